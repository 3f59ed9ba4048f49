"""Edges between the APIs, side by side: consumers joining a group that so far only held
offsets, duplicated entries in one request, static members changing their subscription,
ListGroups mid-rebalance, OffsetFetch with require_stable."""

from __future__ import annotations

import dataclasses

import pytest
from diff_dialog import Dialog
from diff_flows import Member, form_group, new_member, send_join, sync_all
from diff_requests import (
    assignment,
    commit,
    describe,
    fetch,
    fetch_groups,
    heartbeat,
    join,
    leave,
    list_groups,
    subscription,
    sync,
)
from diff_setup import ON_BOTH_ENGINES

pytestmark = pytest.mark.kafka


@ON_BOTH_ENGINES
def test_consumers_join_a_group_that_only_held_offsets(converse) -> None:
    def script(d: Dialog) -> None:
        admin = d.connect("admin")
        admin.call(commit(d.group, {("diff-t", 0): 4}))
        admin.call(join(d.group, "a-00000000-0000-0000-0000-000000000000"))
        (a,) = form_group(d, ["a"])
        a.conn.call(commit(d.group, {("diff-t", 0): 5}, generation=a.generation,
                           member_id=a.member_id))
        admin.call(fetch(d.group, None))
        admin.call(describe(d.group))

    converse(script)


def test_duplicate_protocol_names_in_one_join(converse) -> None:
    """Known difference (docs/compatibility.md): Kafka counts a protocol named twice by one
    member as supported by two members, so with one member "range" is no longer common to
    all and "roundrobin" wins; kgroups counts each member once and keeps its first choice."""
    meta = subscription("diff-t")
    protocols = (("range", meta), ("range", subscription("diff-u")), ("roundrobin", meta))

    def script(d: Dialog) -> None:
        a = new_member(d, "a", protocols=protocols)
        a.absorb(send_join(d, a, protocols=protocols).result())
        a.conn.call(describe(d.group))

    converse(script, known={"1 JoinGroupv9[a].protocol_name": ("roundrobin", "range")})


def test_leader_assigns_one_member_twice(converse) -> None:
    def duplicated(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=False)
        leader, follower = (a, b) if a.is_leader else (b, a)
        entity = sync(d.group, leader.generation, leader.member_id,
                      {follower.member_id: assignment({"diff-t": [0]})})
        doubled = dataclasses.replace(entity, assignments=entity.assignments * 2)
        leader.conn.call(doubled)
        follower.conn.call(sync(d.group, follower.generation, follower.member_id))

    converse(duplicated)


def test_static_member_changes_its_subscription(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], static=True)
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = send_join(d, follower, topics=("diff-t", "diff-u"))
        d.wait_state("PreparingRebalance")
        leader.conn.call(heartbeat(d.group, leader.generation, leader.member_id,
                                   instance=leader.instance))
        rejoined = send_join(d, leader, topics=("diff-t",))
        follower.absorb(parked.result())
        leader.absorb(rejoined.result())
        sync_all(d, [a, b])
        a.conn.call(describe(d.group))

    converse(script)


@pytest.mark.parametrize("state", ["PreparingRebalance", "CompletingRebalance"])
def test_list_groups_mid_rebalance(converse, state: str) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=state != "CompletingRebalance")
        parked = []
        if state == "PreparingRebalance":
            leader = a if a.is_leader else b
            parked.append(send_join(d, leader))
            d.wait_state(state)
        answer = d.connect("admin").call(list_groups(states=(state,)), record=False)
        d.record("listed", sorted((g.group_id, g.group_state) for g in answer.groups
                                  if g.group_id == d.group))
        for member in (a, b):
            if parked and not member.is_leader:
                parked.append(send_join(d, member))
        for pending in parked:
            pending.result()

    converse(script)


@ON_BOTH_ENGINES
@pytest.mark.parametrize("version", [7, 9])
def test_fetch_requiring_stable_offsets(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        admin = d.connect("admin")
        admin.call(commit(d.group, {("diff-u", 1): 8}))
        if version >= 8:
            admin.call(fetch_groups({d.group: {"diff-u": [0, 1]}}, v=version,
                                    require_stable=True))
        else:
            admin.call(fetch(d.group, {"diff-u": [0, 1]}, v=version, require_stable=True))

    converse(script)


def test_old_member_rejoining_after_a_new_generation(converse) -> None:
    """A member that left while the leader's rejoin was parked comes back with its old id."""
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"])
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = send_join(d, leader)
        d.wait_state("PreparingRebalance")
        follower.conn.call(leave(d.group, [(follower.member_id, None)]))
        leader.absorb(parked.result())
        ghost = Member(follower.name, follower.conn, follower.member_id)
        send_join(d, ghost).result()

    converse(script)
