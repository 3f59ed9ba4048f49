"""Static membership (group.instance.id), side by side: joining, rejoining without a member id
(replacement without rebalance, SkipAssignment for a leader), fencing, leaving by instance id."""

from __future__ import annotations

import pytest
from diff_dialog import Dialog
from diff_flows import Member, form_group, send_join
from diff_requests import commit, describe, heartbeat, join, leave, sync
from diff_setup import ON_BOTH_ENGINES

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("version", range(5, 10))
def test_static_member_joins_and_syncs(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], v=version, static=True)
        a.conn.call(heartbeat(d.group, a.generation, a.member_id, instance=a.instance,
                              v=min(version, 4)))
        a.conn.call(describe(d.group))

    converse(script)


def _restart(d: Dialog, member: Member, version: int = 9) -> Member:
    """The same instance id on a new connection with no member id: a restarted consumer."""
    restarted = Member(member.name + "2", d.connect(member.name + "2"), instance=member.instance)
    restarted.absorb(send_join(d, restarted, v=version).result())
    return restarted


@ON_BOTH_ENGINES
@pytest.mark.parametrize("leader", [True, False])
def test_restart_in_stable_replaces_the_member_without_rebalance(converse, leader: bool) -> None:
    def script(d: Dialog) -> None:
        members = form_group(d, ["a", "b"], static=True)
        old = next(m for m in members if m.is_leader == leader)
        new = _restart(d, old)
        old.conn.call(heartbeat(d.group, old.generation, old.member_id, instance=old.instance))
        new.conn.call(heartbeat(d.group, new.generation, new.member_id, instance=new.instance))
        new.conn.call(sync(d.group, new.generation, new.member_id, instance=new.instance))
        new.conn.call(describe(d.group))

    converse(script)


@pytest.mark.parametrize("version", [5, 8])
def test_leader_restart_before_skip_assignment_versions(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], static=True)
        _restart(d, a, version)

    converse(script)


def test_unknown_instance_with_a_member_id_is_unknown(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], static=True)
        a.conn.call(join(d.group, a.member_id, instance="nobody"))
        a.conn.call(heartbeat(d.group, a.generation, a.member_id, instance="nobody"))

    converse(script)


@ON_BOTH_ENGINES
def test_known_instance_with_another_member_id_is_fenced_everywhere(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], static=True)
        x = d.connect("x")
        x.call(join(d.group, b.member_id, instance=a.instance))
        x.call(heartbeat(d.group, a.generation, b.member_id, instance=a.instance))
        x.call(sync(d.group, a.generation, b.member_id, instance=a.instance))
        x.call(commit(d.group, {("diff-t", 0): 5}, generation=a.generation,
                      member_id=b.member_id, instance=a.instance))
        x.call(leave(d.group, [(b.member_id, a.instance)]))
        x.call(describe(d.group))

    converse(script)


def test_fenced_heartbeat_wins_over_a_wrong_generation(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], static=True)
        a.conn.call(heartbeat(d.group, a.generation + 7, b.member_id, instance=a.instance))
        a.conn.call(heartbeat(d.group, a.generation + 7, a.member_id, instance=a.instance))

    converse(script)


def test_leave_by_instance_id(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], static=True)
        a.conn.call(leave(d.group, [("", b.instance), ("", "nobody")]))
        a.conn.call(describe(d.group))
        a.conn.call(heartbeat(d.group, a.generation, a.member_id, instance=a.instance))

    converse(script)


def test_restart_in_completing_rebalance_starts_a_rebalance(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], static=True, do_sync=False)
        new = _restart(d, a)
        a.conn.call(sync(d.group, a.generation, a.member_id, instance=a.instance))
        new.conn.call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_restart_fences_the_old_incarnations_pending_join(converse) -> None:
    """The leader's rejoin is parked (the follower has not rejoined) when a restarted leader
    takes its instance id over: the parked join is answered FENCED_INSTANCE_ID."""
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], static=True)
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = send_join(d, leader)
        d.wait_state("PreparingRebalance")
        restarted = Member(leader.name + "2", d.connect(leader.name + "2"),
                           instance=leader.instance)
        replacing = send_join(d, restarted)
        parked.result()
        rejoined = send_join(d, follower)
        restarted.absorb(replacing.result())
        rejoined.result()
        restarted.conn.call(describe(d.group))

    converse(script)


def test_static_member_leaving_dynamically_is_removed(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], static=True)
        a.conn.call(leave(d.group, [(a.member_id, a.instance)]))
        a.conn.call(describe(d.group))
        send_join(d, Member("a", a.conn, instance=a.instance)).result()

    converse(script)
