"""Shared machinery of the coordinator: owned groups, timers, pending writes and effects.

The handlers (membership, offsets, admin) are mixins over this base so each stays a readable
size; they all run inside `_run`, which collects what they emit into one `Effects` and then fires
every timer already due at the caller's `now`.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from kgroups.coordinator.api import RequestId, Response
from kgroups.coordinator.config import GroupCoordinatorConfig
from kgroups.coordinator.effects import (
    Effects,
    GroupEvent,
    MemberRemoved,
    RemovalReason,
    Reply,
    Write,
)
from kgroups.coordinator.group import ClassicGroup, GroupState, Member
from kgroups.coordinator.placement import partition_for
from kgroups.coordinator.timers import TimerQueue
from kgroups.errors import ErrorCode
from kgroups.records.schema import OffsetsRecord

WriteCallback = Callable[[], None]
FailureCallback = Callable[[ErrorCode], None]

# Storage errors a client cannot act on are reported as the group errors Kafka reports instead.
_CLIENT_ERROR_FOR_WRITE_ERROR = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def client_error_for_write(error: ErrorCode) -> ErrorCode:
    return _CLIENT_ERROR_FOR_WRITE_ERROR.get(error, error)


def ignore_success() -> None:
    """For writes whose success needs no follow-up."""


def ignore_failure(error: ErrorCode) -> None:
    """For writes whose loss Kafka tolerates: the previous record stays authoritative."""


@dataclass(slots=True)
class _PendingWrite:
    offsets_partition: int
    on_success: WriteCallback
    on_failure: FailureCallback


class CoordinatorCore(ABC):
    def __init__(
        self,
        config: GroupCoordinatorConfig | None = None,
        new_uuid: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.config = config or GroupCoordinatorConfig()
        self._new_uuid = new_uuid
        self._groups: dict[str, ClassicGroup] = {}
        self._owned: set[int] = set()
        self._loading: set[int] = set()
        self._timers = TimerQueue()
        self._pending_writes: dict[int, _PendingWrite] = {}
        self._next_write_id = 0
        self._partition_cache: dict[str, int] = {}
        self._fx = Effects()
        self._now = 0

    # -- the frame every entry point runs in -------------------------------------------------

    def _run(self, now: int, action: Callable[[], None]) -> Effects:
        self._fx = Effects()
        self._now = now
        action()
        self._fire_due_timers()
        return self._fx

    def _fire_due_timers(self) -> None:
        while (key := self._timers.pop_due(self._now)) is not None:
            self._on_timer(key)

    @abstractmethod
    def _on_timer(self, key: Hashable) -> None:
        """Act on a timer that came due (dispatch lives with the handlers that arm them)."""

    def _reply(self, request_id: RequestId, response: Response) -> None:
        self._fx.replies.append(Reply(request_id, response))

    def _write(
        self,
        offsets_partition: int,
        records: list[OffsetsRecord],
        on_success: WriteCallback,
        on_failure: FailureCallback,
    ) -> None:
        self._next_write_id += 1
        write_id = self._next_write_id
        self._pending_writes[write_id] = _PendingWrite(offsets_partition, on_success, on_failure)
        self._fx.writes.append(Write(write_id, offsets_partition, records))

    def _complete_write(self, write_id: int, error: ErrorCode | None) -> None:
        pending = self._pending_writes.pop(write_id, None)
        if pending is None:
            return
        if error is None or error == ErrorCode.NONE:
            pending.on_success()
        else:
            pending.on_failure(client_error_for_write(error))

    def _fail_pending_writes(self, offsets_partition: int, error: ErrorCode) -> None:
        for write_id in sorted(self._pending_writes):
            if self._pending_writes[write_id].offsets_partition == offsets_partition:
                self._pending_writes.pop(write_id).on_failure(error)

    # -- groups and placement -----------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        partition = self._partition_cache.get(group_id)
        if partition is None:
            partition = partition_for(group_id, self.config.offsets_topic_num_partitions)
            self._partition_cache[group_id] = partition
        return partition

    def _ownership_error(self, group_id: str) -> ErrorCode | None:
        partition = self.partition_of(group_id)
        if partition in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._owned:
            return ErrorCode.NOT_COORDINATOR
        return None

    def _membership_status_error(self, group_id: str) -> ErrorCode | None:
        """Join/Sync/Heartbeat/Leave need a non-empty group id; offsets APIs accept ""."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        return self._ownership_error(group_id)

    def _create_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, self.partition_of(group_id), GroupState.EMPTY, self._now)
        self._groups[group_id] = group
        self._event(group, None)
        return group

    def _transition(self, group: ClassicGroup, new_state: GroupState) -> None:
        old_state = group.state
        group.transition_to(new_state, self._now)
        self._event(group, old_state)

    def _event(self, group: ClassicGroup, old_state: GroupState | None) -> None:
        self._fx.events.append(
            GroupEvent(
                group.group_id,
                None if old_state is None else old_state.value,
                group.state.value,
                group.generation_id,
                len(group.members),
            )
        )

    def _member_removed(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, reason: RemovalReason
    ) -> None:
        self._fx.removals.append(MemberRemoved(group.group_id, member_id, instance_id, reason))

    # -- member liveness ----------------------------------------------------------------------

    def _schedule_session(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        key = ("session", group.group_id, member.member_id)
        self._timers.schedule(key, self._now + timeout_ms)

    def _refresh_session(self, group: ClassicGroup, member: Member) -> None:
        self._schedule_session(group, member, member.session_timeout_ms)

    def _cancel_session(self, group: ClassicGroup, member_id: str) -> None:
        self._timers.cancel(("session", group.group_id, member_id))
