"""One segment: a `<20-digit base offset>.log` file of whole batches and its `.index` (and,
once a transaction aborted in it, its `.txnindex`: kgroups.log.txn_index).

The offset index is Kafka's: 8-byte entries (offset relative to the segment's base as int32,
byte position as int32), one per `index.interval.bytes` of log, each naming the last offset of
the batch that starts at that position. It is only a shortcut into the log: an index that does
not make sense is rebuilt from the log rather than trusted.

A segment holds one file descriptor, its `.log`, as a Kafka broker does (Kafka memory-maps its
indexes and closes their files). The index lives in memory and goes to its file whole
(`write_index`, fsynced) when the segment stops taking appends (a roll), when it is rebuilt, and
when the log closes; the active segment's index file is never trusted anyway, since opening a
log rebuilds it from the batches it checks. So a partition of one segment holds one descriptor,
not two.

A failed or short write (ENOSPC, EIO) must not leave part of a batch in the file: the next
append would land after it and every batch from there on would be unreadable. So an append that
fails cuts the file back to where it ended before it, and the in-memory size and index only
move once the bytes are written. If even that cut fails, the segment remembers it and every
later append tries the cut again first, failing until it succeeds.
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from bisect import bisect_left
from pathlib import Path

from kgroups.log.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchCorruptError,
    peek_batch_header,
)

logger = logging.getLogger(__name__)

INDEX_ENTRY = struct.Struct(">ii")
SCAN_WINDOW = 256 * 1024
CHECK_WINDOW = 4 * 1024 * 1024
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class SegmentCorruptError(BatchCorruptError):
    """A batch inside a segment that is not where the log says it is; names file and byte."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"corrupt batch in {path} at byte {position}: {reason}", position)
        self.path = path
        self.reason = reason


class UnrepairedTailError(OSError):
    """An earlier failed append left bytes at the end of a segment that could not be cut off."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Segment:
    """The log file's descriptor and the in-memory offset index of one segment."""

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.log_path = directory / f"{segment_name(base_offset)}.log"
        self.index_path = directory / f"{segment_name(base_offset)}.index"
        self.txn_index_path = directory / f"{segment_name(base_offset)}.txnindex"
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.size = os.fstat(self.fd).st_size
            if not self.size and not self.index_path.exists():  # new: Kafka's pair of files
                os.close(os.open(self.index_path, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError:
            os.close(self.fd)
            raise
        self.index_offsets = array("q")  # absolute last offsets, for bisect
        self.index_positions = array("q")
        self._index_file = bytearray()  # the same entries as the file holds them
        self.bytes_since_index = 0
        self.next_offset = base_offset
        self.cached_max_timestamp: int | None = None
        self._unrepaired: int | None = None  # the log size to cut back to

    # --------------------------------------------------------------------------- writing

    def append(self, data: bytes, last_offset: int, index_interval_bytes: int) -> None:
        """Write one batch at the end; on any OSError the file is as it was before."""
        self.repair_tail()
        position = self.size
        add_entry = self.bytes_since_index > index_interval_bytes
        try:
            _write_all(self.fd, data)
        except OSError:
            self._cut_back(position)
            raise
        self.size += len(data)
        self.next_offset = last_offset + 1
        self.cached_max_timestamp = None
        if add_entry:
            self._add_index_entry(last_offset, position)
            self.bytes_since_index = 0
        self.bytes_since_index += len(data)

    def _cut_back(self, size: int) -> None:
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:
            self._unrepaired = size
            logger.error("could not cut %s back to byte %d after a failed append (%s): no "
                         "appends to it until that cut succeeds", self.log_path, size, exc)

    def repair_tail(self) -> None:
        """Cut off what a failed append left behind, if an earlier cut failed; raises
        UnrepairedTailError while it still cannot."""
        if self._unrepaired is None:
            return
        size = self._unrepaired
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:
            raise UnrepairedTailError(
                exc.errno, f"{self.log_path} still ends in a failed append past byte {size}: "
                           f"{exc.strerror}") from exc
        self._unrepaired = None
        logger.warning("cut %s back to byte %d: appends resume", self.log_path, size)

    def _add_index_entry(self, last_offset: int, position: int) -> None:
        self.index_offsets.append(last_offset)
        self.index_positions.append(position)
        self._index_file += INDEX_ENTRY.pack(last_offset - self.base_offset, position)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.size = size

    def sync(self) -> None:
        os.fsync(self.fd)

    def write_index(self, *, durable: bool = True) -> None:
        """Write the in-memory index to its file, whole, and fsync it unless not `durable`
        (a descriptor held only meanwhile). Its bytes are kept packed as entries are added, so
        a roll of a 1 GiB segment writes its 2 MiB index without packing 262,144 entries."""
        fd = os.open(self.index_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, bytes(self._index_file))
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        os.close(self.fd)

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)
        self.txn_index_path.unlink(missing_ok=True)

    # --------------------------------------------------------------------------- reading

    def pread(self, size: int, position: int) -> bytes:
        """Up to `size` bytes at `position`, never past the segment's end: bytes beyond it are
        not part of the log (a failed append whose cut back has not succeeded yet)."""
        return os.pread(self.fd, max(min(size, self.size - position), 0), position)

    def batch_positions(self, start: int = 0) -> list[tuple[int, int, int, int]]:
        """(position, base offset, last offset, size) of every batch from `start`, reading
        headers only. Raises SegmentCorruptError at the first batch that does not fit."""
        found: list[tuple[int, int, int, int]] = []
        self._walk_headers(start, found)
        return found

    def check_framing(self) -> None:
        """Chain every batch by its length to the exact end of the file, checking magic and
        that base offsets move forward; raises SegmentCorruptError naming the byte. This runs
        for every older segment when a log opens, so it does as little per batch as it can
        (about a third of `batch_positions`); a bad batch is then named by the full walk."""
        position = 0
        expected_base = self.base_offset
        offset_and_length = _OFFSET_AND_LENGTH.unpack_from
        smallest = HEADER_SIZE - LOG_OVERHEAD
        while position < self.size:
            window = self.pread(CHECK_WINDOW, position)
            last_header = len(window) - HEADER_SIZE
            pos = 0
            while pos <= last_header:
                base, length = offset_and_length(window, pos)
                if length < smallest or window[pos + 16] != MAGIC or base < expected_base:
                    self._name_damage(position + pos)
                expected_base = base + 1
                pos += LOG_OVERHEAD + length
            if pos == 0 or position + pos > self.size:
                self._name_damage(position + pos)
            position += pos

    def _name_damage(self, near: int) -> None:
        """Raise the full walk's SegmentCorruptError for a damage the quick walk saw."""
        self._walk_headers(0, None)
        raise SegmentCorruptError(self.log_path, near, "batches do not chain to the end")

    def _walk_headers(self, start: int, found: list[tuple[int, int, int, int]] | None) -> None:
        position = start
        expected_base = self.base_offset if start == 0 else 0
        while position < self.size:
            window = self.pread(SCAN_WINDOW, position)
            pos = 0
            while pos + HEADER_SIZE <= len(window):
                at = position + pos
                try:
                    base, last, size = peek_batch_header(window, pos)
                except BatchCorruptError as exc:
                    raise SegmentCorruptError(
                        self.log_path, at, str(exc).replace(f" at byte {pos}", "")) from exc
                if at + size > self.size:
                    raise SegmentCorruptError(
                        self.log_path, at, f"batch of {size} bytes runs past the end "
                                           f"({self.size} bytes)")
                if base < expected_base or last < base:
                    raise SegmentCorruptError(
                        self.log_path, at, f"offsets {base}..{last} do not follow "
                                           f"{expected_base - 1}")
                if found is not None:
                    found.append((at, base, last, size))
                expected_base = last + 1
                pos += size
            if pos == 0:
                raise SegmentCorruptError(self.log_path, position, "batch header is cut short")
            position += pos

    def load_index(self) -> bool:
        """Load the index file; False (and nothing loaded) when it is missing or does not fit
        this log."""
        try:
            raw = self.index_path.read_bytes()
        except FileNotFoundError:
            return False
        if len(raw) % INDEX_ENTRY.size:
            return False
        previous = -1
        offsets = array("q")
        positions = array("q")
        for relative, position in INDEX_ENTRY.iter_unpack(raw):
            if relative <= previous or not 0 <= position < self.size:
                return False
            previous = relative
            offsets.append(self.base_offset + relative)
            positions.append(position)
        self.index_offsets, self.index_positions = offsets, positions
        self._index_file = bytearray(raw)
        return True

    def rebuild_index(self, batches: list[tuple[int, int, int, int]], interval: int) -> None:
        """Recreate the index (memory and file, fsynced) from the batch list of this
        segment."""
        self.index_offsets = array("q")
        self.index_positions = array("q")
        self._index_file = bytearray()
        since = 0
        for position, _base, last, size in batches:
            if since > interval:
                self._add_index_entry(last, position)
                since = 0
            since += size
        self.bytes_since_index = since
        self.write_index()

    def start_position_for(self, offset: int) -> int:
        """A byte position at or before the batch holding `offset` (from the index)."""
        slot = bisect_left(self.index_offsets, offset) - 1
        return 0 if slot < 0 else self.index_positions[slot]

    def max_timestamp(self) -> int:
        """The largest record timestamp in the segment (-1 when empty), read from batch headers."""
        if self.cached_max_timestamp is None:
            largest = -1
            for position, _base, _last, _size in self.batch_positions():
                raw = self.pread(8, position + _MAX_TIMESTAMP_AT)
                largest = max(largest, _MAX_TIMESTAMP.unpack(raw)[0])
            self.cached_max_timestamp = largest
        return self.cached_max_timestamp
