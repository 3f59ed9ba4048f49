"""The share coordinator's state of its share-partitions, and its answers, without I/O.

Each share-partition (group, topic id, partition) has a state epoch (bumped when the group
coordinator re-initializes it), the leader epoch of the share partition's leader, the start
offset, its in-flight batches and the count of delivered offsets. Each request is answered as
Kafka 4.3.1's ShareCoordinatorShard answers it, and a change becomes one record to append:
Initialize and every `snapshot_every`-th write become a ShareSnapshot with the whole state (and
the next snapshot epoch); other writes a ShareUpdate with what the request carried. The caller
appends the record and only then `replay`s it; a restart replays the partition's log in order.
A Read with a new leader epoch is also a write (the epoch is recorded). Delete is a tombstone.

`topic_partitions(topic_id)` is the metadata the caller knows: how many partitions the topic
has (None: no such topic), for Kafka's UNKNOWN_TOPIC_OR_PARTITION checks.

Housekeeping, as Kafka's: every record before the oldest of the latest snapshots (or
tombstones) of a `__share_group_state` partition's share-partitions is redundant and may be
deleted (`redundant_offset`), and a share-partition whose last snapshot was written a
while ago gets a fresh one (`cold_snapshots`) so that offset keeps moving.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from kgroups.errors import KAFKA_MESSAGES, ErrorCode
from kgroups.records.share_state import (
    UNKNOWN_COUNT,
    ShareSnapshotValue,
    ShareStateKey,
    ShareStateValue,
    ShareUpdateValue,
    StateBatch,
)
from kgroups.share_coordinator.batches import combine
from kgroups.share_coordinator.placement import (
    STATE_TOPIC_PARTITIONS,
    coordinator_key,
    state_partition,
)

# Kafka's share.coordinator.snapshot.update.records.per.snapshot default.
SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT = 500
NO_EPOCH = -1
NO_OFFSET = -1
_NO_REDUNDANT_OFFSET = 2**63 - 1
TopicPartitions = Callable[[uuid.UUID], "int | None"]

# Kafka's texts for the errors the share coordinator answers with.
NEGATIVE_PARTITION = "The partition id cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    """What the coordinator keeps per share-partition (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    batches: tuple[StateBatch, ...]
    create_timestamp: int
    write_timestamp: int


@dataclass(frozen=True, slots=True)
class StateRecord:
    """One record for __share_group_state; `value` None is a tombstone."""

    key: ShareStateKey
    value: ShareStateValue | None


@dataclass(frozen=True, slots=True)
class Answer:
    """A request's result: the error (with Kafka's message), the state a read returns, and
    the record to append first (the answer holds only once it is durable)."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    state: SharePartitionState | None = None
    record: StateRecord | None = None


@dataclass(frozen=True, slots=True)
class WriteRequest:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_COUNT


Key = tuple[str, uuid.UUID, int]


def _older(recorded: dict[Key, int], key: Key, epoch: int) -> bool:
    """Whether `epoch` is older than the one recorded for `key` (-1 is never checked)."""
    return epoch != NO_EPOCH and recorded.get(key, epoch) > epoch


def _refused(error: ErrorCode, message: str | None = None) -> Answer:
    return Answer(error, message if message is not None else KAFKA_MESSAGES.get(error))


class ShareCoordinatorShard:
    def __init__(self, snapshot_every: int = SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
                 num_partitions: int = STATE_TOPIC_PARTITIONS) -> None:
        self.snapshot_every = snapshot_every
        self.num_partitions = num_partitions
        self.states: dict[Key, SharePartitionState] = {}
        self._leader_epochs: dict[Key, int] = {}
        self._state_epochs: dict[Key, int] = {}
        self._updates_since_snapshot: dict[Key, int] = {}
        # Per __share_group_state partition: each share-partition's latest snapshot offset,
        # and the oldest of them (Kafka's ShareCoordinatorOffsetsManager).
        self._snapshot_offsets: dict[int, dict[Key, int]] = {}
        self._redundant: dict[int, int] = {}

    def partition_of(self, key: Key) -> int:
        """The `__share_group_state` partition holding the share-partition's records."""
        return state_partition(coordinator_key(*key), self.num_partitions)

    # -- replay ------------------------------------------------------------------------------

    def replay(self, record: StateRecord, offset: int) -> None:
        """Apply one record of the log at `offset`, in log order (a written one after it is
        durable)."""
        key = (record.key.group_id, record.key.topic_id, record.key.partition)
        value = record.value
        if record.key.snapshot:
            self._snapshot_written(key, offset, deleted=value is None)
        if value is None:
            if record.key.snapshot:
                self.states.pop(key, None)
                for epochs in (self._leader_epochs, self._state_epochs,
                               self._updates_since_snapshot):
                    epochs.pop(key, None)
            return
        self._raise_epoch(self._leader_epochs, key, value.leader_epoch)
        if isinstance(value, ShareSnapshotValue):
            self._raise_epoch(self._state_epochs, key, value.state_epoch)
            self.states[key] = SharePartitionState(
                value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
                value.delivery_complete_count, value.state_batches, value.create_timestamp,
                value.write_timestamp)
            if self._updates_since_snapshot.get(key, 0) >= self.snapshot_every:
                self._updates_since_snapshot[key] = 0
            return
        current = self.states.get(key)
        if current is None:
            # An update with no snapshot before it (Kafka keeps it as the state as is).
            self.states[key] = SharePartitionState(
                value.snapshot_epoch, 0, value.leader_epoch, value.start_offset,
                value.delivery_complete_count, value.state_batches, 0, 0)
            self._updates_since_snapshot[key] = 1
            return
        start = current.start_offset if value.start_offset == NO_OFFSET else value.start_offset
        self.states[key] = replace(
            current, start_offset=start,
            leader_epoch=(current.leader_epoch if value.leader_epoch == NO_EPOCH
                          else value.leader_epoch),
            delivery_complete_count=value.delivery_complete_count,
            batches=combine(current.batches, value.state_batches, start))
        self._updates_since_snapshot[key] = self._updates_since_snapshot.get(key, 0) + 1

    def _snapshot_written(self, key: Key, offset: int, deleted: bool) -> None:
        partition = self.partition_of(key)
        offsets = self._snapshot_offsets.setdefault(partition, {})
        offsets[key] = offset
        self._redundant[partition] = min(offsets.values())
        if deleted:
            del offsets[key]

    def unload(self, partition: int) -> None:
        """Forget every share-partition of the `__share_group_state` partition (another
        broker coordinates it now; it is replayed afresh if it comes back)."""
        for table in (self.states, self._leader_epochs, self._state_epochs,
                      self._updates_since_snapshot):
            for key in [k for k in table if self.partition_of(k) == partition]:
                del table[key]
        self._snapshot_offsets.pop(partition, None)
        self._redundant.pop(partition, None)

    def redundant_offset(self, partition: int) -> int | None:
        """The offset before which every record of the `__share_group_state` partition is
        superseded (None: nothing to delete yet)."""
        offset = self._redundant.get(partition, _NO_REDUNDANT_OFFSET)
        return None if offset <= 0 or offset == _NO_REDUNDANT_OFFSET else offset

    def cold_snapshots(self, now_ms: int, interval_ms: int) -> list[StateRecord]:
        """A fresh snapshot (next snapshot epoch, written now) of each share-partition whose
        last one was written `interval_ms` ago or more; none when every share-partition was
        already so refreshed (its write time differs from its creation time)."""
        if all(s.create_timestamp != s.write_timestamp for s in self.states.values()):
            return []
        return [StateRecord(ShareStateKey(*key), ShareSnapshotValue(
                    state.snapshot_epoch + 1, state.state_epoch, state.leader_epoch,
                    state.start_offset, state.create_timestamp, now_ms, state.batches,
                    state.delivery_complete_count))
                for key, state in self.states.items()
                if now_ms - state.write_timestamp >= interval_ms]

    @staticmethod
    def _raise_epoch(table: dict[Key, int], key: Key, epoch: int) -> None:
        if epoch > table.get(key, epoch - 1):
            table[key] = epoch

    # -- requests ----------------------------------------------------------------------------

    def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                   start_offset: int, topic_partitions: TopicPartitions, now_ms: int) -> Answer:
        key = (group_id, topic_id, partition)
        if partition < 0:
            return _refused(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION)
        if _older(self._state_epochs, key, state_epoch):
            return _refused(ErrorCode.FENCED_STATE_EPOCH)
        unknown = self._unknown_partition(topic_id, partition, topic_partitions)
        if unknown is not None:
            return unknown
        current = self.states.get(key)
        value = ShareSnapshotValue(
            0 if current is None else current.snapshot_epoch + 1, state_epoch, 0, start_offset,
            now_ms, now_ms, (), UNKNOWN_COUNT if start_offset == NO_OFFSET else 0)
        return Answer(record=StateRecord(ShareStateKey(group_id, topic_id, partition), value))

    def write(self, group_id: str, topic_id: uuid.UUID, partition: int, request: WriteRequest,
              topic_partitions: TopicPartitions, now_ms: int) -> Answer:
        key = (group_id, topic_id, partition)
        if partition < 0:
            return _refused(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION)
        if key not in self.states:
            return _refused(ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED)
        if _older(self._leader_epochs, key, request.leader_epoch):
            return _refused(ErrorCode.FENCED_LEADER_EPOCH)
        if _older(self._state_epochs, key, request.state_epoch):
            return _refused(ErrorCode.FENCED_STATE_EPOCH)
        unknown = self._unknown_partition(topic_id, partition, topic_partitions)
        if unknown is not None:
            return unknown
        return Answer(record=self._state_record(key, request, now_ms, update_leader=False))

    def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
             topic_partitions: TopicPartitions, now_ms: int) -> Answer:
        """The state; with a leader epoch newer than the one recorded, also the record that
        records it (the read is answered once it is durable)."""
        key = (group_id, topic_id, partition)
        if partition < 0:
            return _refused(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION)
        current = self.states.get(key)
        if current is None:
            return _refused(ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED)
        if _older(self._leader_epochs, key, leader_epoch):
            return _refused(ErrorCode.FENCED_LEADER_EPOCH)
        unknown = self._unknown_partition(topic_id, partition, topic_partitions)
        if unknown is not None:
            return unknown
        if leader_epoch == NO_EPOCH or self._leader_epochs.get(key) == leader_epoch:
            return Answer(state=current)
        request = WriteRequest(current.state_epoch, leader_epoch, current.start_offset, (),
                               current.delivery_complete_count)
        return Answer(state=current,
                      record=self._state_record(key, request, now_ms, update_leader=True))

    def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int,
                     topic_partitions: TopicPartitions) -> Answer:
        """The state without batches; a share-partition never initialized answers its
        absence (start offset -1), not an error, as Kafka does."""
        if partition < 0:
            return _refused(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION)
        unknown = self._unknown_partition(topic_id, partition, topic_partitions)
        if unknown is not None:
            return unknown
        current = self.states.get((group_id, topic_id, partition))
        if current is None:
            return Answer(state=SharePartitionState(0, 0, 0, NO_OFFSET, UNKNOWN_COUNT, (), 0, 0))
        return Answer(state=current)

    def delete(self, group_id: str, topic_id: uuid.UUID, partition: int,
               topic_partitions: TopicPartitions) -> Answer:
        if partition < 0:
            return _refused(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION)
        unknown = self._unknown_partition(topic_id, partition, topic_partitions)
        if unknown is not None:
            return unknown
        if (group_id, topic_id, partition) not in self.states:
            return Answer()
        return Answer(record=StateRecord(ShareStateKey(group_id, topic_id, partition), None))

    @staticmethod
    def _unknown_partition(topic_id: uuid.UUID, partition: int,
                           topic_partitions: TopicPartitions) -> Answer | None:
        count = topic_partitions(topic_id)
        if count is None or partition >= count:
            return _refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return None

    # -- records -----------------------------------------------------------------------------

    def _state_record(self, key: Key, request: WriteRequest, now_ms: int,
                      update_leader: bool) -> StateRecord:
        """A ShareSnapshot when `snapshot_every` updates followed the last one, else a
        ShareUpdate, with the fields Kafka fills in each."""
        current = self.states[key]
        leader_epoch = current.leader_epoch
        if update_leader:
            leader_epoch = (current.leader_epoch if request.leader_epoch == NO_EPOCH
                            else request.leader_epoch)
        group_id, topic_id, partition = key
        if self._updates_since_snapshot.get(key, 0) >= self.snapshot_every:
            start = (current.start_offset if request.start_offset == NO_OFFSET
                     else request.start_offset)
            snapshot = ShareSnapshotValue(
                current.snapshot_epoch + 1, current.state_epoch, leader_epoch, start,
                now_ms, now_ms, combine(current.batches, request.batches, start),
                request.delivery_complete_count)
            return StateRecord(ShareStateKey(group_id, topic_id, partition), snapshot)
        update = ShareUpdateValue(current.snapshot_epoch, leader_epoch, request.start_offset,
                                  combine((), request.batches, request.start_offset),
                                  request.delivery_complete_count)
        return StateRecord(ShareStateKey(group_id, topic_id, partition, snapshot=False), update)
