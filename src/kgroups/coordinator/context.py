"""What every group-type module of the shard shares: the groups, the timers, the clock, the
topics, and the journal of the request in progress (its replies, events and writes).

The group-type modules (classic groups, consumer groups, offsets, migration, admin) hold one
`ShardContext` each; the shard (`coordinator.GroupCoordinator`) sets `now` and a fresh `fx` before
each request, dispatches it, and returns `fx`.

The write path: a handler validates, builds the records it wants written and hands them over with
the continuations that release its responses. Records change groups only through
`persistence.apply_record`, the function replay uses, either once the write is durable
(`write_when_durable`: what Kafka lets no reader see before then, such as offsets and a new
assignment) or at once (`write_at_once` / `record` + `write_applied`: what Kafka shows while the
write is in flight, such as a static member's new id, a deleted group, a consumer group's epochs).
A failed at-once classic write is undone by a `GroupSnapshot` of what its records changed.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kgroups.coordinator.api import RequestId
from kgroups.coordinator.config import GroupCoordinatorConfig
from kgroups.coordinator.consumer_api import AnyResponse
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.effects import (
    Effects,
    GroupEvent,
    MemberRemoved,
    RebalanceCause,
    RebalanceStarted,
    RemovalReason,
    Reply,
    Write,
)
from kgroups.coordinator.group import ClassicGroup, GroupState, Member
from kgroups.coordinator.persistence import apply_record, copy_member
from kgroups.coordinator.placement import partition_for
from kgroups.coordinator.rebalance_cause import RebalanceNote
from kgroups.coordinator.timer_keys import (
    consumer_join_timer,
    consumer_rebalance_timer,
    consumer_session_timer,
    consumer_sync_timer,
    session_timer,
)
from kgroups.coordinator.timers import TimerQueue
from kgroups.errors import ErrorCode
from kgroups.records.schema import GroupMetadataKey, OffsetCommitKey, OffsetsRecord

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


def always() -> bool:
    """For at-once writes whose outcome always concerns their requester."""
    return True


# The group fields a record can change (a GroupMetadata record, or a tombstone ending the group).
_GROUP_FIELDS = (
    "state",
    "previous_state",
    "state_timestamp",
    "protocol_type",
    "protocol_name",
    "generation_id",
    "leader_id",
)
# The member fields a GroupMetadata record can change (besides renaming a static member).
_MEMBER_FIELDS = (
    "client_id",
    "client_host",
    "protocols",
    "assignment",
    "rebalance_timeout_ms",
    "session_timeout_ms",
)

_ALL_MEMBER_FIELDS = tuple(name for name in Member.__dataclass_fields__ if name != "member_id")


@dataclass(slots=True)
class GroupSnapshot:
    """What an at-once write's records are about to change in one group, taken just before they
    are applied (Kafka's timeline snapshot, limited to what the records touch): the group fields,
    copies of the members the records name and the offsets they name. `restore` puts back only
    what still holds the value the records gave it, so changes made since by other requests
    (a member that left or rejoined, a rebalance that started) are kept; a member the records
    renamed (a static replacement) is put back whole, since its new identity exists only
    through them."""

    group: ClassicGroup
    fields_before: tuple[object, ...]
    members_before: list[Member]
    offsets_before: dict[tuple[str, int], object]
    fields_after: tuple[object, ...] = ()
    members_after: list[Member] = field(default_factory=list)
    offsets_after: dict[tuple[str, int], object] = field(default_factory=dict)

    @classmethod
    def take(cls, group: ClassicGroup, records: list[OffsetsRecord]) -> GroupSnapshot:
        members: list[Member] = []
        offsets: dict[tuple[str, int], object] = {}
        for record in records:
            key = record.key
            if type(key) is OffsetCommitKey:
                offsets[(key.topic, key.partition)] = group.offsets.get((key.topic, key.partition))
            elif type(key) is GroupMetadataKey and record.value is not None:
                for stored in record.value.members:  # type: ignore[union-attr]
                    holder = _holder(group, stored.member_id, stored.group_instance_id)
                    if holder is not None:
                        members.append(copy_member(group.members[holder]))
        return cls(group, _fields(group), members, offsets)

    def applied(self) -> None:
        """Note what the records left, so a restore can tell their values from later ones."""
        group = self.group
        self.fields_after = _fields(group)
        self.members_after = [
            copy_member(group.members[_holder(group, m.member_id, m.group_instance_id) or ""])
            for m in self.members_before
        ]
        self.offsets_after = {key: group.offsets.get(key) for key in self.offsets_before}


    def rebase(self, earlier: GroupSnapshot) -> None:
        """`earlier` belongs to a write that failed before this one: the values it gave were
        never durable, so where this snapshot took them as "before", take its "before"."""
        self.fields_before = tuple(
            earlier_before if before == earlier_after else before
            for before, earlier_before, earlier_after in zip(
                self.fields_before, earlier.fields_before, earlier.fields_after, strict=True
            )
        )
        for index, before in enumerate(self.members_before):
            for earlier_before, earlier_after in zip(
                earlier.members_before, earlier.members_after, strict=True
            ):
                if before.member_id != earlier_after.member_id:
                    continue
                if earlier_before.member_id != earlier_after.member_id:  # renamed: whole
                    self.members_before[index] = copy_member(earlier_before)
                    continue
                for name in _MEMBER_FIELDS:
                    if getattr(before, name) == getattr(earlier_after, name):
                        setattr(before, name, getattr(earlier_before, name))
        for key, offset_before in self.offsets_before.items():
            if key in earlier.offsets_before and offset_before == earlier.offsets_after[key]:
                self.offsets_before[key] = earlier.offsets_before[key]


def _fields(group: ClassicGroup) -> tuple[object, ...]:
    return tuple(getattr(group, name) for name in _GROUP_FIELDS)


def _holder(group: ClassicGroup, member_id: str, instance_id: str | None) -> str | None:
    """The member id now in the place of (`member_id`, `instance_id`): a static member's place
    is its instance id, whatever id holds it."""
    if instance_id is not None:
        return group.static_members.get(instance_id)
    return member_id if member_id in group.members else None


@dataclass(slots=True)
class _PendingWrite:
    offsets_partition: int
    records: list[OffsetsRecord]
    # When durable: where the records land (None: nowhere any more). At once: None.
    target: Callable[[], ClassicGroup | None] | None
    on_success: WriteCallback
    on_failure: FailureCallback
    # At once: whether the change still awaits this write (else its outcome concerns no one).
    still_pending: Callable[[], bool] = always
    snapshots: list[GroupSnapshot] = field(default_factory=list)


class ShardContext:
    """The shard's shared state and the current request's journal (module docstring)."""

    def __init__(self, config: GroupCoordinatorConfig, new_uuid: Callable[[], uuid.UUID]) -> None:
        self.config = config
        self.new_uuid = new_uuid
        self.groups: dict[str, ClassicGroup] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.timers = TimerQueue()
        self.pending_writes: dict[int, _PendingWrite] = {}
        # Offset keys of OffsetCommits in flight, per group id (the group may not exist yet):
        # expiry skips them and a deletion writes tombstones for them too.
        self.commits_in_flight: dict[str, Counter[tuple[str, int]]] = {}
        self.next_write_id = 0
        # Offsets dropped by retention since start (a counter the shell's metrics read).
        self.offsets_expired_total = 0
        self.partition_cache: dict[str, int] = {}
        self.fx = Effects()
        self.now = 0
        # The topics that exist (the broker's catalogue, through `GroupCoordinator.set_topics`).
        self.topics: Mapping[str, TopicInfo] = {}
        self.topic_names: Mapping[uuid.UUID, str] = {}
        # Kafka's metadata image version, as regex resolutions record it: bumped by every change
        # of the topics, never below the clock (so it still grows across a restart).
        self.topics_version = 0
        self.topics_created_version = 0  # the version that last brought a new topic (or id)

    def set_topics(self, topics: Mapping[str, TopicInfo], now: int | None = None) -> None:
        """The topics that exist now (`now`: the shell's clock; the last request's time when
        not given). Groups notice a change at their next heartbeat, as with Kafka: the
        subscribed topics' metadata hash moves and the group epoch is bumped, and regex
        subscriptions are resolved again when topics were created (the first call counts as
        such, as Kafka counts its first metadata image: after a restart, topics created
        meanwhile are found)."""
        if topics == self.topics and self.topics_version:
            return
        created = not self.topics_version or any(
            self.topics.get(name, info).topic_id != info.topic_id or name not in self.topics
            for name, info in topics.items())
        clock = self.now if now is None else now
        self.topics_version = max(clock, self.topics_version + 1)
        if created:
            self.topics_created_version = self.topics_version
        self.topics = dict(topics)
        self.topic_names = {info.topic_id: name for name, info in topics.items()}

    def reply(self, request_id: RequestId, response: AnyResponse) -> None:
        self.fx.replies.append(Reply(request_id, response))

    def write_when_durable(
        self,
        offsets_partition: int,
        records: list[OffsetsRecord],
        target: Callable[[], ClassicGroup | None],
        on_success: WriteCallback,
        on_failure: FailureCallback,
    ) -> None:
        """Write `records`; once durable, apply them to `target()` (if it still names a group),
        then call `on_success`. A failure changes no group: `on_failure` answers."""
        self._emit_write(_PendingWrite(offsets_partition, records, target, on_success, on_failure))

    def write_at_once(
        self,
        offsets_partition: int,
        records: list[OffsetsRecord],
        on_success: WriteCallback,
        on_failure: FailureCallback,
        *,
        revertible: bool,
        still_pending: Callable[[], bool] = always,
    ) -> None:
        """Apply `records` to their groups now and write them. A revertible write that fails,
        while `still_pending()`, restores the snapshots taken before applying (a static member's
        new id leaves as STATIC_REPLACEMENT_REVERTED), then `on_failure` answers. A write that
        is not revertible is one whose loss Kafka tolerates: the previous record stays
        authoritative in the log, memory keeps the change. Groups the records end stay as Dead
        placeholders while a revert may still bring them back."""
        by_group: dict[str, list[OffsetsRecord]] = {}
        for record in records:
            by_group.setdefault(record.key.group, []).append(record)  # type: ignore[union-attr]
        pending = _PendingWrite(
            offsets_partition, records, None, on_success, on_failure, still_pending
        )
        for group_id, group_records in by_group.items():
            group = self.groups[group_id]
            snapshot = GroupSnapshot.take(group, group_records) if revertible else None
            self.apply(group, group_records)
            if snapshot is not None:
                snapshot.applied()
                pending.snapshots.append(snapshot)
            elif group.state is GroupState.DEAD:
                del self.groups[group_id]
        self._emit_write(pending)

    def write_applied(
        self,
        offsets_partition: int,
        records: list[OffsetsRecord],
        on_success: WriteCallback,
        on_failure: FailureCallback,
    ) -> None:
        """Write `records` that the caller already applied one by one through `apply` (the
        consumer protocol's steps each read what the previous record changed). Like a write at
        once that is not revertible: a failure answers through `on_failure`, memory keeps the
        change (Kafka would revert it; kgroups does not yet for these records)."""
        self._emit_write(_PendingWrite(offsets_partition, records, None, on_success, on_failure))

    def _emit_write(self, pending: _PendingWrite) -> None:
        self.next_write_id += 1
        write_id = self.next_write_id
        self.pending_writes[write_id] = pending
        self.fx.writes.append(Write(write_id, pending.offsets_partition, pending.records))

    def apply(self, group: ClassicGroup, records: list[OffsetsRecord]) -> None:
        """The records change the group through the replay's apply; a state change is an event."""
        old_state = group.state
        for record in records:
            apply_record(group, record, self.now)
        if group.state is not old_state:
            self.event(group, old_state)

    def complete_write(self, write_id: int, error: ErrorCode | None) -> None:
        pending = self.pending_writes.pop(write_id, None)
        if pending is None:
            return
        if error is None or error == ErrorCode.NONE:
            self._write_succeeded(pending)
        else:
            self._rebase_later_snapshots(write_id, pending)
            self._write_failed(pending, client_error_for_write(error))

    def _write_succeeded(self, pending: _PendingWrite) -> None:
        if pending.target is not None:
            group = pending.target()
            if group is not None:
                self.apply(group, pending.records)
        for snapshot in pending.snapshots:
            group = snapshot.group
            if group.state is GroupState.DEAD and self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
        pending.on_success()

    def _rebase_later_snapshots(self, write_id: int, failed: _PendingWrite) -> None:
        """A later at-once write on the same group snapshotted what this one had applied; as
        this one failed, reverting the later one must go back to before this one."""
        for later_id, later in self.pending_writes.items():
            if later_id < write_id:
                continue
            for snapshot in later.snapshots:
                for earlier in failed.snapshots:
                    if earlier.group is snapshot.group:
                        snapshot.rebase(earlier)

    def _write_failed(self, pending: _PendingWrite, error: ErrorCode) -> None:
        if not pending.still_pending():
            return
        for snapshot in pending.snapshots:
            self._restore(snapshot)
        pending.on_failure(error)

    def _restore(self, snapshot: GroupSnapshot) -> None:
        """Put back what the write's records changed and nothing has changed since."""
        group = snapshot.group
        for before, after in zip(snapshot.members_before, snapshot.members_after, strict=True):
            current = _holder(group, before.member_id, before.group_instance_id)
            if current != after.member_id:
                continue  # it left, or was replaced again, since: nothing of this write remains
            if current != before.member_id and before.group_instance_id is not None:
                self.cancel_session(group, current)
                member = group.replace_static_member(
                    before.group_instance_id, current, before.member_id
                )
                self.member_removed(
                    group, current, before.group_instance_id,
                    RemovalReason.STATIC_REPLACEMENT_REVERTED,
                )
                # Whole: the new id's parked JoinGroup goes with it (its requester is answered by
                # the write's failure continuation), the old member's own state comes back.
                for name in _ALL_MEMBER_FIELDS:
                    group.set_member_field(member, name, getattr(before, name))
                self.refresh_session(group, member)
                continue
            member = group.members[current]
            for name in _MEMBER_FIELDS:
                if getattr(member, name) == getattr(after, name):
                    group.set_member_field(member, name, getattr(before, name))
        old_state = group.state
        for name, before_value, after_value in zip(
            _GROUP_FIELDS, snapshot.fields_before, snapshot.fields_after, strict=True
        ):
            if getattr(group, name) == after_value:
                setattr(group, name, before_value)
        if group.state is not old_state:
            self.event(group, old_state)
        for key, value in snapshot.offsets_before.items():
            if group.offsets.get(key) == snapshot.offsets_after[key]:
                if value is None:
                    group.offsets.pop(key, None)
                else:
                    group.offsets[key] = value  # type: ignore[assignment]

    def fail_pending_writes(self, offsets_partition: int, error: ErrorCode) -> None:
        for write_id in sorted(self.pending_writes):
            if self.pending_writes[write_id].offsets_partition == offsets_partition:
                pending = self.pending_writes.pop(write_id)
                self._rebase_later_snapshots(write_id, pending)
                self._write_failed(pending, error)

    # -- groups and placement -----------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        partition = self.partition_cache.get(group_id)
        if partition is None:
            partition = partition_for(group_id, self.config.offsets_topic_num_partitions)
            self.partition_cache[group_id] = partition
        return partition

    def ownership_error(self, group_id: str) -> ErrorCode | None:
        partition = self.partition_of(group_id)
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return None

    def membership_status_error(self, group_id: str) -> ErrorCode | None:
        """Join/Sync/Heartbeat/Leave need a non-empty group id; offsets APIs accept ""."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        return self.ownership_error(group_id)

    def create_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, self.partition_of(group_id), GroupState.EMPTY, self.now)
        self.groups[group_id] = group
        self.event(group, None)
        return group

    def transition(self, group: ClassicGroup, new_state: GroupState) -> None:
        old_state = group.state
        group.transition_to(new_state, self.now)
        self.event(group, old_state)

    def event(self, group: ClassicGroup, old_state: GroupState | None) -> None:
        self.fx.events.append(
            GroupEvent(
                group.group_id,
                None if old_state is None else old_state.value,
                group.state.value,
                group.generation_id,
                len(group.members),
            )
        )

    def note_rebalance(self, group: ClassicGroup, cause: RebalanceCause, detail: str) -> None:
        """Called as a rebalance starts (before the state changes): the group remembers why,
        and the shell gets it to log and count."""
        group.last_rebalance = RebalanceNote(cause, detail, self.now, group.generation_id)
        self.fx.rebalances.append(
            RebalanceStarted(group.group_id, group.state.value, group.generation_id, cause, detail)
        )

    def member_removed(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, reason: RemovalReason
    ) -> None:
        self.fx.removals.append(MemberRemoved(group.group_id, member_id, instance_id, reason))

    # -- member liveness ----------------------------------------------------------------------

    def schedule_session(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        key = session_timer(group.group_id, member.member_id)
        self.timers.schedule(key, self.now + timeout_ms)

    def refresh_session(self, group: ClassicGroup, member: Member) -> None:
        self.schedule_session(group, member, member.session_timeout_ms)

    def cancel_session(self, group: ClassicGroup, member_id: str) -> None:
        self.timers.cancel(session_timer(group.group_id, member_id))

    def cancel_consumer_member_timers(self, group_id: str, member_id: str) -> None:
        """Every timer of a consumer group's member (classic-protocol members' included)."""
        for key in (consumer_session_timer(group_id, member_id),
                    consumer_rebalance_timer(group_id, member_id),
                    consumer_join_timer(group_id, member_id),
                    consumer_sync_timer(group_id, member_id)):
            self.timers.cancel(key)

    def record(self, group: ClassicGroup, records: list[OffsetsRecord], key: object,
               value: object) -> None:
        """Apply one record to `group` now and add it to the write being built (the consumer
        protocol's steps each read what the previous record changed)."""
        record = OffsetsRecord(key, value)  # type: ignore[arg-type]
        self.apply(group, [record])
        records.append(record)
