"""Transactional offsets in the group coordinator (TxnOffsetCommit, KIP-447 and KIP-98): held
pending per producer until the producer's marker, invisible to OffsetFetch until then (and
UNSTABLE_OFFSET_COMMIT under require_stable), committed or dropped by the marker, fenced by the
group as Kafka 4.3.1 fences transactional commits, and kept by deletion and expiry rules."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
from tests.coordinator.harness import Harness, counting_uuids, synchronous_config
from tests.coordinator.test_consumer_protocol import G, Session, topics

from kgroups.broker.coordinator_runtime import batch_of, image_of
from kgroups.coordinator import (
    DeleteGroupsRequest,
    GroupCoordinator,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetDeleteRequest,
    OffsetFetchGroup,
    OffsetFetchRequest,
)
from kgroups.coordinator.messages import (
    CompleteTransactionRequest,
    TxnOffsetCommitRequest,
)
from kgroups.errors import ErrorCode

E = ErrorCode
PID, EPOCH = 4000, 2
_BASE_OFFSET = struct.Struct(">q")  # a batch's first field, outside its CRC
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of the batch header


@dataclass
class LogHarness(Harness):
    """A harness that also keeps each partition's log bytes, as the runtime appends them."""

    segments: dict[int, bytearray] = field(default_factory=dict)
    next_offsets: dict[int, int] = field(default_factory=dict)

    def complete_writes(self, error=None) -> None:
        while self.pending:
            write = self.pending.pop(0)
            if error is None:
                self.log.setdefault(write.offsets_partition, []).extend(write.records)
                batch = bytearray(batch_of(write, self.now))
                offset = self.next_offsets.get(write.offsets_partition, 0)
                _BASE_OFFSET.pack_into(batch, 0, offset)
                self.next_offsets[write.offsets_partition] = \
                    offset + _LAST_OFFSET_DELTA.unpack_from(batch, 23)[0] + 1
                self.segments.setdefault(write.offsets_partition, bytearray()).extend(batch)
            self.absorb(self.coordinator.write_completed(write.write_id, error, self.now))

    def replayed_from_bytes(self) -> GroupCoordinator:
        """A coordinator loaded from the log bytes (transactions resolved by their markers)."""
        fresh = GroupCoordinator(self.config, new_uuid=counting_uuids())
        for partition in range(self.config.offsets_topic_num_partitions):
            data = bytes(self.segments.get(partition, b""))
            fresh.load_image(partition, image_of(data)[0], self.now)
        return fresh


def txn_commit(h: Harness, group: str, offsets: dict[tuple[str, int], int], *,
               producer: int = PID, epoch: int = EPOCH, generation: int = -1,
               member_id: str = "", instance: str | None = None,
               metadata: str = "") -> list[ErrorCode]:
    by_topic: dict[str, list[OffsetCommitPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(OffsetCommitPartition(partition, offset, metadata))
    rid = h.rid()
    h.absorb(h.coordinator.txn_offset_commit(TxnOffsetCommitRequest(
        rid, group, producer, epoch, tuple(OffsetCommitTopic(t, tuple(p))
                                           for t, p in by_topic.items()),
        generation, member_id, instance), h.now))
    response = h.reply(rid)
    if response is None:
        return []
    return [p.error for t in response.topics for p in t.partitions]


def end_txn(h: Harness, group: str, commits: bool, *, producer: int = PID,
            epoch: int = EPOCH) -> ErrorCode | None:
    rid = h.rid()
    h.absorb(h.coordinator.complete_transaction(CompleteTransactionRequest(
        rid, h.partition_of(group), producer, epoch, commits, 7), h.now))
    response = h.reply(rid)
    return None if response is None else response.error


def stable_fetch(h: Harness, group: str, topics=None) -> dict[tuple[str, int], object]:
    rid = h.rid()
    h.absorb(h.coordinator.offset_fetch(OffsetFetchRequest(
        rid, (OffsetFetchGroup(group, topics),), require_stable=True), h.now))
    (fetched,) = h.reply(rid).groups
    return {(t.name, p.partition): (p.error if p.error is not E.NONE else p.offset)
            for t in fetched.topics for p in t.partitions}


@pytest.fixture
def h() -> LogHarness:
    return LogHarness(synchronous_config(offsets_topic_num_partitions=3))


def test_pending_until_commit_marker(h: Harness) -> None:
    assert txn_commit(h, "g", {("t", 0): 10, ("t", 1): 11}) == [E.NONE, E.NONE]
    assert h.fetch("g", (("t", (0, 1)),)) == {("t", 0): -1, ("t", 1): -1}
    assert stable_fetch(h, "g", (("t", (0, 1, 2)),)) == {
        ("t", 0): E.UNSTABLE_OFFSET_COMMIT, ("t", 1): E.UNSTABLE_OFFSET_COMMIT, ("t", 2): -1}
    assert end_txn(h, "g", commits=True) is E.NONE
    assert h.fetch("g") == {("t", 0): 10, ("t", 1): 11}
    assert stable_fetch(h, "g", (("t", (0, 1)),)) == {("t", 0): 10, ("t", 1): 11}


def test_abort_marker_drops_them_and_keeps_the_committed_value(h: Harness) -> None:
    h.commit("g", {("t", 0): 5})
    txn_commit(h, "g", {("t", 0): 10})
    assert h.fetch("g") == {("t", 0): 5}  # without require_stable: the last committed one
    assert stable_fetch(h, "g") == {("t", 0): E.UNSTABLE_OFFSET_COMMIT}
    assert end_txn(h, "g", commits=False) is E.NONE
    assert h.fetch("g") == {("t", 0): 5}
    assert stable_fetch(h, "g") == {("t", 0): 5}


def test_a_later_plain_commit_wins_over_the_pending_one(h: Harness) -> None:
    txn_commit(h, "g", {("t", 0): 10})
    h.commit("g", {("t", 0): 20})
    assert stable_fetch(h, "g") == {("t", 0): 20}  # the plain commit superseded it
    end_txn(h, "g", commits=True)
    assert h.fetch("g") == {("t", 0): 20}


def test_missing_group_is_created_only_without_generation(h: Harness) -> None:
    assert txn_commit(h, "new", {("t", 0): 1}, generation=3, member_id="m") == \
        [E.ILLEGAL_GENERATION]
    assert h.coordinator.group_view("new") is None
    assert txn_commit(h, "new", {("t", 0): 1}) == [E.NONE]
    view = h.coordinator.group_view("new")
    assert view is not None and view.state == "Empty"


def test_failed_write_takes_the_created_group_back() -> None:
    h = Harness(synchronous_config(offsets_topic_num_partitions=1), auto_complete=False)
    txn_commit(h, "new", {("t", 0): 1})
    (write,) = h.pending
    assert write.producer_id == PID and write.producer_epoch == EPOCH
    h.pending.clear()
    h.absorb(h.coordinator.write_completed(write.write_id, E.NOT_LEADER_OR_FOLLOWER, h.now))
    assert h.coordinator.group_view("new") is None
    assert h.coordinator.pending_transactional_offsets() == {}


def test_metadata_over_the_limit(h: Harness) -> None:
    limit = h.config.offset_metadata_max_bytes
    assert txn_commit(h, "g", {("t", 0): 1}, metadata="x" * (limit + 1)) == \
        [E.OFFSET_METADATA_TOO_LARGE]
    assert h.coordinator.pending_transactional_offsets() == {}


def test_classic_group_fencing(h: Harness) -> None:
    rid = h.join("g", instance="i1")
    h.advance(3000)  # the initial rebalance delay
    member, generation = h.reply(rid).member_id, h.reply(rid).generation_id
    h.sync("g", member, generation, {member: b""}, instance="i1")
    assert txn_commit(h, "g", {("t", 0): 1}, generation=generation, member_id="nobody") == \
        [E.UNKNOWN_MEMBER_ID]
    assert txn_commit(h, "g", {("t", 0): 1}, generation=generation + 1, member_id=member,
                      instance="i1") == [E.ILLEGAL_GENERATION]
    assert txn_commit(h, "g", {("t", 0): 1}, generation=generation, member_id="other",
                      instance="i1") == [E.FENCED_INSTANCE_ID]
    # v0-v2 carry no member fields: a live group takes them (unlike OffsetCommit).
    assert txn_commit(h, "g", {("t", 0): 1}) == [E.NONE]
    assert txn_commit(h, "g", {("t", 1): 2}, generation=generation, member_id=member,
                      instance="i1") == [E.NONE]


def test_consumer_group_fencing() -> None:
    s = Session()
    s.coordinator.set_topics(topics(t1=3))
    s.hb("a", 0)
    epoch = s.group().members["a"].member_epoch
    assert txn_commit(s, G, {("t1", 0): 1}, generation=epoch, member_id="zz") == \
        [E.UNKNOWN_MEMBER_ID]
    # TxnOffsetCommit has no STALE_MEMBER_EPOCH: Kafka answers ILLEGAL_GENERATION.
    assert txn_commit(s, G, {("t1", 0): 1}, generation=epoch + 1, member_id="a") == \
        [E.ILLEGAL_GENERATION]
    assert txn_commit(s, G, {("t1", 0): 1}) == [E.UNKNOWN_MEMBER_ID]  # group not empty
    assert txn_commit(s, G, {("t1", 0): 1}, generation=epoch, member_id="a") == [E.NONE]


def test_not_coordinator_and_loading() -> None:
    coordinator = GroupCoordinator(synchronous_config(offsets_topic_num_partitions=1),
                                   new_uuid=counting_uuids())
    fx = coordinator.txn_offset_commit(TxnOffsetCommitRequest(
        1, "g", PID, EPOCH, (OffsetCommitTopic("t", (OffsetCommitPartition(0, 1),)),)), 0)
    assert fx.replies[0].response.topics[0].partitions[0].error is E.NOT_COORDINATOR
    coordinator.begin_loading(0)
    fx = coordinator.complete_transaction(CompleteTransactionRequest(2, 0, PID, 0, True, 0), 0)
    assert fx.replies[0].response.error is E.COORDINATOR_LOAD_IN_PROGRESS


def test_an_older_producer_epoch_is_fenced(h: Harness) -> None:
    txn_commit(h, "g", {("t", 0): 1}, epoch=5)
    assert txn_commit(h, "g", {("t", 0): 2}, epoch=4) == [E.INVALID_PRODUCER_EPOCH]
    assert end_txn(h, "g", commits=True, epoch=4) is E.INVALID_PRODUCER_EPOCH
    assert end_txn(h, "g", commits=True, epoch=5) is E.NONE
    assert h.fetch("g") == {("t", 0): 1}


def test_delete_groups_drops_pending_offsets(h: Harness) -> None:
    txn_commit(h, "g", {("t", 0): 1})
    rid = h.rid()
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(rid, ("g",)), h.now))
    assert dict(h.reply(rid).results) == {"g": E.NONE}
    end_txn(h, "g", commits=True)  # the tombstone was newer: nothing comes back
    assert h.coordinator.group_view("g") is None
    assert h.replayed_from_bytes().group_view("g") is None


def test_offset_delete_drops_a_pending_offset(h: Harness) -> None:
    h.commit("g", {("t", 1): 3})
    txn_commit(h, "g", {("t", 0): 1})
    rid = h.rid()
    h.absorb(h.coordinator.offset_delete(OffsetDeleteRequest(rid, "g", (("t", (0,)),)), h.now))
    assert h.reply(rid).error is E.NONE
    assert stable_fetch(h, "g", (("t", (0,)),)) == {("t", 0): -1}
    end_txn(h, "g", commits=True)
    assert h.fetch("g") == {("t", 1): 3}


def test_expiry_waits_for_the_pending_offset() -> None:
    h = Harness(synchronous_config(offsets_topic_num_partitions=1,
                                   offsets_retention_minutes=1,
                                   offsets_retention_check_interval_ms=1_000))
    h.commit("g", {("t", 0): 1, ("t", 1): 1})
    txn_commit(h, "g", {("t", 0): 2})
    h.advance(120_000)
    assert h.fetch("g") == {("t", 0): 1}  # t-1 expired; t-0 waits for its transaction
    end_txn(h, "g", commits=False)
    h.advance(120_000)
    assert h.coordinator.group_view("g") is None  # now everything expired: the group went


def test_pending_offsets_survive_a_restart_and_the_later_marker_commits_them(
        h: LogHarness) -> None:
    h.commit("g", {("t", 0): 5})
    txn_commit(h, "g", {("t", 0): 10, ("t", 1): 11})
    txn_commit(h, "g", {("t", 2): 12}, producer=PID + 1)
    h.commit("g", {("t", 1): 20})  # supersedes the pending t-1
    end_txn(h, "g", commits=False, producer=PID + 1)
    restarted = h.replayed_from_bytes()
    assert restarted.pending_transactional_offsets() == \
        h.coordinator.pending_transactional_offsets()
    assert set(restarted.pending_transactional_offsets()[(h.partition_of("g"), PID)]) == \
        {("g", "t", 0)}
    # The marker comes after the restart: the restarted coordinator commits what it held.
    h.coordinator = restarted
    assert stable_fetch(h, "g") == {("t", 0): E.UNSTABLE_OFFSET_COMMIT, ("t", 1): 20}
    assert end_txn(h, "g", commits=True) is E.NONE
    assert h.fetch("g") == {("t", 0): 10, ("t", 1): 20}
    assert h.replayed_from_bytes().group_view("g").offsets == h.coordinator.group_view("g").offsets
