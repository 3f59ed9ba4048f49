"""Random conversations, side by side: hypothesis draws a sequence of moves (members joining,
leaving, rejoining, heartbeating, syncing and committing with right and wrong generations and
ids, fetching, describing) and the same sequence is sent to Kafka and to kgroups.

Moves whose outcome depends on a race the protocol leaves open are not drawn: the leader never
leaves (Kafka elects its successor from a hash map), and a rebalance is always driven to Stable
with fences between clients, as the scripted conversations do.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from diff_dialog import Dialog, differences, render, run_both
from diff_flows import Member, new_member, send_join, sync_all, wait_members
from diff_requests import commit, describe, fetch, heartbeat, leave, sync
from diff_setup import ON_BOTH_ENGINES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.kafka

NAMES = ("a", "b", "c", "d")
UNKNOWN = "z-00000000-0000-0000-0000-000000000000"

moves = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(NAMES)),
    st.tuples(st.just("leave"), st.sampled_from(NAMES)),
    st.tuples(st.just("rejoin")),
    st.tuples(st.just("heartbeat"), st.sampled_from(NAMES), st.sampled_from((0, -1, 1))),
    st.tuples(st.just("sync"), st.sampled_from(NAMES), st.sampled_from((0, -1, 1))),
    st.tuples(st.just("commit"), st.sampled_from((*NAMES, "unknown")), st.integers(0, 2),
              st.integers(0, 1000), st.sampled_from((0, -1, 1))),
    st.tuples(st.just("fetch")),
    st.tuples(st.just("describe")),
)


@dataclass
class Model:
    """What the script believes about the group, to pick ids and generations to send."""

    d: Dialog
    members: dict[str, Member] = field(default_factory=dict)
    gone: dict[str, Member] = field(default_factory=dict)

    def state(self) -> str:
        (group,) = self.d.connect("model").call(describe(self.d.group), record=False).groups
        return str(group.group_state)

    def leader(self) -> Member | None:
        return next((m for m in self.members.values() if m.is_leader), None)

    def rebalance(self, newcomers: list[Member]) -> None:
        """Drive every member (and `newcomers`) through one join phase and a sync to Stable."""
        state = self.state()
        everyone = [*self.members.values(), *newcomers]
        if not everyone:
            return
        if state in ("Empty", "Dead"):
            first, rest = everyone[0], everyone[1:]
            first.absorb(send_join(self.d, first).result())
            if rest:
                self._join_together(rest, then=[first])
        elif state == "Stable":
            leader = self.leader()
            starter = leader if leader is not None else everyone[0]
            parked = send_join(self.d, starter)
            others = [m for m in everyone if m is not starter]
            if others:  # else the join completes at once: the starter is all there is
                self.d.wait_state("PreparingRebalance")
            self._join_together(others, parked=[(starter, parked)])
        else:  # PreparingRebalance: everyone rejoins, in any order
            self._join_together(everyone)
        for member in newcomers:
            self.members[member.name] = member
        sync_all(self.d, list(self.members.values()))

    def _join_together(self, members: list[Member], then: list[Member] = (),  # type: ignore[assignment]
                       parked: list[tuple[Member, object]] = ()) -> None:  # type: ignore[assignment]
        sent = list(parked) + [(m, send_join(self.d, m)) for m in members]
        if then:
            wait_members(self.d, len(sent) + len(then))
            sent += [(m, send_join(self.d, m)) for m in then]
        for member, pending in sent:
            member.absorb(pending.result())  # type: ignore[attr-defined]

    def play(self, move: tuple[object, ...]) -> None:
        kind, *args = move
        d = self.d
        if kind == "add" and args[0] not in self.members | self.gone:
            self.rebalance([new_member(d, str(args[0]))])
        elif kind == "leave" and args[0] in self.members:
            member = self.members[str(args[0])]
            if not member.is_leader:
                member.conn.call(leave(d.group, [(member.member_id, None)]))
                self.gone[member.name] = self.members.pop(member.name)
        elif kind == "rejoin":
            self.rebalance([])
        elif kind in ("heartbeat", "sync") and args[0] in self.members | self.gone:
            member = (self.members | self.gone)[str(args[0])]
            generation = member.generation + int(args[1])  # type: ignore[call-overload]
            if kind == "heartbeat":
                member.conn.call(heartbeat(d.group, generation, member.member_id))
            else:  # never parks: moves leave the group Stable, PreparingRebalance or Empty
                member.conn.call(sync(d.group, generation, member.member_id,
                                      protocol_name=member.protocol or "range"))
        elif kind == "commit":
            name, partition, offset, delta = args
            member = (self.members | self.gone).get(str(name))
            member_id = member.member_id if member else UNKNOWN
            generation = (member.generation if member else 1) + int(delta)  # type: ignore[call-overload]
            d.connect("committer").call(commit(d.group, {("diff-t", int(partition)): int(offset)},  # type: ignore[call-overload]
                                               generation=generation, member_id=member_id))
        elif kind == "fetch":
            d.connect("fetcher").call(fetch(d.group, None))
        elif kind == "describe":
            d.connect("describer").call(describe(d.group))


@ON_BOTH_ENGINES
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(script=st.lists(moves, min_size=3, max_size=8))
def test_random_conversation(differential_ports: dict[str, int],
                             script: list[tuple[object, ...]]) -> None:
    def run(d: Dialog) -> None:
        model = Model(d)
        first = new_member(d, "a")
        model.rebalance([first])
        for move in script:
            model.play(move)

    group = f"random-{uuid.uuid4().hex[:8]}"
    transcripts = run_both(run, differential_ports, group, ("diff-t",))
    diff = differences(transcripts["kafka"], transcripts["kgroups"])
    assert not diff, f"moves {script} answered differently:\n{render(diff)}"
