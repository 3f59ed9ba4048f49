"""The data plane of a cluster broker, in process, against a real PostgreSQL: the catalogue of
topics shared by every broker, Produce/Fetch/ListOffsets/DeleteRecords on the leased
partitions, NOT_LEADER_OR_FOLLOWER with KIP-951's hints for the others, leader-epoch checks,
fencing, and producer ids that never collide. Leases are taken with the store directly and
the LeadershipView filled by hand, as the membership runtime would."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import nested_of, request_of

from kgroups.broker.apis import (
    cluster,
    delete_records,
    fetch,
    leader_epochs,
    list_offsets,
    produce,
)
from kgroups.broker.apis.contract import RequestContext
from kgroups.broker.broker import Broker
from kgroups.broker.cluster.catalog_books import StoreBrokerConfigs
from kgroups.broker.cluster.catalog_sync import catalog_changed
from kgroups.broker.cluster.leadership import BrokerEndpoint, Leader, LeadershipView
from kgroups.broker.config import BrokerConfig
from kgroups.broker.dynamic_configs import CLUSTER_DEFAULT, PER_BROKER, DynamicBrokerConfigs
from kgroups.broker.producer_state import ProducerIdAllocator
from kgroups.broker.security.authorizer import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kgroups.broker.security.scram import credential_from_password
from kgroups.broker.security.state import Security
from kgroups.broker.topic_configs import SET, ConfigChange
from kgroups.broker.topics import TopicCatalog
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, iter_batches, read_header, set_base_offset
from kgroups.storage.postgresql import Lease, PostgresStore

pytestmark = pytest.mark.postgresql

TOPIC = "orders"
LEASE_MS = 60_000
NOW_MS = int(time.time() * 1000)
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ENDPOINTS = [BrokerEndpoint(1, "127.0.0.1", 19091), BrokerEndpoint(2, "127.0.0.1", 19092, "r2")]


@dataclass
class Node:
    """One broker of the cluster: its store (used on this test's thread only), its view of
    who leads what, and the Broker whose handlers answer (with a cluster catalogue)."""

    node_id: int
    store: PostgresStore
    view: LeadershipView
    broker: Broker

    @property
    def topics(self) -> TopicCatalog:
        return self.broker.topics

    def lead(self, partition: int, lease_ms: int = LEASE_MS) -> Lease:
        lease = self.store.take_lease(TOPIC, partition, self.node_id, lease_ms)
        assert lease is not None
        self.topics.leadership_gained(lease)
        return lease

    def call(self, handler: Any, api_key: int, version: int, request: Any) -> Any:
        ctx = RequestContext(api_key, version, 1, "test", "127.0.0.1", self.broker)
        return asyncio.run(handler(ctx, request))


def _node(url: str, node_id: int, tmp_path: Path) -> Node:
    """A Broker wired as a cluster broker's parts are: topics, producer ids, security and
    dynamic settings on the store."""
    store = PostgresStore.open(url)
    view = LeadershipView(node_id)
    view.update({}, ENDPOINTS)
    config = BrokerConfig.build(port=0, data_dir=tmp_path / f"node-{node_id}", overrides=[
        f"node.id={node_id}", f"authorizer.class.name={STANDARD_AUTHORIZER}"])
    broker = Broker(config)
    broker.dynamic_configs = DynamicBrokerConfigs(StoreBrokerConfigs(store.catalog, node_id),
                                                  config.properties)
    broker.topics = TopicCatalog.on_store(broker.logs, store, view)
    broker.producer_ids = ProducerIdAllocator(store.allocate_producer_ids)
    broker.security = Security(config, store.catalog)
    return Node(node_id, store, view, broker)


@pytest.fixture
def nodes(postgres_url: str, tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    first, second = _node(postgres_url, 1, tmp_path), _node(postgres_url, 2, tmp_path)
    yield first, second
    first.store.close()
    second.store.close()


def _create_on(node: Node, partitions: int, seen_by: Node) -> None:
    """The topic, created on `node` and read by `seen_by` (as its listener would make it)."""
    assert node.topics.create(TOPIC, partitions) == ErrorCode.NONE
    seen_by.topics.catalog_changed()


def _produce(node: Node, partition: int, batch: bytes, topic: str = TOPIC,
             version: int = 11) -> Any:
    request = request_of(0, version, transactional_id=None, acks=-1,
                         timeout=datetime.timedelta(seconds=5), topic_data=(
        nested_of(0, version, "TopicProduceData", name=topic, partition_data=(
            nested_of(0, version, "PartitionProduceData", index=partition, records=batch),)),))
    response = node.call(produce.produce, 0, version, request)
    return response, response.responses[0].partition_responses[0]


def _fetch(node: Node, partition: int, offset: int, epoch: int = -1) -> Any:
    request = request_of(1, 12, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                         isolation_level=0, session_id=0, session_epoch=-1, topics=(
        nested_of(1, 12, "FetchTopic", topic=TOPIC, partitions=(
            nested_of(1, 12, "FetchPartition", partition=partition, current_leader_epoch=epoch,
                      fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                      partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    return node.call(fetch.fetch, 1, 12, request).responses[0].partitions[0]


def _list_offset(node: Node, partition: int, timestamp: int, epoch: int = -1) -> Any:
    request = request_of(2, 7, replica_id=-1, isolation_level=0, topics=(
        nested_of(2, 7, "ListOffsetsTopic", name=TOPIC, partitions=(
            nested_of(2, 7, "ListOffsetsPartition", partition_index=partition,
                      current_leader_epoch=epoch, timestamp=timestamp),)),))
    return node.call(list_offsets.list_offsets, 2, 7, request).topics[0].partitions[0]


def _delete_records(node: Node, partition: int, offset: int) -> Any:
    request = request_of(21, 2, timeout=datetime.timedelta(seconds=5), topics=(
        nested_of(21, 2, "DeleteRecordsTopic", name=TOPIC, partitions=(
            nested_of(21, 2, "DeleteRecordsPartition", partition_index=partition,
                      offset=offset),)),))
    return node.call(delete_records.delete_records, 21, 2, request).topics[0].partitions[0]


def _records(count: int, first_timestamp: int = NOW_MS, producer_id: int = -1,
             base_sequence: int = -1) -> bytes:
    return build_batch([(f"k{i}".encode(), f"v{i}".encode(), first_timestamp + i)
                        for i in range(count)],
                       producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=base_sequence)


def _as_stored(batch: bytes, base_offset: int, epoch: int) -> bytes:
    """The batch as Kafka stores it: at its offset, stamped with the leader epoch."""
    placed = set_base_offset(batch, base_offset)
    return placed[:12] + struct.pack(">i", epoch) + placed[16:]


def test_a_led_partition_takes_records_at_kafkas_offsets_and_gives_them_back_byte_exact(
        nodes: tuple[Node, Node]) -> None:
    first, _ = nodes
    assert first.topics.create(TOPIC, 2) == ErrorCode.NONE
    lease = first.lead(0)
    batches = [_records(3), _records(1, NOW_MS + 10)]
    bases = []
    for batch in batches:
        _, answer = _produce(first, 0, batch)
        assert int(answer.error_code) == 0
        bases.append(int(answer.base_offset))
    assert bases == [0, 3]
    read = _fetch(first, 0, 0)
    assert int(read.error_code) == 0 and int(read.high_watermark) == 4
    assert read.records == b"".join(_as_stored(b, o, lease.epoch)
                                    for b, o in zip(batches, bases, strict=True))
    assert [read_header(b).partition_leader_epoch for b in first.store.batches(TOPIC, 0)] \
        == [lease.epoch, lease.epoch]
    latest = _list_offset(first, 0, -1)
    assert (int(latest.offset), int(latest.leader_epoch)) == (4, lease.epoch)


def test_a_partition_led_elsewhere_answers_not_leader_with_the_leader_and_its_endpoint(
        nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    _create_on(first, 2, seen_by=second)
    lease = first.lead(0)
    second.view.update({(TOPIC, 0): Leader(1, lease.epoch)}, ENDPOINTS)
    response, answer = _produce(second, 0, _records(1))
    assert int(answer.error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (int(answer.current_leader.leader_id), int(answer.current_leader.leader_epoch)) == (
        1, lease.epoch)
    assert [(int(e.node_id), e.host, int(e.port)) for e in response.node_endpoints] == [
        (1, "127.0.0.1", 19091)]
    read = _fetch(second, 0, 0)
    assert int(read.error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert int(read.current_leader.leader_id) == 1
    assert int(_list_offset(second, 0, -1).error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert int(_delete_records(second, 0, 0).error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # A partition nobody leads yet: the error, no leader named.
    _, unled = _produce(second, 1, _records(1))
    assert int(unled.error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert int(unled.current_leader.leader_id) == -1
    # An unknown topic or partition is still that.
    _, unknown = _produce(second, 0, _records(1), topic="nope")
    assert int(unknown.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    _, beyond = _produce(second, 7, _records(1))
    assert int(beyond.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_append_after_the_lease_was_taken_over_is_refused_and_not_in_the_log(
        nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    _create_on(first, 1, seen_by=second)
    first.lead(0, lease_ms=300)
    assert int(_produce(first, 0, _records(1))[1].error_code) == 0
    time.sleep(0.5)
    taken = second.lead(0)
    first.view.update({(TOPIC, 0): Leader(2, taken.epoch)}, ENDPOINTS)
    _, answer = _produce(first, 0, _records(2, NOW_MS + 50))
    assert int(answer.error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert int(answer.current_leader.leader_id) == 2
    assert first.topics.log(TOPIC, 0) is None  # the fenced leader stepped down
    stored = list(second.store.batches(TOPIC, 0))
    assert [read_header(b).records_count for b in stored] == [1]
    # The new leader carries on after what the old one wrote before the takeover.
    _, next_answer = _produce(second, 0, _records(1))
    assert int(next_answer.base_offset) == 1
    assert read_header(list(second.store.batches(TOPIC, 0))[-1]).partition_leader_epoch \
        == taken.epoch


def test_a_current_leader_epoch_older_is_fenced_and_newer_unknown(
        nodes: tuple[Node, Node]) -> None:
    first, _ = nodes
    first.topics.create(TOPIC, 1)
    epoch = first.lead(0).epoch
    _produce(first, 0, _records(1))
    served = first.topics.log(TOPIC, 0)
    assert first.lead(0).epoch == epoch  # a renewal keeps the log it serves
    assert first.topics.log(TOPIC, 0) is served
    assert int(_fetch(first, 0, 0, epoch).error_code) == 0
    assert int(_fetch(first, 0, 0, epoch - 1).error_code) == ErrorCode.FENCED_LEADER_EPOCH
    assert int(_fetch(first, 0, 0, epoch + 1).error_code) == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert int(_list_offset(first, 0, -1, epoch - 1).error_code) \
        == ErrorCode.FENCED_LEADER_EPOCH
    assert int(_list_offset(first, 0, -1, epoch + 1).error_code) \
        == ErrorCode.UNKNOWN_LEADER_EPOCH


def _epoch_end(node: Node, partition: int, epoch: int, current: int = -1) -> tuple[int, ...]:
    """OffsetForLeaderEpoch v4 for one partition: (error, epoch, end offset)."""
    request = request_of(23, 4, replica_id=-1, topics=(
        nested_of(23, 4, "OffsetForLeaderTopic", topic=TOPIC, partitions=(
            nested_of(23, 4, "OffsetForLeaderPartition", partition=partition,
                      current_leader_epoch=current, leader_epoch=epoch),)),))
    (answer,) = node.call(leader_epochs.offset_for_leader_epoch, 23, 4,
                          request).topics[0].partitions
    return int(answer.error_code), int(answer.leader_epoch), int(answer.end_offset)


def _hand_over(giver: Node, taker: Node, lease: Lease) -> Lease:
    """`giver` steps down and releases its lease; `taker` leads at the next epoch."""
    giver.topics.leadership_lost(TOPIC, 0)
    giver.store.release_lease(lease)
    taken = taker.lead(0)
    giver.view.update({(TOPIC, 0): Leader(taker.node_id, taken.epoch)}, ENDPOINTS)
    return taken


def test_offset_for_leader_epoch_answers_where_each_leaders_epoch_ended(
        nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    _create_on(first, 1, seen_by=second)
    one = first.lead(0)
    _produce(first, 0, _records(3))  # offsets 0-2 at epoch `one`
    two = _hand_over(first, second, one)
    _produce(second, 0, _records(2))  # 3-4
    three = _hand_over(second, first, two)
    _produce(first, 0, _records(1))  # 5
    four = _hand_over(first, second, three)  # leads, writes nothing
    assert _epoch_end(second, 0, one.epoch) == (0, one.epoch, 3)
    assert _epoch_end(second, 0, two.epoch) == (0, two.epoch, 5)
    assert _epoch_end(second, 0, three.epoch) == (0, three.epoch, 6)
    assert _epoch_end(second, 0, four.epoch) == (0, four.epoch, 6)
    assert _epoch_end(second, 0, four.epoch + 1) == (0, -1, -1)
    assert _epoch_end(second, 0, -1) == (0, -1, -1)
    # An epoch older than any the log holds: its own number, ended where the log's first began.
    assert _epoch_end(second, 0, one.epoch - 1) == (0, one.epoch - 1, 0)
    # A record of a later epoch at its end moves the current epoch's end with it.
    _produce(second, 0, _records(2))  # 6-7
    assert _epoch_end(second, 0, four.epoch) == (0, four.epoch, 8)
    assert _epoch_end(second, 0, three.epoch) == (0, three.epoch, 6)
    # Records deleted below the log start: the epochs they held end where the log now starts.
    assert int(_delete_records(second, 0, 4).error_code) == 0
    assert _epoch_end(second, 0, one.epoch) == (0, one.epoch, 4)
    assert _epoch_end(second, 0, two.epoch) == (0, two.epoch, 5)
    # The checks before the answer.
    assert _epoch_end(second, 0, two.epoch, current=four.epoch) == (0, two.epoch, 5)
    assert _epoch_end(second, 0, two.epoch, current=three.epoch)[0] \
        == ErrorCode.FENCED_LEADER_EPOCH
    assert _epoch_end(second, 0, two.epoch, current=four.epoch + 1)[0] \
        == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert _epoch_end(first, 0, two.epoch) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)
    assert _epoch_end(second, 3, two.epoch) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)


def test_every_broker_sees_topics_created_grown_reconfigured_and_deleted_on_another(
        nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    seen: list[dict[str, int]] = []
    second.topics.on_change(lambda: seen.append(second.topics.partition_counts()))
    assert first.topics.create(TOPIC, 2, {"retention.ms": "5000"}) == ErrorCode.NONE
    second.topics.catalog_changed()
    assert second.topics.partition_count(TOPIC) == 2
    assert second.topics.overrides(TOPIC) == {"retention.ms": "5000"}
    assert second.topics.topic_id(TOPIC) == first.topics.topic_id(TOPIC) is not None
    assert ("retention.ms", "5000", True) in second.topics.config_entries(TOPIC)
    assert second.topics.create(TOPIC, 3) == ErrorCode.TOPIC_ALREADY_EXISTS
    lease = second.lead(1)
    first.topics.set_overrides(TOPIC, {"retention.ms": "7000"})
    first.topics.add_partitions(TOPIC, 4)
    second.topics.catalog_changed()
    assert second.topics.overrides(TOPIC) == {"retention.ms": "7000"}
    log = second.topics.log(TOPIC, 1)
    assert log is not None and log.config.retention_ms == 7000  # the open log follows
    assert second.topics.partition_count(TOPIC) == 4
    assert lease.epoch == second.topics.leader_epoch(TOPIC, 1)
    assert second.topics.delete(TOPIC) == ErrorCode.NONE
    assert second.topics.log(TOPIC, 1) is None
    first.topics.catalog_changed()
    assert first.topics.partition_count(TOPIC) is None
    assert seen == [{}, {TOPIC: 2}, {TOPIC: 4}, {}]


def test_a_racing_create_on_another_broker_answers_topic_already_exists(
        nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    assert first.topics.create(TOPIC, 1) == ErrorCode.NONE
    # The second broker has not read the catalogue since: the store refuses the duplicate.
    assert second.topics.create(TOPIC, 5, {"retention.ms": "1"}) == ErrorCode.TOPIC_ALREADY_EXISTS
    assert second.topics.partition_count(TOPIC) == 1
    assert second.topics.overrides(TOPIC) == {}


def test_producer_ids_from_two_brokers_never_collide(nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    drawn: list[list[int]] = [[], []]
    for _ in range(1500):
        for index, node in enumerate(nodes):
            answer = node.call(cluster.init_producer_id, 22, 4, request_of(
                22, 4, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1))
            assert int(answer.error_code) == 0
            drawn[index].append(int(answer.producer_id))
    assert len(set(drawn[0]) | set(drawn[1])) == 3000
    assert first.store is not second.store


def test_a_new_leader_recognises_a_retry_of_a_batch_the_old_one_stored(
        nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    _create_on(first, 1, seen_by=second)
    lease = first.lead(0)
    first.topics.leadership_lost(TOPIC, 0)
    first.store.release_lease(lease)
    batch = _records(2, producer_id=4242, base_sequence=0)
    # The old leader stored it; its acknowledgement was lost, so the producer retries on the
    # new leader, which rebuilds the producer state from the log's batch headers.
    relead = first.lead(0)
    assert int(_produce(first, 0, batch)[1].base_offset) == 0
    first.topics.leadership_lost(TOPIC, 0)
    first.store.release_lease(relead)
    second.lead(0)
    _, retry = _produce(second, 0, batch)
    assert (int(retry.error_code), int(retry.base_offset)) == (0, 0)
    _, gap = _produce(second, 0, _records(1, producer_id=4242, base_sequence=5))
    assert int(gap.error_code) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert [read_header(b).records_count for b in second.store.batches(TOPIC, 0)] == [2]


def test_list_offsets_and_delete_records_on_the_postgresql_log(
        nodes: tuple[Node, Node]) -> None:
    first, _ = nodes
    first.topics.create(TOPIC, 1)
    first.lead(0)
    for index in range(5):  # offsets 0..9, timestamps NOW_MS + 100*i + j
        _produce(first, 0, _records(2, NOW_MS + 100 * index))
    _produce(first, 0, _records(1, NOW_MS + 50))  # offset 10, an older timestamp
    assert int(_list_offset(first, 0, -2).offset) == 0
    assert int(_list_offset(first, 0, -1).offset) == 11
    by_time = _list_offset(first, 0, NOW_MS + 201)
    assert (int(by_time.offset), int(by_time.timestamp)) == (5, NOW_MS + 201)
    largest = _list_offset(first, 0, -3)
    assert (int(largest.offset), int(largest.timestamp)) == (9, NOW_MS + 401)
    assert int(_list_offset(first, 0, NOW_MS + 10_000).offset) == -1
    moved = _delete_records(first, 0, 5)
    assert (int(moved.error_code), int(moved.low_watermark)) == (0, 5)
    assert int(_list_offset(first, 0, -2).offset) == 5
    assert int(_fetch(first, 0, 3).error_code) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert int(_fetch(first, 0, 5).error_code) == 0
    assert first.store.partition_state(TOPIC, 0).log_start_offset == 5
    beyond = _delete_records(first, 0, 12)
    assert int(beyond.error_code) == ErrorCode.OFFSET_OUT_OF_RANGE


def _list_offsets_v0(node: Node, partition: int, timestamp: int,
                     max_num_offsets: int) -> tuple[int, list[int]]:
    request = request_of(2, 0, replica_id=-1, topics=(
        nested_of(2, 0, "ListOffsetsTopic", name=TOPIC, partitions=(
            nested_of(2, 0, "ListOffsetsPartition", partition_index=partition,
                      timestamp=timestamp, max_num_offsets=max_num_offsets),)),))
    (answer,) = node.call(list_offsets.list_offsets, 2, 0, request).topics[0].partitions
    return int(answer.error_code), [int(o) for o in answer.old_style_offsets]


def test_list_offsets_v0_answers_a_postgresql_log_as_one_segment(
        nodes: tuple[Node, Node]) -> None:
    """Burrow's v0 question on a cluster partition: the log end (and start) offsets, as Kafka
    answers for a partition with one segment, dated by its newest record."""
    first, second = nodes
    _create_on(first, 3, seen_by=second)
    first.lead(0)
    first.lead(1)
    for index in range(3):
        _produce(first, 0, _records(2, NOW_MS + index))  # offsets 0-5, newest at NOW_MS + 3
    assert _list_offsets_v0(first, 0, -1, 1) == (0, [6])
    assert _list_offsets_v0(first, 0, -1, 5) == (0, [6, 0])
    assert _list_offsets_v0(first, 0, -2, 5) == (0, [0])
    assert _list_offsets_v0(first, 0, NOW_MS + 3, 5) == (0, [0])  # dated by its newest record
    assert _list_offsets_v0(first, 0, NOW_MS + 2, 5) == (0, [])
    assert _list_offsets_v0(first, 1, -1, 5) == (0, [0])  # empty: its start only
    assert _list_offsets_v0(first, 1, 0, 5) == (0, [])
    assert int(_delete_records(first, 0, 4).error_code) == 0
    assert _list_offsets_v0(first, 0, -1, 5) == (0, [6, 4])
    assert _list_offsets_v0(first, 0, -1, -1) == (ErrorCode.UNKNOWN_SERVER_ERROR, [])
    assert _list_offsets_v0(second, 0, -1, 1) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, [])
    assert _list_offsets_v0(first, 7, -1, 1) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


HOUR_MS = 3_600_000


def _read_keys(node: Node, offset: int) -> list[tuple[int, bytes | None]]:
    """(offset, key) of every record a Fetch from `offset` returns."""
    answer = _fetch(node, 0, offset)
    assert int(answer.error_code) == 0, answer
    return [(r.offset, r.key) for b in iter_batches(bytes(answer.records or b""))
            for r in b.records if r.offset >= offset]


def test_the_leader_applies_retention_ms_in_the_database(nodes: tuple[Node, Node]) -> None:
    first, _ = nodes
    first.topics.create(TOPIC, 1, {"retention.ms": str(3 * HOUR_MS)})
    first.lead(0)
    for age_hours in (10, 5, 1, 0):  # a batch of two records each: offsets 0-7
        _produce(first, 0, _records(2, NOW_MS - age_hours * HOUR_MS))
    first.topics.clean_led_partitions(NOW_MS)
    assert first.store.partition_state(TOPIC, 0).log_start_offset == 4
    assert [read_header(b).base_offset for b in first.store.batches(TOPIC, 0)] == [4, 6]
    assert int(_list_offset(first, 0, -2).offset) == 4
    assert int(_fetch(first, 0, 3).error_code) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert [o for o, _ in _read_keys(first, 4)] == [4, 5, 6, 7]
    # Everything expired: the log is empty and starts at its end.
    first.topics.clean_led_partitions(NOW_MS + 10 * HOUR_MS)
    state = first.store.partition_state(TOPIC, 0)
    assert (state.log_start_offset, state.next_offset) == (8, 8)
    assert list(first.store.batches(TOPIC, 0)) == []


def test_the_leader_applies_retention_bytes_in_the_database(nodes: tuple[Node, Node]) -> None:
    first, _ = nodes
    batches = [_records(2, NOW_MS + i) for i in range(4)]
    first.topics.create(TOPIC, 1, {"retention.bytes": str(2 * len(batches[0]))})
    first.lead(0)
    for batch in batches:
        _produce(first, 0, batch)
    first.topics.clean_led_partitions(NOW_MS)
    # The oldest go while what is left still holds retention.bytes: two of the four.
    assert [read_header(b).base_offset for b in first.store.batches(TOPIC, 0)] == [4, 6]
    assert first.store.partition_state(TOPIC, 0).log_start_offset == 4


def test_the_leader_compacts_a_compacted_topic_in_the_database(
        nodes: tuple[Node, Node]) -> None:
    first, _ = nodes
    first.topics.create(TOPIC, 1, {"cleanup.policy": "compact", "retention.ms": "1"})
    lease = first.lead(0)
    for _ in range(3):  # keys k0, k1 at offsets 0-1, 2-3, 4-5
        _produce(first, 0, _records(2, NOW_MS - 10 * HOUR_MS))
    _produce(first, 0, build_batch([(b"k0", None, NOW_MS)]))  # 6: k0's tombstone
    _produce(first, 0, build_batch([(b"k2", b"v", NOW_MS)]))  # 7: the newest batch
    first.topics.clean_led_partitions(NOW_MS)
    # Each key's latest record stays at its offset; retention does not apply (compact only).
    assert _read_keys(first, 0) == [(5, b"k1"), (6, b"k0"), (7, b"k2")]
    assert first.store.partition_state(TOPIC, 0).log_start_offset == 0
    stored = [read_header(b) for b in first.store.batches(TOPIC, 0)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in stored] == [
        (4, lease.epoch), (6, lease.epoch), (7, lease.epoch)]
    # The tombstone goes on the first pass after its delete horizon, once records arrived.
    _produce(first, 0, build_batch([(b"k3", b"v", NOW_MS)]))  # 8
    first.topics.clean_led_partitions(NOW_MS + 25 * HOUR_MS)
    assert _read_keys(first, 0) == [(5, b"k1"), (7, b"k2"), (8, b"k3")]


def test_a_leader_that_lost_its_lease_cleans_nothing(nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    first.topics.create(TOPIC, 1, {"retention.ms": "1000"})
    second.topics.catalog_changed()
    first.lead(0, lease_ms=300)
    _produce(first, 0, _records(2, NOW_MS - HOUR_MS))
    time.sleep(0.5)
    second.lead(0)
    first.topics.clean_led_partitions(NOW_MS)
    assert first.topics.log(TOPIC, 0) is None  # it stepped down
    assert second.store.partition_state(TOPIC, 0).log_start_offset == 0
    assert len(list(second.store.batches(TOPIC, 0))) == 1


def test_acls_scram_users_and_broker_settings_changed_on_one_broker_hold_on_the_other(
        nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    first.topics.create(TOPIC, 1)
    catalog_changed(second.broker)
    first_auth, second_auth = first.broker.security.authorizer, second.broker.security.authorizer
    assert first_auth is not None and second_auth is not None
    read = AclBinding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, "User:alice", "*",
                      Operation.READ, Permission.ALLOW)
    assert not second_auth.authorize("User:alice", "10.0.0.1", Operation.READ,
                                     ResourceType.TOPIC, TOPIC)
    first_auth.create([read])
    credential = credential_from_password("SCRAM-SHA-256", "secret")
    first.broker.security.scram.apply([("alice", "SCRAM-SHA-256", credential)], [])
    dynamic = first.broker.dynamic_configs
    dynamic.replace(CLUSTER_DEFAULT, dynamic.changed(
        CLUSTER_DEFAULT, [ConfigChange("log.retention.ms", SET, "1234")]))
    dynamic.replace(PER_BROKER, dynamic.changed(
        PER_BROKER, [ConfigChange("log.segment.bytes", SET, "2000000")]))
    lease = second.lead(0)
    catalog_changed(second.broker)
    assert second_auth.authorize("User:alice", "10.0.0.1", Operation.READ,
                                 ResourceType.TOPIC, TOPIC)
    assert second.broker.security.scram.get("alice", "SCRAM-SHA-256") == credential
    assert second.broker.log_config.retention_ms == 1234  # the cluster default is shared
    assert second.broker.log_config.segment_bytes != 2_000_000  # the first broker's own
    log = second.topics.log(TOPIC, 0)
    assert log is not None and log.config.retention_ms == 1234  # open logs follow
    assert lease.epoch == second.topics.leader_epoch(TOPIC, 0)
    # Removals travel the same way.
    second_auth.delete([AclFilter(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, None, None,
                                  Operation.ANY, Permission.ANY)])
    second.broker.security.scram.apply([], [("alice", "SCRAM-SHA-256")])
    catalog_changed(first.broker)
    assert first_auth.acls() == []
    assert first.broker.security.scram.get("alice", "SCRAM-SHA-256") is None
