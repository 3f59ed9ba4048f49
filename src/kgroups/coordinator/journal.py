"""A write being built: the records it will carry, and how to take them back if it fails.

Records are the only way a group's persisted state changes: a handler adds each record through
`ShardContext.record` (applied at once, through the apply function replay uses) and the journal
notes the value the record's key held before (`stored_value`). If the write fails, or the
request is refused after some records were applied, `ShardContext.roll_back` applies those
earlier values again, newest first, through the same apply function: what the log holds is what
memory holds. This is the one revert mechanism, for classic groups, consumer groups, offsets and
the conversions between group types (Kafka's timeline snapshots, kept per key instead of per
offset, so a revert costs what its write changed, never a copy of the group).

Bookkeeping that is not persisted but moved with the records (a parked JoinGroup, the members
an upgrade took out of a classic group, a revived deleted group) is put back by `on_revert`
steps the handler registers in the same journal; they run after the records are undone, and only
while the write's requester still waits for it (`still_pending`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kgroups.coordinator.group import ClassicGroup
from kgroups.records.consumer_group import CONSUMER_GROUP_KEY_TYPES
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetsRecord,
    RecordKey,
    RecordValue,
)


@dataclass(slots=True)
class KeyUndo:
    """`key` of `group` held `before` (None: nothing) until this journal's record gave it
    `after` (the very value object the record carried)."""

    group: ClassicGroup
    key: RecordKey
    before: RecordValue | None
    after: RecordValue | None

    def still_current(self) -> bool:
        """Whether the key still holds what the record gave it. A classic group's
        GroupMetadata value counts only while the group's generation is the record's: once a
        new rebalance started, memory is ahead of both records (the next SyncGroup writes the
        whole roster again), so a revert leaves it and restores only the stored value."""
        if stored_value(self.group, self.key) is not self.after:
            return False
        after = self.after
        return not isinstance(after, GroupMetadataValue) \
            or self.group.generation_id == after.generation


@dataclass(slots=True)
class Journal:
    records: list[OffsetsRecord] = field(default_factory=list)
    undo: list[KeyUndo] = field(default_factory=list)
    on_revert: list[Callable[[], None]] = field(default_factory=list)

    def __bool__(self) -> bool:
        """Whether there is anything to write."""
        return bool(self.records)


def stored_value(group: ClassicGroup, key: RecordKey) -> RecordValue | None:
    """The value `key` holds for `group` in memory, as the log (with the pending writes) has
    it: None when no record holds it."""
    if type(key) is OffsetCommitKey:
        return group.offsets.get((key.topic, key.partition))
    if type(key) is GroupMetadataKey:
        return group.stored_metadata
    if key.version in CONSUMER_GROUP_KEY_TYPES and group.consumer is not None:
        return group.consumer.stored.get(key)  # type: ignore[arg-type]
    return None
