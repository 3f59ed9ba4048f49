"""ShareFetch and ShareAcknowledge over the wire against an in-process broker: acquisition,
acknowledgement, lock expiry with redelivery, the delivery count limit, acknowledgement and
session errors, and the state the broker's share coordinator (broker.share_state) keeps."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from broker_wire_helpers import connect, create_topic, metadata_request, produce_request
from prometheus_client.parser import text_string_to_metric_families
from read_committed_helpers import txn_batch, write_marker
from servers import InProcessBroker
from tests.share.share_wire import brief, join_share_group, share_acknowledge, share_fetch

from kgroups.broker.wire import build, request_type
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch
from kgroups.share.persisted import DeliveryState, PersistedBatch, SharePartitionKey
from kgroups.tools.wire_client import KafkaWireClient

SETTINGS = ("group.share.record.lock.duration.ms=1000",
            "group.share.min.record.lock.duration.ms=1000",
            "group.share.delivery.count.limit=2")


class Conversation:
    def __init__(self, broker: InProcessBroker, topic: str) -> None:
        self.broker = broker
        self.client: KafkaWireClient = connect(broker.port)
        create_topic(self.client, topic)
        self.topic = topic
        self.topic_id: uuid.UUID = self.client.call(metadata_request(topic)).topics[0].topic_id
        self.group = "g-" + topic
        # A member joins first, as with Kafka: the group coordinator initializes the share
        # partition when assigning it (a share partition never initialized is not served).
        # The members that fetch need not be this one: ShareFetch does not check membership.
        self.join("joined-first")

    def produce(self, count: int, start: int = 0) -> None:
        records = build_batch([(b"k", b"v%d" % i, 1_700_000_000_000)
                               for i in range(start, start + count)])
        self.client.call(produce_request(self.topic, 0, records))

    def fetch(self, member: str, epoch: int, **fields: Any) -> dict[str, Any]:
        return brief(self.client.call(share_fetch(self.group, member, epoch, self.topic_id,
                                                  **fields)))

    def ack(self, member: str, epoch: int, acks: Any, **fields: Any) -> dict[str, Any]:
        return brief(self.client.call(share_acknowledge(self.group, member, epoch,
                                                        self.topic_id, acks, **fields)))

    def heartbeat(self, member: str, epoch: int) -> Any:
        """ShareGroupHeartbeat: epoch 0 joins (subscribed to the topic), -1 leaves."""
        return self.client.call(build(
            request_type(76, 1), group_id=self.group, member_id=member, member_epoch=epoch,
            rack_id=None, subscribed_topic_names=(self.topic,) if epoch == 0 else None))

    def join(self, member: str) -> None:
        join_share_group(self.client, self.group, member, self.topic)

    def state(self) -> Any:
        """What the share coordinator keeps of the share partition."""
        key = SharePartitionKey(self.group, self.topic_id.bytes, 0)

        async def read() -> Any:
            return await self.broker.broker.share_state.read(key, 0)

        result = self.broker.call(read)
        assert result.error == ErrorCode.NONE
        return result.state


@pytest.fixture
def conversation(make_inprocess_broker: Callable[..., InProcessBroker],
                 request: pytest.FixtureRequest) -> Conversation:
    return Conversation(make_inprocess_broker(*SETTINGS), "share-" + uuid.uuid4().hex[:8])


def test_records_before_the_first_fetch_are_skipped_then_acquired_and_acknowledged(
        conversation: Conversation) -> None:
    c = conversation
    c.produce(3)
    first = c.fetch("m1", 0)
    assert first["lock_ms"] == 1000
    assert first["partitions"] == [{"partition": 0, "error": 0, "message": None,
                                    "ack_error": 0, "ack_message": None, "batches": [],
                                    "acquired": []}]
    c.produce(3, 3)
    c.produce(2, 6)
    second = c.fetch("m1", 1)
    assert second["partitions"][0]["acquired"] == [(3, 7, 1)]
    assert second["partitions"][0]["batches"] == [(3, 5), (6, 7)]
    assert c.fetch("m1", 2)["partitions"] == []  # nothing new: an incremental answer is empty
    acked = c.ack("m1", 3, {0: [(3, 4, [1]), (5, 5, [2])]})
    assert acked["partitions"] == [{"partition": 0, "error": 0, "message": None}]
    # Written as Kafka writes it: the start from before the acknowledgement (3) and the two
    # records acknowledged past it; the start moves with the next write.
    state = c.state()
    assert (state.start_offset, state.delivery_complete_count) == (3, 2)
    redelivered = c.fetch("m1", 4)["partitions"][0]
    assert redelivered["acquired"] == [(5, 5, 2)]
    assert redelivered["batches"] == [(3, 5)]


def test_lock_expiry_redelivers_then_archives_at_the_delivery_count_limit(
        conversation: Conversation) -> None:
    c = conversation
    c.fetch("m1", 0)
    c.produce(2)
    assert c.fetch("m1", 1)["partitions"][0]["acquired"] == [(0, 1, 1)]
    time.sleep(1.3)
    assert c.fetch("m2", 0, wait_ms=0)["partitions"][0]["acquired"] == [(0, 1, 2)]
    assert c.state().batches == (PersistedBatch(0, 1, DeliveryState.AVAILABLE, 1),)
    time.sleep(1.3)
    assert c.fetch("m2", 1, wait_ms=200)["partitions"] == []
    assert c.state().start_offset == 2  # delivered twice, timed out twice: archived


def test_acknowledgement_errors(conversation: Conversation) -> None:
    c = conversation
    c.fetch("m1", 0)
    c.produce(3)
    c.fetch("m1", 1)
    c.fetch("m2", 0)
    other = c.fetch("m2", 1, acks={0: [(0, 0, [1])]})["partitions"][0]
    assert (other["ack_error"], other["ack_message"]) == (
        ErrorCode.INVALID_RECORD_STATE, "Member is not the owner of batch record")
    assert c.ack("m1", 2, {0: [(0, 0, [5])]})["partitions"][0]["error"] == \
        ErrorCode.INVALID_REQUEST
    assert c.ack("m1", 3, {0: [(0, 1, [1, 1, 1])]})["partitions"][0]["error"] == \
        ErrorCode.INVALID_REQUEST
    assert c.ack("m1", 4, {0: [(0, 0, [4])]})["partitions"][0]["error"] == \
        ErrorCode.INVALID_REQUEST  # RENEW without is_renew_ack
    assert c.ack("m1", 5, {0: [(0, 0, [4])]}, renew=True)["partitions"][0]["error"] == 0
    overlapping = c.ack("m1", 6, {0: [(0, 1, [1]), (1, 2, [1])]})["partitions"][0]
    assert overlapping["error"] == ErrorCode.INVALID_RECORD_STATE  # and nothing applied
    assert c.ack("m1", 7, {0: [(1, 1, [0])]})["partitions"][0]["error"] == 0
    assert c.ack("m1", 8, {0: [(1, 1, [1])]})["partitions"][0] == {
        "partition": 0, "error": ErrorCode.INVALID_RECORD_STATE,
        "message": "The offset cannot be acknowledged. The offset is not acquired."}
    assert c.ack("m1", 9, {0: [(9, 9, [1])]})["partitions"][0]["message"] == \
        "Batch record not found. The first offset in request is past acquired records."


def test_session_errors_and_close_release(conversation: Conversation) -> None:
    c = conversation
    c.fetch("m1", 0)
    c.produce(2)
    assert c.fetch("m1", 1)["partitions"][0]["acquired"] == [(0, 1, 1)]
    assert c.fetch("m1", 5)["error"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert c.ack("m1", 0, {0: [(0, 0, [1])]})["error"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert c.fetch("m1", 0, acks={0: [(0, 0, [1])]})["error"] == ErrorCode.INVALID_REQUEST
    assert c.fetch("nobody", 3)["error"] == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert c.fetch("m1", -1, partitions=())["partitions"] == []
    assert c.fetch("m1", 2)["error"] == ErrorCode.SHARE_SESSION_NOT_FOUND
    # closing released m1's records at once: another member gets them on its next fetch
    assert c.fetch("m2", 0)["partitions"][0]["acquired"] == [(0, 1, 2)]


def test_long_poll_answers_when_records_arrive(conversation: Conversation) -> None:
    c = conversation
    c.fetch("m1", 0)
    other = connect(c.client.port)
    began = time.monotonic()
    timer = threading.Timer(0.3, lambda: other.call(produce_request(
        c.topic, 0, build_batch([(b"k", b"late", 1_700_000_000_000)]))))
    timer.start()
    answer = c.fetch("m1", 1, wait_ms=5000)
    timer.join()
    assert answer["partitions"][0]["acquired"] == [(0, 0, 1)]
    assert time.monotonic() - began < 3


def _long_poll(c: Conversation, member: str, let_go: Callable[[], object],
               wait_ms: int) -> tuple[float, list[Any]]:
    """`member` (its session opened on a connection of its own) waits in a ShareFetch while
    m1, holding offsets 0-1, lets them go; how long the wait lasted and what it acquired."""
    other = connect(c.client.port)
    brief(other.call(share_fetch(c.group, member, 0, c.topic_id)))
    c.produce(2)
    assert c.fetch("m1", 1)["partitions"][0]["acquired"] == [(0, 1, 1)]
    answer: dict[str, Any] = {}

    def wait() -> None:
        answer.update(brief(other.call(share_fetch(c.group, member, 1, c.topic_id,
                                                   wait_ms=wait_ms))))

    began = time.monotonic()
    waiting = threading.Thread(target=wait)
    waiting.start()
    time.sleep(0.15)
    let_go()
    waiting.join()
    return time.monotonic() - began, [p["acquired"] for p in answer["partitions"]]


def _close_without_acknowledging(c: Conversation) -> None:
    """What KafkaShareConsumer.close() sends for records its last poll returned (implicit
    acknowledgement acknowledges them only at the next poll): epoch -1, nothing acknowledged."""
    assert c.ack("m1", -1, {})["error"] == ErrorCode.NONE


def _disconnect(c: Conversation) -> None:
    c.client.close()


def _release(c: Conversation) -> None:
    assert c.ack("m1", 2, {0: [(0, 1, [2])]})["partitions"][0]["error"] == ErrorCode.NONE


@pytest.mark.parametrize("let_go", [_close_without_acknowledging, _disconnect, _release])
def test_records_a_member_lets_go_wait_for_a_waiting_fetchs_max_wait(
        conversation: Conversation, let_go: Callable[[Conversation], None]) -> None:
    """As on Kafka 4.3.1: released records do not cut short another member's long poll (they
    are available, and its fetch takes them when MaxWait ends). Waking it at once handed the
    records a closing KafkaShareConsumer had just returned to its application to a second
    consumer while the first was still closing (bench/share_groups.py's redeliveries)."""
    c = conversation
    c.fetch("m1", 0)
    took, acquired = _long_poll(c, "m2", lambda: let_go(c), wait_ms=700)
    assert acquired == [[(0, 1, 2)]]
    assert took >= 0.65, f"answered after {took:.2f}s, before its 0.7 s MaxWait"


def test_an_acknowledgement_moving_the_start_wakes_a_waiting_fetch(
        conversation: Conversation) -> None:
    c = conversation
    c.fetch("m1", 0)
    took, acquired = _long_poll(
        c, "m2", lambda: c.ack("m1", 2, {0: [(0, 1, [1, 2])]}), wait_ms=5000)
    assert acquired == [[(1, 1, 2)]]
    assert took < 2.5, f"answered only after {took:.2f}s"


def test_a_member_leaving_its_group_keeps_its_session_and_records(
        conversation: Conversation) -> None:
    """As on Kafka 4.3.1 (tests/differential/test_diff_share_fetch.py): leaving the share group
    neither ends the member's share session nor releases what it acquired; its session closing
    (KafkaShareConsumer closes it before it leaves) or the locks timing out do."""
    c = conversation
    c.join("m1")
    c.fetch("m1", 0)
    c.produce(2)
    assert c.fetch("m1", 1)["partitions"][0]["acquired"] == [(0, 1, 1)]
    assert int(c.heartbeat("m1", -1).error_code) == ErrorCode.NONE
    time.sleep(0.2)  # what a release in the background would have taken
    assert c.fetch("m2", 0)["partitions"][0]["acquired"] == []
    assert c.ack("m1", 2, {0: [(0, 1, [1])]})["partitions"] == [
        {"partition": 0, "error": 0, "message": None}]
    assert c.state().batches == (PersistedBatch(0, 1, DeliveryState.ACKNOWLEDGED, 1),)


def test_a_closed_connection_ends_its_share_sessions(conversation: Conversation) -> None:
    c = conversation
    c.fetch("m1", 0)
    c.produce(2)
    assert c.fetch("m1", 1)["partitions"][0]["acquired"] == [(0, 1, 1)]
    c.client.close()
    c.client = connect(c.broker.port)
    deadline = time.monotonic() + 0.8  # well before m1's 1 s lock would have released them
    while (answer := c.fetch("m2", 0))["partitions"][0]["acquired"] == []:
        assert time.monotonic() < deadline, "m1's records were not released with its session"
        c.client = connect(c.broker.port)  # a fresh session each try
    assert answer["partitions"][0]["acquired"] == [(0, 1, 2)]
    assert c.fetch("m1", 2)["error"] == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_min_bytes_waits_before_acquiring(conversation: Conversation) -> None:
    c = conversation
    c.fetch("m1", 0)
    c.produce(1)
    began = time.monotonic()
    answer = c.fetch("m1", 1, wait_ms=1500, min_bytes=1 << 20)
    assert time.monotonic() - began >= 1.4  # MinBytes never came: MaxWait, then acquired
    assert answer["partitions"][0]["acquired"] == [(0, 0, 1)]


def test_a_share_partition_whose_state_was_deleted_is_loaded_again(
        conversation: Conversation) -> None:
    c = conversation
    c.fetch("m1", 0)
    c.produce(2)
    assert c.fetch("m1", 1)["partitions"][0]["acquired"] == [(0, 1, 1)]
    key = SharePartitionKey(c.group, c.topic_id.bytes, 0)

    async def delete() -> ErrorCode:
        return await c.broker.broker.share_state.delete(key)

    assert c.broker.call(delete) == ErrorCode.NONE  # as DeleteShareGroupOffsets does
    refused = c.ack("m1", 2, {0: [(0, 1, [1])]})["partitions"][0]
    assert refused["error"] != ErrorCode.NONE  # the share coordinator no longer has it
    c.produce(1)
    assert c.fetch("m1", 3, wait_ms=200)["partitions"][0]["error"] == \
        ErrorCode.UNKNOWN_SERVER_ERROR  # not initialized again yet
    assert c.ack("m1", 4, {0: [(0, 1, [1])]})["partitions"] == [{
        "partition": 0, "error": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "message": "This server does not host this topic-partition."}]

    async def initialize() -> ErrorCode:  # as the group coordinator's next assignment does
        return await c.broker.broker.share_state.initialize(key, 1, -1)

    assert c.broker.call(initialize) == ErrorCode.NONE
    # Loaded again from nothing: it starts at the log's end, as a new share partition does.
    assert c.fetch("m1", 5, wait_ms=200)["partitions"] == []
    c.produce(1)
    assert c.fetch("m1", 6, wait_ms=2000)["partitions"][0]["acquired"] == [(3, 3, 1)]


def test_read_committed_skips_aborted_records_and_markers(
        make_inprocess_broker: Callable[..., InProcessBroker]) -> None:
    c = Conversation(make_inprocess_broker(*SETTINGS, "share.isolation.level=read_committed"),
                     "share-rc-" + uuid.uuid4().hex[:8])
    aborted, committed = 7001, 7002
    c.fetch("m1", 0)
    c.client.call(produce_request(c.topic, 0, txn_batch(aborted, b"a1", b"a2")))  # 0-1
    c.client.call(produce_request(c.topic, 0, txn_batch(committed, b"b3")))  # 2
    assert write_marker(c.client, c.topic, aborted, commits=False) == 0  # 3
    assert c.fetch("m1", 1, wait_ms=200)["partitions"] == []  # 2 is not stable yet
    assert write_marker(c.client, c.topic, committed, commits=True) == 0  # 4
    answer = c.fetch("m1", 2, wait_ms=2000)["partitions"][0]
    assert answer["acquired"] == [(2, 2, 1)]
    assert answer["batches"] == [(2, 2)]
    assert c.ack("m1", 3, {0: [(2, 2, [1])]})["partitions"][0]["error"] == 0
    # Written as Kafka writes it: the start from before the acknowledgement, with the records
    # it settled (2 acknowledged; the aborted ones and both markers archived) as batches.
    state = c.state()
    assert (state.start_offset, state.delivery_complete_count) == (2, 3)


def test_metrics_count_deliveries_acknowledgements_and_archivals(
        make_inprocess_broker: Callable[..., InProcessBroker]) -> None:
    """What an operator watches of a queue, on the metrics endpoint: one record accepted, one
    rejected, one released and delivered again, one timed out twice and archived at the
    delivery count limit (2 here)."""
    c = Conversation(make_inprocess_broker(*SETTINGS, "kgroups.metrics.port=0"),
                     "share-metrics-" + uuid.uuid4().hex[:8])
    c.fetch("m1", 0)
    c.produce(4)
    assert c.fetch("m1", 1)["partitions"][0]["acquired"] == [(0, 3, 1)]
    assert c.ack("m1", 2, {0: [(0, 0, [1]), (1, 1, [3]), (2, 2, [2])]})["partitions"][0][
        "error"] == 0
    time.sleep(1.3)  # offset 3's lock runs out
    assert c.fetch("m1", 3, wait_ms=0)["partitions"][0]["acquired"] == [(2, 3, 2)]
    time.sleep(1.3)  # both run out again, each delivered twice: archived
    c.fetch("m1", 4, wait_ms=0)
    port = c.broker.broker.coordinator.metrics_server.port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(answer.read().decode())
                   for s in family.samples}

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("kafka_share_group_records_delivered_total", delivery="first") == 4
    assert value("kafka_share_group_records_delivered_total", delivery="redelivery") == 2
    assert [value("kafka_share_group_records_acknowledged_total", type=kind)
            for kind in ("accept", "reject", "release")] == [1, 1, 1]
    assert value("kafka_share_group_lock_timeouts_total") == 3
    assert value("kafka_share_group_records_archived_at_delivery_limit_total") == 2
