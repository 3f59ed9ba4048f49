"""JoinGroup, side by side: versions, MEMBER_ID_REQUIRED, validation, the protocol vote, and
what an existing member's rejoin does in each state."""

from __future__ import annotations

import pytest
from diff_dialog import Dialog
from diff_flows import form_group, new_member, send_join, wait_members
from diff_requests import describe, heartbeat, join, leave, subscription
from diff_setup import ON_BOTH_ENGINES

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("version", range(0, 10))
def test_first_member_joins_alone(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        first = a.call(join(d.group, v=version))
        if first.member_id and first.generation_id < 0:
            a.call(join(d.group, first.member_id, v=version))
        a.call(describe(d.group))

    converse(script)


@pytest.mark.parametrize("version", [0, 5, 9])
def test_empty_group_id_is_invalid(converse, version: int) -> None:
    converse(lambda d: d.connect("a").call(join("", v=version)))


@pytest.mark.parametrize("session_ms", [499, 1_800_001])
def test_session_timeout_outside_the_bounds(converse, session_ms: int) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(join(d.group, v=9, session_ms=session_ms))
        a.call(describe(d.group))

    converse(script)


def test_unknown_member_id_on_a_missing_group(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(join(d.group, "a-00000000-0000-0000-0000-000000000000", v=9))
        a.call(describe(d.group))

    converse(script)


@pytest.mark.parametrize("protocol_type,protocols", [("", None), ("consumer", ())])
def test_new_group_needs_a_protocol_type_and_protocols(converse, protocol_type, protocols) -> None:
    def script(d: Dialog) -> None:
        a = new_member(d, "a", protocol_type=protocol_type, protocols=protocols)
        send_join(d, a, protocol_type=protocol_type, protocols=protocols).result()

    converse(script)


@ON_BOTH_ENGINES
def test_protocol_vote_takes_the_most_preferred_common_protocol(converse) -> None:
    """a and b prefer roundrobin, c prefers range; all three support both and sticky; the
    candidates are the common ones and each member votes for its first candidate."""
    meta = subscription("diff-t")
    preferences = {
        "a": (("roundrobin", meta), ("range", meta), ("sticky", meta)),
        "b": (("sticky", meta), ("roundrobin", meta), ("range", meta), ("cooperative", meta)),
        "c": (("range", meta), ("roundrobin", meta), ("sticky", meta)),
    }

    def script(d: Dialog) -> None:
        members = {name: new_member(d, name, protocols=p) for name, p in preferences.items()}
        members["a"].absorb(send_join(d, members["a"], protocols=preferences["a"]).result())
        pending = [send_join(d, members[n], protocols=preferences[n]) for n in ("b", "c")]
        wait_members(d, 3)
        pending.insert(0, send_join(d, members["a"], protocols=preferences["a"]))
        for answer in pending:
            answer.result()

    converse(script)


def test_member_without_a_common_protocol_is_refused(converse) -> None:
    def script(d: Dialog) -> None:
        form_group(d, ["a"])
        b = new_member(d, "b", protocols=(("other", b""),))
        send_join(d, b, protocols=(("other", b""),)).result()
        d.connect("c").call(describe(d.group))

    converse(script)


def test_other_protocol_type_is_refused(converse) -> None:
    def script(d: Dialog) -> None:
        form_group(d, ["a"])
        b = new_member(d, "b", protocol_type="connect")
        send_join(d, b, protocol_type="connect").result()

    converse(script)


def test_follower_rejoin_with_same_metadata_in_stable_keeps_the_generation(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"])
        follower = b if a.is_leader else a
        send_join(d, follower, topics=("diff-t",)).result()
        d.connect("probe").call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_leader_rejoin_in_stable_starts_a_rebalance(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"])
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = send_join(d, leader)
        d.wait_state("PreparingRebalance")
        follower.conn.call(heartbeat(d.group, follower.generation, follower.member_id))
        rejoined = send_join(d, follower)
        parked.result()
        rejoined.result()

    converse(script)


def test_follower_with_new_metadata_starts_a_rebalance(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"])
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = send_join(d, follower, topics=("diff-t", "diff-u"))
        d.wait_state("PreparingRebalance")
        leader.conn.call(heartbeat(d.group, leader.generation, leader.member_id))
        rejoined = send_join(d, leader)
        parked.result()
        rejoined.result()

    converse(script)


def test_rejoin_in_completing_rebalance_resends_the_generation(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], do_sync=False)
        send_join(d, a).result()
        d.connect("probe").call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_rejoin_after_the_group_emptied_is_unknown(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"])
        a.conn.call(leave(d.group, [(a.member_id, None)]))
        send_join(d, a).result()

    converse(script)


def test_unknown_member_id_on_an_existing_group(converse) -> None:
    def script(d: Dialog) -> None:
        form_group(d, ["a"])
        b = d.connect("b")
        b.call(join(d.group, "b-00000000-0000-0000-0000-000000000000"))

    converse(script)


@ON_BOTH_ENGINES
def test_pending_member_is_not_a_member_yet(converse) -> None:
    """MEMBER_ID_REQUIRED makes b pending: the group stays Stable with only a in it."""
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"])
        new_member(d, "b")
        a.conn.call(heartbeat(d.group, a.generation, a.member_id))
        a.conn.call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_three_members_form_one_generation(converse) -> None:
    def script(d: Dialog) -> None:
        members = form_group(d, ["a", "b", "c"], topics=("diff-t", "diff-u"))
        members[0].conn.call(describe(d.group))

    converse(script)


@pytest.mark.parametrize("version", [0, 3, 4, 6])
def test_two_members_join_on_older_versions(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        members = form_group(d, ["a", "b"], v=version)
        members[0].conn.call(describe(d.group))

    converse(script)


def test_rebalance_keeps_the_last_assignment_visible(converse) -> None:
    """b leaves mid-generation: during the rebalance DescribeGroups still shows a's assignment
    of the generation before (Kafka replaces it only with the next one)."""
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"])
        b.conn.call(leave(d.group, [(b.member_id, None)]))
        a.conn.call(describe(d.group))
        (solo,) = [send_join(d, a, topics=("diff-t",))]
        solo.result()
        a.conn.call(describe(d.group))

    converse(script)
