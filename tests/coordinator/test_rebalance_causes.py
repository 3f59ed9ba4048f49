"""Every rebalance the classic coordinator starts names its cause (`RebalanceStarted`, and the
group's `last_rebalance` that describe and metrics read), with the client's reason when it sent
one; a JoinGroup or LeaveGroup that starts no rebalance records none."""

from __future__ import annotations

from kgroups.coordinator import (
    DescribeGroupsRequest,
    GroupCoordinatorConfig,
    JoinGroupRequest,
    LeaveGroupRequest,
    MemberIdentity,
    RebalanceCause,
)
from kgroups.errors import ErrorCode

from .harness import Harness, subscription
from .test_join import _load_with, make, stable
from .test_static_sync import static_stable

C = RebalanceCause


def causes_since(h: Harness, seen: int) -> list[tuple[C, str, int]]:
    return [(r.cause, r.old_state, r.old_generation) for r in h.rebalances[seen:]]


def test_first_members_joining_an_empty_group_is_one_rebalance_of_new_members():
    h = make()
    stable(h, "g", 3)
    assert causes_since(h, 0) == [(C.NEW_MEMBER_JOINED, "Empty", 0)]
    assert "Adding new member" in h.rebalances[0].detail


def test_a_new_member_joining_a_stable_group_carries_the_client_reason():
    h = make()
    _, generation = stable(h, "g", 1)
    seen = len(h.rebalances)
    first = h.join("g")
    member_id = h.reply(first).member_id
    h.absorb(h.coordinator.join_group(JoinGroupRequest(
        h.rid(), "g", member_id, "consumer", (("range", subscription("t")),), 10_000, 30_000,
        version=9, reason="rebalance failed due to MemberIdRequiredException"), h.now))
    (started,) = h.rebalances[seen:]
    assert (started.cause, started.old_state, started.old_generation) == (
        C.NEW_MEMBER_JOINED, "Stable", generation)
    assert started.detail.endswith(
        "client reason: rebalance failed due to MemberIdRequiredException")
    note = h.coordinator._groups["g"].last_rebalance
    assert (note.cause, note.started_ms, note.old_generation) == (
        C.NEW_MEMBER_JOINED, h.now, generation)


def test_changed_subscription_and_leader_rejoin_are_told_apart():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    seen = len(h.rebalances)
    h.join("g", follower, protocols=(("range", subscription("t", "u")),))
    assert causes_since(h, seen) == [(C.MEMBER_METADATA_CHANGED, "Stable", generation)]

    h2 = make()
    (a, _), generation = stable(h2, "g", 2)
    leader = h2.coordinator.group_view("g").leader
    h2.join("g", leader)  # same protocols: the leader saw the topics' metadata change
    assert causes_since(h2, 1) == [(C.METADATA_CHANGE, "Stable", generation)]


def test_a_stable_follower_rejoining_unchanged_starts_nothing():
    h = make()
    (a, b), _ = stable(h, "g", 2)
    follower = b if h.coordinator.group_view("g").leader == a else a
    h.join("g", follower)
    assert len(h.rebalances) == 1


def test_leave_with_reason_and_admin_removal_by_instance_id():
    h = make()
    (a, _), generation = stable(h, "g", 2)
    h.absorb(h.coordinator.leave_group(LeaveGroupRequest(
        h.rid(), "g", (MemberIdentity(a, None, "the consumer is being closed"),), 5), h.now))
    (left,) = h.rebalances[1:]
    assert (left.cause, left.old_generation) == (C.MEMBER_LEFT, generation)
    assert left.detail == f"Removing member {a} (left_group); client reason: the consumer is " \
                          "being closed"

    s = make()
    _, generation = static_stable(s, "g", ("i1", "i2"))
    seen = len(s.rebalances)
    s.leave("g", MemberIdentity("", "i1"))
    assert causes_since(s, seen) == [(C.ADMIN_REMOVAL, "Stable", generation)]
    assert "instance id i1 by an admin" in s.rebalances[-1].detail


def test_session_timeout_and_members_that_never_sync():
    h = make()
    _, generation = stable(h, "g", 2, session=10_000)
    h.advance(10_000)
    assert causes_since(h, 1) == [(C.SESSION_TIMEOUT, "Stable", generation)]

    h = make()
    joins = [h.join_dynamic("g", rebalance=20_000, session=30_000) for _ in range(2)]
    h.advance(6000)
    generation = h.reply(joins[0][0]).generation_id
    leader = h.reply(joins[0][0]).leader
    h.sync("g", leader, generation, {m: b"" for _, m in joins})  # the follower never syncs
    seen = len(h.rebalances)
    h.advance(20_000)
    # The leader's SyncGroup made the group Stable; the follower's is still awaited.
    assert causes_since(h, seen) == [(C.REBALANCE_TIMEOUT, "Stable", generation)]
    assert "pending sync request expiration" in h.rebalances[-1].detail


def test_static_member_replaced_while_the_leader_assigns_rebalances_as_a_replacement():
    h = make()
    joins = {i: h.join("g", instance=i) for i in ("i1", "i2")}
    h.advance(6000)  # CompletingRebalance: the leader may be assigning to i1's old id
    generation = h.reply(joins["i1"]).generation_id
    seen = len(h.rebalances)
    h.join("g", instance="i1")
    assert causes_since(h, seen) == [(C.STATIC_MEMBER_REPLACED, "CompletingRebalance",
                                      generation)]
    assert "instance id i1 replaced by" in h.rebalances[-1].detail


def test_group_loaded_over_max_size_and_a_failed_assignment_write():
    h = make()
    stable(h, "g", 3)
    capped = _load_with(h, GroupCoordinatorConfig(offsets_topic_num_partitions=4,
                                                   group_max_size=2))
    note = capped._groups["g"].last_rebalance
    assert note.cause is C.GROUP_MAX_SIZE and "over capacity (3 members" in note.detail

    h = make()
    joins = [h.join_dynamic("g") for _ in range(2)]
    h.advance(6000)
    generation = h.reply(joins[0][0]).generation_id
    leader = h.reply(joins[0][0]).leader
    h.auto_complete = False
    h.sync("g", leader, generation, {m: b"" for _, m in joins})
    seen = len(h.rebalances)
    h.complete_writes(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert causes_since(h, seen) == [(C.ASSIGNMENT_WRITE_FAILED, "CompletingRebalance",
                                      generation)]


def test_describe_carries_the_last_rebalance():
    h = make()
    (a, _), _ = stable(h, "g", 2)
    h.leave("g", MemberIdentity(a))
    request_id = h.rid()
    h.absorb(h.coordinator.describe_groups(DescribeGroupsRequest(request_id, ("g",)), h.now))
    (described,) = h.reply(request_id).groups
    assert described.last_rebalance.cause is C.MEMBER_LEFT
    (summary,) = h.coordinator.group_summaries()
    assert (summary.group_type, summary.member_count) == ("classic", 1)
    assert summary.last_rebalance == described.last_rebalance
