"""The partition side of transactions over the wire: transactional batches, markers through
WriteTxnMarkers, read_committed Fetch (records below the last stable offset, the aborted
transactions listed), ListOffsets, DescribeProducers, and all of it after a kill -9."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from broker_wire_helpers import connect, create_topic, nested_of, produce_request, request_of
from read_committed_helpers import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    fetch_partition,
    list_latest,
    markers_request,
    txn_batch,
    write_marker,
)
from tests.broker.servers import InProcessBroker, ServerProcess

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, iter_batches
from kgroups.log.transactions import control_batch
from kgroups.tools.wire_client import KafkaWireClient

A, B = 7001, 7002


def _produce(client: KafkaWireClient, topic: str, records: bytes) -> int:
    partition = client.call(produce_request(topic, 0, records)).responses[0] \
        .partition_responses[0]
    return int(partition.error_code)


def _plain(*values: bytes) -> bytes:
    return build_batch([(b"k", value, 1_700_000_000_000) for value in values])


def _history(client: KafkaWireClient, topic: str) -> None:
    """0 plain; 1-2 A; 3 B; 4 A's ABORT; 5 plain; 6 B's COMMIT; 7 A again (open)."""
    create_topic(client, topic)
    assert _produce(client, topic, _plain(b"p0")) == ErrorCode.NONE
    assert _produce(client, topic, txn_batch(A, b"a1", b"a2")) == ErrorCode.NONE
    assert _produce(client, topic, txn_batch(B, b"b3")) == ErrorCode.NONE
    assert write_marker(client, topic, A, commits=False) == ErrorCode.NONE
    assert _produce(client, topic, _plain(b"p5")) == ErrorCode.NONE
    assert write_marker(client, topic, B, commits=True) == ErrorCode.NONE
    assert _produce(client, topic, txn_batch(A, b"a7", sequence=2)) == ErrorCode.NONE


def _offsets(records: bytes | None) -> list[int]:
    return [r.offset for b in iter_batches(records or b"") for r in b.records]


def test_read_committed_stops_at_the_lso_and_lists_the_aborted(
        inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        _history(client, "rc")
        committed = fetch_partition(client, "rc", 0, READ_COMMITTED)
        assert (committed.high_watermark, committed.last_stable_offset) == (8, 7)
        assert _offsets(committed.records) == [0, 1, 2, 3, 4, 5, 6]
        assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
            (A, 1)]
        uncommitted = fetch_partition(client, "rc", 0, READ_UNCOMMITTED)
        assert _offsets(uncommitted.records) == [0, 1, 2, 3, 4, 5, 6, 7]
        assert uncommitted.last_stable_offset == 7  # answered in read_uncommitted too
        assert uncommitted.aborted_transactions is None
        # a fetch past the aborted transaction's marker does not list it
        later = fetch_partition(client, "rc", 5, READ_COMMITTED)
        assert _offsets(later.records) == [5, 6]
        assert later.aborted_transactions == ()
        # at the LSO: nothing yet, an empty list
        at_lso = fetch_partition(client, "rc", 7, READ_COMMITTED)
        assert (at_lso.records or b"", at_lso.aborted_transactions) == (b"", ())
        assert list_latest(client, "rc", READ_COMMITTED) == 7
        assert list_latest(client, "rc", READ_UNCOMMITTED) == 8


@pytest.mark.parametrize("version", [4, 5, 8, 11, 12])
def test_every_fetch_version_with_isolation_answers_the_lso(
        inprocess_broker: InProcessBroker, version: int) -> None:
    with connect(inprocess_broker.port) as client:
        _history(client, "versions")
        read = fetch_partition(client, "versions", 0, READ_COMMITTED, version=version)
        assert read.last_stable_offset == 7
        assert _offsets(read.records) == [0, 1, 2, 3, 4, 5, 6]
        assert [a.producer_id for a in read.aborted_transactions] == [A]


@pytest.mark.parametrize("version", [2, 5, 11])
def test_list_offsets_read_committed_answers_the_lso(
        inprocess_broker: InProcessBroker, version: int) -> None:
    with connect(inprocess_broker.port) as client:
        _history(client, "lo")
        assert list_latest(client, "lo", READ_COMMITTED, version=version) == 7
        assert list_latest(client, "lo", READ_UNCOMMITTED, version=version) == 8


def test_legacy_fetch_versions_still_read_everything(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        _history(client, "legacy")
        for version in (0, 3):
            api = ApiKey.FETCH
            partition = nested_of(api, version, "FetchPartition", partition=0, fetch_offset=0,
                                  partition_max_bytes=1 << 20)
            request = request_of(api, version, replica_id=-1, max_wait=datetime.timedelta(0),
                                 min_bytes=1, max_bytes=1 << 20, topics=(nested_of(
                                     api, version, "FetchTopic", topic="legacy",
                                     partitions=(partition,)),))
            partition = client.call(request).responses[0].partitions[0]
            assert partition.error_code == ErrorCode.NONE
            assert partition.records  # converted down, read uncommitted as Kafka 3.9 did


@pytest.mark.parametrize("version", [1, 2])
def test_write_txn_markers_answers_per_partition(inprocess_broker: InProcessBroker,
                                                 version: int) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "marked", partitions=2)
        assert _produce(client, "marked", txn_batch(A, b"x")) == ErrorCode.NONE
        response = client.call(markers_request(
            version, (A, 0, True, "marked", (0, 1, 5)), (B, 0, False, "nowhere", (0,))))
        answered = [(m.producer_id, t.name, p.partition_index, p.error_code)
                    for m in response.markers for t in m.topics for p in t.partitions]
        assert answered == [(A, "marked", 0, ErrorCode.NONE), (A, "marked", 1, ErrorCode.NONE),
                            (A, "marked", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                            (B, "nowhere", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        # a marker for a producer with no open transaction there is written all the same
        assert list_latest(client, "marked", READ_UNCOMMITTED) == 2


def test_produce_checks_epochs_and_open_transactions(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "fence")
        assert _produce(client, "fence", txn_batch(A, b"x", epoch=3)) == ErrorCode.NONE
        # a non-transactional batch while its transaction is open
        assert _produce(client, "fence", txn_batch(A, b"y", epoch=3, sequence=1,
                                                   transactional=False)) == (
            ErrorCode.INVALID_TXN_STATE)
        # a client may not write a marker itself
        assert _produce(client, "fence", control_batch(A, 3, True, 0, 1)) == (
            ErrorCode.INVALID_RECORD)
        # transactions v2: the marker's bumped epoch fences the producer's old one
        assert write_marker(client, "fence", A, commits=True, epoch=4, version=2,
                            transaction_version=2) == ErrorCode.NONE
        assert _produce(client, "fence", txn_batch(A, b"z", epoch=3, sequence=1)) == (
            ErrorCode.INVALID_PRODUCER_EPOCH)
        # a stale marker: older epoch, or (v2) not newer while a transaction is open
        assert write_marker(client, "fence", A, commits=False, epoch=2) == (
            ErrorCode.INVALID_PRODUCER_EPOCH)
        assert _produce(client, "fence", txn_batch(A, b"w", epoch=4)) == ErrorCode.NONE
        assert write_marker(client, "fence", A, commits=True, epoch=4, version=2,
                            transaction_version=2) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert list_latest(client, "fence", READ_COMMITTED) == 2


def test_a_long_poll_wakes_when_a_marker_moves_the_lso(
        inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "wake")
        assert _produce(client, "wake", txn_batch(A, b"pending")) == ErrorCode.NONE

        def commit_later() -> None:
            time.sleep(0.5)
            with connect(inprocess_broker.port) as other:
                write_marker(other, "wake", A, commits=True)

        committer = threading.Thread(target=commit_later)
        started = time.monotonic()
        committer.start()
        read = fetch_partition(client, "wake", 0, READ_COMMITTED, max_wait_ms=10_000)
        waited = time.monotonic() - started
        committer.join()
        assert _offsets(read.records) == [0, 1]  # the record and its COMMIT marker
        assert read.last_stable_offset == 2
        assert 0.4 < waited < 5


def test_describe_producers_shows_open_transactions(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        _history(client, "described")
        api = ApiKey.DESCRIBE_PRODUCERS
        response = client.call(request_of(api, 0, topics=(
            nested_of(api, 0, "TopicRequest", name="described", partition_indexes=(0, 3)),)))
        found, missing = response.topics[0].partitions
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        producers = {p.producer_id: p for p in found.active_producers}
        assert set(producers) == {A, B}
        assert (producers[A].current_txn_start_offset, producers[A].last_sequence) == (7, 2)
        assert (producers[B].current_txn_start_offset, producers[B].coordinator_epoch) == (-1, 0)
        assert producers[A].last_timestamp == 1_700_000_000_000


def test_transactions_survive_a_kill(kgroups_server: ServerProcess) -> None:
    with connect(kgroups_server.port) as client:
        _history(client, "durable")
    kgroups_server.kill()
    kgroups_server.start()
    with connect(kgroups_server.port) as client:
        read = fetch_partition(client, "durable", 0, READ_COMMITTED)
        assert read.last_stable_offset == 7
        assert [(a.producer_id, a.first_offset) for a in read.aborted_transactions] == [(A, 1)]
        assert write_marker(client, "durable", A, commits=False) == ErrorCode.NONE
        read = fetch_partition(client, "durable", 0, READ_COMMITTED)
        assert read.last_stable_offset == 9
        assert [(a.producer_id, a.first_offset) for a in read.aborted_transactions] == [
            (A, 1), (A, 7)]
