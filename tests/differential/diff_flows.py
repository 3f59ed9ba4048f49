"""Multi-step moves the conversations share: getting a member id, forming a group of several
members, syncing. Every answer along the way is recorded, so these steps are compared too.

With group.initial.rebalance.delay.ms=0 the first member's join completes alone at once; each
later member's join starts a rebalance that the others must rejoin. To make both brokers see the
same order, a member rejoins only once DescribeGroups shows every joiner in the group.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diff_dialog import Connection, Dialog, Pending
from diff_requests import assignment, describe, join, sync


@dataclass
class Member:
    name: str
    conn: Connection
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    instance: str | None = None
    protocol: str | None = None

    @property
    def is_leader(self) -> bool:
        return self.member_id == self.leader

    def absorb(self, response: Any) -> Any:
        """Take member id, generation and leader from a JoinGroup answer."""
        if response.member_id:
            self.member_id = response.member_id
        if int(response.error_code) == 0:
            self.generation = int(response.generation_id)
            self.leader = response.leader
            self.protocol = response.protocol_name
        return response


def new_member(d: Dialog, name: str, *, v: int = 9, instance: str | None = None,
               **join_fields: Any) -> Member:
    """A connection plus, for a dynamic member on v4+, its id from MEMBER_ID_REQUIRED."""
    member = Member(name, d.connect(name), instance=instance)
    if v >= 4 and instance is None:
        member.absorb(member.conn.call(join(d.group, v=v, **join_fields)))
    return member


def send_join(d: Dialog, member: Member, *, v: int = 9, **join_fields: Any) -> Pending:
    return member.conn.send(join(d.group, member.member_id, v=v, instance=member.instance,
                                 **join_fields))


def wait_members(d: Dialog, count: int, state: str = "PreparingRebalance",
                 timeout_s: float = 20.0) -> None:
    """Unrecorded fence: the group is in `state` with `count` members."""
    probe = d.connect("members-probe")
    deadline = time.monotonic() + timeout_s
    seen: tuple[str, int] = ("", -1)
    while time.monotonic() < deadline:
        (group,) = probe.call(describe(d.group), record=False).groups
        seen = (group.group_state, len(group.members))
        if seen == (state, count):
            return
        time.sleep(0.02)
    raise AssertionError(f"{d.broker}: group is {seen}, expected {(state, count)}")


def form_group(d: Dialog, names: Sequence[str], *, v: int = 9, static: bool = False,
               topics: Sequence[str] = ("diff-t",), do_sync: bool = True,
               **join_fields: Any) -> list[Member]:
    """Members `names` joined (and synced, leader assigning round-robin) in one generation."""
    members = [new_member(d, name, v=v, instance=f"{name}-static" if static else None,
                          topics=topics, **join_fields) for name in names]
    first, rest = members[0], members[1:]
    first.absorb(send_join(d, first, v=v, topics=topics, **join_fields).result())
    if rest:
        pending = [send_join(d, m, v=v, topics=topics, **join_fields) for m in rest]
        wait_members(d, len(members))
        pending.insert(0, send_join(d, first, v=v, topics=topics, **join_fields))
        for member, answer in zip(members, pending, strict=True):
            member.absorb(answer.result())
    if do_sync:
        sync_all(d, members, v=min(v, 5) if v >= 0 else 5)
    return members


def round_robin(members: Sequence[Member], topic: str = "diff-t",
                partitions: int = 3) -> dict[str, bytes]:
    owned: dict[str, list[int]] = {m.member_id: [] for m in members}
    ordered = sorted(owned)
    for partition in range(partitions):
        owned[ordered[partition % len(ordered)]].append(partition)
    return {member_id: assignment({topic: parts}) for member_id, parts in owned.items()}


def sync_all(d: Dialog, members: Sequence[Member], *, v: int = 5,
             assignments: Mapping[str, bytes] | None = None) -> list[Any]:
    """Followers' SyncGroups first (they park, or find the group Stable if the leader's came
    first: the answer is the same either way), then the leader's; answers in member order."""
    leader = next(m for m in members if m.is_leader)
    plan = round_robin(members) if assignments is None else assignments
    pending: dict[str, Pending] = {}
    for member in members:
        if member is not leader:
            pending[member.name] = member.conn.send(sync(
                d.group, member.generation, member.member_id, v=v, instance=member.instance,
                protocol_name=member.protocol))
    pending[leader.name] = leader.conn.send(sync(
        d.group, leader.generation, leader.member_id, plan, v=v, instance=leader.instance,
        protocol_name=leader.protocol))
    return [pending[m.name].result() for m in members]
