"""Failed writes of the consumer protocol and of migration revert exactly what they applied.

Consumer-protocol members (dynamic and static) join, heartbeat, leave and time out, classic
members join, sync, heartbeat and leave the same group (so the group is upgraded to a consumer
group when a consumer-protocol member joins a live classic group, and downgraded when the last
one leaves), offsets are committed and the group is deleted; every write completes, in order,
succeeding or failing as hypothesis chooses, sometimes several at once after they stacked up.
Whenever no write is in flight, the live coordinator must hold exactly what a coordinator rebuilt
from the successfully written records holds: the same offsets, the same stored GroupMetadata
value, the same consumer group (epochs, members, targets, assignments, who owns what), and for a
classic group at rest (Stable or Empty) the same generation, protocol, leader and members.

Transactional producers commit offsets to the group (TxnOffsetCommit, sometimes as the group's
members, sometimes without member fields) and their transactions end (COMMIT or ABORT markers),
mixed with all of the above: the written batches are kept as log bytes (transactional batches
and control batches as the broker writes them), and the coordinator rebuilt from those bytes
(replay resolving transactions by their markers) must also hold the same pending
transactional offsets as the live one.

The one allowance is Kafka's own: a lost GroupMetadata record of a generation that ended Empty
is not reverted (the older record stays authoritative), so that group is skipped until a later
GroupMetadata record of it is written.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kgroups.broker.coordinator_runtime import batch_of, image_of
from kgroups.coordinator import (
    DeleteGroupsRequest,
    GroupCoordinator,
    HeartbeatResponse,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitTopic,
    Write,
)
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.coordinator.messages import CompleteTransactionRequest, TxnOffsetCommitRequest
from kgroups.coordinator.views import view_of
from kgroups.errors import ErrorCode
from kgroups.records.consumer_protocol import encode_assignment
from kgroups.records.schema import ConsumerAssignment, GroupMetadataKey, TopicPartitions

from .harness import Harness, subscription, synchronous_config
from .test_write_path_replay import Client, settle

E = ErrorCode
G = "mixed"
T1 = uuid.UUID(int=0x71)
CONSUMERS = ("a", "b", "sa")  # "sa" is static (instance id "sa")
CLASSICS = ("c0", "c1", "sc")  # "sc" is static (instance id "sc")
WRITE_ERRORS = (E.NOT_ENOUGH_REPLICAS, E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT)
AT_REST = ("Stable", "Empty")
PRODUCERS = (7001, 7002)
_BASE_OFFSET = struct.Struct(">q")  # a batch's first field, outside its CRC
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of the batch header


@dataclass
class Consumer:
    epoch: int = 0
    owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] = ()
    joined: bool = False


def static(name: str) -> str | None:
    return name if name.startswith("s") else None


class MixedWrites(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(synchronous_config(offsets_topic_num_partitions=1,
                                            group_initial_rebalance_delay_ms=0),
                         auto_complete=False)
        self.h.coordinator.set_topics({"t1": TopicInfo(T1, 4)}, self.h.now)
        self.consumers = {name: Consumer() for name in CONSUMERS}
        self.classics = {name: Client() for name in CLASSICS}
        self.lagging = False  # a tolerated GroupMetadata loss (module docstring)
        self.segment = bytearray()  # the partition's log bytes, every durable write's batch
        self.next_offset = 0
        self.outcomes = {"ok": 0, "failed": 0}

    # -- consumer-protocol members ------------------------------------------------------------

    def _consumer_heartbeat(self, name: str, epoch: int, full: bool) -> None:
        member = self.consumers[name]
        request_id = self.h.rid()
        self.h.absorb(self.h.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
            request_id, G, name, epoch, instance_id=static(name),
            rebalance_timeout_ms=20_000 if full else -1,
            subscribed_topic_names=("t1",) if full else None,
            topic_partitions=() if epoch == 0 else member.owned,
            client_id=name, client_host="/127.0.0.1"), self.h.now))
        self.pending_consumer = (name, request_id, epoch)

    def _consumer_answer(self) -> None:
        name, request_id, epoch = self.pending_consumer
        response = self.h.reply(request_id)
        if response is None:
            return  # its write is still in flight
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        member = self.consumers[name]
        if epoch < 0:
            self.consumers[name] = Consumer()
        elif response.error is E.NONE:
            member.epoch, member.joined = response.member_epoch, True
            if response.assignment is not None:
                member.owned = response.assignment
        else:
            self.consumers[name] = Consumer()  # fenced or unknown: it rejoins from scratch

    @rule(name=st.sampled_from(CONSUMERS), outcomes=st.lists(st.booleans(), max_size=6))
    def consumer_heartbeat(self, name: str, outcomes: list[bool]) -> None:
        member = self.consumers[name]
        self._consumer_heartbeat(name, member.epoch if member.joined else 0,
                                 full=not member.joined)
        self._complete(outcomes)
        self._consumer_answer()

    @rule(name=st.sampled_from(CONSUMERS), outcomes=st.lists(st.booleans(), max_size=6))
    def consumer_leave(self, name: str, outcomes: list[bool]) -> None:
        if not self.consumers[name].joined:
            return
        self._consumer_heartbeat(name, -1, full=False)
        self._complete(outcomes)
        self._consumer_answer()

    # -- classic members ----------------------------------------------------------------------

    def _settle_classic(self) -> None:
        for client in self.classics.values():
            settle(self.h, client)

    @rule(name=st.sampled_from(CLASSICS), restarted=st.booleans(),
          outcomes=st.lists(st.booleans(), max_size=6))
    def classic_join(self, name: str, restarted: bool, outcomes: list[bool]) -> None:
        client = self.classics[name]
        if client.join_request is not None and not restarted:
            return
        if restarted:
            client.forget()
        protocols = (("cooperative-sticky", subscription("t1")), ("range", subscription("t1")))
        client.join_request = self.h.join(G, client.member_id, instance=static(name),
                                          protocols=protocols, session=10_000,
                                          rebalance=15_000, client_id=name)
        self._complete(outcomes)
        self._settle_classic()

    @rule(name=st.sampled_from(CLASSICS), outcomes=st.lists(st.booleans(), max_size=6))
    def classic_sync(self, name: str, outcomes: list[bool]) -> None:
        client = self.classics[name]
        if client.sync_request is not None or not client.member_id or client.generation < 0:
            return
        assignments = {m: encode_assignment(ConsumerAssignment(
            (TopicPartitions("t1", (i,)),), None, 1)) for i, m in enumerate(client.leader_members)}
        client.sync_request = self.h.sync(G, client.member_id, client.generation,
                                          assignments or None, instance=static(name),
                                          protocol_type="consumer")
        self._complete(outcomes)
        self._settle_classic()

    @rule(name=st.sampled_from(CLASSICS), outcomes=st.lists(st.booleans(), max_size=6))
    def classic_heartbeat(self, name: str, outcomes: list[bool]) -> None:
        client = self.classics[name]
        if not client.member_id:
            return
        response = self.h.reply(self.h.heartbeat(G, client.member_id, client.generation,
                                                 static(name)))
        assert isinstance(response, HeartbeatResponse)
        if response.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            client.forget()
        self._complete(outcomes)
        self._settle_classic()

    @rule(name=st.sampled_from(CLASSICS), outcomes=st.lists(st.booleans(), max_size=6))
    def classic_leave(self, name: str, outcomes: list[bool]) -> None:
        client = self.classics[name]
        if not client.member_id:
            return
        self.h.leave(G, MemberIdentity(client.member_id, static(name)))
        self._complete(outcomes)
        self._settle_classic()

    # -- offsets, deletion, time --------------------------------------------------------------

    @rule(partition=st.integers(0, 3), offset=st.integers(0, 99),
          outcomes=st.lists(st.booleans(), max_size=6))
    def commit(self, partition: int, offset: int, outcomes: list[bool]) -> None:
        self.h.commit(G, {("t1", partition): offset})
        self._complete(outcomes)

    @rule(producer=st.sampled_from(PRODUCERS), partition=st.integers(0, 3),
          offset=st.integers(0, 99), member=st.sampled_from((None, *CONSUMERS, *CLASSICS)),
          outcomes=st.lists(st.booleans(), max_size=6))
    def txn_commit(self, producer: int, partition: int, offset: int, member: str | None,
                   outcomes: list[bool]) -> None:
        """A transactional producer commits an offset, as a consumer of the group (KIP-447
        fields of a member, possibly stale) or without member fields."""
        generation, member_id = -1, ""
        if member in self.consumers:
            generation, member_id = self.consumers[member].epoch, member
        elif member in self.classics:
            client = self.classics[member]
            generation, member_id = client.generation, client.member_id
        part = OffsetCommitPartition(partition, offset)
        self.h.absorb(self.h.coordinator.txn_offset_commit(TxnOffsetCommitRequest(
            self.h.rid(), G, producer, 0, (OffsetCommitTopic("t1", (part,)),), generation,
            member_id), self.h.now))
        self._complete(outcomes)

    @rule(producer=st.sampled_from(PRODUCERS), commits=st.booleans(),
          outcomes=st.lists(st.booleans(), max_size=6))
    def txn_ends(self, producer: int, commits: bool, outcomes: list[bool]) -> None:
        self.h.absorb(self.h.coordinator.complete_transaction(CompleteTransactionRequest(
            self.h.rid(), 0, producer, 0, commits, 3), self.h.now))
        self._complete(outcomes)

    @rule(outcomes=st.lists(st.booleans(), max_size=6))
    def delete_group(self, outcomes: list[bool]) -> None:
        self.h.absorb(self.h.coordinator.delete_groups(
            DeleteGroupsRequest(self.h.rid(), (G,)), self.h.now))
        self._complete(outcomes)

    @rule(ms=st.sampled_from((1_000, 11_000, 21_000, 46_000)),
          outcomes=st.lists(st.booleans(), max_size=6))
    def time_passes(self, ms: int, outcomes: list[bool]) -> None:
        self.h.advance(ms)  # sessions, rebalance and join timeouts fence members on the way
        self._complete(outcomes)
        self._settle_classic()

    @rule(outcomes=st.lists(st.booleans(), min_size=1, max_size=8))
    def stacked_writes_complete(self, outcomes: list[bool]) -> None:
        """Writes that piled up complete together, in order, failing where `outcomes` says."""
        self._complete(outcomes, all_of_them=True)
        self._settle_classic()

    # -- the log side -------------------------------------------------------------------------

    def _complete(self, outcomes: list[bool], all_of_them: bool = False) -> None:
        """Complete the writes in flight in order, one per outcome (True: it fails, and
        the later ones of its partition with it); those left over stay in flight (they stack)
        unless `all_of_them`."""
        steps = iter(outcomes)
        while self.h.pending:
            fails = next(steps, None)
            if fails is None:
                if not all_of_them:
                    return
                fails = False
            write = self.h.pending.pop(0)
            error = WRITE_ERRORS[len(write.records) % len(WRITE_ERRORS)] if fails else None
            self._finish(write, error)

    def _finish(self, write: Write, error: ErrorCode | None) -> None:
        if error is None:
            self.outcomes["ok"] += 1
            self.h.log.setdefault(write.offsets_partition, []).extend(write.records)
            self._append_bytes(write)
            if any(type(r.key) is GroupMetadataKey for r in write.records):
                self.lagging = False
        else:
            for lost in self.h.lost_with(write):
                self.outcomes["failed"] += 1
                # Kafka does not revert the GroupMetadata of a generation that ended Empty.
                first = lost.records[0] if lost.records else None
                if len(lost.records) == 1 and type(first.key) is GroupMetadataKey and \
                        first.value is not None and not first.value.members:
                    self.lagging = True
        self.h.absorb(self.h.coordinator.write_completed(write.write_id, error, self.h.now))

    # -- the check ----------------------------------------------------------------------------

    def _append_bytes(self, write: Write) -> None:
        """The write's batch as the runtime appends it, at the log's next offset."""
        batch = bytearray(batch_of(write, self.h.now))
        _BASE_OFFSET.pack_into(batch, 0, self.next_offset)
        self.next_offset += _LAST_OFFSET_DELTA.unpack_from(batch, 23)[0] + 1
        self.segment += batch

    @invariant()
    def memory_is_the_replay_of_the_written_records(self) -> None:
        if self.h.pending:
            return  # records in flight already show in memory
        fresh = GroupCoordinator(self.h.config, new_uuid=uuid.uuid4)
        image, _, _ = image_of(bytes(self.segment))
        fresh.load_image(0, image, self.h.now)
        live = self.h.coordinator._groups.get(G)
        assert_same_group(live, fresh._groups.get(G), classic=not self.lagging)
        assert (self.h.coordinator.pending_transactional_offsets()
                == fresh.pending_transactional_offsets())


def assert_same_group(live, replayed, *, classic: bool) -> None:
    """`live` holds what `replayed` (rebuilt from the log) holds (module docstring)."""
    if replayed is None:
        # Nothing of it was ever durable: a classic group forming its first generation at most.
        assert live is None or (not live.offsets and live.consumer is None
                                and (live.stored_metadata is None or not classic)), live
        return
    assert live is not None, f"in the log but not in memory: {replayed}"
    assert live.offsets == replayed.offsets
    assert live.consumer == replayed.consumer
    if classic:
        assert live.stored_metadata == replayed.stored_metadata
        if live.state.value in AT_REST and live.consumer is None:
            assert view_of(live) == view_of(replayed)


def test_a_commit_marker_before_a_deletion_lands_in_the_deleted_group() -> None:
    """A COMMIT marker still in flight when DeleteGroups tombstones the group (and the
    transaction's pending key): in log order the tombstones come after the marker, so once
    both are durable the group and its offset are gone, as replay has it."""
    state = MixedWrites()
    state.txn_commit(member=None, offset=0, outcomes=[False], partition=0, producer=7001)
    state.txn_ends(commits=True, outcomes=[], producer=7001)
    state.delete_group(outcomes=[False, False])
    state.memory_is_the_replay_of_the_written_records()
    assert G not in state.h.coordinator._groups


def test_a_commit_marker_before_a_failed_deletion_brings_the_group_back_with_its_offset(
) -> None:
    """The same, with the deletion failing: the group is back, Empty, holding the offset the
    durable marker committed."""
    state = MixedWrites()
    state.txn_commit(member=None, offset=5, outcomes=[False], partition=1, producer=7002)
    state.txn_ends(commits=True, outcomes=[], producer=7002)
    state.delete_group(outcomes=[False, True])
    state.memory_is_the_replay_of_the_written_records()
    group = state.h.coordinator._groups[G]
    assert group.state.value == "Empty"
    assert group.offsets[("t1", 1)].offset == 5


MixedWrites.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMixedWrites = MixedWrites.TestCase
