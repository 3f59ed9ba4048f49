"""Transactional offsets not yet committed: what TxnOffsetCommit wrote per producer, held until
the producer's marker in the same __consumer_offsets partition.

They enter here only once their transactional batch is durable, leave at the marker
(committed into their groups on COMMIT, dropped on ABORT), and lose a key when a later record of
that key lands: a plain OffsetCommit or a tombstone written after them, or a committed
transaction's value written after them (the newer record wins at the marker, as Kafka's loader
keeps it). That is exactly what a replay of the log gives (kgroups.log.replay,
`LatestPerKey.open_transactions`), so memory and replay agree, also across a restart with a
transaction still open. (Kafka keeps a superseded value pending, so require_stable answers
UNSTABLE_OFFSET_COMMIT for its key until that producer's marker; kgroups answers the newer
committed value at once.)
"""

from __future__ import annotations

from collections.abc import Iterable

from kgroups.records.schema import OffsetCommitKey, OffsetCommitValue, OffsetsRecord

# (group id, topic, partition)
OffsetKey = tuple[str, str, int]
# (offsets partition, producer id)
ProducerKey = tuple[int, int]


class PendingTxnOffsets:
    """Pending transactional offsets per (offsets partition, producer id)."""

    def __init__(self) -> None:
        self._by_producer: dict[ProducerKey, dict[OffsetKey, OffsetCommitValue]] = {}
        # When each held value was written (a count in durable-write order, i.e. log order):
        # a transaction committing a key supersedes the values of it held since before.
        self._written: dict[tuple[ProducerKey, OffsetKey], int] = {}
        self._writes = 0
        # The producer epoch of each open transaction (the batch's, or its marker's).
        self.epochs: dict[ProducerKey, int] = {}

    def hold(self, offsets_partition: int, producer_id: int, producer_epoch: int,
             records: Iterable[OffsetsRecord]) -> None:
        """A transactional batch of the producer is durable (or was read back from the log)."""
        producer = (offsets_partition, producer_id)
        held = self._by_producer.setdefault(producer, {})
        self.epochs[producer] = producer_epoch
        self._writes += 1
        for record in records:
            key = record.key
            if type(key) is OffsetCommitKey and record.value is not None:
                offset_key = (key.group, key.topic, key.partition)
                held[offset_key] = record.value  # type: ignore[assignment]
                self._written[(producer, offset_key)] = self._writes

    def end(self, offsets_partition: int, producer_id: int,
            commits: bool) -> dict[OffsetKey, OffsetCommitValue]:
        """The producer's marker is durable: its held offsets, no longer pending (on COMMIT,
        they supersede the values of the same keys other producers hold since before)."""
        producer = (offsets_partition, producer_id)
        self.epochs.pop(producer, None)
        ended = self._by_producer.pop(producer, {})
        written = {key: self._written.pop((producer, key)) for key in ended}
        if not commits:
            return ended
        for other, held in self._by_producer.items():
            for key in ended.keys() & held.keys():
                if self._written[(other, key)] < written[key]:
                    del held[key]
                    del self._written[(other, key)]
        return ended

    def supersede(self, records: Iterable[OffsetsRecord]) -> None:
        """Non-transactional records are durable: their offset keys are newer than any pending
        value of the same key, which therefore never lands."""
        if not self._by_producer:  # no transaction holds an offset: the usual case
            return
        keys = {(k.group, k.topic, k.partition) for r in records
                if type(k := r.key) is OffsetCommitKey}
        for producer, held in self._by_producer.items():
            for key in keys & held.keys():
                del held[key]
                del self._written[(producer, key)]

    def is_pending(self, group_id: str, topic: str, partition: int) -> bool:
        key = (group_id, topic, partition)
        return any(key in held for held in self._by_producer.values())

    def keys_of(self, group_id: str) -> set[tuple[str, int]]:
        """The (topic, partition) of every pending offset of the group."""
        return {(topic, partition) for held in self._by_producer.values()
                for group, topic, partition in held if group == group_id}

    def has_pending(self, group_id: str) -> bool:
        return any(key[0] == group_id for held in self._by_producer.values() for key in held)

    def producer_epoch(self, offsets_partition: int, producer_id: int) -> int | None:
        return self.epochs.get((offsets_partition, producer_id))

    def drop_partition(self, offsets_partition: int) -> None:
        """The partition is unloaded: its pending offsets go with its groups."""
        for producer in [p for p in self._by_producer if p[0] == offsets_partition]:
            for key in self._by_producer.pop(producer):
                del self._written[(producer, key)]
            self.epochs.pop(producer, None)

    def snapshot(self) -> dict[ProducerKey, dict[OffsetKey, OffsetCommitValue]]:
        """A copy of every pending offset (tests compare memory with a replay)."""
        return {producer: dict(held) for producer, held in self._by_producer.items() if held}
