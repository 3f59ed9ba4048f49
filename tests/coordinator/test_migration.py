"""Online migration between the classic and the consumer protocol in the core: a live classic
group becomes a consumer group when a consumer-protocol member joins, its classic members keep
rejoining through JoinGroup/SyncGroup/Heartbeat towards the server assignor's target, and the
group turns classic again when the last consumer-protocol member leaves; the policy gates both
ways and every step survives a replay of the log."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from tests.coordinator.harness import Harness, synchronous_config

from kgroups.coordinator import (
    GroupCoordinatorConfig,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    MemberIdentity,
    SyncGroupResponse,
)
from kgroups.coordinator.consumer_group import MemberState, TopicInfo
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.coordinator.effects import RemovalReason
from kgroups.coordinator.group import GroupState
from kgroups.errors import ErrorCode
from kgroups.records.classic_member import ClassicMemberMetadata
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from kgroups.records.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from kgroups.records.schema import (
    ConsumerAssignment,
    ConsumerSubscription,
    GroupMetadataKey,
    TopicPartitions,
)

T1 = uuid.UUID(int=0x1111)
G = "mig"


def subscription(owned: tuple[int, ...] = ()) -> bytes:
    """What a cooperative Java consumer sends: v1+ lists the partitions it still owns."""
    return encode_subscription(ConsumerSubscription(
        ("t1",), None, (TopicPartitions("t1", owned),) if owned else (), -1, None, 1))


def assignment(*partitions: int) -> bytes:
    return encode_assignment(ConsumerAssignment((TopicPartitions("t1", partitions),), None, 1))


def partitions_of(raw: bytes) -> tuple[int, ...]:
    decoded = decode_assignment(raw)
    return tuple(p for entry in decoded.assigned_partitions for p in entry.partitions)


@dataclass
class Session(Harness):
    """The harness, with a consumer-protocol member `hb` and a classic member `rejoin`."""

    config: GroupCoordinatorConfig = field(default_factory=synchronous_config)

    def hb(self, member: str, epoch: int, *, owned: object = (),
           regex: str | None = None) -> ConsumerGroupHeartbeatResponse:
        joining = epoch == 0
        request_id = self.rid()
        self.absorb(self.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
            request_id, G, member, epoch, rebalance_timeout_ms=30_000 if joining else -1,
            subscribed_topic_names=("t1",) if joining and regex is None else None,
            subscribed_topic_regex=regex,
            topic_partitions=() if joining else owned,  # type: ignore[arg-type]
            client_id="client", client_host="/127.0.0.1"), self.now))
        response = self.reply(request_id)
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        return response

    def rejoin(self, member: str, owned: tuple[int, ...] = ()) -> JoinGroupResponse:
        response = self.reply(self.join(G, member, protocols=(
            ("cooperative-sticky", subscription(owned)), ("range", subscription(owned)))))
        assert isinstance(response, JoinGroupResponse)
        return response

    def sync_classic(self, member: str, generation: int) -> SyncGroupResponse:
        response = self.reply(self.sync(G, member, generation, protocol_type="consumer",
                                        protocol_name="cooperative-sticky"))
        assert isinstance(response, SyncGroupResponse)
        return response

    def beat(self, member: str, generation: int) -> ErrorCode:
        response = self.reply(self.heartbeat(G, member, generation))
        assert isinstance(response, HeartbeatResponse)
        return response.error

    def consumer(self):
        return self.coordinator._groups[G].consumer


def classic_group(config: GroupCoordinatorConfig | None = None) -> tuple[Session, str]:
    """A Stable classic group: one member owning all 6 partitions of t1, generation 1."""
    s = Session(config=config or synchronous_config())
    s.coordinator.set_topics({"t1": TopicInfo(T1, 6)})
    first = s.reply(s.join(G, protocols=(("cooperative-sticky", subscription()),)))
    assert isinstance(first, JoinGroupResponse)
    member = first.member_id
    s.join(G, member, protocols=(("cooperative-sticky", subscription()),))
    s.advance(3_000)  # the initial rebalance delay
    s.sync(G, member, 1, {member: assignment(0, 1, 2, 3, 4, 5)})
    assert s.coordinator._groups[G].state is GroupState.STABLE
    return s, member


def test_a_live_classic_group_converts_and_its_member_rejoins_towards_the_target() -> None:
    s, c = classic_group()
    a = s.hb("a", 0)
    assert (a.error, a.member_epoch, a.assignment) == (ErrorCode.NONE, 2, ())
    log = s.log[s.coordinator.partition_of(G)]
    tombstone = max(i for i, r in enumerate(log) if type(r.key) is GroupMetadataKey)
    assert log[tombstone].value is None
    written = [type(r.key) for r in log[tombstone:]]
    assert written[:6] == [GroupMetadataKey, ConsumerGroupMemberMetadataKey,
                           ConsumerGroupMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                           ConsumerGroupTargetAssignmentMetadataKey,
                           ConsumerGroupCurrentMemberAssignmentKey]
    member = s.consumer().members[c]
    assert member.classic == ClassicMemberMetadata(10_000, (("cooperative-sticky",
                                                             subscription()),))
    assert (member.member_epoch, sorted(member.assigned[T1])) == (1, [0, 1, 2, 3, 4, 5])
    # The classic member learns of the new epoch from its heartbeat and rejoins.
    assert s.beat(c, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    joined = s.rejoin(c, owned=(0, 1, 2, 3, 4, 5))
    assert (joined.error, joined.generation_id, joined.protocol_name, joined.leader,
            joined.members) == (ErrorCode.NONE, 1, "cooperative-sticky", "", ())
    kept = partitions_of(s.sync_classic(c, 1).assignment)
    assert len(kept) == 3
    assert s.consumer().members[c].state is MemberState.UNREVOKED_PARTITIONS
    assert s.beat(c, 1) == ErrorCode.REBALANCE_IN_PROGRESS  # revoke, then rejoin
    joined = s.rejoin(c, owned=kept)
    assert joined.generation_id == 2
    assert partitions_of(s.sync_classic(c, 2).assignment) == kept
    assert s.beat(c, 2) == ErrorCode.NONE
    got = s.hb("a", 2)
    assert got.assignment is not None
    assert set(got.assignment[0][1]) == {0, 1, 2, 3, 4, 5} - set(kept)
    assert s.consumer().state() == "Stable"
    # Commits of the classic member carry its generation (the member epoch), any version.
    rid = s.commit(G, {("t1", kept[0]): 7}, generation=2, member_id=c, version=8)
    assert s.reply(rid).topics[0].partitions[0].error == ErrorCode.NONE
    # An older generation is taken (KIP-1251) only back to when the partition came to it.
    rid = s.commit(G, {("t1", kept[0]): 8}, generation=1, member_id=c)
    assert s.reply(rid).topics[0].partitions[0].error == ErrorCode.NONE
    rid = s.commit(G, {("t1", kept[0]): 8}, generation=0, member_id=c)
    assert s.reply(rid).topics[0].partitions[0].error == ErrorCode.ILLEGAL_GENERATION
    assert s.replayed()._groups[G].consumer == s.consumer()


def test_classic_requests_are_checked_as_kafka_checks_them() -> None:
    s, c = classic_group()
    s.hb("a", 0)
    assert s.beat(c, 7) == ErrorCode.ILLEGAL_GENERATION
    assert s.beat("a", 2) == ErrorCode.UNKNOWN_MEMBER_ID  # a consumer-protocol member
    assert s.beat("nobody", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    bad = s.reply(s.sync(G, c, 1, protocol_type="consumer", protocol_name="range"))
    assert bad.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert s.sync_classic(c, 1).error == ErrorCode.REBALANCE_IN_PROGRESS
    wrong = s.reply(s.join(G, "", protocols=(("roundrobin", subscription()),)))
    assert wrong.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    new = s.reply(s.join(G, "", protocols=(("cooperative-sticky", subscription()),)))
    assert (new.error, new.member_id != "") == (ErrorCode.MEMBER_ID_REQUIRED, True)
    left = s.reply(s.leave(G, MemberIdentity("a"), MemberIdentity("nobody")))
    assert isinstance(left, LeaveGroupResponse)
    assert [m.error for m in left.members] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert s.coordinator._groups[G].consumer is None  # "a" gone: only classic members left


def test_the_last_consumer_member_leaving_turns_the_group_classic() -> None:
    s, c = classic_group()
    a = s.hb("a", 0)
    kept_joined = s.rejoin(c, owned=(0, 1, 2, 3, 4, 5))
    kept = partitions_of(s.sync_classic(c, kept_joined.generation_id).assignment)
    s.rejoin(c, owned=kept)
    epoch = s.consumer().group_epoch
    assert s.hb("a", -1).error == ErrorCode.NONE
    group = s.coordinator._groups[G]
    assert group.consumer is None
    assert (group.state, group.generation_id, list(group.members)) == (
        GroupState.PREPARING_REBALANCE, epoch, [c])
    assert group.members[c].protocols[0][0] == "cooperative-sticky"
    assert partitions_of(group.members[c].assignment) == kept  # its target
    assert s.beat(c, epoch) == ErrorCode.REBALANCE_IN_PROGRESS
    joined = s.rejoin(c, owned=kept)
    assert (joined.error, joined.generation_id, joined.leader) == (ErrorCode.NONE, epoch + 1, c)
    replayed = s.replayed()._groups[G]
    assert replayed.consumer is None and list(replayed.members) == [c]
    assert a.member_id == "a"


def test_a_downgrade_ends_every_consumer_group_record_regexes_included() -> None:
    s, c = classic_group()
    s.hb("a", 0, regex="t.*")
    s.advance(1)  # the regex is resolved after the heartbeat that asked for it
    assert "t.*" in s.consumer().resolved_regexes
    s.hb("a", -1)
    assert s.coordinator._groups[G].consumer is None
    replayed = s.replayed()._groups[G]
    assert replayed.consumer is None and list(replayed.members) == [c]


def test_a_classic_static_member_replacing_the_last_consumer_one_turns_the_group_classic() -> None:
    s, c = classic_group()
    request_id = s.rid()
    s.absorb(s.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        request_id, G, "a", 0, instance_id="ia", rebalance_timeout_ms=30_000,
        subscribed_topic_names=("t1",), topic_partitions=()), s.now))
    epoch = s.consumer().group_epoch
    target = s.consumer().targets["a"]
    joined = s.reply(s.join(G, instance="ia", protocols=(("cooperative-sticky", subscription()),)))
    assert (joined.error, joined.generation_id) == (ErrorCode.NONE, epoch)
    group = s.coordinator._groups[G]
    assert group.consumer is None and group.state is GroupState.STABLE  # same subscription
    assert group.generation_id == epoch and set(group.members) == {c, joined.member_id}
    assert set(partitions_of(group.members[joined.member_id].assignment)) == set(target[T1])
    synced = s.reply(s.sync(G, joined.member_id, epoch, instance="ia"))
    assert synced.error == ErrorCode.NONE
    assert s.replayed()._groups[G].static_members == {"ia": joined.member_id}


def test_policy_disabled_keeps_each_group_in_its_protocol() -> None:
    s, c = classic_group(synchronous_config(group_consumer_migration_policy="downgrade"))
    refused = s.hb("a", 0)
    assert (refused.error, refused.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        f"Cannot upgrade classic group {G} to consumer group because online upgrade is "
        "disabled.")
    assert s.coordinator._groups[G].members
    s, c = classic_group(synchronous_config(group_consumer_migration_policy="upgrade"))
    s.hb("a", 0)
    s.hb("a", -1)
    consumer = s.consumer()
    assert consumer is not None and list(consumer.members) == [c]
    s, c = classic_group(synchronous_config(group_consumer_migration_policy="disabled"))
    assert refused_upgrade(s).endswith("because online upgrade is disabled.")
    s.leave(G, MemberIdentity(c))
    s.hb("a", 0)  # an empty classic group becomes a consumer group whatever the policy
    refused = s.reply(s.join(G, "", protocols=(("range", subscription()),)))
    assert (refused.error, refused.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
    with pytest.raises(ValueError, match=r"migration\.policy"):
        GroupCoordinatorConfig(group_consumer_migration_policy="sideways")
    parsed = GroupCoordinatorConfig.from_properties({"group.consumer.migration.policy": "UPGRADE"})
    assert parsed.group_consumer_migration_policy == "upgrade"


def test_a_classic_member_that_does_not_rejoin_or_sync_in_time_is_fenced() -> None:
    s, c = classic_group()
    s.hb("a", 0)
    assert s.beat(c, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    for _ in range(29):  # heartbeats keep its session, not its deadline to rejoin
        s.advance(1_000)
        assert s.beat(c, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    s.advance(1_001)
    assert c not in s.consumer().members
    assert s.removals[-1].reason is RemovalReason.DID_NOT_REJOIN
    s.hb("a", s.consumer().members["a"].member_epoch)  # "a" keeps its session
    # A new classic member that joins but never sends SyncGroup goes too.
    new = s.reply(s.join(G, "", version=3, session=60_000, rebalance=20_000,
                         protocols=(("range", subscription()),)))
    assert new.error == ErrorCode.NONE and new.member_id in s.consumer().members
    s.advance(20_001)
    assert list(s.consumer().members) == ["a"]
    assert s.removals[-1].reason is RemovalReason.DID_NOT_SYNC


def test_an_empty_consumer_group_becomes_classic_for_a_classic_member() -> None:
    s = Session()
    s.coordinator.set_topics({"t1": TopicInfo(T1, 6)})
    s.hb("a", 0)
    s.hb("a", -1)
    assert s.consumer() is not None and not s.consumer().members
    first = s.reply(s.join(G, protocols=(("range", subscription()),)))
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED
    assert s.coordinator._groups[G].consumer is None
    assert G not in s.replayed()._groups  # nothing of the consumer group survives


def refused_upgrade(s: Session) -> str:
    response = s.hb("a", 0)
    assert response.error == ErrorCode.GROUP_ID_NOT_FOUND
    assert s.coordinator._groups[G].consumer is None
    return response.error_message or ""


def test_upgrade_refusals_say_why_as_kafka_does() -> None:
    s = Session()
    s.coordinator.set_topics({"t1": TopicInfo(T1, 6)})
    first = s.reply(s.join(G, protocol_type="connect", protocols=(("v1", b"x"),)))
    s.join(G, first.member_id, protocol_type="connect", protocols=(("v1", b"x"),))
    assert refused_upgrade(s).endswith("does not use the consumer embedded protocol.")
    s, c = classic_group()
    s.coordinator._groups[G].members[c].assignment = encode_assignment(ConsumerAssignment(
        (TopicPartitions("t1", (0,)),), b"\x00\x00\x00\x01", 1))
    assert "an unsupported custom assignor is in use" in refused_upgrade(s)
    s.coordinator._groups[G].members[c].assignment = b"\x00"
    assert refused_upgrade(s).endswith("the embedded consumer protocol is malformed.")
    s, c = classic_group(synchronous_config(group_consumer_max_size=1))
    s.join(G, "", version=3, protocols=(("cooperative-sticky", subscription()),))  # parked
    assert refused_upgrade(s).endswith("exceeds the consumer group maximum size.")


def test_a_refused_joining_member_leaves_the_group_classic() -> None:
    s, c = classic_group(synchronous_config(group_consumer_max_size=1))
    written = len(s.log[s.coordinator.partition_of(G)])
    refused = s.hb("a", 0)
    assert (refused.error, refused.error_message) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        "The consumer group has reached its maximum capacity of 1 members.")
    group = s.coordinator._groups[G]
    assert (group.consumer, group.state, list(group.members)) == (None, GroupState.STABLE, [c])
    assert len(s.log[s.coordinator.partition_of(G)]) == written  # nothing written
    assert s.beat(c, 1) == ErrorCode.NONE
    s.advance(9_000)
    assert s.beat(c, 1) == ErrorCode.NONE  # its classic session goes on


def test_a_consumer_member_takes_a_classic_static_members_place_at_once() -> None:
    s = Session()
    s.coordinator.set_topics({"t1": TopicInfo(T1, 6)})
    parked = s.join(G, instance="ia", protocols=(("range", subscription()),))
    s.advance(3_000)  # the initial rebalance delay
    c = s.reply(parked).member_id
    s.sync(G, c, 1, {c: assignment(0, 1, 2, 3, 4, 5)}, instance="ia")
    request_id = s.rid()
    s.absorb(s.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        request_id, G, "a", 0, instance_id="ia", rebalance_timeout_ms=30_000,
        subscribed_topic_names=("t1",), topic_partitions=()), s.now))
    joined = s.reply(request_id)
    assert (joined.error, joined.member_epoch) == (ErrorCode.NONE, 1)
    assert joined.assignment == ((T1, (0, 1, 2, 3, 4, 5)),)
    assert list(s.consumer().members) == ["a"]
    assert s.beat(c, 1) == ErrorCode.UNKNOWN_MEMBER_ID


def test_an_upgrade_mid_rebalance_tells_parked_requests_to_rejoin() -> None:
    s, c = classic_group()
    pending = s.reply(s.join(G, "", protocols=(("cooperative-sticky", subscription()),)))
    parked = s.join(G, pending.member_id, protocols=(("cooperative-sticky", subscription()),))
    assert s.reply(parked) is None  # waits for c to rejoin
    assert s.hb("a", 0).error == ErrorCode.NONE
    assert s.reply(parked).error == ErrorCode.REBALANCE_IN_PROGRESS
    assert set(s.consumer().members) == {c, pending.member_id, "a"}


def test_classic_static_members_inside_a_consumer_group() -> None:
    s, c = classic_group()
    s.hb("a", 0)
    protocols = (("cooperative-sticky", subscription()),)
    first = s.reply(s.join(G, instance="s1", protocols=protocols))
    assert first.error == ErrorCode.NONE
    again = s.reply(s.join(G, first.member_id, instance="s1", protocols=protocols))
    assert (again.error, again.member_id) == (ErrorCode.NONE, first.member_id)
    assert s.reply(s.join(G, "other", instance="s1", protocols=protocols)).error \
        == ErrorCode.FENCED_INSTANCE_ID
    assert s.reply(s.join(G, "other", instance="s2", protocols=protocols)).error \
        == ErrorCode.UNKNOWN_MEMBER_ID
    assert s.reply(s.heartbeat(G, "other", again.generation_id, "s1")).error \
        == ErrorCode.FENCED_INSTANCE_ID
    # A replacement takes the place; the replaced one's sync deadline does not fence it.
    successor = s.reply(s.join(G, instance="s1", protocols=protocols))
    assert successor.member_id != first.member_id
    assert s.reply(s.sync(G, successor.member_id, successor.generation_id, instance="s1",
                          protocol_type="connect")).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    s.sync(G, successor.member_id, successor.generation_id, instance="s1")
    for _ in range(6):  # past the replaced member's sync deadline, everyone heartbeating
        s.advance(5_000)
        s.beat(c, s.consumer().members[c].member_epoch)
        s.heartbeat(G, successor.member_id, successor.generation_id, "s1")
        s.hb("a", s.consumer().members["a"].member_epoch)
    assert successor.member_id in s.consumer().members
    left = s.reply(s.leave(G, MemberIdentity("", "s1"), MemberIdentity("wrong", "s1")))
    assert [m.error for m in left.members] == [ErrorCode.NONE, ErrorCode.FENCED_INSTANCE_ID]
    assert successor.member_id not in s.consumer().members
    assert s.reply(s.join(G, "", protocol_type="connect", protocols=protocols)).error \
        == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_a_classic_member_leaving_a_group_that_stays_a_consumer_group() -> None:
    s, c = classic_group()
    s.hb("a", 0)
    epoch = s.consumer().group_epoch
    left = s.reply(s.leave(G, MemberIdentity(c)))
    assert [m.error for m in left.members] == [ErrorCode.NONE]
    assert list(s.consumer().members) == ["a"] and s.consumer().group_epoch == epoch + 1
    assert s.sync_classic(c, 1).error == ErrorCode.UNKNOWN_MEMBER_ID
    s.hb("a", -1)
    empty = s.reply(s.sync(G, c, 1, protocol_type="consumer"))
    assert empty.error == ErrorCode.UNKNOWN_MEMBER_ID  # an empty consumer group


def test_a_classic_member_waiting_for_released_partitions_is_told_when_they_are_free() -> None:
    s = Session()
    s.coordinator.set_topics({"t1": TopicInfo(T1, 6)})
    a = s.hb("a", 0)
    a = s.hb("a", a.member_epoch, owned=a.assignment)
    joined = s.reply(s.join(G, "", version=3, protocols=(("range", subscription()),)))
    assert s.consumer().members[joined.member_id].state is MemberState.UNRELEASED_PARTITIONS
    synced = s.reply(s.sync(G, joined.member_id, joined.generation_id, protocol_type="consumer",
                            protocol_name="range"))
    assert partitions_of(synced.assignment) == ()
    assert s.beat(joined.member_id, joined.generation_id) == ErrorCode.NONE  # still held
    kept = s.hb("a", a.member_epoch, owned=a.assignment).assignment
    s.hb("a", s.consumer().members["a"].member_epoch, owned=kept)
    assert s.beat(joined.member_id, joined.generation_id) == ErrorCode.REBALANCE_IN_PROGRESS
    described = s.coordinator.consumer_group_describe(
        ConsumerGroupDescribeRequest("d", (G, "nothing")), s.now).replies[0].response
    ours, missing = described.groups
    assert {m.member_id: m.classic for m in ours.members} == {"a": False,
                                                               joined.member_id: True}
    assert (missing.error, missing.state) == (ErrorCode.GROUP_ID_NOT_FOUND, "")
