"""Random interleavings of group traffic, checked after every step.

Several groups with static and dynamic members join, sync, heartbeat, leave and commit while the
clock jumps, writes complete late and partitions fail over. After each step: states move only
along Kafka's transitions, generations never go down, a Stable group's leader is a member, every
member of a CompletingRebalance/Stable group was in that generation's join, every member that
leaves a group is reported as removed, and replaying the records written so far rebuilds the same
groups and offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kgroups.coordinator import (
    GroupCoordinatorConfig,
    JoinGroupResponse,
    MemberIdentity,
    RemovalReason,
    SyncGroupResponse,
)
from kgroups.coordinator.group import VALID_PREVIOUS_STATES, GroupState
from kgroups.errors import ErrorCode

from .harness import Harness, subscription

E = ErrorCode
GROUPS = ("alpha", "beta")
CLIENTS = ("d0", "d1", "s0", "s1")  # s* are static (group.instance.id = client name)
PROTOCOLS = (
    (("range", subscription("t1")),),
    (("range", subscription("t1", "t2")), ("roundrobin", subscription("t1", "t2"))),
    (("roundrobin", subscription("t2")), ("range", subscription("t2"))),
)
ALLOWED = {
    (old.value, new.value) for new, olds in VALID_PREVIOUS_STATES.items() for old in olds
}


@dataclass
class Client:
    member_id: str = ""
    generation: int = -1
    join_request: int | None = None
    sync_request: int | None = None
    leader_members: tuple[str, ...] = ()
    is_leader: bool = False


class GroupTraffic(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(
            GroupCoordinatorConfig(offsets_topic_num_partitions=3),
            auto_complete=False,
        )
        self.clients = {(g, c): Client() for g in GROUPS for c in CLIENTS}
        self.joined_in: dict[tuple[str, int], set[str]] = {}
        self.last_state: dict[str, str] = {}
        self.max_generation: dict[str, int] = {}
        self.events_seen = 0
        self.removals_seen = 0
        self.members_before: dict[str, set[str]] = {}
        self.reloaded: set[str] = set()
        self.log_may_lag = False

    # -- client behaviour ---------------------------------------------------------------------

    def _absorb_replies(self) -> None:
        for (group, name), client in self.clients.items():
            if client.join_request is not None:
                response = self.h.reply(client.join_request)
                if response is not None:
                    client.join_request = None
                    self._on_join(group, name, client, response)
            if client.sync_request is not None:
                response = self.h.reply(client.sync_request)
                if response is not None:
                    client.sync_request = None
                    assert isinstance(response, SyncGroupResponse)
                    if response.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                        client.member_id, client.generation = "", -1

    def _on_join(self, group: str, name: str, client: Client, response: JoinGroupResponse):
        if response.error is E.MEMBER_ID_REQUIRED:
            client.member_id = response.member_id
        elif response.error is E.NONE:
            client.member_id = response.member_id
            client.generation = response.generation_id
            client.is_leader = response.leader == response.member_id
            client.leader_members = tuple(m.member_id for m in response.members)
            if response.members:
                self.joined_in[(group, response.generation_id)] = {
                    m.group_instance_id or m.member_id for m in response.members
                }
        elif response.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            client.member_id, client.generation = "", -1

    @rule(group=st.sampled_from(GROUPS), name=st.sampled_from(CLIENTS), variant=st.integers(0, 2))
    def join(self, group: str, name: str, variant: int) -> None:
        client = self.clients[(group, name)]
        if client.join_request is not None:
            return
        client.join_request = self.h.join(
            group,
            client.member_id,
            instance=name if name.startswith("s") else None,
            protocols=PROTOCOLS[variant],
            session=10_000,
            rebalance=20_000,
            client_id=name,
        )
        self._absorb_replies()

    @rule(group=st.sampled_from(GROUPS), name=st.sampled_from(CLIENTS), variant=st.integers(0, 2))
    def act(self, group: str, name: str, variant: int) -> None:
        """What a well-behaved client does next: join, then sync, then heartbeat (and the
        broker's writes complete promptly)."""
        client = self.clients[(group, name)]
        self.complete_writes()
        if client.join_request is not None or client.sync_request is not None:
            self.advance(1000)
        elif not client.member_id or client.generation < 0:
            self.join(group, name, variant)
        elif self.h.coordinator.group_view(group) is not None and (
            self.h.coordinator.group_view(group).state == "CompletingRebalance"
        ):
            self.sync(group, name)
        else:
            rid = self.h.heartbeat(
                group, client.member_id, client.generation, name if name[0] == "s" else None
            )
            error = self.h.reply(rid).error
            if error is E.REBALANCE_IN_PROGRESS or error is E.ILLEGAL_GENERATION:
                self.join(group, name, variant)
            elif error is not E.NONE:
                client.member_id, client.generation = "", -1
        self.complete_writes()

    @rule(group=st.sampled_from(GROUPS), rounds=st.integers(1, 8), variant=st.integers(0, 2))
    def run_clients(self, group: str, rounds: int, variant: int) -> None:
        """Every client of the group keeps going for a while, as real consumers do."""
        for _ in range(rounds):
            for name in CLIENTS:
                self.act(group, name, variant)

    @rule(group=st.sampled_from(GROUPS), name=st.sampled_from(CLIENTS))
    def sync(self, group: str, name: str) -> None:
        client = self.clients[(group, name)]
        if client.sync_request is not None or not client.member_id:
            return
        assignments = None
        if client.is_leader:
            assignments = {m: f"{m}@{client.generation}".encode() for m in client.leader_members}
        client.sync_request = self.h.sync(
            group,
            client.member_id,
            client.generation,
            assignments,
            instance=name if name.startswith("s") else None,
        )
        self._absorb_replies()

    @rule(group=st.sampled_from(GROUPS), name=st.sampled_from(CLIENTS))
    def heartbeat(self, group: str, name: str) -> None:
        client = self.clients[(group, name)]
        instance = name if name.startswith("s") else None
        rid = self.h.heartbeat(group, client.member_id, client.generation, instance)
        if self.h.reply(rid).error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            client.member_id, client.generation = "", -1
        self._absorb_replies()

    @rule(group=st.sampled_from(GROUPS), name=st.sampled_from(CLIENTS), by_instance=st.booleans())
    def leave(self, group: str, name: str, by_instance: bool) -> None:
        client = self.clients[(group, name)]
        if by_instance and name.startswith("s"):
            identity = MemberIdentity("", name)
        else:
            identity = MemberIdentity(client.member_id, None)
        self.h.leave(group, identity)
        self._absorb_replies()

    @rule(
        group=st.sampled_from(GROUPS),
        name=st.sampled_from(CLIENTS),
        partition=st.integers(0, 2),
        offset=st.integers(0, 1000),
        as_member=st.booleans(),
    )
    def commit(self, group: str, name: str, partition: int, offset: int, as_member: bool):
        client = self.clients[(group, name)]
        if as_member:
            self.h.commit(
                group,
                {("t1", partition): offset},
                generation=client.generation,
                member_id=client.member_id,
            )
        else:
            self.h.commit(group, {("t2", partition): offset})
        self._absorb_replies()

    @rule(ms=st.sampled_from([0, 1, 1000, 2999, 3000, 5000, 12_000, 700_000]))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)
        self._absorb_replies()

    @rule()
    def complete_writes(self) -> None:
        self.h.complete_writes()
        self._absorb_replies()

    @rule(error=st.sampled_from([E.NOT_ENOUGH_REPLICAS, E.KAFKA_STORAGE_ERROR]))
    def fail_writes(self, error: ErrorCode) -> None:
        """Pending writes fail. Kafka keeps some in-memory changes whose record was lost (an
        Empty generation), so from here on the log may lag memory: replay is not compared."""
        if self.h.pending:
            self.log_may_lag = True
        self.h.complete_writes(error)
        self._absorb_replies()

    @rule(partition=st.integers(0, 2))
    def fail_over(self, partition: int) -> None:
        """The partition moves away and back: state must come back from the log alone."""
        self.h.pending = [w for w in self.h.pending if w.offsets_partition != partition]
        self.h.absorb(self.h.coordinator.unload_partition(partition, self.h.now))
        self.h.absorb(
            self.h.coordinator.load_partition(partition, self.h.log.get(partition, []), self.h.now)
        )
        for group in [g for g in GROUPS if self.h.partition_of(g) == partition]:
            self.last_state.pop(group, None)
            self.reloaded.add(group)  # transient members vanish with the old coordinator
            if self.log_may_lag:
                # A lost write (say the tombstone of an expired group) lets the log bring back
                # an older group whose generation numbers were since reused in memory only.
                for key in [k for k in self.joined_in if k[0] == group]:
                    del self.joined_in[key]
        self._absorb_replies()

    # -- checks -------------------------------------------------------------------------------

    @invariant()
    def transitions_are_allowed_and_generations_grow(self) -> None:
        for event in self.h.events[self.events_seen :]:
            previous = self.last_state.get(event.group_id)
            if event.old_state is None:
                assert previous in (None, "Dead"), event
            else:
                assert previous in (None, event.old_state), (previous, event)
                assert (event.old_state, event.new_state) in ALLOWED or (
                    event.old_state == "Dead" and event.new_state == "Empty"  # reverted delete
                ), event
            self.last_state[event.group_id] = event.new_state
            if event.new_state == "Dead":
                self.max_generation.pop(event.group_id, None)
            elif event.old_state is not None:
                floor = self.max_generation.get(event.group_id, 0)
                assert event.generation >= floor, event
                self.max_generation[event.group_id] = event.generation
        self.events_seen = len(self.h.events)

    @invariant()
    def every_member_that_vanishes_is_reported_removed(self) -> None:
        removals = self.h.removals[self.removals_seen :]
        reported = {(r.group_id, r.member_id) for r in removals}
        now = {
            group: {m.member_id for m in view.members}
            for group, view in self.h.coordinator.group_views().items()
        }
        for group, before in self.members_before.items():
            if group in now and group not in self.reloaded:
                vanished = {(group, member) for member in before - now[group]}
                assert vanished <= reported, (vanished, removals)
        for removal in removals:
            if removal.reason is not RemovalReason.FENCED_BY_STATIC_REPLACEMENT:
                assert removal.member_id not in now.get(removal.group_id, set()), removal
        self.members_before = now
        self.removals_seen = len(self.h.removals)
        self.reloaded.clear()

    @invariant()
    def members_belong_to_their_generation(self) -> None:
        for group, view in self.h.coordinator.group_views().items():
            if view.state not in ("Stable", "CompletingRebalance"):
                continue
            assert view.leader in {m.member_id for m in view.members}, view
            joined = self.joined_in.get((group, view.generation))
            if joined is None:
                continue  # this generation came back from the log, not from a join
            for member in view.members:
                assert (member.group_instance_id or member.member_id) in joined, (view, joined)

    @invariant()
    def replay_rebuilds_the_same_state(self) -> None:
        if self.h.pending or self.log_may_lag:
            return
        live = self.h.coordinator.group_views()
        replayed = self.h.replayed().group_views()
        assert set(replayed) <= set(live), (set(replayed) - set(live))
        for group_id, view in live.items():
            if view.generation == 0 and not view.offsets:
                assert group_id not in replayed
                continue
            again = replayed.get(group_id)
            if again is None:  # its first generation is still being formed
                assert view.state not in ("Stable", "Empty") and not view.offsets, view
                continue
            assert again.offsets == view.offsets
            if view.state in (GroupState.STABLE.value, GroupState.EMPTY.value):
                assert again == view
            else:
                assert again.generation <= view.generation


GroupTraffic.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupTraffic = GroupTraffic.TestCase
