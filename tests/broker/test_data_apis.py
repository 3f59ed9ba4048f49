"""Topics, Produce, Fetch and ListOffsets as a client sees them over the wire."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from broker_wire_helpers import (
    connect,
    create_topic,
    fetch_request,
    is_closed_by_peer,
    list_offsets_request,
    metadata_request,
    produce_request,
    raw_socket,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as FindCoordinatorV0
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorV4
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from tests.broker.servers import InProcessBroker

from kgroups.broker.wire import encode_request
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, decode_batch, encode_batch, iter_batches


def _records(*values: bytes, timestamp: int = 1_700_000_000_000) -> bytes:
    return build_batch([(b"k", value, timestamp) for value in values])


def _produce(client, topic: str, partition: int, records: bytes, acks: int = -1):  # type: ignore[no-untyped-def]
    response = client.call(produce_request(topic, partition, records, acks))
    ((partition_response,),) = [t.partition_responses for t in response.responses]
    return partition_response


def _fetched_values(client, topic: str, partition: int, offset: int) -> list[bytes | None]:  # type: ignore[no-untyped-def]
    response = client.call(fetch_request(topic, partition, offset))
    (data,) = response.responses[0].partitions
    assert data.error_code == ErrorCode.NONE
    return [record.value for batch in iter_batches(bytes(data.records or b""))
            for record in batch.records if record.offset >= offset]


def test_create_topic_then_metadata_lists_its_partitions(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        assert create_topic(client, "orders", partitions=3).error_code == ErrorCode.NONE
        (topic,) = client.call(metadata_request("orders", auto_create=False)).topics
    assert topic.error_code == ErrorCode.NONE
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    assert all(p.leader_id == 0 for p in topic.partitions)


def test_create_topics_errors_are_kafkas(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "dup")
        assert create_topic(client, "dup").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert create_topic(client, "bad/name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert create_topic(client, "x" * 250).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert create_topic(client, "zero", partitions=0).error_code == ErrorCode.INVALID_PARTITIONS
        assert (create_topic(client, "rf3", replication=3).error_code
                == ErrorCode.INVALID_REPLICATION_FACTOR)
        assert create_topic(client, "dry", validate_only=True).error_code == ErrorCode.NONE
        topics = client.call(metadata_request(all_topics=True)).topics
    assert {t.name for t in topics if not t.is_internal} == {"dup"}


def test_metadata_auto_creates_with_num_partitions(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("num.partitions=4")
    with connect(broker.port) as client:
        (topic,) = client.call(metadata_request("auto")).topics
        assert len(topic.partitions) == 4
        (refused,) = client.call(metadata_request("not-asked", auto_create=False)).topics
        assert refused.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_auto_create_can_be_disabled(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("auto.create.topics.enable=false")
    with connect(broker.port) as client:
        (topic,) = client.call(metadata_request("nope")).topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_assigns_consecutive_offsets_and_fetch_returns_the_values(
    inprocess_broker: InProcessBroker,
) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "t")
        first = _produce(client, "t", 0, _records(b"a", b"b", b"c"))
        second = _produce(client, "t", 0, _records(b"d"))
        assert (first.error_code, first.base_offset) == (ErrorCode.NONE, 0)
        assert second.base_offset == 3
        assert _fetched_values(client, "t", 0, 0) == [b"a", b"b", b"c", b"d"]
        assert _fetched_values(client, "t", 0, 3) == [b"d"]


def test_corrupt_batch_is_refused_and_nothing_is_written(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "c")
        damaged = bytearray(_records(b"payload"))
        damaged[-1] ^= 0xFF
        assert _produce(client, "c", 0, bytes(damaged)).error_code == ErrorCode.CORRUPT_MESSAGE
        old_magic = bytearray(_records(b"payload"))
        old_magic[16] = 1
        assert (_produce(client, "c", 0, bytes(old_magic)).error_code
                == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)
        assert _produce(client, "c", 0, _records(b"ok")).base_offset == 0


def test_produce_errors_for_unknown_partition_internal_topic_and_bad_acks(
    inprocess_broker: InProcessBroker,
) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "p")
        assert (_produce(client, "p", 5, _records(b"x")).error_code
                == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        assert (_produce(client, "missing", 0, _records(b"x")).error_code
                == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        assert (_produce(client, "__consumer_offsets", 0, _records(b"x")).error_code
                == ErrorCode.INVALID_TOPIC_EXCEPTION)
        assert _produce(client, "p", 0, _records(b"x"), acks=2).error_code == (
            ErrorCode.INVALID_REQUIRED_ACKS)


def test_message_over_message_max_bytes_is_refused(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("message.max.bytes=1000")
    with connect(broker.port) as client:
        create_topic(client, "big")
        assert (_produce(client, "big", 0, _records(b"x" * 2000)).error_code
                == ErrorCode.MESSAGE_TOO_LARGE)
        assert _produce(client, "big", 0, _records(b"x" * 10)).error_code == ErrorCode.NONE


def test_acks_zero_gets_no_response_but_is_stored(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "fire")
        client._sock.sendall(
            encode_request(999, "t", produce_request("fire", 0, _records(b"z"), acks=0)))
        # The next response on the connection belongs to the next request (correlation checked).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            values = _fetched_values(client, "fire", 0, 0)
            if values:
                break
        assert values == [b"z"]


def test_fetch_long_poll_wakes_on_append(inprocess_broker: InProcessBroker) -> None:
    port = inprocess_broker.port
    with connect(port) as client:
        create_topic(client, "lp")

        def produce_later() -> None:
            time.sleep(0.3)
            with connect(port) as producer:
                _produce(producer, "lp", 0, _records(b"late"))

        thread = threading.Thread(target=produce_later)
        started = time.monotonic()
        thread.start()
        response = client.call(fetch_request("lp", 0, 0, max_wait_ms=10_000))
        elapsed = time.monotonic() - started
        thread.join()
    (data,) = response.responses[0].partitions
    assert data.high_watermark == 1
    assert data.records
    assert 0.25 < elapsed < 5


def test_fetch_without_data_waits_max_wait(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "quiet")
        started = time.monotonic()
        response = client.call(fetch_request("quiet", 0, 0, max_wait_ms=300))
        elapsed = time.monotonic() - started
    (data,) = response.responses[0].partitions
    assert not data.records
    assert 0.25 < elapsed < 3


def test_fetch_out_of_range_and_unknown(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "r")
        _produce(client, "r", 0, _records(b"a"))
        (beyond,) = client.call(fetch_request("r", 0, 5)).responses[0].partitions
        (unknown,) = client.call(fetch_request("zz", 0, 0)).responses[0].partitions
    assert beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # No watermarks beside the error, as Kafka answers (test_diff_delete_records).
    assert (beyond.high_watermark, beyond.log_start_offset) == (-1, -1)
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_list_offsets_earliest_latest_and_by_time(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "lo")
        _produce(client, "lo", 0, _records(b"a", b"b", timestamp=1000))
        _produce(client, "lo", 0, _records(b"c", timestamp=5000))

        def offset_at(timestamp: int) -> tuple[int, int]:
            response = client.call(list_offsets_request("lo", 0, timestamp))
            (partition,) = response.topics[0].partitions
            assert partition.error_code == ErrorCode.NONE
            return int(partition.offset), int(partition.timestamp)

        assert offset_at(-2)[0] == 0
        assert offset_at(-1)[0] == 3
        assert offset_at(500) == (0, 1000)
        assert offset_at(3000) == (2, 5000)
        assert offset_at(9000) == (-1, -1)


def test_delete_topic_removes_it(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "gone")
        response = client.call(delete_topics.DeleteTopicsRequest(
            topics=(delete_topics.DeleteTopicState(name="gone", topic_id=None),
                    delete_topics.DeleteTopicState(name="never", topic_id=None)),
            timeout=datetime.timedelta(seconds=5)))
        errors = {r.name: r.error_code for r in response.responses}
        names = {t.name for t in client.call(metadata_request(all_topics=True)).topics}
    assert errors == {"gone": ErrorCode.NONE, "never": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert "gone" not in names


def test_find_coordinator_points_at_this_broker(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        single = client.call(FindCoordinatorV0(key="g"))
        batch = client.call(FindCoordinatorV4(key_type=0, coordinator_keys=("a", "b")))
    assert (single.error_code, single.port) == (ErrorCode.NONE, inprocess_broker.port)
    assert [(c.key, c.port) for c in batch.coordinators] == [
        ("a", inprocess_broker.port), ("b", inprocess_broker.port)]


def test_init_producer_id_gives_distinct_ids(inprocess_broker: InProcessBroker) -> None:
    request = InitProducerIdRequest(transactional_id=None,
                                    transaction_timeout=datetime.timedelta(seconds=60),
                                    producer_id=-1, producer_epoch=-1)
    with connect(inprocess_broker.port) as client:
        ids = {int(client.call(request).producer_id) for _ in range(5)}
    assert len(ids) == 5
    assert min(ids) >= 0


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.binary(max_size=200), min_size=1, max_size=5),
                        min_size=1, max_size=6))
def test_everything_produced_is_fetched_back_in_order(
    inprocess_broker: InProcessBroker, batches: list[list[bytes]],
) -> None:
    with connect(inprocess_broker.port) as client:
        topic = f"prop-{time.monotonic_ns()}"
        create_topic(client, topic)
        for values in batches:
            _produce(client, topic, 0, _records(*values))
        assert _fetched_values(client, topic, 0, 0) == [v for vs in batches for v in vs]


def test_batch_whose_count_disagrees_with_its_offsets_is_refused(
    inprocess_broker: InProcessBroker,
) -> None:
    batch, _ = decode_batch(_records(b"a", b"b"))
    batch.last_offset_delta = 5
    with connect(inprocess_broker.port) as client:
        create_topic(client, "cnt")
        assert (_produce(client, "cnt", 0, encode_batch(batch)).error_code
                == ErrorCode.INVALID_RECORD)
        (data,) = client.call(list_offsets_request("cnt", 0, -1)).topics[0].partitions
    assert data.offset == 0


def test_failed_fsync_is_not_acknowledged(
    inprocess_broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def fsync_fails(log: object) -> None:
        raise OSError(5, "Input/output error")

    with connect(inprocess_broker.port) as client:
        create_topic(client, "eio", configs={"flush.messages": "1"})  # fsync before every ack
        monkeypatch.setattr(inprocess_broker.broker.group_commit, "wait_durable", fsync_fails)
        outcome = _produce(client, "eio", 0, _records(b"lost?"))
    assert (outcome.error_code, outcome.base_offset) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)


def test_acknowledgement_waits_for_an_fsync_only_where_flush_messages_asks(
    inprocess_broker: InProcessBroker,
) -> None:
    """Kafka's default acknowledges an append once it is in the log file; flush.messages=N
    fsyncs before acknowledging the append that makes N messages unflushed."""
    group_commit = inprocess_broker.broker.group_commit
    with connect(inprocess_broker.port) as client:
        create_topic(client, "page-cache")
        create_topic(client, "every-third", configs={"flush.messages": "3"})
        before = group_commit.fsyncs
        for value in (b"a", b"b", b"c"):
            assert _produce(client, "page-cache", 0, _records(value)).error_code == 0
        assert group_commit.fsyncs == before
        assert inprocess_broker.broker.logs.get("page-cache", 0).unflushed_messages == 3
        for value in (b"a", b"b"):
            assert _produce(client, "every-third", 0, _records(value)).error_code == 0
        assert group_commit.fsyncs == before
        assert _produce(client, "every-third", 0, _records(b"c")).error_code == 0
        assert group_commit.fsyncs == before + 1
        assert inprocess_broker.broker.logs.get("every-third", 0).unflushed_messages == 0


def test_flush_ms_fsyncs_on_schedule(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("log.flush.interval.ms=200")
    with connect(broker.port) as client:
        create_topic(client, "timed")
        assert _produce(client, "timed", 0, _records(b"x")).error_code == 0
        log = broker.broker.logs.get("timed", 0)
        appended = time.monotonic()
        while log.unflushed_messages and time.monotonic() - appended < 5:
            time.sleep(0.02)
        assert log.unflushed_messages == 0
        assert time.monotonic() - appended < 1.0  # within the interval, plus a check's delay


def test_failed_append_is_a_storage_error_and_the_broker_carries_on(
    inprocess_broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def disk_full(batch: bytes) -> tuple[int, int]:
        raise OSError(28, "No space left on device")

    with connect(inprocess_broker.port) as client:
        create_topic(client, "full")
        create_topic(client, "fine")
        log = inprocess_broker.broker.logs.get("full", 0)
        monkeypatch.setattr(log, "append_batch", disk_full)
        assert (_produce(client, "full", 0, _records(b"x")).error_code
                == ErrorCode.KAFKA_STORAGE_ERROR)
        assert _produce(client, "fine", 0, _records(b"y")).error_code == ErrorCode.NONE


def test_failed_read_is_a_storage_error_for_that_partition_only(
    inprocess_broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreadable(offset: int, max_bytes: int, *, min_one: bool = True) -> bytes:
        raise OSError(5, "Input/output error")

    with connect(inprocess_broker.port) as client:
        create_topic(client, "bad-disk")
        _produce(client, "bad-disk", 0, _records(b"x"))
        monkeypatch.setattr(inprocess_broker.broker.logs.get("bad-disk", 0), "read", unreadable)
        (data,) = client.call(fetch_request("bad-disk", 0, 0)).responses[0].partitions
        assert data.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert client.call(metadata_request(all_topics=True)).brokers


def test_advertised_listener_is_what_clients_are_told(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("advertised.listeners=PLAINTEXT://kafka.example:19092")
    with connect(broker.port) as client:
        (node,) = client.call(metadata_request(all_topics=True)).brokers
        (coordinator,) = client.call(
            FindCoordinatorV4(key_type=0, coordinator_keys=("g",))).coordinators
    assert (node.host, node.port) == ("kafka.example", 19092)
    assert (coordinator.host, coordinator.port) == ("kafka.example", 19092)


def test_failed_acks_zero_produce_closes_the_connection(inprocess_broker: InProcessBroker) -> None:
    """acks=0 has no response, so Kafka signals a failure by closing the connection."""
    with raw_socket(inprocess_broker.port) as sock:
        sock.sendall(encode_request(1, "t", produce_request("nowhere", 0, _records(b"x"), acks=0)))
        assert is_closed_by_peer(sock)
    with connect(inprocess_broker.port) as client:
        assert client.call(metadata_request(all_topics=True)).brokers


def test_topic_names_from_requests_never_reach_the_file_system(
    inprocess_broker: InProcessBroker,
) -> None:
    with connect(inprocess_broker.port) as client:
        # A topic with its own settings makes the __topic_configs directory exist.
        create_topic(client, "real", configs={"retention.ms": "86400000"})
        sneaky = "__topic_configs/../real"
        assert (_produce(client, sneaky, 0, _records(b"x")).error_code
                == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        (data,) = client.call(fetch_request(sneaky, 0, 0)).responses[0].partitions
        assert data.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        (offsets,) = client.call(list_offsets_request(sneaky, 0, -1)).topics[0].partitions
        assert offsets.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _produce(client, "real", 0, _records(b"ok")).base_offset == 0
