"""A KIP-848 consumer (`group.protocol=consumer`) as a state machine with time passed in,
following the Java consumer's ConsumerMembershipManager and its heartbeat request manager.

The member heartbeats on the interval the coordinator gives it and adopts the assignment the
coordinator sends. The coordinator only ever sends partitions nobody else still holds, so
reconciling is: revoke what is no longer in the assignment (after committing it), then take
what is new -- revoke before assign, within one reconciliation -- and acknowledge at once with a
heartbeat listing what the member now owns. Reconciliation runs the application's callbacks, so
the Java client does it in `poll()`: it waits for the next poll of the application's loop.

A fenced member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) loses its partitions and joins again
with epoch 0 under the same member id (the client picks its id, as Kafka 4 clients do). A
member whose poll loop stops past `max.poll.interval.ms` leaves (epoch -1, or -2 for a static
member, which keeps its place until the session times out) and loses its partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping
from enum import Enum

from kgroups.coordinator import OffsetCommitResponse
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.errors import ErrorCode
from kgroups.member.outbox import CommitLedger, MemberRequest, Outbox
from kgroups.member.poll_loop import PollLoop
from kgroups.member.settings import MemberSettings, Protocol, TopicPartition

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
_FENCED_ERRORS = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
# Errors the Java consumer treats as fatal (it throws them to the application).
_FATAL_ERRORS = frozenset({ErrorCode.UNRELEASED_INSTANCE_ID, ErrorCode.FENCED_INSTANCE_ID,
                           ErrorCode.GROUP_MAX_SIZE_REACHED, ErrorCode.INVALID_REQUEST,
                           ErrorCode.UNSUPPORTED_ASSIGNOR})


class ConsumerState(Enum):
    UNJOINED = "unjoined"  # joins (epoch 0) at its next poll
    JOINING = "joining"  # the epoch-0 heartbeat is in flight
    MEMBER = "member"  # has an epoch; heartbeats and reconciles
    CLOSED = "closed"


class ConsumerMember:
    def __init__(self, key: Hashable, settings: MemberSettings, member_id: str,
                 topic_ids: Mapping[str, uuid.UUID], now: int) -> None:
        if settings.protocol is not Protocol.CONSUMER:
            raise ValueError("ConsumerMember speaks the consumer protocol; use ClassicMember")
        self.settings = settings
        self.member_id = member_id
        self.outbox = Outbox(key)
        self.commits = CommitLedger(last_at=now)
        self.loop = PollLoop.of(settings, now)
        self._topic_ids = dict(topic_ids)
        self._topic_names = {topic_id: name for name, topic_id in topic_ids.items()}
        self.state = ConsumerState.UNJOINED
        self.epoch = 0
        self.owned: frozenset[TopicPartition] = frozenset()
        self.failure: str | None = None
        self._target: frozenset[TopicPartition] | None = None  # not yet reconciled
        self._acknowledged: frozenset[TopicPartition] | None = None  # owned as last sent
        self._heartbeat_in_flight = False
        self._interval = settings.heartbeat_interval_ms
        self._next_heartbeat = now
        self._timed_out_poll: int | None = None

    # -- what the driver calls ---------------------------------------------------------------

    def next_deadline(self, now: int) -> int | None:
        if self.state is ConsumerState.CLOSED:
            return None
        times = []
        if self.state is ConsumerState.MEMBER and not self._heartbeat_in_flight:
            times.append(self._heartbeat_due())
        if self.state is not ConsumerState.UNJOINED:
            deadline = self.loop.poll_deadline(now)
            if deadline is not None:
                times.append(deadline)
        if self.state is ConsumerState.UNJOINED or self._target is not None:
            times.append(self.loop.group_work_at(now))
        elif self.state is ConsumerState.MEMBER and self.owned \
                and self.settings.commit_interval_ms:
            times.append(self.loop.group_work_at(
                max(now, self.commits.last_at + self.settings.commit_interval_ms)))
        return max(now, min(times)) if times else None

    def advance(self, now: int) -> None:
        if self.state is ConsumerState.CLOSED:
            return
        self._check_poll_timeout(now)
        at_poll = now >= self.loop.group_work_at(now)
        if at_poll and self.state is ConsumerState.UNJOINED:
            self._join(now)
            return
        if at_poll and self._target is not None and self.state is ConsumerState.MEMBER:
            self._reconcile(now)
        elif at_poll and self.state is ConsumerState.MEMBER and self.owned \
                and self.settings.commit_interval_ms \
                and now >= self.commits.last_at + self.settings.commit_interval_ms:
            self._commit(now)
        if self.state is ConsumerState.MEMBER and not self._heartbeat_in_flight \
                and now >= self._heartbeat_due():
            self._heartbeat(now, self.epoch)

    def on_response(self, response: ConsumerGroupHeartbeatResponse | OffsetCommitResponse,
                    now: int) -> None:
        if self.state is ConsumerState.CLOSED:
            return
        match response:
            case ConsumerGroupHeartbeatResponse():
                self._on_heartbeat(response, now)
            case OffsetCommitResponse():
                self.commits.answered(response)

    def close(self, now: int) -> None:
        """Commit, revoke everything, and leave (a static member keeps its place)."""
        if self.state is ConsumerState.CLOSED:
            return
        self._leave(now, commit=True)
        self.state = ConsumerState.CLOSED

    def crash(self) -> None:
        self.outbox.pending.clear()
        self.owned = frozenset()
        self.state = ConsumerState.CLOSED

    def take_requests(self) -> list[MemberRequest]:
        return self.outbox.take()

    # -- the steps ---------------------------------------------------------------------------

    def _heartbeat_due(self) -> int:
        """A changed assignment is acknowledged at once; otherwise on the interval."""
        return 0 if self.owned != self._acknowledged else self._next_heartbeat

    def _check_poll_timeout(self, now: int) -> None:
        deadline = self.loop.poll_deadline(now)
        if self.state is ConsumerState.UNJOINED or deadline is None or now < deadline:
            return
        self._leave(now, commit=False)
        self.state = ConsumerState.UNJOINED

    def _leave(self, now: int, commit: bool) -> None:
        if commit:
            self._commit(now)
        self.owned = frozenset()
        self._target = None
        if self.state is not ConsumerState.UNJOINED:
            static = self.settings.instance_id is not None
            self._heartbeat(now, STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH)
        self.epoch = 0

    def _join(self, now: int) -> None:
        self.state = ConsumerState.JOINING
        self.epoch = 0
        self._acknowledged = None
        self._heartbeat(now, 0)

    def _heartbeat(self, now: int, epoch: int) -> None:
        joining = epoch == 0
        owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None = None
        if joining:
            owned = ()
        elif epoch > 0 and self.owned != self._acknowledged:
            owned = self._partition_list(self.owned)
            self._acknowledged = self.owned
        self._heartbeat_in_flight = epoch >= 0
        self._next_heartbeat = now + self._interval
        self.outbox.pending.append(ConsumerGroupHeartbeatRequest(
            self.outbox.next_id(), self.settings.group_id, self.member_id, epoch,
            instance_id=self.settings.instance_id,
            rebalance_timeout_ms=self.settings.max_poll_interval_ms if joining else -1,
            subscribed_topic_names=tuple(sorted(self.settings.topics)) if joining else None,
            server_assignor=self.settings.assignor if joining else None,
            topic_partitions=owned))

    def _partition_list(
        self, partitions: frozenset[TopicPartition],
    ) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        return tuple((self._topic_ids[t], tuple(p)) for t, p in by_topic.items())

    def _on_heartbeat(self, response: ConsumerGroupHeartbeatResponse, now: int) -> None:
        self._heartbeat_in_flight = False
        if self.state not in (ConsumerState.JOINING, ConsumerState.MEMBER):
            return
        error = response.error
        if error in _FENCED_ERRORS:
            self.owned = frozenset()  # lost, not revoked
            self._target = None
            self.state = ConsumerState.UNJOINED
            return
        if error in _FATAL_ERRORS:
            self.failure = error.name
            self.crash()
            return
        if error is not ErrorCode.NONE:  # the coordinator is moving or busy: try again later
            if self.state is ConsumerState.JOINING:
                self.state = ConsumerState.UNJOINED
            return
        self.state = ConsumerState.MEMBER
        self.epoch = response.member_epoch
        if response.heartbeat_interval_ms > 0:
            self._interval = response.heartbeat_interval_ms
            self._next_heartbeat = now + self._interval
        if response.assignment is not None:
            target = frozenset(
                (self._topic_names[topic_id], p) for topic_id, parts in response.assignment
                for p in parts if topic_id in self._topic_names)
            self._target = None if target == self.owned else target

    def _reconcile(self, now: int) -> None:
        """Revoke (after committing) what left the assignment, then take what is new, and say
        so at once."""
        target = self._target
        assert target is not None
        self._target = None
        if self.owned - target:
            self._commit(now)
        self.owned = target

    def _commit(self, now: int) -> None:
        if self.owned and self.epoch > 0:
            self.commits.commit(self.outbox, self.settings.group_id, self.owned, now,
                                self.member_id, self.epoch, self.settings.instance_id)
