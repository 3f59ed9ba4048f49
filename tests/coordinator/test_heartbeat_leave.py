"""Heartbeat and LeaveGroup rules of the reference."""

from __future__ import annotations

from kgroups.coordinator import DeleteGroupsRequest, MemberIdentity
from kgroups.errors import ErrorCode

from .harness import subscription
from .test_join import make, stable

E = ErrorCode


def test_heartbeat_errors_in_kafka_order():
    h = make()
    assert h.reply(h.heartbeat("nope", "m", 1)).error is E.UNKNOWN_MEMBER_ID
    (a, _b), generation = stable(h, "g", 2)
    assert h.reply(h.heartbeat("g", "stranger", generation)).error is E.UNKNOWN_MEMBER_ID
    # member validation comes before the generation check
    assert h.reply(h.heartbeat("g", "stranger", generation + 9)).error is E.UNKNOWN_MEMBER_ID
    assert h.reply(h.heartbeat("g", a, generation + 9)).error is E.ILLEGAL_GENERATION
    assert h.reply(h.heartbeat("g", a, generation)).error is E.NONE
    assert h.reply(h.heartbeat("", a, generation)).error is E.INVALID_GROUP_ID


def test_heartbeat_on_dead_group():
    h = make()
    h.commit("g", {("t", 0): 1})
    h.auto_complete = False
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(h.rid(), ("g",)), h.now))
    assert h.reply(h.heartbeat("g", "m", 0)).error is E.COORDINATOR_NOT_AVAILABLE


def test_heartbeat_during_rebalance_says_so_and_keeps_member_alive():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    h.join("g", leader)
    for _ in range(3):  # 3 x 8 s > the 10 s session: heartbeats keep the follower in
        h.advance(8000)
        assert h.reply(h.heartbeat("g", follower, generation)).error is E.REBALANCE_IN_PROGRESS
    view = h.coordinator.group_view("g")
    assert view.state == "PreparingRebalance"
    assert follower in {m.member_id for m in view.members}


def test_heartbeat_in_completing_rebalance_is_fine():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    h.join("g", a)
    h.join("g", b)
    assert h.reply(h.heartbeat("g", a, generation + 1)).error is E.NONE


def test_heartbeat_on_empty_group_is_unknown_member():
    h = make()
    (a,), _generation = stable(h, "g", 1)
    h.advance(10_000)  # no heartbeats: session expires, then the join phase empties it
    h.advance(30_000)
    view = h.coordinator.group_view("g")
    assert view.state == "Empty"
    assert h.reply(h.heartbeat("g", a, view.generation)).error is E.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_member_and_rebalances():
    h = make()
    (a, _b), generation = stable(h, "g", 2)
    for _ in range(3):
        h.advance(4000)
        h.heartbeat("g", a, generation)
    view = h.coordinator.group_view("g")
    assert [m.member_id for m in view.members] == [a]
    assert view.state in ("PreparingRebalance", "CompletingRebalance")


def test_join_sync_and_commit_count_as_liveness():
    h = make()
    (a,), generation = stable(h, "g", 1)
    for _ in range(4):
        h.advance(8000)
        h.commit("g", {("t", 0): 1}, generation=generation, member_id=a)
    assert h.coordinator.group_view("g").state == "Stable"
    for _ in range(4):
        h.advance(8000)
        h.sync("g", a, generation)
    assert h.coordinator.group_view("g").state == "Stable"


def test_heartbeat_while_loading_answers_none_and_sync_rebalance_in_progress():
    h = make()
    (a,), generation = stable(h, "g", 1)
    partition = h.partition_of("g")
    h.absorb(h.coordinator.unload_partition(partition, h.now))
    h.coordinator.begin_loading(partition)
    assert h.reply(h.heartbeat("g", a, generation)).error is E.NONE
    assert h.reply(h.sync("g", a, generation)).error is E.REBALANCE_IN_PROGRESS
    assert h.reply(h.join("g", a)).error is E.COORDINATOR_LOAD_IN_PROGRESS


# -- LeaveGroup ----------------------------------------------------------------------------------


def test_leave_batch_reports_one_error_per_member():
    h = make()
    (a, _b), _ = stable(h, "g", 2)
    response = h.reply(h.leave("g", MemberIdentity(a), MemberIdentity("ghost")))
    assert response.error is E.NONE
    assert [(m.member_id, m.error) for m in response.members] == [
        (a, E.NONE),
        ("ghost", E.UNKNOWN_MEMBER_ID),
    ]


def test_leave_before_v3_reports_the_member_error_at_top_level():
    h = make()
    stable(h, "g", 1)
    assert h.reply(h.leave("g", MemberIdentity("ghost"), version=2)).error is E.UNKNOWN_MEMBER_ID


def test_leave_unknown_group_and_invalid_group():
    h = make()
    response = h.reply(h.leave("nope", MemberIdentity("m")))
    assert response.members[0].error is E.UNKNOWN_MEMBER_ID
    assert h.reply(h.leave("", MemberIdentity("m"))).error is E.INVALID_GROUP_ID


def test_leave_of_a_pending_member_rebalances_as_in_kafka():
    """Kafka 4.3 treats a pending member's leave as a leave: the Stable group rebalances
    (checked against Kafka in tests/differential/test_diff_leave.py)."""
    h = make()
    (_a,), _generation = stable(h, "g", 1)
    pending = h.reply(h.join("g")).member_id
    assert h.coordinator.group_view("g").state == "Stable"
    response = h.reply(h.leave("g", MemberIdentity(pending)))
    assert response.members[0].error is E.NONE
    assert h.coordinator.group_view("g").state == "PreparingRebalance"
    # Gone: its join with that id now is an unknown member.
    assert h.reply(h.join("g", pending)).error is E.UNKNOWN_MEMBER_ID


def test_leave_with_wrong_instance_is_fenced():
    h = make()
    rid = h.join("g", instance="i1")
    h.advance(3000)
    member = h.reply(rid).member_id
    h.join("g", instance="i2")
    response = h.reply(h.leave("g", MemberIdentity(member, "i2")))
    assert response.members[0].error is E.FENCED_INSTANCE_ID


def test_leave_from_stable_rebalances_and_from_preparing_completes_join():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    rid = h.join("g", leader, protocols=(("range", subscription("z")),))
    assert h.reply(rid) is None
    h.leave("g", MemberIdentity(follower))  # everyone left has joined: complete now
    assert h.reply(rid).generation_id == generation + 1
    h2 = make()
    (a, b), _ = stable(h2, "g", 2)
    h2.leave("g", MemberIdentity(a))
    assert h2.coordinator.group_view("g").state == "PreparingRebalance"


def test_leave_in_completing_rebalance_cancels_parked_syncs():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    h.join("g", a)
    h.join("g", b)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    parked = h.sync("g", follower, generation + 1)
    h.leave("g", MemberIdentity(leader))
    assert h.reply(parked).error is E.REBALANCE_IN_PROGRESS


def test_leave_on_empty_group_changes_nothing():
    h = make()
    h.commit("g", {("t", 0): 3})
    response = h.reply(h.leave("g", MemberIdentity("m")))
    assert response.members[0].error is E.UNKNOWN_MEMBER_ID
    assert h.coordinator.group_view("g").state == "Empty"
