"""A streams group next to the other APIs: offsets committed and fetched with member epochs,
ListGroups, DescribeGroups, DeleteGroups (and its replay), classic requests to a streams group."""

from __future__ import annotations

from tests.coordinator.harness import Harness
from tests.coordinator.test_streams_protocol import G, Session, streams_config, topics

from kgroups.coordinator import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    JoinGroupRequest,
    ListGroupsRequest,
)
from kgroups.coordinator.messages import MemberIdentity, OffsetFetchGroup, OffsetFetchRequest
from kgroups.errors import ErrorCode


def _session() -> Session:
    s = Session()
    s.coordinator.set_topics(topics(words=4))
    return s


def _commit(s: Harness, epoch: int, member: str = "m1", version: int = 9,
            partition: int = 0) -> ErrorCode:
    request_id = s.commit(G, {("words", partition): 5}, generation=epoch, member_id=member,
                          version=version)
    (topic,) = s.reply(request_id).topics
    (part,) = topic.partitions
    return part.error


def _fetch(s: Harness, member: str | None, epoch: int) -> ErrorCode:
    request_id = s.rid()
    s.absorb(s.coordinator.offset_fetch(OffsetFetchRequest(
        request_id, (OffsetFetchGroup(G, None, member, epoch),)), s.now))
    (group,) = s.reply(request_id).groups
    return group.error


def test_commits_and_fetches_are_checked_with_the_member_epoch() -> None:
    s = _session()
    r = s.hb("m1", 0)
    epoch = r.member_epoch
    assert _commit(s, epoch) is ErrorCode.NONE
    assert s.fetch(G) == {("words", 0): 5}
    assert _commit(s, epoch + 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert _commit(s, epoch - 1) is ErrorCode.STALE_MEMBER_EPOCH  # tasks came at `epoch`
    assert _commit(s, epoch, member="zz") is ErrorCode.UNKNOWN_MEMBER_ID
    assert _commit(s, -1, member="") is ErrorCode.UNKNOWN_MEMBER_ID  # a live group
    assert _commit(s, epoch, version=8) is ErrorCode.UNSUPPORTED_VERSION
    assert _fetch(s, "m1", epoch) is ErrorCode.NONE
    assert _fetch(s, "m1", epoch - 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert _fetch(s, "zz", epoch) is ErrorCode.UNKNOWN_MEMBER_ID
    assert _fetch(s, None, -1) is ErrorCode.NONE
    s.hb("m1", -1, active=None, standby=None, warmup=None)
    assert _commit(s, -1, member="") is ErrorCode.NONE  # an empty group takes admin commits


def test_an_older_epoch_commits_tasks_held_since_then() -> None:
    s = _session()
    r1 = s.hb("m1", 0)
    s.hb("m2", 0)
    s.hb("m1", r1.member_epoch, active=r1.active_tasks)  # keeps two tasks, revokes two
    kept = s.group().members["m1"].assigned.active["0"]
    revoking = s.group().members["m1"].pending_revocation.active["0"]
    s.hb("m1", r1.member_epoch, active=(("0", tuple(sorted(kept))),))  # revoked: next epoch
    moved = s.group().members["m1"].member_epoch
    assert moved > r1.member_epoch
    assert _commit(s, r1.member_epoch, partition=min(kept)) is ErrorCode.NONE
    assert _commit(s, r1.member_epoch, partition=min(revoking)) is ErrorCode.STALE_MEMBER_EPOCH


def test_list_describe_and_delete() -> None:
    s = _session()
    s.hb("m1", 0)
    request_id = s.rid()
    s.absorb(s.coordinator.list_groups(ListGroupsRequest(request_id), s.now))
    (listed,) = s.reply(request_id).groups
    assert (listed.protocol_type, listed.state, listed.group_type) == (
        "streams", "Stable", "streams")
    request_id = s.rid()
    s.absorb(s.coordinator.describe_groups(DescribeGroupsRequest(request_id, (G,), 6), s.now))
    (described,) = s.reply(request_id).groups
    assert (described.error, described.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {G} is not a classic group.")
    request_id = s.rid()
    s.absorb(s.coordinator.delete_groups(DeleteGroupsRequest(request_id, (G,)), s.now))
    assert s.reply(request_id).results == ((G, ErrorCode.NON_EMPTY_GROUP),)
    s.hb("m1", -1, active=None, standby=None, warmup=None)
    s.commit(G, {("words", 1): 3}, generation=-1, member_id="")
    request_id = s.rid()
    s.absorb(s.coordinator.delete_groups(DeleteGroupsRequest(request_id, (G,)), s.now))
    assert s.reply(request_id).results == ((G, ErrorCode.NONE),)
    tail = [record.key.version for record in s.log[s.partition_of(G)][-4:]]
    assert tail == [1, 20, 17, 23]  # offsets, then the streams keys in Kafka's order
    assert s.coordinator.group_view(G).state == "Dead"
    assert s.replayed().group_view(G) is None  # nothing of it survives a restart
    assert s.hb("m1", 0).member_epoch == 2  # a new group again


def test_joining_a_streams_group_with_the_classic_protocol_is_refused() -> None:
    s = _session()
    s.hb("m1", 0)
    request_id = s.rid()
    s.absorb(s.coordinator.join_group(JoinGroupRequest(
        request_id, G, "", "consumer", (("range", b""),), 10_000, 10_000), s.now))
    assert s.reply(request_id).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert "m1" in s.group().members


def test_offline_migration_between_classic_and_streams_keeps_the_offsets() -> None:
    """An empty classic group becomes a streams group when a streams member joins (its
    GroupMetadata ended first, as Kafka writes it), and an empty streams group becomes classic
    when a classic member joins (its streams records ended); the offsets stay throughout."""
    s = Session(config=streams_config(group_initial_rebalance_delay_ms=0))
    s.coordinator.set_topics(topics(words=4))
    join_id, member = s.join_dynamic(G)
    generation = s.reply(join_id).generation_id
    s.sync(G, member, generation, {member: b""})
    s.commit(G, {("words", 0): 7}, generation=generation, member_id=member, version=8)
    s.leave(G, MemberIdentity(member, None))
    r = s.hb("m1", 0)
    assert r.error is ErrorCode.NONE and r.member_epoch == 2
    written = [record.key for record in s.log[s.partition_of(G)]]
    first_streams = next(i for i, key in enumerate(written) if key.version == 19)
    assert type(written[first_streams - 1]).__name__ == "GroupMetadataKey"
    assert s.log[s.partition_of(G)][first_streams - 1].value is None
    assert s.fetch(G) == {("words", 0): 7}
    s.hb("m1", -1, active=None, standby=None, warmup=None)
    join_id, member = s.join_dynamic(G)
    assert s.reply(join_id).error is ErrorCode.NONE
    assert s.coordinator._groups[G].streams is None
    assert [k.version for k in (r.key for r in s.log[s.partition_of(G)][-3:])] == [20, 17, 23]
    assert s.fetch(G) == {("words", 0): 7}
    fresh = s.replayed()
    assert fresh._groups[G].streams is None
