"""LeaveGroup, side by side: single and batched leaves in each version, pending and unknown
members, and what a leave does to the group in each state."""

from __future__ import annotations

import pytest
from diff_dialog import Dialog
from diff_flows import form_group, new_member, send_join
from diff_requests import describe, heartbeat, leave
from diff_setup import ON_BOTH_ENGINES

pytestmark = pytest.mark.kafka

UNKNOWN = "z-00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize("version", range(0, 6))
def test_last_member_leaves(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"])
        a.conn.call(leave(d.group, [(a.member_id, None)], v=version))
        a.conn.call(describe(d.group))
        a.conn.call(leave(d.group, [(a.member_id, None)], v=version))

    converse(script)


@pytest.mark.parametrize("version", [0, 3, 5])
def test_leave_on_a_missing_group(converse, version: int) -> None:
    converse(lambda d: d.connect("a").call(leave(d.group, [(UNKNOWN, None)], v=version)))


@ON_BOTH_ENGINES
def test_batch_with_known_unknown_and_static_members(converse) -> None:
    def script(d: Dialog) -> None:
        a, b, c = form_group(d, ["a", "b", "c"])
        a.conn.call(leave(d.group, [(b.member_id, None), (UNKNOWN, None), ("", "nobody"),
                                    (c.member_id, "c-static"), (c.member_id, None)]))
        a.conn.call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_leave_starts_a_rebalance_for_the_others(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"])
        b.conn.call(leave(d.group, [(b.member_id, None)]))
        a.conn.call(heartbeat(d.group, a.generation, a.member_id))
        send_join(d, a).result()
        a.conn.call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_leave_while_preparing_completes_the_join(converse) -> None:
    """a rejoined and waits for b; b's leave lets the join phase complete without it."""
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"])
        parked = send_join(d, a)
        d.wait_state("PreparingRebalance")
        b.conn.call(leave(d.group, [(b.member_id, None)]))
        parked.result()

    converse(script)


def test_leave_in_completing_rebalance(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=False)
        b.conn.call(leave(d.group, [(b.member_id, None)]))
        a.conn.call(describe(d.group))
        a.conn.call(heartbeat(d.group, a.generation, a.member_id))

    converse(script)


def test_pending_member_leaves_silently(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"])
        b = new_member(d, "b")
        b.conn.call(leave(d.group, [(b.member_id, None)]))
        a.conn.call(heartbeat(d.group, a.generation, a.member_id))
        a.conn.call(describe(d.group))

    converse(script)


def test_batch_leave_of_everyone(converse) -> None:
    def script(d: Dialog) -> None:
        members = form_group(d, ["a", "b", "c"])
        members[0].conn.call(leave(d.group, [(m.member_id, None) for m in members]))
        members[0].conn.call(describe(d.group))

    converse(script)
