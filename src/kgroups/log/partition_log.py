"""One topic-partition as a directory of segment files, laid out as a Kafka broker lays it out.

Appends go to the last (active) segment and become durable only at `flush()`; the durability
module batches concurrent waiters onto shared flushes. Before a segment is rolled it is synced,
so after a crash only the active segment can hold a torn batch: `open` checks it batch by batch
(CRC included), cuts it back to the last whole batch and says so in one log line. Older segments
were whole when they were synced, so a batch that does not fit in one of them is damage, not a
crash: `open` walks their batch headers and refuses the whole log (SegmentCorruptError, naming
file and byte) rather than cut away what follows, which was acknowledged.

Disk errors follow Kafka's log.dir failure handling, scaled to one partition: a failed append
leaves the files as they were (see `Segment.append`) and the log refuses appends with an
OSError, Kafka's KAFKA_STORAGE_ERROR, until one succeeds again. A failed fsync is worse: the
kernel may already have dropped the pages it could not write, so nothing written since the last
good fsync can be trusted; the log then stays offline for writes until it is opened again, when
the active segment's CRC check decides what survived.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

from kgroups.log.batch import (
    HEADER_SIZE,
    LENGTH_AT,
    LOG_OVERHEAD,
    PRODUCER_ID_AT,
    BatchCorruptError,
    BatchHeader,
    check_batch,
    decode_batch,
    peek_batch_header,
    read_header,
    set_base_offset,
)
from kgroups.log.config import LogConfig
from kgroups.log.segment import CHECK_WINDOW, SCAN_WINDOW, Segment
from kgroups.log.transaction_state import REBUILD_TAIL_OFFSETS, PartitionTransactions
from kgroups.log.txn_index import AbortedTransaction, append_entry
from kgroups.log.txn_index import load as load_txn_index

logger = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
# What a crashed compaction leaves behind (kgroups' and Kafka's cleaner alike): the segment it
# was replacing is still intact, so the half-written copy is simply removed.
_LEFTOVER_SUFFIX = ".cleaned"
_LENGTH = struct.Struct(">i")
_PRODUCER_ID = struct.Struct(">q")
NO_PRODUCER = -1


class OffsetOutOfRangeError(ValueError):
    """A fetch below the log start or beyond the log end (Kafka's OFFSET_OUT_OF_RANGE)."""


class LogOfflineError(OSError):
    """The log takes no appends and no flushes until it is opened again (a failed fsync)."""


class PartitionLog:
    """Segments of one partition, in offset order; the last one takes appends.

    Not thread-safe beyond `flush`: appends, reads, retention and compaction belong to one
    thread at a time (the broker's event loop); `flush` alone may run in a worker thread
    concurrently with them. A reader in another thread must not overlap compaction or
    retention of the same log, which close and replace segment files."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[Segment],
                 log_start_offset: int = 0) -> None:
        self.directory = directory
        self.config = config
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        # Where DeleteRecords put the start (Kafka's logStartOffset); the first segment's base
        # when that is higher (retention deleted past it): the start never moves back.
        self._start_offset = log_start_offset
        self._dirty: set[Segment] = set()
        self._directory_dirty = False
        self._sync_lock = threading.Lock()
        self.write_error: str | None = None  # the last append failed; cleared by a good one
        self.sync_failure: OSError | None = None  # an fsync failed: offline until reopened
        # Offsets below this are on disk (Kafka's recovery point); what opened was flushed.
        self.flushed_through = self.log_end_offset
        # The end of what appends have handed to `flush` (their segment marked dirty).
        self._registered_end = self.flushed_through
        self.last_flush = time.monotonic()
        # Open transactions, the LSO and the aborted ones (kgroups.log.transaction_state),
        # loaded at first use: opening many logs reads no transaction state.
        self._transactions: PartitionTransactions | None = None

    # ----------------------------------------------------------------------------- opening

    @classmethod
    def open(
        cls, directory: Path, config: LogConfig, *, check_older_segments: bool = True,
        log_start_offset: int = 0,
    ) -> PartitionLog:
        """Open (creating if needed) the log in `directory`. `check_older_segments=False` skips
        the framing walk of segments whose index fits, for a log whose every byte its reader
        checks anyway right after (the coordinator's load of __consumer_offsets, CRC included,
        naming file and byte too): the walk costs ~0.3 us per batch. `log_start_offset` is the
        start DeleteRecords left (the log-start-offset checkpoint); a log that ends below it
        (a crash cut the tail it was moved into) starts over, empty, at it, so that no offset
        a consumer was told is gone is handed out again."""
        directory.mkdir(parents=True, exist_ok=True)
        for leftover in directory.iterdir():
            if leftover.name.endswith(_LEFTOVER_SUFFIX):
                leftover.unlink()
        bases = sorted(
            int(match.group(1))
            for match in (_SEGMENT_FILE.match(path.name) for path in directory.iterdir())
            if match
        )
        segments: list[Segment] = []
        try:  # whatever fails (damage, or no descriptor left: EMFILE), nothing stays open
            for base in bases or [0]:
                segments.append(Segment(directory, base))
            for segment, next_segment in pairwise(segments):
                segment.next_offset = next_segment.base_offset
                if segment.load_index():
                    if check_older_segments:
                        segment.check_framing()
                else:
                    segment.rebuild_index(segment.batch_positions(), config.index_interval_bytes)
            _recover_active(segments[-1], config)
            if log_start_offset > segments[-1].next_offset:
                logger.warning("%s ends at offset %d, below its log start offset %d: its "
                               "segments are deleted and it starts over, empty, at %d",
                               directory, segments[-1].next_offset, log_start_offset,
                               log_start_offset)
                for segment in segments:
                    segment.delete()
                segments = [Segment(directory, log_start_offset)]
                segments[0].next_offset = log_start_offset
            fsync_path(directory)
        except BaseException:
            for segment in segments:
                segment.close()
            raise
        return cls(directory, config, segments, log_start_offset)

    @property
    def transactions(self) -> PartitionTransactions:
        """The partition's transactions; at first use, the aborted ones from the segments'
        `.txnindex` files (a torn tail cut), then the open ones from the log's tail
        (kgroups.log.transaction_state says the bound). Loaded lazily: a broker opens every
        log at start, and __consumer_offsets' are opened without the framing walk the rebuild
        would otherwise make of a damaged segment before the coordinator's load names it."""
        if self._transactions is None:
            aborted: list[AbortedTransaction] = []
            for segment in self._segments:
                aborted += load_txn_index(segment.txn_index_path, segment.next_offset)
            tracker = PartitionTransactions(aborted)
            tail = max(self.log_start_offset, self.log_end_offset - REBUILD_TAIL_OFFSETS)
            tracker.rebuild(self.producer_batch_headers(tail),
                            lambda offset: self.read(offset, 1), self._store_abort)
            self._transactions = tracker
        return self._transactions

    def _store_abort(self, aborted: AbortedTransaction) -> None:
        """Into the `.txnindex` of the segment holding the ABORT marker. A failed write is
        logged and the marker's append stands: the entry is listed from memory, and the
        rebuild after a restart writes it again from the marker (within its bound)."""
        slot = bisect_right(self._bases, aborted.last_offset) - 1
        try:
            append_entry(self._segments[slot].txn_index_path, aborted)
        except OSError as exc:
            logger.error("could not add producer %d's aborted transaction (offsets %d-%d) to "
                         "%s (%s)", aborted.producer_id, aborted.first_offset,
                         aborted.last_offset, self._segments[slot].txn_index_path, exc)

    # ----------------------------------------------------------------------------- offsets

    @property
    def log_start_offset(self) -> int:
        """The first offset a consumer may read: the first segment's base, or above it where
        DeleteRecords moved it."""
        return max(self._start_offset, self._segments[0].base_offset)

    def advance_log_start(self, offset: int) -> bool:
        """Move the log start offset up to `offset` (DeleteRecords); a lower offset changes
        nothing. Returns whether it moved. Beyond the log end raises OffsetOutOfRangeError.
        The segments it leaves wholly below stay until `drop_segments_below_start`, so the
        caller can first make the new start durable."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is beyond the log end offset {self.log_end_offset}")
        if offset <= self.log_start_offset:
            return False
        self._start_offset = offset
        return True

    def drop_segments_below_start(self) -> int:
        """Delete the segments whose every offset is below the log start offset (never the
        active one: Kafka deletes a segment once the next one starts at or below the start).
        Returns how many went."""
        deleted = 0
        while len(self._segments) > 1 and self._segments[1].base_offset <= self._start_offset:
            self._delete_oldest_segment()
            deleted += 1
        if deleted:
            fsync_path(self.directory)
        return deleted

    def _delete_oldest_segment(self) -> None:
        """Remove the first segment (never the active one: callers keep one); the caller
        fsyncs the directory once after its deletions."""
        oldest = self._segments[0]
        with self._sync_lock:
            self._dirty.discard(oldest)
            oldest.delete()
            del self._segments[0]
            del self._bases[0]
        if self._transactions is not None:
            self._transactions.forget_below(self._bases[0])

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    def leader_epoch_starts(self) -> list[tuple[int, int]]:
        """[(epoch, start offset)] for OffsetForLeaderEpoch: a single node leads its partitions
        at Kafka's first epoch, 0, for their whole life, from the log start."""
        return [(0, self.log_start_offset)]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    # ----------------------------------------------------------------------------- writing

    def append_batch(self, batch: bytes) -> tuple[int, int]:
        """Append one RecordBatch v2, giving it the next offsets (the base offset is rewritten;
        the CRC does not cover it). Returns (base offset, last offset). Not yet durable."""
        header, end = check_batch(batch, 0)
        if end != len(batch):
            raise BatchCorruptError(
                f"expected exactly one batch, found {len(batch) - end} bytes after it", end
            )
        if header.last_offset_delta < 0 or header.records_count < 1:
            raise BatchCorruptError(
                f"batch has lastOffsetDelta {header.last_offset_delta} and "
                f"{header.records_count} records", 0
            )
        if self.sync_failure is not None:
            raise self._offline()
        transactions = self.transactions  # loaded before this batch is in the log
        try:
            active = self._segments[-1]
            if active.size and active.size + len(batch) > self.config.segment_bytes:
                active = self._roll()
            base = active.next_offset
            last = base + header.last_offset_delta
            active.append(set_base_offset(batch, base), last, self.config.index_interval_bytes)
        except OSError as exc:
            if self.write_error is None and self.sync_failure is None:
                logger.error("append to %s failed (%s): it answers KAFKA_STORAGE_ERROR until an "
                             "append succeeds again", self.directory, exc)
            self.write_error = str(exc)
            raise
        if self.write_error is not None:
            logger.warning("appends to %s succeed again", self.directory)
            self.write_error = None
        with self._sync_lock:
            self._dirty.add(active)
            self._registered_end = last + 1
        aborted = transactions.observe(header, base, lambda: batch)
        if aborted is not None:
            self._store_abort(aborted)
        return base, last

    def _offline(self) -> LogOfflineError:
        return LogOfflineError(
            errno.EIO, f"{self.directory} is offline until it is opened again: an fsync failed "
                       f"({self.sync_failure})")

    def _note_sync_failure(self, exc: OSError) -> None:
        """Called with the sync lock held."""
        if self.sync_failure is None:
            self.sync_failure = exc
            logger.error("fsync of %s failed (%s): what was written since the last good fsync "
                         "is in doubt; the partition takes no more writes until the broker "
                         "restarts", self.directory, exc)

    def _roll(self) -> Segment:
        """Start a new segment at the log end, after syncing the old one, so that a crash can
        only ever tear the newest segment; the old one's index goes to its file now that it
        is complete (see kgroups.log.segment)."""
        old = self._segments[-1]
        old.repair_tail()
        with self._sync_lock:
            try:
                old.sync()
            except OSError as exc:
                self._note_sync_failure(exc)
                raise
            self._dirty.discard(old)
            self._directory_dirty = True
        old.write_index()  # failing, the roll (and its append) fails; the next append retries
        segment = Segment(self.directory, old.next_offset)
        segment.next_offset = old.next_offset
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    @property
    def unflushed_messages(self) -> int:
        """Messages appended since the last fsync began (Kafka's log end - recovery point)."""
        return self.log_end_offset - self.flushed_through

    @property
    def flush_due(self) -> bool:
        """flush.messages: an append may be acknowledged only after an fsync."""
        return self.unflushed_messages >= self.config.flush_messages

    def flush(self) -> None:
        """fsync everything appended so far (safe to call from a worker thread). A closed log
        (its topic deleted meanwhile) has nothing left to flush."""
        with self._sync_lock:
            if self.closed:
                return
            if self.sync_failure is not None:
                raise self._offline()
            target = self._registered_end  # what the dirty segments below hold
            try:
                for segment in list(self._dirty):
                    segment.sync()
                    self._dirty.discard(segment)
                if self._directory_dirty:
                    fsync_path(self.directory)
                    self._directory_dirty = False
            except OSError as exc:
                self._note_sync_failure(exc)
                raise
            self.flushed_through = max(self.flushed_through, target)
            self.last_flush = time.monotonic()

    # ----------------------------------------------------------------------------- reading

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> bytes:
        """Whole batches from the one holding `offset`, up to `max_bytes`; with `min_one`, at
        least one batch however large (as Kafka does for the first partition of a Fetch with
        data, so an oversized batch cannot stall a consumer), else nothing when the first
        batch is larger than `max_bytes`."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        slot = bisect_right(self._bases, offset) - 1
        for segment in self._segments[slot:]:
            position = _find_batch(segment, offset)
            if position is not None:
                return _read_batches(segment, position, max_bytes, min_one)
        return b""

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset at or above the log start whose record timestamp is >= `timestamp`
        (ListOffsets by time)."""
        start = self.log_start_offset
        for segment in self._segments:
            if segment.max_timestamp() < timestamp:
                continue
            for position, _base, last, size in segment.batch_positions():
                if last < start:
                    continue
                batch, _ = decode_batch(segment.pread(size, position))
                if batch.max_timestamp < timestamp:
                    continue
                for record in batch.records:
                    if record.timestamp >= timestamp and record.offset >= start:
                        return record.offset
        return None

    def batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches holding `from_offset` and after, in offset order, read
        without the records (the idempotent producers' state is rebuilt from them)."""
        for segment in self._segments:
            if segment.next_offset <= from_offset:
                continue
            start = segment.start_position_for(max(from_offset, segment.base_offset))
            for position, _base, _last, _size in segment.batch_positions(start):
                yield read_header(segment.pread(HEADER_SIZE, position))

    def producer_batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches with a producer id (idempotent or transactional, markers
        included) from the one holding `from_offset` on: what the transaction tracker's
        rebuild replays. Batches without one are stepped over by their length in large
        windows (~0.3 us each, as `Segment.check_framing`), so a log written by plain
        producers costs its tail's reads and little else."""
        length_at, producer_at = _LENGTH.unpack_from, _PRODUCER_ID.unpack_from
        for segment in self._segments:
            if segment.next_offset <= from_offset:
                continue
            position = segment.start_position_for(max(from_offset, segment.base_offset))
            while position < segment.size:
                window = segment.pread(CHECK_WINDOW, position)
                pos = 0
                while pos + HEADER_SIZE <= len(window):
                    if producer_at(window, pos + PRODUCER_ID_AT)[0] != NO_PRODUCER:
                        yield read_header(window, pos)
                    pos += LOG_OVERHEAD + length_at(window, pos + LENGTH_AT)[0]
                if pos == 0:
                    break  # not a whole header left: nothing more to read
                position += pos

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp, the first such record
        when several share it (ListOffsets MAX_TIMESTAMP); None for an empty log. Segments and
        batches are skipped by their headers' max timestamps, so one batch is decoded."""
        largest = max((segment.max_timestamp() for segment in self._segments), default=-1)
        if largest < 0:
            return None
        segment = next(s for s in self._segments if s.max_timestamp() == largest)
        for position, base, _last, size in segment.batch_positions():
            batch, _ = decode_batch(segment.pread(size, position))
            if batch.max_timestamp == largest:
                return largest, next((r.offset for r in batch.records if r.timestamp == largest),
                                     base)
        return None

    # ------------------------------------------------------------------------- maintenance

    def segments(self) -> list[Segment]:
        """The segments in offset order (the last is active); for compaction and retention."""
        return list(self._segments)

    def replace_segment(self, segment: Segment, data: bytes) -> None:
        """Swap a non-active segment's contents for `data` (whole batches, same offsets):
        written to a side file, synced, then renamed over the original, so a crash leaves
        either the old or the new segment. Empty `data` deletes the segment, except the first
        one, which stays (empty) so that compaction never moves the log start offset."""
        if segment is self._segments[-1]:
            raise ValueError("the active segment cannot be replaced")
        index = self._segments.index(segment)
        with self._sync_lock:
            self._dirty.discard(segment)
            if not data and index > 0:
                segment.delete()
                del self._segments[index]
                del self._bases[index]
                fsync_path(self.directory)
                return
            side = segment.log_path.with_name(segment.log_path.name + ".cleaned")
            try:
                with open(side, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
            except OSError:
                side.unlink(missing_ok=True)  # the original is untouched; free the space
                raise
            segment.close()
            os.replace(side, segment.log_path)
            fsync_path(self.directory)
            fresh = Segment(self.directory, segment.base_offset)
            fresh.next_offset = segment.next_offset
            fresh.rebuild_index(fresh.batch_positions(), self.config.index_interval_bytes)
            fresh.sync()
            self._segments[index] = fresh

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest segments past retention.ms or beyond retention.bytes (never the
        active one); returns how many went. For `delete` cleanup policies only."""
        deleted = 0
        excess = self.size_bytes - self.config.retention_bytes
        while len(self._segments) > 1:
            oldest = self._segments[0]
            too_old = (
                self.config.retention_ms >= 0
                and now_ms - oldest.max_timestamp() > self.config.retention_ms
            )
            too_big = self.config.retention_bytes >= 0 and excess - oldest.size >= 0
            if not (too_old or too_big):
                break
            excess -= oldest.size
            self._delete_oldest_segment()
            deleted += 1
        if deleted:
            fsync_path(self.directory)
        return deleted

    @property
    def closed(self) -> bool:
        """Closed (its topic deleted, or the broker stopping): no offsets, nothing to flush."""
        return not self._segments

    def close(self) -> None:
        """Close the files, the active segment's index written first, so that a cleanly
        closed log's index files are all whole (a reader other than kgroups may trust them;
        kgroups rebuilds the active one's on open either way, hence no fsync and no error for
        it)."""
        with self._sync_lock:
            if self._segments:
                with contextlib.suppress(OSError):
                    self._segments[-1].write_index(durable=False)
            for segment in self._segments:
                segment.close()
            self._segments = []
            self._dirty = set()


def _recover_active(segment: Segment, config: LogConfig) -> None:
    """Check every batch of the active segment, CRC included; cut a torn or corrupt tail."""
    batches: list[tuple[int, int, int, int]] = []
    position = 0
    reason = ""
    expected_base = segment.base_offset
    while position < segment.size:
        window = segment.pread(max(SCAN_WINDOW, HEADER_SIZE), position)
        try:
            _base, _last, size = peek_batch_header(window, 0)
            if size > len(window):
                window = segment.pread(size, position)
            header, _ = check_batch(window[:size], 0)
        except BatchCorruptError as exc:
            reason = str(exc)
            break
        if header.base_offset < expected_base:
            reason = f"batch base offset {header.base_offset} goes backwards"
            break
        last = header.base_offset + header.last_offset_delta
        batches.append((position, header.base_offset, last, size))
        expected_base = last + 1
        position += size
    if position < segment.size:
        logger.warning(
            "truncated torn tail of %s at byte %d (%d bytes dropped: %s)",
            segment.log_path, position, segment.size - position, reason.replace(" at byte 0", ""),
        )
        segment.truncate(position)
        os.fsync(segment.fd)
    segment.next_offset = batches[-1][2] + 1 if batches else segment.base_offset
    segment.rebuild_index(batches, config.index_interval_bytes)


def _find_batch(segment: Segment, offset: int) -> int | None:
    """Position of the first batch in `segment` whose last offset is >= `offset`."""
    position = segment.start_position_for(offset)
    while position < segment.size:
        window = segment.pread(SCAN_WINDOW, position)
        pos = 0
        while pos + HEADER_SIZE <= len(window):
            _base, last, size = peek_batch_header(window, pos)
            if last >= offset:
                return position + pos
            pos += size
        position += pos
    return None


def _read_batches(segment: Segment, position: int, max_bytes: int, min_one: bool) -> bytes:
    window = segment.pread(max(max_bytes, HEADER_SIZE), position)
    _base, _last, first_size = peek_batch_header(window, 0)
    if first_size > max_bytes and not min_one:
        return b""
    if first_size >= len(window):
        return window if first_size == len(window) else segment.pread(first_size, position)
    end = first_size
    while end + HEADER_SIZE <= len(window):
        _base, _last, size = peek_batch_header(window, end)
        if end + size > len(window):
            break
        end += size
    return window[:end]


def fsync_path(path: Path) -> None:
    """Make a file's bytes durable or, for a directory, the files created, renamed and deleted
    in it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
