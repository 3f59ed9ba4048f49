"""One segment: a `<20-digit base offset>.log` file of whole batches and its `.index`.

The offset index is Kafka's: 8-byte entries (offset relative to the segment's base as int32,
byte position as int32), one per `index.interval.bytes` of log, each naming the last offset of
the batch that starts at that position. It is only a shortcut into the log: an index that does
not make sense is rebuilt from the log rather than trusted.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left
from pathlib import Path

from kgroups.log.batch import HEADER_SIZE, BatchCorruptError, peek_batch_header

INDEX_ENTRY = struct.Struct(">ii")
SCAN_WINDOW = 256 * 1024
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    """File handles and the in-memory offset index of one segment."""

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.log_path = directory / f"{segment_name(base_offset)}.log"
        self.index_path = directory / f"{segment_name(base_offset)}.index"
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.index_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.index_offsets = array("q")  # absolute last offsets, for bisect
        self.index_positions = array("q")
        self.bytes_since_index = 0
        self.next_offset = base_offset
        self.cached_max_timestamp: int | None = None

    # --------------------------------------------------------------------------- writing

    def append(self, data: bytes, last_offset: int, index_interval_bytes: int) -> None:
        position = self.size
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        self.size += len(data)
        self.next_offset = last_offset + 1
        self.cached_max_timestamp = None
        if self.bytes_since_index > index_interval_bytes:
            self._add_index_entry(last_offset, position, write=True)
            self.bytes_since_index = 0
        self.bytes_since_index += len(data)

    def _add_index_entry(self, last_offset: int, position: int, *, write: bool) -> None:
        self.index_offsets.append(last_offset)
        self.index_positions.append(position)
        if write:
            os.write(self.index_fd, INDEX_ENTRY.pack(last_offset - self.base_offset, position))

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.size = size

    def sync(self) -> None:
        os.fsync(self.fd)
        os.fsync(self.index_fd)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.index_fd)

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)

    # --------------------------------------------------------------------------- reading

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)

    def batch_positions(self, start: int = 0) -> list[tuple[int, int, int, int]]:
        """(position, base offset, last offset, size) of every batch from `start`, reading
        headers only. Raises BatchCorruptError at the first batch that does not fit."""
        found = []
        position = start
        while position < self.size:
            window = self.pread(SCAN_WINDOW, position)
            pos = 0
            while pos + HEADER_SIZE <= len(window):
                base, last, size = peek_batch_header(window, pos)
                if position + pos + size > self.size:
                    raise BatchCorruptError(
                        f"batch at byte {position + pos} runs past the end of {self.log_path}",
                        position + pos,
                    )
                found.append((position + pos, base, last, size))
                pos += size
            if pos == 0:
                raise BatchCorruptError(
                    f"batch header at byte {position} of {self.log_path} is cut short", position
                )
            position += pos
        return found

    def load_index(self) -> bool:
        """Load the index file; False (and nothing loaded) when it does not fit this log."""
        raw = os.pread(self.index_fd, os.fstat(self.index_fd).st_size, 0)
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
        return True

    def rebuild_index(self, batches: list[tuple[int, int, int, int]], interval: int) -> None:
        """Recreate the index (memory and file) from the batch list of this segment."""
        self.index_offsets = array("q")
        self.index_positions = array("q")
        since = 0
        for position, _base, last, size in batches:
            if since > interval:
                self._add_index_entry(last, position, write=False)
                since = 0
            since += size
        self.bytes_since_index = since
        entries = b"".join(
            INDEX_ENTRY.pack(offset - self.base_offset, position)
            for offset, position in zip(self.index_offsets, self.index_positions, strict=True)
        )
        os.ftruncate(self.index_fd, 0)
        os.write(self.index_fd, entries)

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
