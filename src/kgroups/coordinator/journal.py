"""A write being built: the records it will carry, and how to take them back if it fails.

Records are the only way a group's persisted state changes: a handler adds each record through
`ShardContext.record` / `record_all` (applied at once, through `persistence.apply_record`, the
function replay uses) and the journal notes the value the record's key held before
(`stored_value`: the offset, the group's GroupMetadata value, the consumer group's value for
that key). If the write fails, or the request is refused after records were applied (a refused
upgrade), `ShardContext` applies those earlier values again, newest first, through the same
apply function, so memory holds what the log holds. This is the one revert mechanism, for
classic groups, consumer groups, offsets and the conversions between group types: Kafka's
timeline snapshots, kept per key instead of per offset, so a revert costs what its write
changed, never a copy of the group.

Writes in flight stack, and a failure takes the later ones of its partition with it (Kafka's
rule: a revert goes back to the snapshot of the failed write's offset, so what later writes
applied goes too, and their requesters get the error): a later write was built on what the failed
one applied, and a log never holds it without the failed one. A key whose value a durable write
has replaced since, or a classic group's GroupMetadata after a new rebalance began (memory is
ahead of both records; the next SyncGroup writes the roster again), is left as it is.

Bookkeeping that moves with the records but is not persisted (a parked JoinGroup, the member
objects an upgrade took out of a classic group with all their protocols, timers, a deleted
group's Dead placeholder) comes back through `on_revert` steps the handler registers in the
same journal; they run after the records are undone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kgroups.coordinator.group import ClassicGroup
from kgroups.records.consumer_group import ConsumerGroupKey
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetsRecord,
    RecordKey,
    RecordValue,
)
from kgroups.records.share_group import SHARE_GROUP_KEY_TYPES


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
    if group.consumer is not None and isinstance(key, ConsumerGroupKey):
        return group.consumer.stored.get(key)
    if group.share is not None and key.version in SHARE_GROUP_KEY_TYPES:
        return group.share.stored.get(key)  # type: ignore[arg-type]
    return None
