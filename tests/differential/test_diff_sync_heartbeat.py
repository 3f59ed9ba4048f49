"""SyncGroup and Heartbeat, side by side: every error in Kafka's order, parking, the leader's
assignment (members it left out get an empty one), versions, session expiry."""

from __future__ import annotations

import time

import pytest
from diff_dialog import Dialog
from diff_flows import form_group, send_join, sync_all, wait_members
from diff_requests import assignment, describe, heartbeat, join, leave, sync
from diff_setup import ON_BOTH_ENGINES

pytestmark = pytest.mark.kafka

UNKNOWN = "z-00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize("version", range(0, 6))
def test_sync_versions(converse, version: int) -> None:
    def run(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], v=9 if version >= 3 else 3, do_sync=False)
        sync_all(d, [a, b], v=version)
        a.conn.call(sync(d.group, a.generation, a.member_id, v=version))

    converse(run)


def test_sync_on_a_missing_group(converse) -> None:
    converse(lambda d: d.connect("a").call(sync(d.group, 1, UNKNOWN)))


@ON_BOTH_ENGINES
def test_sync_errors_in_order(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], do_sync=False)
        a.conn.call(sync(d.group, a.generation, UNKNOWN))
        a.conn.call(sync(d.group, a.generation + 1, UNKNOWN))
        a.conn.call(sync(d.group, a.generation + 1, a.member_id))
        a.conn.call(sync(d.group, a.generation, a.member_id, protocol_type="connect"))
        a.conn.call(sync(d.group, a.generation, a.member_id, protocol_name="roundrobin"))
        a.conn.call(sync(d.group, a.generation + 1, a.member_id, protocol_name="roundrobin"))
        a.conn.call(sync(d.group, a.generation, a.member_id, protocol_type=None,
                         protocol_name=None))

    converse(script)


def test_sync_while_preparing_rebalance(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"])
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = send_join(d, leader)
        d.wait_state("PreparingRebalance")
        follower.conn.call(sync(d.group, follower.generation, follower.member_id))
        rejoined = send_join(d, follower)
        parked.result()
        rejoined.result()

    converse(script)


def test_leader_leaves_a_member_out_of_the_assignment(converse) -> None:
    def script(d: Dialog) -> None:
        a, b, c = form_group(d, ["a", "b", "c"], do_sync=False)
        leader = next(m for m in (a, b, c) if m.is_leader)
        only_leader = {leader.member_id: assignment({"diff-t": [0, 1, 2]})}
        sync_all(d, [a, b, c], assignments=only_leader)
        a.conn.call(describe(d.group))

    converse(script)


def test_assignment_for_an_unknown_member_is_ignored(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], do_sync=False)
        sync_all(d, [a], assignments={a.member_id: assignment({"diff-t": [0]}),
                                      UNKNOWN: assignment({"diff-t": [1]})})
        a.conn.call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_follower_sync_parks_until_the_leaders(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=False)
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = follower.conn.send(sync(d.group, follower.generation, follower.member_id))
        d.record("follower answered before the leader synced", parked.arrived(0.3))
        leader.conn.call(sync(d.group, leader.generation, leader.member_id,
                              {follower.member_id: assignment({"diff-t": [2]})}))
        parked.result()

    converse(script)


def test_second_sync_from_a_parked_member(converse) -> None:
    """Known difference (docs/compatibility.md): Kafka drops the first parked SyncGroup when the
    same member sends another (that client waits for its request timeout); kgroups answers it
    REBALANCE_IN_PROGRESS at once. The second gets the assignment on both. The first is parked
    before the second is sent: on two connections Kafka may otherwise take the second first
    and drop it instead."""
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=False)
        leader, follower = (a, b) if a.is_leader else (b, a)
        first = follower.conn.send(sync(d.group, follower.generation, follower.member_id))
        d.record("first answered before a second was sent", first.arrived(0.3))
        other = d.connect(follower.name + "-again")
        second = other.send(sync(d.group, follower.generation, follower.member_id))
        d.record("second answered before the leader synced", second.arrived(0.3))
        leader.conn.call(sync(d.group, leader.generation, leader.member_id,
                              {follower.member_id: assignment({"diff-t": [1]})}))
        second.result()
        d.record("first sync answered", first.arrived(0.5))

    converse(script, known={"9 first sync answered": (False, True)})


@pytest.mark.parametrize("version", range(0, 5))
def test_heartbeat_versions(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"])
        a.conn.call(heartbeat(d.group, a.generation, a.member_id, v=version))
        a.conn.call(heartbeat(d.group, a.generation - 1, a.member_id, v=version))
        a.conn.call(heartbeat(d.group, a.generation, UNKNOWN, v=version))

    converse(script)


def test_heartbeat_errors_in_order(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(heartbeat(d.group, 1, UNKNOWN))
        (m,) = form_group(d, ["m"], do_sync=False)
        a.call(heartbeat(d.group, m.generation + 3, UNKNOWN))
        a.call(heartbeat(d.group, m.generation + 3, m.member_id))
        a.call(heartbeat(d.group, m.generation, m.member_id))
        a.call(heartbeat(d.group, -1, m.member_id))
        a.call(heartbeat(d.group, m.generation, m.member_id, instance="nobody"))

    converse(script)


@ON_BOTH_ENGINES
def test_heartbeat_in_each_state(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=False)
        a.conn.call(heartbeat(d.group, a.generation, a.member_id))  # CompletingRebalance
        sync_all(d, [a, b])
        a.conn.call(heartbeat(d.group, a.generation, a.member_id))  # Stable
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = send_join(d, leader)
        d.wait_state("PreparingRebalance")
        follower.conn.call(heartbeat(d.group, follower.generation, follower.member_id))
        rejoined = send_join(d, follower)
        parked.result()
        rejoined.result()
        for member in (a, b):
            member.conn.call(leave(d.group, [(member.member_id, None)]))
        a.conn.call(heartbeat(d.group, a.generation, a.member_id))  # Empty

    converse(script)


@ON_BOTH_ENGINES
def test_session_expiry_removes_a_silent_member(converse) -> None:
    """b's session is 600 ms and it stays silent; a keeps heartbeating and is told to rejoin."""
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"])
        b = d.connect("b")
        required = b.call(join(d.group, session_ms=600, topics=("diff-t",)))
        parked = b.send(join(d.group, required.member_id, session_ms=600, topics=("diff-t",)))
        wait_members(d, 2)
        rejoin = send_join(d, a, topics=("diff-t",))
        generation = rejoin.result().generation_id
        b_answer = parked.result()
        a.conn.call(sync(d.group, generation, a.member_id, {}))
        b.call(sync(d.group, generation, b_answer.member_id))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            answer = a.conn.call(heartbeat(d.group, generation, a.member_id), record=False)
            if int(answer.error_code) != 0:
                break
            time.sleep(0.1)
        d.record("a's heartbeat after b went silent", answer)
        send_join(d, a, topics=("diff-t",)).result()
        a.conn.call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_members_that_never_sync_are_removed_after_the_rebalance_timeout(converse) -> None:
    """The leader never sends SyncGroup: after the rebalance timeout (1.5 s) it is removed,
    the follower's parked SyncGroup is told to rejoin and the follower is alone."""
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=False, rebalance_ms=1500)
        follower = b if a.is_leader else a
        parked = follower.conn.send(sync(d.group, follower.generation, follower.member_id))
        parked.result()
        send_join(d, follower, rebalance_ms=1500).result()
        follower.conn.call(describe(d.group))

    converse(script)
