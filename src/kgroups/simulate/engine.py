"""The discrete-event simulator: members of `kgroups.member` and the real coordinator core
(`GroupCoordinator`) on one virtual clock.

Everything happens through one queue of timed entries, ordered by time and then by the order
they were queued, so a run is a pure function of the scenario, the variant and the seed. The
coordinator's effects are carried out as the broker's runtime carries them out: replies go back
to the member that asked, writes complete after `write_delay_ms` (in order), and the core is
woken at its `next_deadline()`. Each request and each answer spends the member's network delay
on the way.
"""

from __future__ import annotations

import heapq
import random
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, assert_never

from kgroups.assignors import ClusterMetadata
from kgroups.coordinator import (
    Effects,
    GroupCoordinator,
    GroupCoordinatorConfig,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.member import (
    ClassicMember,
    ConsumerMember,
    MemberRequest,
    MemberSettings,
    Protocol,
)
from kgroups.simulate.ledger import OwnershipLedger
from kgroups.simulate.scenario import Action, Event, Scenario, Variant

Member = ClassicMember | ConsumerMember
MemberKey = tuple[str, int]  # (name, incarnation)


class Kind(IntEnum):
    REQUEST = 0  # a request reaches the coordinator
    REPLY = 1  # an answer reaches its member
    WRITE_DONE = 2  # a __consumer_offsets write is durable
    COORDINATOR_TIMER = 3
    MEMBER_TIMER = 4
    SCHEDULED = 5  # an event of the scenario
    START = 6  # a member (re)starts
    RESTORE = 7  # a slow or network window ends


@dataclass(slots=True)
class Incarnation:
    """One run of a member process; a restart is a new incarnation under the same name."""

    key: MemberKey
    member: Member
    reported: frozenset[tuple[str, int]] = frozenset()
    extra_delay_ms: int = 0
    wake_at: int | None = None


@dataclass(slots=True)
class Outcome:
    """What one variant's run measured."""

    variant: Variant
    ledger: OwnershipLedger
    rebalances: int
    commits_sent: int
    commits_refused: int
    refusal_errors: dict[str, int]
    member_failures: dict[str, str]
    duration_ms: int
    events_processed: int
    generations: list[tuple[int, int]] = field(default_factory=list)  # (time, generation/epoch)
    # The real history's row (simulate.from_history), measured from the log rather than run:
    # refused commits are not written there, so they are not known.
    recorded: bool = False


def coordinator_config(variant: Variant) -> GroupCoordinatorConfig:
    """The broker settings a variant implies; the consumer protocol's session timeout and
    heartbeat interval are the broker's (group.consumer.*), widened to admit the variant's."""
    session = variant.session_timeout_ms
    heartbeat = variant.heartbeat_interval_ms
    return GroupCoordinatorConfig(
        offsets_topic_num_partitions=1,
        group_initial_rebalance_delay_ms=variant.initial_rebalance_delay_ms,
        group_min_session_timeout_ms=min(6_000, session),
        group_max_session_timeout_ms=max(1_800_000, session),
        group_consumer_session_timeout_ms=session,
        group_consumer_min_session_timeout_ms=min(45_000, session),
        group_consumer_max_session_timeout_ms=max(60_000, session),
        group_consumer_heartbeat_interval_ms=heartbeat,
        group_consumer_min_heartbeat_interval_ms=min(5_000, heartbeat),
        group_consumer_max_heartbeat_interval_ms=max(15_000, heartbeat),
    )


class Simulation:
    def __init__(self, scenario: Scenario, variant: Variant, keep_segments: bool = False) -> None:
        self.scenario = scenario
        self.variant = variant
        self._rng = random.Random(scenario.seed)
        self._queue: list[tuple[int, int, Kind, Any]] = []
        self._sequence = 0
        self.now = 0
        self._coordinator = GroupCoordinator(coordinator_config(variant),
                                             new_uuid=self._new_uuid)
        self._topic_ids = {topic: self._new_uuid() for topic in sorted(scenario.topics)}
        self._coordinator.set_topics(
            {t: TopicInfo(self._topic_ids[t], n) for t, n in scenario.topics.items()}, 0)
        self._coordinator.load_partition(0, [], 0)
        self._cluster = ClusterMetadata(dict(scenario.topics))
        self._live: dict[str, Incarnation] = {}
        self._by_key: dict[MemberKey, Incarnation] = {}
        self._incarnations: dict[str, int] = {}
        self._coordinator_wake: int | None = None
        self._pending_writes: dict[int, None] = {}
        self._rebalances = 0
        self._max_epoch = 0
        self._generations: list[tuple[int, int]] = []
        self._commits = [0, 0]
        self._refusals: dict[str, int] = {}
        self._failures: dict[str, str] = {}
        self._events = 0
        partitions = tuple((t, p) for t in sorted(scenario.topics)
                           for p in range(scenario.topics[t]))
        self.ledger = OwnershipLedger(partitions, scenario.measure_from_ms, keep_segments)
        for name in scenario.members:  # processes never start in the same millisecond
            self._push(self._rng.randrange(scenario.start_spread_ms + 1), Kind.START, name)
        for event in scenario.events:
            self._push(event.at_ms, Kind.SCHEDULED, event)

    def _new_uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def _push(self, at: int, kind: Kind, payload: Any) -> None:
        self._sequence += 1
        heapq.heappush(self._queue, (at, self._sequence, kind, payload))

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> Outcome:
        end = self.scenario.duration_ms
        queue = self._queue
        while queue and queue[0][0] <= end:
            at, _, kind, payload = heapq.heappop(queue)
            self.now = at
            self._events += 1
            self._handle(kind, payload)
        self.now = end
        for incarnation in self._live.values():
            self._note_ownership(incarnation)
        self.ledger.finish(end)
        for incarnation in list(self._by_key.values()):
            self._retire_commits(incarnation)
        return Outcome(self.variant, self.ledger, self._rebalances, self._commits[0],
                       self._commits[1], self._refusals, self._failures, end, self._events,
                       self._generations)

    def _handle(self, kind: Kind, payload: Any) -> None:
        match kind:
            case Kind.REQUEST:
                self._to_coordinator(payload)
            case Kind.REPLY:
                key, response = payload
                incarnation = self._by_key.get(key)
                if incarnation is not None:
                    self._note_reply(response)
                    incarnation.member.on_response(response, self.now)
                    self._after_member(incarnation)
            case Kind.WRITE_DONE:
                self._apply(self._coordinator.write_completed(payload, None, self.now))
            case Kind.COORDINATOR_TIMER:
                self._coordinator_wake = None
                deadline = self._coordinator.next_deadline()
                if deadline is not None and deadline <= self.now:
                    self._apply(self._coordinator.advance_time(self.now))
                self._schedule_coordinator()
            case Kind.MEMBER_TIMER:
                incarnation = self._by_key.get(payload)
                if incarnation is not None and incarnation.wake_at == self.now:
                    incarnation.wake_at = None
                    incarnation.member.advance(self.now)
                    self._after_member(incarnation)
            case Kind.SCHEDULED:
                self._on_event(payload)
            case Kind.START:
                self._start(payload)
            case Kind.RESTORE:
                self._restore(payload)
            case _:
                assert_never(kind)

    # -- members -------------------------------------------------------------------------------

    def _settings(self, name: str) -> MemberSettings:
        variant = self.variant
        return MemberSettings(
            self.scenario.group_id, tuple(sorted(self.scenario.topics)), variant.protocol,
            variant.assignor, name if variant.static else None, variant.session_timeout_ms,
            variant.max_poll_interval_ms, variant.heartbeat_interval_ms,
            variant.commit_interval_ms, self.scenario.processing_ms, variant.client, name)

    def _start(self, name: str) -> None:
        if name in self._live:
            return
        number = self._incarnations.get(name, 0) + 1
        self._incarnations[name] = number
        key = (name, number)
        settings = self._settings(name)
        member: Member
        if settings.protocol is Protocol.CONSUMER:
            member_id = f"{name}-{self._new_uuid().hex[:12]}"
            member = ConsumerMember(key, settings, member_id, self._topic_ids, self.now)
        else:
            member = ClassicMember(key, settings, self._cluster, self.now)
        incarnation = Incarnation(key, member)
        self._live[name] = incarnation
        self._by_key[key] = incarnation
        self._after_member(incarnation)

    def _after_member(self, incarnation: Incarnation) -> None:
        """Send what the member queued, record what it now owns, wake it when it asks."""
        member = incarnation.member
        delay = self.scenario.network_delay_ms + incarnation.extra_delay_ms
        for request in member.take_requests():
            self._push(self.now + delay, Kind.REQUEST, request)
        self._note_ownership(incarnation)
        if member.failure is not None:
            self._failures[incarnation.key[0]] = member.failure
        deadline = member.next_deadline(self.now)
        if deadline is None:
            if incarnation.key[0] in self._live and self._live[incarnation.key[0]] is incarnation \
                    and member.failure is not None:
                del self._live[incarnation.key[0]]
            return
        if incarnation.wake_at is None or deadline < incarnation.wake_at:
            incarnation.wake_at = deadline
            self._push(deadline, Kind.MEMBER_TIMER, incarnation.key)

    def _note_ownership(self, incarnation: Incarnation) -> None:
        owned = incarnation.member.owned
        before = incarnation.reported
        if owned is before or owned == before:
            return
        name = incarnation.key[0]
        self.ledger.lose(name, before - owned, self.now)
        self.ledger.gain(name, owned - before, self.now)
        incarnation.reported = owned

    def _on_event(self, event: Event) -> None:
        for name in event.members:
            self._act(event, name)

    def _act(self, event: Event, name: str) -> None:
        if event.action is Action.JOIN:
            self._start(name)
            return
        incarnation = self._live.get(name)
        if incarnation is None:
            return
        member = incarnation.member
        match event.action:
            case Action.LEAVE | Action.RESTART:
                member.close(self.now)
                self._stop(incarnation)
                if event.action is Action.RESTART:
                    self._push(self.now + (event.down_ms or 0), Kind.START, name)
                return
            case Action.CRASH:
                member.crash()
                self._stop(incarnation)
                if event.down_ms is not None:
                    self._push(self.now + event.down_ms, Kind.START, name)
                return
            case Action.PAUSE:
                member.loop.pause(self.now, self.now + event.for_ms)
            case Action.SLOW:
                member.loop.set_processing(self.now, event.processing_ms)
                self._push(self.now + event.for_ms, Kind.RESTORE, (incarnation.key, "slow"))
            case Action.NETWORK:
                incarnation.extra_delay_ms = event.delay_ms
                self._push(self.now + event.for_ms, Kind.RESTORE, (incarnation.key, "network"))
            case Action.JOIN:
                return
            case _:
                assert_never(event.action)
        incarnation.wake_at = None  # its loop moved: recompute when it wakes
        self._after_member(incarnation)

    def _restore(self, payload: tuple[MemberKey, str]) -> None:
        key, what = payload
        incarnation = self._by_key.get(key)
        if incarnation is None or self._live.get(key[0]) is not incarnation:
            return
        if what == "slow":
            incarnation.member.loop.set_processing(self.now, self.scenario.processing_ms)
            incarnation.wake_at = None
        else:
            incarnation.extra_delay_ms = 0
        self._after_member(incarnation)

    def _stop(self, incarnation: Incarnation) -> None:
        """The process is gone: its last requests (a commit, a LeaveGroup) still go out, and
        answers to it are dropped from now on."""
        self._after_member(incarnation)
        del self._live[incarnation.key[0]]
        self._retire_commits(incarnation)
        del self._by_key[incarnation.key]

    def _retire_commits(self, incarnation: Incarnation) -> None:
        ledger = incarnation.member.commits
        self._commits[0] += ledger.sent
        self._commits[1] += ledger.refused
        for name, count in ledger.errors.items():
            self._refusals[name] = self._refusals.get(name, 0) + count
        ledger.sent = ledger.refused = 0
        ledger.errors.clear()

    # -- the coordinator -----------------------------------------------------------------------

    def _to_coordinator(self, request: MemberRequest) -> None:
        coordinator = self._coordinator
        now = self.now
        match request:
            case JoinGroupRequest():
                effects = coordinator.join_group(request, now)
            case SyncGroupRequest():
                effects = coordinator.sync_group(request, now)
            case HeartbeatRequest():
                effects = coordinator.heartbeat(request, now)
            case LeaveGroupRequest():
                effects = coordinator.leave_group(request, now)
            case OffsetCommitRequest():
                effects = coordinator.offset_commit(request, now)
            case ConsumerGroupHeartbeatRequest():
                effects = coordinator.consumer_group_heartbeat(request, now)
            case _:
                assert_never(request)
        self._apply(effects)

    def _apply(self, effects: Effects) -> None:
        now = self.now
        for reply in effects.replies:
            key: MemberKey = reply.request_id[0]  # type: ignore[index]
            incarnation = self._by_key.get(key)
            if incarnation is None:
                continue
            delay = self.scenario.network_delay_ms + incarnation.extra_delay_ms
            self._push(now + delay, Kind.REPLY, (key, reply.response))
        for started in effects.rebalances:
            if now >= self.scenario.measure_from_ms:
                self._rebalances += 1
            self._generations.append((now, started.old_generation + 1))
        for write in effects.writes:
            self._push(now + self.scenario.write_delay_ms, Kind.WRITE_DONE, write.write_id)
        self._schedule_coordinator()

    def _schedule_coordinator(self) -> None:
        deadline = self._coordinator.next_deadline()
        if deadline is None:
            return
        if self._coordinator_wake is None or deadline < self._coordinator_wake:
            self._coordinator_wake = deadline
            self._push(max(deadline, self.now), Kind.COORDINATOR_TIMER, None)

    def _note_reply(self, response: object) -> None:
        """The consumer protocol has no rebalance to announce: each new assignment epoch a
        member is given counts as one."""
        if isinstance(response, ConsumerGroupHeartbeatResponse) \
                and response.member_epoch > self._max_epoch:
            self._max_epoch = response.member_epoch
            self._generations.append((self.now, response.member_epoch))
            if self.now >= self.scenario.measure_from_ms:
                self._rebalances += 1


def simulate(scenario: Scenario, variant: Variant, keep_segments: bool = False) -> Outcome:
    return Simulation(scenario, variant, keep_segments).run()
