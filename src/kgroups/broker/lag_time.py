"""Lag in seconds: how old the first record a group has not consumed is.

The committed offset names the next record the group will read; its timestamp (CreateTime as
the producer set it, or LogAppendTime where the topic asks for that) against now is how far
behind the group is in time, which is what an operator means by "lag" more often than a count
of records. The broker reads the record from its own log; `kgroups groups describe` reads it
with a Fetch, as any Kafka tool would.

When that record is not at hand, the figure is an estimate, and a lower bound:
- the group is caught up (committed offset at or past the log end): 0;
- the record was compacted away or deleted by retention: the first record the log still holds
  after it is used; it was appended later, so the real lag is at least that old;
- no record after the committed offset can be read (only transaction markers, or a read
  error): no figure (describe prints "-", metrics omit the series).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from kgroups.log.batch import CONTROL, BatchCorruptError, check_batch, records_of
from kgroups.log.partition_log import OffsetOutOfRangeError, PartitionLog

# Enough for the first batch in nearly every log; the log returns one whole batch anyway.
_READ_BYTES = 64 * 1024
_MAX_READS = 4  # a few batches of transaction markers at most before giving up


def first_timestamp(records: bytes, offset: int) -> tuple[int | None, int | None]:
    """(timestamp of the first data record at or after `offset` in `records`, the last offset
    walked past): transaction markers are stepped over; a batch cut short at the end (a Fetch
    may cut the last one) or damaged ends the walk."""
    last = None
    position = 0
    try:
        while position < len(records):
            header, end = check_batch(records, position)
            if not header.attributes & CONTROL:
                for record_offset, timestamp, *_ in records_of(records, position, end, header,
                                                               False):
                    if record_offset >= offset:
                        return timestamp, record_offset
            last = header.base_offset + header.last_offset_delta
            position = end
    except BatchCorruptError:
        pass
    return None, last


@dataclass(frozen=True, slots=True)
class _Batch:
    base: int
    last: int
    offsets: list[int]  # of its data records, ascending
    timestamps: list[int]  # theirs, in the same order


class RecordTimes:
    """Timestamps read from one partition's log, each batch read and decoded once: a scrape
    asks for many groups' committed offsets, and those of busy partitions share batches
    (decoding a 1000-record batch once per group made a scrape of 1000 groups take seconds).
    Use a fresh one per scrape: a batch may since have been compacted or deleted."""

    def __init__(self, log: PartitionLog) -> None:
        self._log = log
        self._bases: list[int] = []
        self._batches: list[_Batch] = []

    def first_unconsumed(self, committed: int) -> int | None:
        """The timestamp of the record at `committed`, or of the first the log holds after it
        (None when there is none, or it cannot be read)."""
        log = self._log
        position = max(committed, log.log_start_offset)
        for _ in range(_MAX_READS):
            if position >= log.log_end_offset:
                return None
            batch = self._batch_holding(position)
            if batch is None:
                return None
            index = bisect_left(batch.offsets, position)
            if index < len(batch.offsets):
                return batch.timestamps[index]
            position = batch.last + 1
        return None

    def _batch_holding(self, position: int) -> _Batch | None:
        slot = bisect_right(self._bases, position) - 1
        if slot >= 0 and self._batches[slot].last >= position:
            return self._batches[slot]
        try:
            data = self._log.read(position, _READ_BYTES)
            header, end = check_batch(data, 0)
            rows = () if header.attributes & CONTROL else records_of(data, 0, end, header, False)
        except (OffsetOutOfRangeError, OSError, BatchCorruptError):
            return None
        batch = _Batch(header.base_offset, header.base_offset + header.last_offset_delta,
                       [row[0] for row in rows], [row[1] for row in rows])
        slot = bisect_right(self._bases, batch.base)
        self._bases.insert(slot, batch.base)
        self._batches.insert(slot, batch)
        return batch


def lag_seconds(committed: int, log_end: int, timestamp: int | None, now_ms: int) -> float | None:
    """Seconds behind: 0 when caught up, else now minus the first unconsumed record's time."""
    if committed >= log_end:
        return 0.0
    if timestamp is None or timestamp < 0:  # -1: a record written without a timestamp
        return None
    return max(now_ms - timestamp, 0) / 1000
