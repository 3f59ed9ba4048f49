"""Less travelled paths: old versions, superseded requests, stale writes, odd inputs."""

from __future__ import annotations

import struct

import crc32c
import pytest

from kgroups.coordinator import DeleteGroupsRequest, MemberIdentity, latest_values
from kgroups.errors import ErrorCode
from kgroups.log.batch import BatchCorruptError, build_batch

from .harness import counting_uuids, subscription
from .test_join import make, stable
from .test_static_sync import static_stable

E = ErrorCode


def test_v0_join_uses_the_session_timeout_as_rebalance_timeout():
    h = make()
    rid = h.join("g", version=0, session=7000, rebalance=99_999)
    h.advance(3000)
    (member,) = h.coordinator.group_view("g").members
    assert member.member_id == h.reply(rid).member_id and member.rebalance_timeout_ms == 7000


def test_known_member_join_on_dead_group_and_with_foreign_protocol():
    h = make()
    (a,), _ = stable(h, "g", 1)
    assert h.reply(h.join("g", a, protocol_type="connect")).error is E.INCONSISTENT_GROUP_PROTOCOL
    h.commit("simple", {("t", 0): 1})
    h.auto_complete = False
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(h.rid(), ("simple",)), h.now))
    assert h.reply(h.join("simple", "someone")).error is E.COORDINATOR_NOT_AVAILABLE
    assert h.reply(h.sync("simple", "someone", 0)).error is E.COORDINATOR_NOT_AVAILABLE
    assert h.reply(h.leave("simple", MemberIdentity("x"))).error is E.COORDINATOR_NOT_AVAILABLE
    commit = h.reply(h.commit("simple", {("t", 0): 2}))
    assert commit.topics[0].partitions[0].error is E.COORDINATOR_NOT_AVAILABLE


def test_pending_member_id_with_instance_id_is_unknown():
    h = make()
    pending = h.reply(h.join("g")).member_id
    assert h.reply(h.join("g", pending, instance="i1")).error is E.UNKNOWN_MEMBER_ID


def test_second_join_supersedes_the_parked_one():
    h = make()
    first, member = h.join_dynamic("g")
    second = h.join("g", member)
    assert h.reply(first).error is E.REBALANCE_IN_PROGRESS
    h.advance(3000)
    assert h.reply(second).error is E.NONE


def test_second_sync_supersedes_the_parked_one():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    h.join("g", a)
    h.join("g", b)
    follower = a if h.coordinator.group_view("g").leader != a else b
    first = h.sync("g", follower, generation + 1)
    second = h.sync("g", follower, generation + 1)
    assert h.reply(first).error is E.REBALANCE_IN_PROGRESS and h.reply(second) is None


def test_static_rejoin_while_preparing_fences_the_old_join_and_waits():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"), session=60_000)
    old_join = h.join("g", ids["i1"], instance="i1", protocols=(("range", subscription("z")),))
    assert h.coordinator.group_view("g").state == "PreparingRebalance"
    # i1 restarts: its old JoinGroup is fenced, the new incarnation waits for the join phase.
    new_join = h.join("g", instance="i1", session=60_000)
    assert h.reply(old_join).error is E.FENCED_INSTANCE_ID
    h.join("g", ids["i2"], instance="i2", session=60_000)
    assert h.reply(new_join).generation_id == generation + 1


def test_only_static_members_left_and_none_rejoin_keeps_waiting():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"), session=100_000)
    h.leave("g", MemberIdentity(ids["i2"], "i2"))
    h.advance(30_000)  # rebalance timeout: i1 is static and silent, nobody to lead
    view = h.coordinator.group_view("g")
    assert view.state == "PreparingRebalance" and view.generation == generation
    rid = h.join("g", ids["i1"], instance="i1", session=100_000)
    assert h.reply(rid).generation_id == generation + 1


def test_leader_that_left_is_replaced_by_a_joined_member():
    h = make()
    ids, _ = static_stable(h, "g", ("i1", "i2", "i3"), session=100_000)
    leader = h.coordinator.group_view("g").leader
    others = [i for i, m in ids.items() if m != leader]
    changed = (("range", subscription("t", "new")),)
    rid = h.join("g", ids[others[0]], instance=others[0], session=100_000, protocols=changed)
    h.advance(30_000)  # the static leader stays a member but did not rejoin: it cannot lead
    assert h.reply(rid).leader == ids[others[0]]
    assert leader in {m.member_id for m in h.coordinator.group_view("g").members}


def test_heartbeat_and_sync_of_unknown_static_instance():
    h = make()
    ids, generation = static_stable(h, "g", ("i1",))
    assert h.reply(h.heartbeat("g", ids["i1"], generation, "ghost")).error is E.UNKNOWN_MEMBER_ID
    assert h.reply(h.sync("g", ids["i1"], generation, instance="ghost")).error is (
        E.UNKNOWN_MEMBER_ID
    )


def test_removed_member_with_parked_sync_is_told_unknown_member():
    h = make()
    (a, b), generation = stable(h, "g", 2, session=60_000)
    h.join("g", a, session=60_000)
    h.join("g", b, session=60_000)
    follower = a if h.coordinator.group_view("g").leader != a else b
    parked = h.sync("g", follower, generation + 1)
    h.leave("g", MemberIdentity(follower))
    assert h.reply(parked).error is E.UNKNOWN_MEMBER_ID


def test_leave_of_pending_member_while_preparing_completes_the_join():
    h = make()
    (a,), generation = stable(h, "g", 1)
    pending = h.reply(h.join("g")).member_id
    rid = h.join("g", a)
    assert h.reply(rid) is None
    h.leave("g", MemberIdentity(pending))
    assert h.reply(rid).generation_id == generation + 1


def test_stale_assignment_write_after_a_new_rebalance_changes_nothing():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    h.join("g", a)
    h.join("g", b)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    h.auto_complete = False
    leader_sync = h.sync("g", leader, generation + 1, {leader: b"x", follower: b"y"})
    h.leave("g", MemberIdentity(follower))  # rebalances before the write lands
    assert h.reply(leader_sync).error is E.REBALANCE_IN_PROGRESS
    h.complete_writes()
    assert h.coordinator.group_view("g").state != "Stable"


def test_unknown_write_ids_are_ignored():
    h = make()
    fx = h.coordinator.write_completed(12345, None, h.now)
    assert fx.replies == [] and fx.writes == []


def test_offset_commit_lands_nowhere_if_the_group_was_deleted_meanwhile():
    h = make()
    h.commit("g", {("t", 0): 1})
    h.auto_complete = False
    commit = h.commit("g", {("t", 1): 2})
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(h.rid(), ("g",)), h.now))
    h.complete_writes()
    assert commit in h.replies
    assert h.coordinator.group_view("g") is None


def test_offset_delete_write_failure_is_reported():
    from kgroups.coordinator import OffsetDeleteRequest

    h = make()
    h.commit("g", {("t", 0): 1})
    h.auto_complete = False
    rid = h.rid()
    h.absorb(h.coordinator.offset_delete(OffsetDeleteRequest(rid, "g", (("t", (0,)),)), h.now))
    h.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert h.reply(rid).error is E.COORDINATOR_NOT_AVAILABLE and h.reply(rid).topics == ()
    assert h.fetch("g") == {("t", 0): 1}


def test_unowned_partition_in_fetch_and_delete():
    from kgroups.coordinator import GroupCoordinator, GroupCoordinatorConfig, OffsetDeleteRequest

    from .harness import Harness

    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=4))
    h.coordinator = GroupCoordinator(h.config, new_uuid=counting_uuids())
    rid = h.rid()
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(rid, ("g",)), h.now))
    assert dict(h.reply(rid).results) == {"g": E.NOT_COORDINATOR}
    rid = h.rid()
    h.absorb(h.coordinator.offset_delete(OffsetDeleteRequest(rid, "g", ()), h.now))
    assert h.reply(rid).error is E.NOT_COORDINATOR
    from kgroups.coordinator import OffsetFetchGroup, OffsetFetchRequest

    rid = h.rid()
    h.absorb(h.coordinator.offset_fetch(OffsetFetchRequest(rid, (OffsetFetchGroup("g"),)), h.now))
    assert h.reply(rid).groups[0].error is E.NOT_COORDINATOR
    h.absorb(h.coordinator.unload_partition(1, h.now))  # not owned: nothing to do


# -- the replay fold on unusual batches --------------------------------------------------------


def test_fold_handles_long_keys_and_values():
    records = [(b"k" * 300, b"v" * 100_000, 1), (b"j", b"w" * 5000, 2), (b"k" * 300, None, 3)]
    latest, walked = latest_values(build_batch(records))
    assert walked == 3 and latest == {b"k" * 300: None, b"j": b"w" * 5000}


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_fold_rejects_records_that_overrun_their_batch_even_with_a_good_crc():
    batch = bytearray(build_batch([(b"key", b"value", 1)]))
    batch[61] = 0x7E  # record length 63: far past the batch end
    with pytest.raises(BatchCorruptError, match="malformed records"):
        latest_values(_with_crc(batch))
    batch = bytearray(build_batch([(b"key", b"value", 1)]))
    struct.pack_into(">i", batch, 57, 2)  # claims two records
    with pytest.raises(BatchCorruptError, match="malformed records"):
        latest_values(_with_crc(batch))
