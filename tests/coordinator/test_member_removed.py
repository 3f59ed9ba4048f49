"""Every way a member leaves a group is reported once, with why, as a `MemberRemoved` effect
(the broker logs it); requests that remove nobody report nothing."""

from __future__ import annotations

from kgroups.coordinator import (
    DeleteGroupsRequest,
    GroupCoordinator,
    GroupCoordinatorConfig,
    JoinGroupRequest,
    MemberIdentity,
    MemberRemoved,
)
from kgroups.coordinator import RemovalReason as R
from kgroups.errors import ErrorCode

from .harness import Harness, counting_uuids, subscription
from .test_join import make, stable
from .test_static_sync import static_stable

E = ErrorCode


def removed_since(h: Harness, seen: int) -> list[tuple[str, str | None, R]]:
    return [(r.member_id, r.group_instance_id, r.reason) for r in h.removals[seen:]]


def test_session_timeout_fires_exactly_at_the_last_heartbeat_plus_session():
    h = make()
    (a, b), generation = stable(h, "g", 2, session=10_000)
    for _ in range(500):  # many refreshes: the deadline follows the latest heartbeat
        h.advance(1000)
        h.heartbeat("g", a, generation)
        h.heartbeat("g", b, generation)
    h.advance(2000)
    h.heartbeat("g", a, generation)  # b's last heartbeat was 2 s before a's
    h.advance(7_999)
    assert removed_since(h, 0) == []
    h.advance(1)
    assert h.removals == [MemberRemoved("g", b, None, R.SESSION_TIMEOUT)]
    h.advance(1_999)
    assert len(h.removals) == 1
    h.advance(1)
    assert removed_since(h, 1) == [(a, None, R.SESSION_TIMEOUT)]


def test_heartbeats_keep_the_timer_heap_as_small_as_the_membership():
    h = make()
    members, generation = stable(h, "g", 20, session=10_000)
    for _ in range(300):
        h.advance(500)
        for member in members:
            h.heartbeat("g", member, generation)
    timers = h.coordinator._timers
    # One session per member plus the offset-expiry timer of each owned partition.
    assert len(timers) == len(members) + h.config.offsets_topic_num_partitions
    assert timers.queued_entries <= 2 * len(timers) + 64
    assert removed_since(h, 0) == []


def test_static_member_session_timeout_carries_its_instance_id():
    h = make()
    ids, _generation = static_stable(h, "g", ("i1",), session=10_000)
    h.advance(10_000)
    assert removed_since(h, 0) == [(ids["i1"], "i1", R.SESSION_TIMEOUT)]


def test_new_member_outliving_the_join_timeout_is_reported_as_such():
    h = make(group_new_member_join_timeout_ms=300_000)
    (a, _b), _generation = stable(h, "g", 2, session=400_000)
    h.join("g", a, rebalance=600_000, session=400_000)
    _late, late_id = h.join_dynamic("g", rebalance=600_000, session=400_000)
    seen = len(h.removals)
    h.advance(300_000)
    assert removed_since(h, seen) == [(late_id, None, R.JOIN_TIMEOUT)]


def test_pending_member_id_that_never_comes_back_expires():
    h = make(group_initial_rebalance_delay_ms=0)
    (a,), generation = stable(h, "g", 1)
    pending = h.reply(h.join("g", session=10_000)).member_id
    h.advance(5_000)
    h.heartbeat("g", a, generation)
    h.advance(4_999)
    assert removed_since(h, 0) == []
    h.advance(1)
    assert removed_since(h, 0) == [(pending, None, R.PENDING_MEMBER_TIMEOUT)]


def test_leave_reports_members_and_pending_members_but_not_strangers():
    h = make()
    (a, _b), _generation = stable(h, "g", 2)
    pending = h.reply(h.join("g")).member_id
    h.leave("g", MemberIdentity(pending), MemberIdentity(a), MemberIdentity("stranger"))
    assert removed_since(h, 0) == [(pending, None, R.LEFT_GROUP), (a, None, R.LEFT_GROUP)]
    seen = len(h.removals)
    h.leave("g", MemberIdentity(a))  # already gone: UNKNOWN_MEMBER_ID, nothing removed
    h.leave("g", MemberIdentity(pending))
    assert removed_since(h, seen) == []


def test_leave_by_instance_id_names_the_removed_member():
    h = make()
    ids, _generation = static_stable(h, "g", ("i1", "i2"))
    h.leave("g", MemberIdentity("", "i2"), MemberIdentity("", "unknown-instance"))
    assert removed_since(h, 0) == [(ids["i2"], "i2", R.REMOVED_BY_INSTANCE_ID)]


def test_dynamic_member_missing_the_join_phase_did_not_rejoin():
    h = make()
    (a, b), _generation = stable(h, "g", 2, session=60_000)
    h.join("g", a, protocols=(("range", subscription("t", "u")),), session=60_000)
    h.advance(29_999)
    assert removed_since(h, 0) == []
    h.advance(1)
    assert removed_since(h, 0) == [(b, None, R.DID_NOT_REJOIN)]


def test_member_that_never_syncs_is_reported():
    h = make()
    (a, b), generation = stable(h, "g", 2, session=60_000)
    h.join("g", a, session=60_000)
    h.join("g", b, session=60_000)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    h.sync("g", leader, generation + 1, {leader: b"x"})
    h.advance(30_000)
    assert removed_since(h, 0) == [(follower, None, R.DID_NOT_SYNC)]


def test_static_replacement_fences_the_old_member_id():
    h = make()
    ids, _generation = static_stable(h, "g", ("i1", "i2"))
    new_id = h.reply(h.join("g", instance="i2")).member_id
    assert new_id != ids["i2"]
    assert removed_since(h, 0) == [(ids["i2"], "i2", R.FENCED_BY_STATIC_REPLACEMENT)]


def test_reverted_static_replacement_removes_the_new_member_id():
    h = make()
    ids, _generation = static_stable(h, "g", ("i1", "i2"))
    h.auto_complete = False
    h.join("g", instance="i2")
    (fenced,) = h.removals
    (written,) = h.pending
    (record,) = written.records
    new_id = next(m.member_id for m in record.value.members if m.group_instance_id == "i2")
    h.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert (fenced.member_id, fenced.reason) == (ids["i2"], R.FENCED_BY_STATIC_REPLACEMENT)
    assert removed_since(h, 1) == [(new_id, "i2", R.STATIC_REPLACEMENT_REVERTED)]
    members = {m.member_id for m in h.coordinator.group_view("g").members}
    assert members == set(ids.values())


def test_member_over_group_max_size_is_reported_when_turned_away():
    h = make()
    members, _generation = stable(h, "g", 3)
    config = GroupCoordinatorConfig(offsets_topic_num_partitions=4, group_max_size=2)
    capped = GroupCoordinator(config, new_uuid=counting_uuids())
    for partition in range(config.offsets_topic_num_partitions):
        capped.load_partition(partition, h.log.get(partition, []), h.now)
    removals = []
    for index, member in enumerate(members):
        fx = capped.join_group(
            JoinGroupRequest(index, "g", member, "consumer", (("range", subscription("t")),),
                             10_000, 30_000, version=9),
            h.now,
        )
        removals += fx.removals
    assert removals == [MemberRemoved("g", members[2], None, R.GROUP_MAX_SIZE_REACHED)]


def test_pending_member_over_group_max_size_is_reported_when_turned_away():
    h = make(group_max_size=2)
    (a,), _generation = stable(h, "g", 1)
    pending = h.reply(h.join("g")).member_id
    h.join("g", a)  # the leader's rejoin starts a rebalance
    h.join("g", version=3)  # joins at once (no pending id before v4): two now wait to join
    seen = len(h.removals)
    assert h.reply(h.join("g", pending)).error is E.GROUP_MAX_SIZE_REACHED
    assert removed_since(h, seen) == [(pending, None, R.GROUP_MAX_SIZE_REACHED)]


def test_requests_that_remove_nobody_report_nothing():
    h = make(group_max_size=1)
    (a,), generation = stable(h, "g", 1)
    assert h.reply(h.join("g", version=3)).error is E.GROUP_MAX_SIZE_REACHED  # never a member
    h.heartbeat("g", a, generation)
    h.leave("g", MemberIdentity("stranger"))
    h.commit("g", {("t", 0): 5}, generation=generation, member_id=a)
    assert removed_since(h, 0) == []


def test_pending_id_of_a_deleted_group_is_not_reported_against_its_successor():
    h = make()
    assert h.reply(h.join("g", session=10_000)).error is E.MEMBER_ID_REQUIRED  # g stays Empty
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(h.rid(), ("g",)), h.now))
    h.commit("g", {("t", 0): 1})  # a new simple group of the same name
    h.advance(10_000)
    assert removed_since(h, 0) == []
