"""What every group-type module of the shard shares: the groups, the timers, the clock, the
topics, the writes in flight, and the effects of the request in progress (replies, events,
writes).

The group-type modules (classic groups, consumer groups, offsets, migration, admin) hold one
`ShardContext` each; the shard (`coordinator.GroupCoordinator`) sets `now` and a fresh `fx` before
each request, dispatches it, and returns `fx`.

The write path: a handler validates, builds the records it wants written and hands them over with
the continuations that release its responses. Records change groups only through
`persistence.apply_record`, the function replay uses, either once the write is durable
(`write_when_durable`: what Kafka lets no reader see before then, such as offsets and a new
assignment) or at once (`record` / `record_all` into a `Journal`, then `write`: what Kafka shows
while the write is in flight, such as a static member's new id, a deleted group, a consumer
group's epochs and assignments). A failed write is reverted through its journal (`journal.py`,
the one mechanism), and so is every later write of its partition still in flight.
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kgroups.coordinator.config import GroupCoordinatorConfig
from kgroups.coordinator.consumer_group import ConsumerGroup, TopicInfo
from kgroups.coordinator.consumer_messages import AnyResponse
from kgroups.coordinator.effects import (
    Effects,
    GroupEvent,
    MemberRemoved,
    RebalanceCause,
    RebalanceStarted,
    RemovalReason,
    Reply,
    TxnMarker,
    Write,
)
from kgroups.coordinator.group import ClassicGroup, GroupState, Member
from kgroups.coordinator.journal import Journal, KeyUndo, stored_value
from kgroups.coordinator.messages import JoinGroupResponse, RequestId, SyncGroupResponse
from kgroups.coordinator.pending_txn import PendingTxnOffsets
from kgroups.coordinator.persistence import apply_record, offset_record
from kgroups.coordinator.placement import partition_for
from kgroups.coordinator.rebalance_cause import RebalanceNote
from kgroups.coordinator.share_group import ShareGroup
from kgroups.coordinator.timer_keys import (
    consumer_join_timer,
    consumer_rebalance_timer,
    consumer_session_timer,
    consumer_sync_timer,
    session_timer,
)
from kgroups.coordinator.timers import TimerQueue
from kgroups.errors import ErrorCode
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetsRecord,
    RecordKey,
    RecordValue,
)

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


@dataclass(slots=True)
class _PendingWrite:
    offsets_partition: int
    records: list[OffsetsRecord]
    # When durable: where the records land (None: nowhere any more). Applied at once: None.
    target: Callable[[], ClassicGroup | None] | None
    on_success: WriteCallback
    on_failure: FailureCallback
    # Applied at once: how to take the records back (None: a loss Kafka tolerates).
    journal: Journal | None = None
    # Whether the requester still waits for this write (else its failure answers no one).
    still_pending: Callable[[], bool] = always
    # A transactional batch of this producer (TxnOffsetCommit), or its marker.
    producer_id: int = -1
    producer_epoch: int = -1
    marker: TxnMarker | None = None


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
        # The ids of those applied at once (with a journal), in emitted order: what a durable
        # write must rebase (`_rebase_later_undos`); none, for a stream of offset commits.
        self._journaled: dict[int, None] = {}
        # Offset keys of OffsetCommits in flight, per group id (the group may not exist yet):
        # expiry skips them and a deletion writes tombstones for them too.
        self.commits_in_flight: dict[str, Counter[tuple[str, int]]] = {}
        # TxnOffsetCommit's offsets awaiting their transaction's marker.
        self.txn = PendingTxnOffsets()
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

    def answer_parked(self, group: ClassicGroup, member: Member, error: ErrorCode) -> None:
        """`error` to the member's parked JoinGroup and SyncGroup, if it has any: a member
        fenced, a group unloaded or migrated must not leave its client waiting."""
        if member.join_request is not None:
            self.reply(member.join_request, JoinGroupResponse(error, member_id=member.member_id))
            group.set_join_request(member, None)
        if member.sync_request is not None:
            self.reply(member.sync_request, SyncGroupResponse(error))
            member.sync_request = None

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

    def write(
        self,
        offsets_partition: int,
        journal: Journal,
        on_success: WriteCallback,
        on_failure: FailureCallback,
        still_pending: Callable[[], bool] = always,
    ) -> None:
        """Write the records `journal` applied (`record`, `record_all`). A failure reverts
        them (`_revert`), then `on_failure` answers if `still_pending()`."""
        self._emit_write(_PendingWrite(offsets_partition, journal.records, None, on_success,
                                       on_failure, journal, still_pending))

    def reply_when_written(self, offsets_partition: int, journal: Journal,
                           request_id: RequestId, response: AnyResponse,
                           failed: Callable[[ErrorCode], AnyResponse]) -> None:
        """Answer `response` once the journal's records are durable (at once when it has none),
        or `failed(error)` if they cannot be written."""
        if not journal:
            self.reply(request_id, response)
            return
        self.write(offsets_partition, journal, lambda: self.reply(request_id, response),
                   lambda error: self.reply(request_id, failed(error)))

    def write_tolerated(self, offsets_partition: int, records: list[OffsetsRecord]) -> None:
        """Apply `records` now and write them; a failure reverts nothing, as Kafka tolerates
        the loss (the previous record stays authoritative in the log): the GroupMetadata of a
        generation that ended Empty, offset expiry's tombstones."""
        by_group: dict[str, list[OffsetsRecord]] = {}
        for record in records:
            by_group.setdefault(record.key.group, []).append(record)  # type: ignore[union-attr]
        for group_id, group_records in by_group.items():
            group = self.groups[group_id]
            self.apply(group, group_records)
            if group.state is GroupState.DEAD:
                del self.groups[group_id]
        self._emit_write(_PendingWrite(offsets_partition, records, None, ignore_success,
                                       ignore_failure))

    def write_transactional(self, offsets_partition: int, producer_id: int, producer_epoch: int,
                            records: list[OffsetsRecord], on_success: WriteCallback,
                            on_failure: FailureCallback) -> None:
        """Write `records` as the producer's transactional batch; once durable they are held
        pending (`txn`) until the producer's marker, changing no group before."""
        self._emit_write(_PendingWrite(offsets_partition, records, None, on_success, on_failure,
                                       producer_id=producer_id, producer_epoch=producer_epoch))

    def write_marker(self, offsets_partition: int, producer_id: int, producer_epoch: int,
                     marker: TxnMarker, on_success: WriteCallback,
                     on_failure: FailureCallback) -> None:
        """Write the producer's marker; once durable its pending offsets in the partition are
        committed into their groups (COMMIT) or dropped (ABORT), as replay does at a marker."""
        self._emit_write(_PendingWrite(offsets_partition, [], None, on_success, on_failure,
                                       producer_id=producer_id, producer_epoch=producer_epoch,
                                       marker=marker))

    def _end_transaction(self, offsets_partition: int, producer_id: int, commits: bool) -> None:
        """The marker's records-only state change: each committed offset is applied to its
        group as its record would be (a missing group created, as Kafka's loader creates a
        simple group for an offset)."""
        ended = self.txn.end(offsets_partition, producer_id, commits)
        if not commits:
            return
        by_group: dict[str, list[OffsetsRecord]] = {}
        for (group_id, topic, partition), value in ended.items():
            by_group.setdefault(group_id, []).append(offset_record(group_id, topic, partition,
                                                                   value))
        for group_id, records in by_group.items():
            group = self._awaiting_deletion(group_id) or self.groups.get(group_id)
            if group is None:
                group = self.create_group(group_id)
            self.apply(group, records)

    def _awaiting_deletion(self, group_id: str) -> ClassicGroup | None:
        """The Dead group of `group_id` whose deletion is the earliest write in flight, if any.
        Every write still in flight lands after the one now durable, so its records go into
        that group: the deletion's tombstones come later in the log and take them when durable;
        if it fails, the group comes back holding them (as an OffsetCommit lands in a group
        whose deletion is in flight, `offsets.Offsets.commit`)."""
        for pending in self.pending_writes.values():
            if pending.journal is None:
                continue
            for undo in pending.journal.undo:
                if undo.group.group_id == group_id and type(undo.key) is GroupMetadataKey \
                        and undo.after is None and undo.group.state is GroupState.DEAD:
                    return undo.group
        return None

    def record(self, group: ClassicGroup, journal: Journal, key: RecordKey,
               value: RecordValue | None) -> None:
        """Apply one record to `group` now and add it to `journal` (the consumer protocol's
        steps each read what the previous record changed)."""
        record = OffsetsRecord(key, value)
        journal.undo.append(KeyUndo(group, key, stored_value(group, key), value))
        self.apply(group, [record])
        journal.records.append(record)

    def record_all(self, group: ClassicGroup, journal: Journal,
                   records: list[OffsetsRecord]) -> None:
        """`record` for records that read nothing of each other (one event at most)."""
        journal.undo.extend(KeyUndo(group, r.key, stored_value(group, r.key), r.value)
                            for r in records)
        self.apply(group, records)
        journal.records.extend(records)

    def roll_back(self, journal: Journal) -> None:
        """Take back a journal that will not be written (its request was refused)."""
        for undo in reversed(journal.undo):
            self._undo(undo)
        for step in reversed(journal.on_revert):
            step()
        journal.records.clear()
        journal.undo.clear()
        journal.on_revert.clear()

    def _emit_write(self, pending: _PendingWrite) -> None:
        self.next_write_id += 1
        write_id = self.next_write_id
        self.pending_writes[write_id] = pending
        if pending.journal is not None:
            self._journaled[write_id] = None
        self.fx.writes.append(Write(write_id, pending.offsets_partition, pending.records,
                                    pending.producer_id, pending.producer_epoch, pending.marker))

    def apply(self, group: ClassicGroup, records: list[OffsetsRecord]) -> None:
        """The records change the group through the replay's apply; a state change is an event."""
        old_state = group.state
        for record in records:
            apply_record(group, record, self.now)
        if group.state is not old_state:
            self.event(group, old_state)

    def complete_write(self, write_id: int, error: ErrorCode | None) -> None:
        if write_id not in self.pending_writes:
            return  # unknown, or failed already with an earlier write of its partition
        if error is None or error == ErrorCode.NONE:
            self._journaled.pop(write_id, None)
            self._write_succeeded(write_id, self.pending_writes.pop(write_id))
        else:
            self._fail_from(write_id, client_error_for_write(error))

    def _write_succeeded(self, write_id: int, pending: _PendingWrite) -> None:
        if pending.marker is not None:
            self._end_transaction(pending.offsets_partition, pending.producer_id,
                                  pending.marker.commits)
        elif pending.producer_id >= 0:
            self.txn.hold(pending.offsets_partition, pending.producer_id,
                          pending.producer_epoch, pending.records)
        else:
            self.txn.supersede(pending.records)
        if pending.target is not None:
            group = pending.target()
            if group is not None:
                self.apply(group, pending.records)
                self._rebase_later_undos(write_id, pending, group)
        if pending.journal is not None:
            for undo in pending.journal.undo:  # groups the write ended are gone now
                group = undo.group
                if type(undo.key) is GroupMetadataKey and undo.after is None \
                        and group.state is GroupState.DEAD \
                        and self.groups.get(group.group_id) is group:
                    del self.groups[group.group_id]
        pending.on_success()

    def _rebase_later_undos(self, write_id: int, durable: _PendingWrite,
                            group: ClassicGroup) -> None:
        """A write applied once durable (an OffsetDelete's tombstones, an OffsetCommit) comes
        before the writes emitted after it in the log: a later write in flight that replaced
        one of its keys must, if it fails, go back to the value this one gave the key, not to
        what the key held before this one landed (the first undo of that key does; the ones
        after it go back to the value the one before them gave)."""
        if not self._journaled:  # the usual case (commits only in flight): no comprehension
            return
        # _journaled holds the writes in the order they were emitted (ids only grow).
        later = [journal for later_id in self._journaled
                 if later_id > write_id
                 and (pending := self.pending_writes[later_id]).offsets_partition
                 == durable.offsets_partition and (journal := pending.journal) is not None]
        if not later:  # the usual case: nothing applied at once is in flight behind it
            return
        values = {record.key: record.value for record in durable.records}
        rebased: set[RecordKey] = set()
        for journal in later:
            for undo in journal.undo:
                if undo.group is group and undo.key in values and undo.key not in rebased:
                    undo.before = values[undo.key]
                    rebased.add(undo.key)

    def _fail_from(self, write_id: int, error: ErrorCode) -> None:
        """A write failed: so does every later write of its partition still in flight, as in
        Kafka, where a revert goes back to the snapshot of the failed write's offset (a later
        write was built on what the failed one applied; the log never holds it without the
        failed one: the shell fails the writes of a partition in order, from the first failure
        on). They are reverted newest first, each answering its requester, then this one."""
        partition = self.pending_writes[write_id].offsets_partition
        later = sorted(i for i, p in self.pending_writes.items()
                       if i > write_id and p.offsets_partition == partition)
        for later_id in reversed(later):  # each still counts the ones before it as in flight
            self._journaled.pop(later_id, None)
            self._revert(self.pending_writes.pop(later_id), error)
        self._journaled.pop(write_id, None)
        self._revert(self.pending_writes.pop(write_id), error)

    def _revert(self, failed: _PendingWrite, error: ErrorCode) -> None:
        """Undo a failed write (module docstring of `journal`), then answer its requester."""
        answer = failed.still_pending()  # asked before the revert settles the request
        journal = failed.journal
        if journal is not None:
            for undo in reversed(journal.undo):
                self._undo(undo)
            for step in reversed(journal.on_revert):
                step()
        if answer:
            failed.on_failure(error)

    def _undo(self, undo: KeyUndo) -> None:
        """Put the key's earlier value back through the apply function, if the key still holds
        what the undone record gave it (a write since that is durable, or a classic rebalance
        since, keeps its own)."""
        if undo.still_current():
            self.apply(undo.group, [OffsetsRecord(undo.key, undo.before)])
        elif isinstance(undo.before, GroupMetadataValue | None) \
                and type(undo.key) is GroupMetadataKey \
                and undo.group.stored_metadata is undo.after:
            undo.group.stored_metadata = undo.before

    def fail_pending_writes(self, offsets_partition: int, error: ErrorCode) -> None:
        """The partition goes away: every write of it still in flight fails."""
        first = min((i for i, p in self.pending_writes.items()
                     if p.offsets_partition == offsets_partition), default=None)
        if first is not None:
            self._fail_from(first, error)

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

    def create_group(self, group_id: str, journal: Journal | None = None) -> ClassicGroup:
        """A new Empty group (in place of a Dead one whose deletion is in flight). With a
        `journal`, the write that creates it takes it away again if it fails, putting back
        whatever it replaced."""
        replaced = self.groups.get(group_id)
        group = ClassicGroup(group_id, self.partition_of(group_id), GroupState.EMPTY, self.now)
        self.groups[group_id] = group
        self.event(group, None)
        if journal is not None:
            journal.on_revert.append(functools.partial(self._uncreate, group, replaced))
        return group

    def _uncreate(self, group: ClassicGroup, replaced: ClassicGroup | None) -> None:
        if self.groups.get(group.group_id) is not group or group.offsets or group.members \
                or group.consumer is not None or group.streams is not None \
                or group.share is not None \
                or group.stored_metadata is not None:
            return  # something else made it since, and keeps it
        awaited = replaced is not None and any(  # a deletion in flight that may still fail
            undo.group is replaced for p in self.pending_writes.values() if p.journal is not None
            for undo in p.journal.undo)
        if replaced is not None and awaited:
            self.groups[group.group_id] = replaced
        else:
            del self.groups[group.group_id]

    def open_consumer_part(self, group: ClassicGroup, journal: Journal) -> ConsumerGroup:
        """An empty consumer part for a group becoming a consumer group; its records fill it
        (`persistence.apply_record` keeps the object). A failed write takes it away again if
        no record of it remains."""
        consumer = group.consumer = ConsumerGroup()
        journal.on_revert.append(functools.partial(self._close_consumer_part, group, consumer))
        return consumer

    def open_share_part(self, group: ClassicGroup, journal: Journal) -> ShareGroup:
        """An empty share part for a group becoming a share group (as `open_consumer_part`)."""
        share = group.share = ShareGroup()
        journal.on_revert.append(functools.partial(self._close_share_part, group, share))
        return share

    @staticmethod
    def _close_share_part(group: ClassicGroup, share: ShareGroup) -> None:
        if group.share is share and not share.stored:
            group.share = None

    @staticmethod
    def _close_consumer_part(group: ClassicGroup, consumer: ConsumerGroup) -> None:
        if group.consumer is consumer and not consumer.stored:
            group.consumer = None

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

