"""Replay equivalence over every write path, failed writes included.

Groups join (dynamic and static members, restarted static members that replace themselves),
sync, heartbeat, leave, commit, delete offsets, get deleted and have their offsets expire, while
each write completes late, one at a time and in order, succeeding or failing as hypothesis
chooses (a failure fails the writes of its partition still in flight with it), and partitions
fail over. Whenever no write is in flight, the live coordinator's persisted part must equal a
coordinator rebuilt from the records that were written successfully: the same groups, the same
offsets, and for every group at rest (Stable or Empty) the same generation, protocol, leader and
members with their assignments.

The one allowance is Kafka's own: a lost record that Kafka does not revert (the GroupMetadata of
a generation that ended Empty, the tombstones of offset expiry) leaves the log behind memory
until a later record for the same key is written; those keys are skipped until then.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kgroups.coordinator import (
    DeleteGroupsRequest,
    Effects,
    GroupCoordinatorConfig,
    GroupView,
    JoinGroupResponse,
    MemberIdentity,
    OffsetDeleteRequest,
    SyncGroupResponse,
    Write,
)
from kgroups.errors import ErrorCode
from kgroups.records.schema import GroupMetadataKey, OffsetCommitKey

from .harness import Harness, subscription

E = ErrorCode
GROUPS = ("alpha", "beta", "gamma")
CLIENTS = ("d0", "d1", "s0", "s1")  # s* are static (group.instance.id = client name)
PROTOCOLS = (
    (("range", subscription("t1")),),
    (("range", subscription("t1", "t2")), ("roundrobin", subscription("t1", "t2"))),
    (("roundrobin", subscription("t2")), ("range", subscription("t2"))),
)
WRITE_ERRORS = (E.NOT_ENOUGH_REPLICAS, E.KAFKA_STORAGE_ERROR, E.REQUEST_TIMED_OUT)
AT_REST = ("Stable", "Empty")


@dataclass
class Client:
    member_id: str = ""
    generation: int = -1
    join_request: int | None = None
    sync_request: int | None = None
    leader_members: tuple[str, ...] = ()
    is_leader: bool = False

    def forget(self) -> None:
        self.member_id, self.generation, self.is_leader = "", -1, False


def settle(h: Harness, client: Client) -> None:
    """Take the answers to `client`'s parked JoinGroup and SyncGroup, as a client would."""
    if client.join_request is not None:
        response = h.reply(client.join_request)
        if response is not None:
            client.join_request = None
            _on_join(client, response)
    if client.sync_request is not None:
        response = h.reply(client.sync_request)
        if response is not None:
            client.sync_request = None
            assert isinstance(response, SyncGroupResponse)
            if response.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                client.forget()


def _on_join(client: Client, response: object) -> None:
    assert isinstance(response, JoinGroupResponse)
    if response.error is E.MEMBER_ID_REQUIRED:
        client.member_id = response.member_id
    elif response.error is E.NONE:
        client.member_id = response.member_id
        client.generation = response.generation_id
        client.is_leader = response.leader == response.member_id
        client.leader_members = tuple(m.member_id for m in response.members)
    elif response.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID) or (
        response.member_id == ""
    ):
        client.forget()


class WritePaths(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(
            GroupCoordinatorConfig(
                offsets_topic_num_partitions=2,
                offsets_retention_minutes=1,
                offsets_retention_check_interval_ms=20_000,
                group_initial_rebalance_delay_ms=0,
            ),
            auto_complete=False,
        )
        self.clients = {(g, c): Client() for g in GROUPS for c in CLIENTS}
        # Writes whose failure the coordinator reverts or never applied: the DeleteGroups and
        # OffsetDelete writes (told apart from expiry's tombstones by where they came from).
        self.answered_writes: set[int] = set()
        self.lagging_groups: set[str] = set()
        self.lagging_offsets: set[tuple[str, str, int]] = set()
        self.outcomes: dict[str, int] = {"ok": 0, "failed": 0}

    # -- the client side ----------------------------------------------------------------------

    def _settle_replies(self) -> None:
        for client in self.clients.values():
            settle(self.h, client)

    @rule(
        group=st.sampled_from(GROUPS),
        name=st.sampled_from(CLIENTS),
        variant=st.integers(0, 2),
        restarted=st.booleans(),
    )
    def join(self, group: str, name: str, variant: int, restarted: bool) -> None:
        """Join (or rejoin); a restarted client has lost its member id (and any JoinGroup it
        was waiting on), which for a static member is a static replacement."""
        client = self.clients[(group, name)]
        if client.join_request is not None and not restarted:
            return
        if restarted:
            client.forget()
        client.join_request = self.h.join(
            group,
            client.member_id,
            instance=name if name.startswith("s") else None,
            protocols=PROTOCOLS[variant],
            session=10_000,
            rebalance=15_000,
            client_id=name,
        )
        self._settle_replies()

    @rule(group=st.sampled_from(GROUPS), name=st.sampled_from(CLIENTS))
    def sync(self, group: str, name: str) -> None:
        client = self.clients[(group, name)]
        if client.sync_request is not None or not client.member_id or client.generation < 0:
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
        self._settle_replies()

    @rule(
        group=st.sampled_from(GROUPS),
        rounds=st.integers(1, 6),
        variant=st.integers(0, 2),
        failures=st.lists(st.booleans(), min_size=1, max_size=8),
    )
    def run_clients(self, group: str, rounds: int, variant: int, failures: list[bool]) -> None:
        """Every client of the group takes its next step, as real consumers do, for a few
        rounds; the writes they cause complete in between, failing where `failures` says."""
        outcomes = iter(failures * (rounds * len(CLIENTS)))
        for _ in range(rounds):
            for name in CLIENTS:
                self._next_step(group, name, variant)
                while self.h.pending:
                    error = WRITE_ERRORS[0] if next(outcomes, False) else None
                    self._complete(self.h.pending.pop(0), error)
            self.advance(1000)

    def _next_step(self, group: str, name: str, variant: int) -> None:
        client = self.clients[(group, name)]
        if client.join_request is not None or client.sync_request is not None:
            return
        view = self.h.coordinator.group_view(group)
        if not client.member_id or client.generation < 0:
            self.join(group, name, variant, restarted=False)
        elif view is not None and view.state == "CompletingRebalance":
            self.sync(group, name)
        else:
            rid = self.h.heartbeat(
                group, client.member_id, client.generation, name if name[0] == "s" else None
            )
            error = self.h.reply(rid).error
            if error in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION):
                self.join(group, name, variant, restarted=False)
            elif error is not E.NONE:
                client.forget()

    @rule(group=st.sampled_from(GROUPS), name=st.sampled_from(CLIENTS))
    def heartbeat(self, group: str, name: str) -> None:
        client = self.clients[(group, name)]
        instance = name if name.startswith("s") else None
        rid = self.h.heartbeat(group, client.member_id, client.generation, instance)
        if self.h.reply(rid).error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            client.forget()
        self._settle_replies()

    @rule(group=st.sampled_from(GROUPS), name=st.sampled_from(CLIENTS), by_instance=st.booleans())
    def leave(self, group: str, name: str, by_instance: bool) -> None:
        client = self.clients[(group, name)]
        if by_instance and name.startswith("s"):
            self.h.leave(group, MemberIdentity("", name))
        else:
            self.h.leave(group, MemberIdentity(client.member_id, None))
        self._settle_replies()

    @rule(
        group=st.sampled_from(GROUPS),
        name=st.sampled_from(CLIENTS),
        partition=st.integers(0, 1),
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
            self.h.commit(group, {("t2", partition): offset, ("t3", partition): offset})
        self._settle_replies()

    @rule(group=st.sampled_from(GROUPS), topic=st.sampled_from(("t1", "t2", "t3")))
    def delete_offsets(self, group: str, topic: str) -> None:
        request = OffsetDeleteRequest(self.h.rid(), group, ((topic, (0, 1)),))
        self._answered(self.h.coordinator.offset_delete(request, self.h.now))

    @rule(groups=st.lists(st.sampled_from(GROUPS), min_size=1, max_size=3))
    def delete_groups(self, groups: list[str]) -> None:
        request = DeleteGroupsRequest(self.h.rid(), tuple(groups))
        self._answered(self.h.coordinator.delete_groups(request, self.h.now))

    def _answered(self, fx: Effects) -> None:
        self.answered_writes.update(write.write_id for write in fx.writes)
        self.h.absorb(fx)
        self._settle_replies()

    @rule(ms=st.sampled_from([0, 1000, 5000, 11_000, 20_000, 61_000]))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)
        self._settle_replies()

    # -- the log side -------------------------------------------------------------------------

    @rule(succeed=st.booleans(), error=st.sampled_from(WRITE_ERRORS))
    def complete_next_write(self, succeed: bool, error: ErrorCode) -> None:
        if self.h.pending:
            self._complete(self.h.pending.pop(0), None if succeed else error)

    @rule(succeed=st.booleans(), error=st.sampled_from(WRITE_ERRORS))
    def complete_all_writes(self, succeed: bool, error: ErrorCode) -> None:
        while self.h.pending:
            self._complete(self.h.pending.pop(0), None if succeed else error)

    def _complete(self, write: Write, error: ErrorCode | None) -> None:
        if error is None:
            self.outcomes["ok"] += 1
            self.h.log.setdefault(write.offsets_partition, []).extend(write.records)
            for record in write.records:
                key = record.key
                if isinstance(key, GroupMetadataKey):
                    self.lagging_groups.discard(key.group)
                elif isinstance(key, OffsetCommitKey):
                    self.lagging_offsets.discard((key.group, key.topic, key.partition))
        else:
            for lost in self.h.lost_with(write):
                self.outcomes["failed"] += 1
                if lost.write_id not in self.answered_writes:
                    self._note_tolerated_loss(lost)
        self.h.absorb(self.h.coordinator.write_completed(write.write_id, error, self.h.now))
        self._settle_replies()

    def _note_tolerated_loss(self, write: Write) -> None:
        """Kafka keeps in memory what these records said even though they were lost."""
        for record in write.records:
            key, value = record.key, record.value
            if isinstance(key, GroupMetadataKey) and (value is None or not value.members):
                self.lagging_groups.add(key.group)
            elif isinstance(key, OffsetCommitKey) and value is None:
                self.lagging_offsets.add((key.group, key.topic, key.partition))

    @rule(partition=st.integers(0, 1))
    def fail_over(self, partition: int) -> None:
        """The partition moves away and back: its state comes back from the log alone."""
        self.h.pending = [w for w in self.h.pending if w.offsets_partition != partition]
        self.h.absorb(self.h.coordinator.unload_partition(partition, self.h.now))
        self.h.absorb(
            self.h.coordinator.load_partition(partition, self.h.log.get(partition, []), self.h.now)
        )
        moved = {g for g in GROUPS if self.h.partition_of(g) == partition}
        self.lagging_groups -= moved
        self.lagging_offsets = {k for k in self.lagging_offsets if k[0] not in moved}
        self._settle_replies()

    # -- the check ----------------------------------------------------------------------------

    @invariant()
    def live_state_is_the_replay_of_the_written_records(self) -> None:
        if self.h.pending:
            return  # an in-flight write's records may already show (at-once writes)
        live = self._settled(self.h.coordinator.group_views())
        replayed = self._settled(self.h.replayed().group_views())
        for group_id in set(live) | set(replayed):
            view, again = live.get(group_id), replayed.get(group_id)
            assert (view.offsets if view else ()) == (again.offsets if again else ()), group_id
            if group_id in self.lagging_groups:
                continue
            if again is None:
                # Nothing persisted yet: a group forming a generation whose record is not written.
                assert view is not None and not view.offsets, view
                assert view.state not in AT_REST or view.generation == 0, view
                continue
            assert view is not None, f"{group_id} is in the log but not live: {again}"
            if view.state in AT_REST:
                assert view == again
            else:
                assert again.generation <= view.generation, (view, again)


    def _settled(self, views: dict[str, GroupView]) -> dict[str, GroupView]:
        """Views without the offsets whose tombstones were lost; a group that only those
        offsets made (a simple group) is left out with them."""
        settled = {}
        for group_id, view in views.items():
            offsets = tuple(
                o for o in view.offsets if (group_id, o[0], o[1]) not in self.lagging_offsets
            )
            if offsets != view.offsets and not offsets and view.protocol_type is None:
                continue
            settled[group_id] = replace(view, offsets=offsets)
        return settled


WritePaths.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestWritePaths = WritePaths.TestCase


def test_a_failed_group_deletion_keeps_the_offset_deletion_written_before_it() -> None:
    """Hypothesis found it: an OffsetDelete's tombstones apply once durable, a DeleteGroups
    applied meanwhile (its tombstones and the group's, at once) then failed. The revert must go
    back to the state after the OffsetDelete, which comes first in the log, and not bring its
    deleted offset back to life."""
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=1), auto_complete=False)
    h.commit("alpha", {("t2", 0): 0, ("t3", 0): 0})
    h.complete_writes()
    h.absorb(h.coordinator.offset_delete(
        OffsetDeleteRequest(h.rid(), "alpha", (("t2", (0, 1)),)), h.now))
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(h.rid(), ("alpha",)), h.now))
    offset_delete, group_delete = h.pending
    h.pending.clear()
    h.log.setdefault(offset_delete.offsets_partition, []).extend(offset_delete.records)
    h.absorb(h.coordinator.write_completed(offset_delete.write_id, None, h.now))
    h.absorb(h.coordinator.write_completed(group_delete.write_id, E.NOT_ENOUGH_REPLICAS, h.now))
    live = h.coordinator.group_views()["alpha"]
    assert [(t, p) for t, p, _ in live.offsets] == [("t3", 0)]
    assert h.replayed().group_views()["alpha"].offsets == live.offsets
