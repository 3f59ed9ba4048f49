"""Idempotent-producer bookkeeping: drop retried batches, refuse gaps and fenced epochs.

An idempotent producer numbers its batches per partition. When an acknowledgement is lost it
resends the same batch; Kafka recognises the resend by (producer id, epoch, sequence range) and
answers with the original offset instead of storing the records twice. Like Kafka, the last
five batches of each producer are remembered per partition. The table lives in memory and is
rebuilt for a partition, on its first idempotent produce after a start, from the batch headers
of its last REBUILD_TAIL_OFFSETS offsets (Kafka keeps producer snapshots for the same purpose),
so a retry that straddles a broker restart is still recognised; a producer silent for longer
than that tail is treated as new.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kgroups.errors import ErrorCode
from kgroups.log.batch import CONTROL
from kgroups.storage.log_seam import PartitionLogSeam

NO_PRODUCER_ID = -1
REMEMBERED_BATCHES = 5
# How far back from the log end a rebuild reads batch headers: bounded work (no whole-segment
# scan on the event loop), far more than the last five batches of any active producer.
REBUILD_TAIL_OFFSETS = 50_000
INT32_MAX = 2**31 - 1


def next_sequence(sequence: int) -> int:
    """Sequences wrap from INT32_MAX to 0, as in Kafka."""
    return 0 if sequence == INT32_MAX else sequence + 1


def last_sequence(first_sequence: int, last_offset_delta: int) -> int:
    return (first_sequence + last_offset_delta) % (INT32_MAX + 1)


@dataclass(frozen=True, slots=True)
class BatchIdentity:
    producer_id: int
    producer_epoch: int
    first_sequence: int
    last_sequence: int


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    # (first sequence, last sequence, base offset) of the most recent batches, oldest first.
    batches: deque[tuple[int, int, int]] = field(
        default_factory=lambda: deque(maxlen=REMEMBERED_BATCHES)
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """APPEND (error NONE, no offset), DUPLICATE (error NONE, the original offset) or an error."""

    error: ErrorCode
    duplicate_of: int | None = None

    @property
    def append(self) -> bool:
        return self.error == ErrorCode.NONE and self.duplicate_of is None


APPEND = Verdict(ErrorCode.NONE)


class ProducerStateTable:
    """Per partition log, per producer id: the epoch and the last batches appended."""

    def __init__(self) -> None:
        self._by_log: weakref.WeakKeyDictionary[PartitionLogSeam, dict[int, _ProducerEntry]] = (
            weakref.WeakKeyDictionary()
        )

    def check(self, log: PartitionLogSeam, batch: BatchIdentity) -> Verdict:
        if batch.producer_id == NO_PRODUCER_ID:
            return APPEND
        if log not in self._by_log:
            self._rebuild(log)
        entry = self._by_log[log].get(batch.producer_id)
        if entry is None:
            return APPEND
        if batch.producer_epoch < entry.epoch:
            return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH)
        if batch.producer_epoch > entry.epoch:
            return APPEND if batch.first_sequence == 0 else Verdict(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        for first, last, base_offset in entry.batches:
            if (first, last) == (batch.first_sequence, batch.last_sequence):
                return Verdict(ErrorCode.NONE, duplicate_of=base_offset)
        newest_last = entry.batches[-1][1]
        if batch.first_sequence == next_sequence(newest_last):
            return APPEND
        return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def _rebuild(self, log: PartitionLogSeam) -> None:
        """Replay the producer fields of the recent batch headers (no records are parsed).
        Transaction markers carry the producer id but no sequence (Produce never records
        them), so they are stepped over: counting one would make the producer's next batch
        look out of order."""
        self._by_log[log] = {}
        tail_start = max(log.log_start_offset, log.log_end_offset - REBUILD_TAIL_OFFSETS)
        for header in log.batch_headers(tail_start):
            if header.producer_id == NO_PRODUCER_ID or header.attributes & CONTROL:
                continue
            last = last_sequence(header.base_sequence, header.last_offset_delta)
            self.record(log, BatchIdentity(header.producer_id, header.producer_epoch,
                                           header.base_sequence, last), header.base_offset)

    def record(self, log: PartitionLogSeam, batch: BatchIdentity, base_offset: int) -> None:
        if batch.producer_id == NO_PRODUCER_ID:
            return
        producers = self._by_log.setdefault(log, {})
        entry = producers.get(batch.producer_id)
        if entry is None or batch.producer_epoch > entry.epoch:
            entry = producers[batch.producer_id] = _ProducerEntry(batch.producer_epoch)
        entry.batches.append((batch.first_sequence, batch.last_sequence, base_offset))


class ProducerIdAllocator:
    """Hands out producer ids. A single node needs no stored counter: the sequence starts from
    the wall clock in milliseconds, which only moves forward between runs. A cluster's brokers
    draw from blocks the store hands each of them (`allocate_block`, the store's
    allocate_producer_ids: no two brokers ever get the same id), as Kafka's brokers draw from
    blocks of 1000 the controller hands out; an OSError (the store unreachable) leaves the
    allocator ready to ask again."""

    def __init__(self, allocate_block: Callable[[], range] | None = None) -> None:
        self._allocate_block = allocate_block
        self._ids: Iterator[int] = (iter(()) if allocate_block is not None
                                    else itertools.count(int(time.time() * 1000)))

    def next_id(self) -> int:
        found = next(self._ids, None)
        if found is None:
            assert self._allocate_block is not None  # the clock's count never ends
            block = self._allocate_block()
            self._ids = iter(block)
            found = next(self._ids)
        return found
