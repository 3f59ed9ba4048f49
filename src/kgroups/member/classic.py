"""A classic-protocol consumer (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as a state machine
with time passed in, following the Java consumer's ConsumerCoordinator.

- Eager: every owned partition is committed and revoked before JoinGroup goes out, and the
  SyncGroup answer is adopted whole.
- Cooperative (KIP-429): JoinGroup reports what the member owns; from the SyncGroup answer the
  member gives up only what it lost and, if it gave anything up, joins again at once so the
  follow-up rebalance can hand those partitions to their new owners.
- Static membership (`group.instance.id`): a closing static member sends no LeaveGroup (the
  coordinator keeps its place until the session times out), and a poll timeout only stops its
  heartbeats.
- A member whose poll loop stops for longer than `max.poll.interval.ms` leaves (dynamic) and
  counts its partitions as lost from that moment: its commits would be refused from then on.

Group work that the Java client does inside `poll()` (sending JoinGroup, auto-commits) waits
for the next poll of the application's loop (`PollLoop`); heartbeats come from the heartbeat
thread, on time whatever the application does.
"""

from __future__ import annotations

from collections.abc import Hashable
from enum import Enum

from kgroups.assignors import ClusterMetadata, create_assignor
from kgroups.assignors.leader import JoinedMember, lead_assignment
from kgroups.coordinator import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroups.errors import ErrorCode
from kgroups.member.outbox import CommitLedger, MemberRequest, Outbox
from kgroups.member.poll_loop import PollLoop
from kgroups.member.settings import ClientFlavour, MemberSettings, Protocol, TopicPartition
from kgroups.records.consumer_protocol import decode_assignment, encode_subscription
from kgroups.records.schema import ConsumerSubscription, TopicPartitions

NO_GENERATION = -1
# Errors after which the member no longer belongs to the generation it thinks it is in.
_RESET_ERRORS = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
# Errors the Java consumer gives up on: it throws to the application and stops.
_FATAL_ERRORS = frozenset({ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_MAX_SIZE_REACHED,
                           ErrorCode.INCONSISTENT_GROUP_PROTOCOL})


class ClassicState(Enum):
    UNJOINED = "unjoined"  # not in a generation; joins at its next poll when it must
    JOINING = "joining"  # JoinGroup in flight
    SYNCING = "syncing"  # SyncGroup in flight
    STABLE = "stable"
    CLOSED = "closed"  # left cleanly, crashed or failed: sends nothing more


ClassicResponse = JoinGroupResponse | SyncGroupResponse | HeartbeatResponse \
    | LeaveGroupResponse | OffsetCommitResponse


class ClassicMember:
    def __init__(self, key: Hashable, settings: MemberSettings, cluster: ClusterMetadata,
                 now: int) -> None:
        if settings.protocol is Protocol.CONSUMER:
            raise ValueError("ClassicMember speaks the classic protocol; use ConsumerMember")
        self.settings = settings
        self.cluster = cluster
        self.outbox = Outbox(key)
        self.commits = CommitLedger(last_at=now)
        self.loop = PollLoop.of(settings, now)
        self._assignor = create_assignor(settings.assignor)
        self.state = ClassicState.UNJOINED
        self.member_id = ""
        self.generation = NO_GENERATION
        self.owned: frozenset[TopicPartition] = frozenset()
        self.failure: str | None = None  # why a fatal error stopped the member
        self._rejoin = True
        self._heartbeat_in_flight = False
        self._next_heartbeat = now
        # Java's heartbeat thread also beats while SyncGroup is out and starts its interval
        # afresh at every JoinGroup answer; librdkafka's main thread beats only in a steady
        # group, on the rhythm of its first heartbeat: a rebalance does not move it, and a beat
        # overdue when the rebalance ends goes out at once (rdkafka_cgrp.c, rkcg_heartbeat_intvl).
        self._heartbeat_states = (ClassicState.SYNCING, ClassicState.STABLE) \
            if settings.client is ClientFlavour.JAVA else (ClassicState.STABLE,)
        self._timed_out_poll: int | None = None  # the poll whose interval already ran out

    # -- what the driver calls ---------------------------------------------------------------

    def next_deadline(self, now: int) -> int | None:
        """The next moment `advance` has something to do (None: only an answer can wake it)."""
        if self.state is ClassicState.CLOSED:
            return None
        times = []
        if self.state in self._heartbeat_states and not self._heartbeat_in_flight:
            times.append(self._next_heartbeat)
        if self.state is not ClassicState.UNJOINED or self.member_id:
            deadline = self.loop.poll_deadline(now)
            if deadline is not None and deadline != self._timed_out_poll_deadline():
                times.append(deadline)
        if self._rejoin and self.state in (ClassicState.UNJOINED, ClassicState.STABLE):
            times.append(self.loop.group_work_at(now))
        elif self.state is ClassicState.STABLE and self.owned and self.settings.commit_interval_ms:
            times.append(self.loop.group_work_at(
                max(now, self.commits.last_at + self.settings.commit_interval_ms)))
        return max(now, min(times)) if times else None

    def advance(self, now: int) -> None:
        """Do whatever is due at `now`: a poll timeout, a heartbeat, the poll's group work."""
        if self.state is ClassicState.CLOSED:
            return
        self._check_poll_timeout(now)
        if self.state in self._heartbeat_states \
                and not self._heartbeat_in_flight and now >= self._next_heartbeat:
            self._heartbeat_in_flight = True
            self._next_heartbeat = now + self.settings.heartbeat_interval_ms
            self.outbox.pending.append(HeartbeatRequest(
                self.outbox.next_id(), self.settings.group_id, self.generation, self.member_id,
                self.settings.instance_id))
        if now < self.loop.group_work_at(now):
            return
        if self._rejoin and self.state in (ClassicState.UNJOINED, ClassicState.STABLE):
            self._join(now)
        elif self.state is ClassicState.STABLE and self.owned and self.settings.commit_interval_ms \
                and now >= self.commits.last_at + self.settings.commit_interval_ms:
            self._commit(now)

    def on_response(self, response: ClassicResponse, now: int) -> None:
        if self.state is ClassicState.CLOSED:
            return
        match response:
            case JoinGroupResponse():
                self._on_join(response, now)
            case SyncGroupResponse():
                self._on_sync(response, now)
            case HeartbeatResponse():
                self._on_heartbeat(response)
            case OffsetCommitResponse():
                error = self.commits.answered(response)
                if error is ErrorCode.REBALANCE_IN_PROGRESS:
                    self._rejoin = True
                elif error in _RESET_ERRORS and self.state is ClassicState.STABLE:
                    self._reset(error)
            case LeaveGroupResponse():
                pass

    def close(self, now: int) -> None:
        """A clean shutdown: commit, revoke, and (a dynamic member) LeaveGroup."""
        if self.state is ClassicState.CLOSED:
            return
        self._commit(now)
        self.owned = frozenset()
        if self.settings.instance_id is None and self.member_id:
            self.outbox.pending.append(LeaveGroupRequest(
                self.outbox.next_id(), self.settings.group_id,
                (MemberIdentity(self.member_id, None, "the consumer is being closed"),)))
        self.state = ClassicState.CLOSED

    def crash(self) -> None:
        """The process dies: nothing more is sent, and it consumes nothing."""
        self.outbox.pending.clear()
        self.owned = frozenset()
        self.state = ClassicState.CLOSED

    def take_requests(self) -> list[MemberRequest]:
        return self.outbox.take()

    # -- the steps ---------------------------------------------------------------------------

    def _timed_out_poll_deadline(self) -> int | None:
        if self._timed_out_poll is None:
            return None
        return self._timed_out_poll + self.settings.max_poll_interval_ms

    def _check_poll_timeout(self, now: int) -> None:
        deadline = self.loop.poll_deadline(now)
        if deadline is None or now < deadline or deadline == self._timed_out_poll_deadline():
            return
        if self.state is ClassicState.UNJOINED and not self.member_id:
            return
        self._timed_out_poll = self.loop.last_poll(now)
        if self.settings.instance_id is None and self.member_id:
            self.outbox.pending.append(LeaveGroupRequest(
                self.outbox.next_id(), self.settings.group_id,
                (MemberIdentity(self.member_id, None, "consumer poll timeout has expired"),)))
        self.owned = frozenset()
        self.generation = NO_GENERATION
        if self.settings.instance_id is None:
            self.member_id = ""
        self.state = ClassicState.UNJOINED
        self._rejoin = True

    def _subscription(self) -> bytes:
        owned: dict[str, list[int]] = {}
        if self.settings.protocol is Protocol.COOPERATIVE:
            for topic, partition in sorted(self.owned):
                owned.setdefault(topic, []).append(partition)
        return encode_subscription(ConsumerSubscription(
            tuple(sorted(self.settings.topics)),
            self._assignor.subscription_user_data(frozenset(self.settings.topics)),
            tuple(TopicPartitions(t, tuple(p)) for t, p in owned.items()),
            self.generation))

    def _join(self, now: int) -> None:
        """Java's onJoinPrepare (commit; eager: revoke everything), then JoinGroup."""
        self._commit(now)
        if self.settings.protocol is Protocol.EAGER:
            self.owned = frozenset()
        self._rejoin = False
        self.state = ClassicState.JOINING
        self._send_join()

    def _send_join(self) -> None:
        self.outbox.pending.append(JoinGroupRequest(
            self.outbox.next_id(), self.settings.group_id, self.member_id, "consumer",
            ((self.settings.assignor, self._subscription()),),
            self.settings.session_timeout_ms, self.settings.max_poll_interval_ms,
            self.settings.instance_id, self.settings.client_id))

    def _on_join(self, response: JoinGroupResponse, now: int) -> None:
        if self.state is not ClassicState.JOINING:
            return
        error = response.error
        if error is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self._send_join()
            return
        if error is not ErrorCode.NONE:
            self._on_group_error(error)
            return
        self.member_id = response.member_id
        self.generation = response.generation_id
        assignments: tuple[tuple[str, bytes], ...] = ()
        if response.leader == self.member_id and not response.skip_assignment:
            members = [JoinedMember(m.member_id, m.group_instance_id, m.metadata)
                       for m in response.members]
            assignments = tuple(lead_assignment(
                response.protocol_name or self.settings.assignor, self.cluster, members).items())
        self.state = ClassicState.SYNCING
        if self.settings.client is ClientFlavour.JAVA:
            self._next_heartbeat = now + self.settings.heartbeat_interval_ms
        self.outbox.pending.append(SyncGroupRequest(
            self.outbox.next_id(), self.settings.group_id, self.generation, self.member_id,
            assignments, self.settings.instance_id, "consumer", response.protocol_name))

    def _on_sync(self, response: SyncGroupResponse, now: int) -> None:
        if self.state is not ClassicState.SYNCING:
            return
        if response.error is not ErrorCode.NONE:
            self._on_group_error(response.error)
            return
        assigned = frozenset(
            (tp.topic, p) for tp in decode_assignment(response.assignment).assigned_partitions
            for p in tp.partitions)
        revoked = self.owned - assigned
        self.owned = assigned  # eager owned nothing; cooperative drops `revoked`, adds the rest
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(assigned):
            by_topic.setdefault(topic, []).append(partition)
        self._assignor.on_assignment(by_topic, self.generation)
        self.state = ClassicState.STABLE
        self.commits.last_at = now
        if revoked and self.settings.protocol is Protocol.COOPERATIVE:
            self._rejoin = True

    def _on_heartbeat(self, response: HeartbeatResponse) -> None:
        self._heartbeat_in_flight = False
        error = response.error
        if error is ErrorCode.NONE or self.state is not ClassicState.STABLE:
            return
        if error is ErrorCode.REBALANCE_IN_PROGRESS:
            self._rejoin = True
        else:
            self._on_group_error(error)

    def _on_group_error(self, error: ErrorCode) -> None:
        if error in _FATAL_ERRORS:
            self.failure = error.name
            self.crash()
        elif error in _RESET_ERRORS:
            self._reset(error)
        else:  # REBALANCE_IN_PROGRESS, coordinator moving or loading: join again
            self.state = ClassicState.UNJOINED
            self._rejoin = True

    def _reset(self, error: ErrorCode) -> None:
        """Java's resetGenerationOnResponseError: the partitions are lost, not revoked."""
        self.owned = frozenset()
        self.generation = NO_GENERATION
        if error is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.state = ClassicState.UNJOINED
        self._rejoin = True

    def _commit(self, now: int) -> None:
        if self.owned and self.generation != NO_GENERATION:
            self.commits.commit(self.outbox, self.settings.group_id, self.owned, now,
                                self.member_id, self.generation, self.settings.instance_id)
