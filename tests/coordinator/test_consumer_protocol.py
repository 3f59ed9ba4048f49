"""KIP-848's consumer protocol in the core: epochs, revoke-before-assign reconciliation,
fencing, timeouts, static members, assignors, offsets with member epochs, and replay."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from tests.coordinator.harness import Harness, synchronous_config

from kgroups.coordinator import (
    DeleteGroupsRequest,
    GroupCoordinatorConfig,
    ListGroupsRequest,
)
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.coordinator.effects import RemovalReason
from kgroups.errors import ErrorCode

T1 = uuid.UUID(int=0x1111)
T2 = uuid.UUID(int=0x2222)
G = "cg"


@dataclass
class Session(Harness):
    """The harness plus heartbeats that report owned partitions as a real member would."""

    config: GroupCoordinatorConfig = field(default_factory=synchronous_config)

    def hb(self, member: str, epoch: int, *, owned=(), topics=("t1",), instance=None,
           assignor=None, version: int = 1, full: bool = False,
           rebalance: int = 30_000) -> ConsumerGroupHeartbeatResponse:
        joining = epoch == 0
        request_id = self.rid()
        self.absorb(self.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
            request_id, G, member, epoch, instance_id=instance,
            rebalance_timeout_ms=rebalance if joining or full else -1,
            subscribed_topic_names=tuple(topics) if joining or full else None,
            server_assignor=assignor,
            topic_partitions=() if joining else tuple(owned),
            client_id="client", client_host="/127.0.0.1", version=version,
        ), self.now))
        response = self.reply(request_id)
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        return response

    def group(self):
        return self.coordinator._groups[G].consumer


def topics(**partitions: int) -> dict[str, TopicInfo]:
    ids = {"t1": T1, "t2": T2}
    return {name: TopicInfo(ids[name], count) for name, count in partitions.items()}


@pytest.fixture
def s() -> Session:
    session = Session()
    session.coordinator.set_topics(topics(t1=6))
    return session


def owned(response: ConsumerGroupHeartbeatResponse):
    return response.assignment


def assert_exclusive(s: Session) -> None:
    """No partition is assigned (or pending revocation) to two members at once."""
    seen: set[tuple[uuid.UUID, int]] = set()
    for member in s.group().members.values():
        held = {(t, p) for a in (member.assigned, member.pending_revocation)
                for t, parts in a.items() for p in parts}
        assert not held & seen
        seen |= held


def count(assignment) -> int:
    return sum(len(parts) for _, parts in assignment or ())


def test_first_member_gets_every_partition(s: Session) -> None:
    response = s.hb("a", 0)
    assert response.error == ErrorCode.NONE
    # Kafka 4.3 counts the new subscription and the subscribed topics' new metadata: 0 -> 2.
    assert (response.member_id, response.member_epoch) == ("a", 2)
    assert response.heartbeat_interval_ms == 5000
    assert response.assignment == ((T1, (0, 1, 2, 3, 4, 5)),)
    assert s.group().state() == "Stable"


def test_second_member_waits_until_the_first_revoked(s: Session) -> None:
    a = s.hb("a", 0)
    b = s.hb("b", 0)
    # b is at the new epoch but its partitions are still a's: nothing yet.
    assert (b.member_epoch, b.assignment) == (3, ())
    assert s.group().state() == "Reconciling"
    # a is asked to revoke: it keeps 3 partitions and stays at its epoch.
    a = s.hb("a", 2, owned=a.assignment)
    assert a.member_epoch == 2 and count(a.assignment) == 3
    assert_exclusive(s)
    # b still gets nothing while a owns them.
    assert s.hb("b", 3).assignment is None
    # a reports the revocation done: the new epoch.
    a = s.hb("a", 2, owned=a.assignment)
    assert a.member_epoch == 3 and a.assignment is None
    b = s.hb("b", 3)
    assert count(b.assignment) == 3
    mine = {p for _, parts in b.assignment for p in parts}
    theirs = {p for _, parts in s.hb("a", 3, owned=((T1, ()),)).assignment or () for p in parts}
    assert not mine & theirs
    assert_exclusive(s)
    assert s.group().state() == "Stable"


def converge(s: Session, members: dict[str, ConsumerGroupHeartbeatResponse], rounds=6):
    """Heartbeat every member until nothing moves, reporting what each was last told."""
    held = {m: r.assignment or () for m, r in members.items()}
    epochs = {m: r.member_epoch for m, r in members.items()}
    for _ in range(rounds):
        for member in held:
            response = s.hb(member, epochs[member], owned=held[member])
            assert response.error == ErrorCode.NONE, response
            epochs[member] = response.member_epoch
            if response.assignment is not None:
                held[member] = response.assignment
            assert_exclusive(s)
    return held, epochs


def test_three_members_converge_to_a_balanced_exclusive_assignment(s: Session) -> None:
    joined = {m: s.hb(m, 0) for m in ("a", "b", "c")}
    held, epochs = converge(s, joined)
    assert sorted(count(a) for a in held.values()) == [2, 2, 2]
    assert set(epochs.values()) == {4}
    assert s.group().state() == "Stable"


def test_epochs_ahead_or_stale_are_fenced_previous_epoch_tolerated(s: Session) -> None:
    a = s.hb("a", 0)
    s.hb("b", 0)
    a = s.hb("a", 2, owned=a.assignment)
    a = s.hb("a", 2, owned=a.assignment)  # now epoch 3, previous 2
    assert a.member_epoch == 3
    assert s.hb("a", 4, owned=()).error == ErrorCode.FENCED_MEMBER_EPOCH
    # The response of the bump got lost: the previous epoch with owned partitions it still has.
    kept = s.group().members["a"].assigned
    assert s.hb("a", 2, owned=tuple((t, tuple(p)) for t, p in kept.items())).error \
        == ErrorCode.NONE
    # ... but not with partitions it no longer has.
    assert s.hb("a", 2, owned=((T1, (0, 1, 2, 3, 4, 5)),)).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert s.hb("nobody", 3).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_invalid_requests_answer_as_kafka(s: Session) -> None:
    assert s.hb("", 0).error == ErrorCode.INVALID_REQUEST  # v1: the client makes the id
    assert s.hb("a", -3).error == ErrorCode.INVALID_REQUEST
    assert s.hb("a", 0, assignor="sticky").error == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert s.hb("a", 4).error == ErrorCode.GROUP_ID_NOT_FOUND
    assert s.hb("e", 0, topics=()).member_epoch == 1  # an empty subscription joins, as in Kafka
    generated = s.hb("", 0, version=0)  # v0: the coordinator makes the id
    assert generated.error == ErrorCode.NONE and len(generated.member_id or "") == 22


def test_leave_frees_the_partitions_for_the_others(s: Session) -> None:
    joined = {m: s.hb(m, 0) for m in ("a", "b", "c")}
    held, epochs = converge(s, joined)
    left = s.hb("c", -1)
    assert (left.error, left.member_epoch) == (ErrorCode.NONE, -1)
    assert "c" not in s.group().members
    assert s.group().group_epoch == 5
    held.pop("c")
    epochs.pop("c")
    held, epochs = converge(s, {m: ConsumerGroupHeartbeatResponse(
        ErrorCode.NONE, None, m, epochs[m], 0, held[m]) for m in held})
    assert sorted(count(a) for a in held.values()) == [3, 3]
    assert set(epochs.values()) == {5}


def test_silent_member_is_removed_after_the_session_timeout(s: Session) -> None:
    s.hb("a", 0)
    s.advance(44_999)
    assert "a" in s.group().members
    s.advance(2)
    assert "a" not in s.group().members
    assert s.removals[-1].reason is RemovalReason.SESSION_TIMEOUT
    assert s.group().state() == "Empty"


def test_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout(s: Session) -> None:
    a = s.hb("a", 0, rebalance=10_000)
    b = s.hb("b", 0)
    s.hb("a", a.member_epoch, owned=a.assignment)  # told to revoke; never confirms
    for _ in range(3):
        s.advance(4_000)
        s.hb("b", b.member_epoch)
    assert "a" not in s.group().members
    assert any(r.reason is RemovalReason.REBALANCE_TIMEOUT for r in s.removals)
    assert count(s.hb("b", b.member_epoch, full=True).assignment) == 6


def test_static_member_rejoins_with_its_partitions_without_a_rebalance(s: Session) -> None:
    a = s.hb("a1", 0, instance="i-a")
    b = s.hb("b", 0)
    held, _ = converge(s, {"a1": a, "b": b})
    epoch_before = s.group().group_epoch
    assert s.hb("a1", -2, instance="i-a").member_epoch == -2
    assert s.group().members["a1"].assigned  # kept while it is away
    # The process comes back under a new member id and takes over the same partitions.
    back = s.hb("a3", 0, instance="i-a")
    assert back.error == ErrorCode.NONE
    assert back.assignment == held["a1"]
    assert back.member_epoch == s.group().assignment_epoch
    assert "a1" not in s.group().members
    assert s.group().group_epoch == epoch_before  # no rebalance


def test_unreleased_instance_id(s: Session) -> None:
    s.hb("a1", 0, instance="i-a")
    assert s.hb("a2", 0, instance="i-a").error == ErrorCode.UNRELEASED_INSTANCE_ID
    assert s.hb("a2", 1, instance="i-a").error == ErrorCode.FENCED_INSTANCE_ID


def test_range_assignor_on_request_and_max_size() -> None:
    s = Session(config=synchronous_config(group_consumer_max_size=2))
    s.coordinator.set_topics(topics(t1=3, t2=3))
    a = s.hb("a", 0, topics=("t1", "t2"), assignor="range")
    b = s.hb("b", 0, topics=("t1", "t2"), assignor="range")
    held, _ = converge(s, {"a": a, "b": b})
    # range: the first member takes the first ceil(3/2) partitions of each topic
    assert dict(held["a"]) == {T1: (0, 1), T2: (0, 1)}
    assert s.hb("c", 0).error == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_new_partitions_bump_the_group_epoch_and_are_assigned(s: Session) -> None:
    a = s.hb("a", 0)
    s.coordinator.set_topics(topics(t1=8))
    grown = s.hb("a", a.member_epoch, owned=a.assignment)
    assert grown.member_epoch == a.member_epoch + 1
    assert grown.assignment == ((T1, tuple(range(8))),)


def test_offset_commit_checks_member_and_epoch(s: Session) -> None:
    s.hb("a", 0)  # epoch 2
    stale = s.reply(s.commit(G, {("t1", 0): 5}, generation=1, member_id="a"))
    assert stale.topics[0].partitions[0].error == ErrorCode.STALE_MEMBER_EPOCH
    unknown = s.reply(s.commit(G, {("t1", 0): 5}, generation=2, member_id="zz"))
    assert unknown.topics[0].partitions[0].error == ErrorCode.UNKNOWN_MEMBER_ID
    old_api = s.reply(s.commit(G, {("t1", 0): 5}, generation=2, member_id="a", version=8))
    assert old_api.topics[0].partitions[0].error == ErrorCode.UNSUPPORTED_VERSION
    ok = s.reply(s.commit(G, {("t1", 0): 5}, generation=2, member_id="a"))
    assert ok.topics[0].partitions[0].error == ErrorCode.NONE
    assert s.fetch(G) == {("t1", 0): 5}


def test_list_describe_and_delete(s: Session) -> None:
    s.hb("a", 0)
    rid = s.rid()
    s.absorb(s.coordinator.list_groups(ListGroupsRequest(rid), s.now))
    (listed,) = s.reply(rid).groups
    assert (listed.group_type, listed.protocol_type, listed.state) == ("consumer", "consumer",
                                                                       "Stable")
    rid = s.rid()
    s.absorb(s.coordinator.consumer_group_describe(ConsumerGroupDescribeRequest(rid, (G, "x")),
                                                   s.now))
    described, missing = s.reply(rid).groups
    assert (described.group_epoch, described.assignment_epoch, described.assignor_name) == (
        2, 2, "uniform")
    (member,) = described.members
    assert member.member_epoch == 2 and member.assignment == member.target_assignment
    assert missing.error == ErrorCode.GROUP_ID_NOT_FOUND
    rid = s.rid()
    s.absorb(s.coordinator.delete_groups(DeleteGroupsRequest(rid, (G,)), s.now))
    assert s.reply(rid).results == ((G, ErrorCode.NON_EMPTY_GROUP),)
    s.hb("a", -1)
    rid = s.rid()
    s.absorb(s.coordinator.delete_groups(DeleteGroupsRequest(rid, (G,)), s.now))
    assert s.reply(rid).results == ((G, ErrorCode.NONE),)
    assert s.replayed().group_view(G) is None


def test_replay_rebuilds_members_epochs_targets_and_owners(s: Session) -> None:
    s.coordinator.set_topics(topics(t1=6, t2=2))
    a = s.hb("a", 0, topics=("t1", "t2"), instance="i-a")
    b = s.hb("b", 0)
    s.hb("a", a.member_epoch, owned=a.assignment)  # a mid-revocation: UNREVOKED_PARTITIONS
    live = s.group()
    assert live.state() == "Reconciling"
    fresh = s.replayed()
    assert fresh._groups[G].consumer == live
    # The replayed coordinator carries on the same conversation.
    fresh.set_topics(topics(t1=6, t2=2))
    s.coordinator = fresh
    assert s.hb("b", b.member_epoch).error == ErrorCode.NONE
    s.advance(45_001)
    assert not s.group().members


def test_protocol_can_be_switched_off() -> None:
    s = Session(config=synchronous_config(group_coordinator_rebalance_protocols=("classic",)))
    refused = s.hb("a", 0)
    assert (refused.error, refused.error_message) == (ErrorCode.UNSUPPORTED_VERSION, None)
    rid = s.rid()
    s.absorb(s.coordinator.consumer_group_describe(ConsumerGroupDescribeRequest(rid, (G,)), s.now))
    (described,) = s.reply(rid).groups
    assert (described.error, described.state) == (ErrorCode.UNSUPPORTED_VERSION, "")


def test_an_empty_classic_group_becomes_a_consumer_group_with_its_offsets(s: Session) -> None:
    s.commit(G, {("t1", 0): 42})
    assert s.hb("a", 0).error == ErrorCode.NONE
    assert s.fetch(G) == {("t1", 0): 42}
    assert s.replayed()._groups[G].consumer == s.group()


def test_describe_counts_partitions_pending_revocation_as_held(s: Session) -> None:
    """As Kafka 4.3.1 describes a member asked to give partitions up: its assignment still
    lists them until it reports them gone (tests/differential, test_diff_consumer_protocol.py
    ::test_target_assignment_batching_as_kafka_43)."""
    a = s.hb("a", 0)
    s.hb("b", 0)
    revoking = s.hb("a", a.member_epoch, owned=a.assignment)
    assert count(revoking.assignment) == 3
    rid = s.rid()
    s.absorb(s.coordinator.consumer_group_describe(ConsumerGroupDescribeRequest(rid, (G,)), s.now))
    (described,) = s.reply(rid).groups
    held = {m.member_id: m.assignment for m in described.members}
    assert held["a"] == ((T1, (0, 1, 2, 3, 4, 5)),)
    s.hb("a", a.member_epoch, owned=revoking.assignment)
    rid = s.rid()
    s.absorb(s.coordinator.consumer_group_describe(ConsumerGroupDescribeRequest(rid, (G,)), s.now))
    (described,) = s.reply(rid).groups
    assert {m.member_id: count(m.assignment) for m in described.members}["a"] == 3
