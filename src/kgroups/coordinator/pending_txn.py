"""Transactional offsets not yet committed: what TxnOffsetCommit wrote per producer, held until
the producer's marker in the same __consumer_offsets partition.

They enter here only once their transactional batch is durable, leave at the marker (committed
into their groups on COMMIT, dropped on ABORT), and lose a key when a later non-transactional
record of that key is durable (a plain OffsetCommit or a tombstone written after them wins, as
Kafka's loader keeps the newer record). That is exactly what a replay of the log gives
(kgroups.log.replay, `LatestPerKey.open_transactions`), so memory and replay agree, also across
a restart with a transaction still open.
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
        # The producer epoch of each open transaction (the batch's, or its marker's).
        self.epochs: dict[ProducerKey, int] = {}

    def hold(self, offsets_partition: int, producer_id: int, producer_epoch: int,
             records: Iterable[OffsetsRecord]) -> None:
        """A transactional batch of the producer is durable (or was read back from the log)."""
        producer = (offsets_partition, producer_id)
        held = self._by_producer.setdefault(producer, {})
        self.epochs[producer] = producer_epoch
        for record in records:
            key = record.key
            if type(key) is OffsetCommitKey and record.value is not None:
                held[(key.group, key.topic, key.partition)] = record.value  # type: ignore[assignment]

    def end(self, offsets_partition: int, producer_id: int) -> dict[OffsetKey, OffsetCommitValue]:
        """The producer's marker is durable: its held offsets, no longer pending."""
        producer = (offsets_partition, producer_id)
        self.epochs.pop(producer, None)
        return self._by_producer.pop(producer, {})

    def supersede(self, records: Iterable[OffsetsRecord]) -> None:
        """Non-transactional records are durable: their offset keys are newer than any pending
        value of the same key, which therefore never lands."""
        keys = {(k.group, k.topic, k.partition) for r in records
                if type(k := r.key) is OffsetCommitKey}
        if not keys or not self._by_producer:
            return
        for held in self._by_producer.values():
            for key in keys & held.keys():
                del held[key]

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
            del self._by_producer[producer]
            self.epochs.pop(producer, None)

    def snapshot(self) -> dict[ProducerKey, dict[OffsetKey, OffsetCommitValue]]:
        """A copy of every pending offset (tests compare memory with a replay)."""
        return {producer: dict(held) for producer, held in self._by_producer.items() if held}
