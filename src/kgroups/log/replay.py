"""The last word per key in a compacted topic's log, for fast state rebuilds.

Rebuilding __consumer_offsets state only needs the final record of each key: every earlier
commit of the same partition is overwritten anyway. Walking the log once and keeping the latest
raw record per key lets a loader decode each key's value once instead of once per commit, which
is what makes replaying a long, repetitive log fast. Transactions are honoured as Kafka's loader
does: a transactional record counts only once its producer's COMMIT marker follows, and is
discarded at an ABORT marker.

Plain uncompressed batches (what a coordinator writes) take a dedicated walk that remembers
where each key's latest value lies and copies only the survivors' values out at the end of the
chunk; every other batch goes through the general record parser.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from operator import itemgetter

from kgroups.log.batch import (
    COMPRESSION_MASK,
    CONTROL,
    HEADER_SIZE,
    TIMESTAMP_LOG_APPEND,
    TRANSACTIONAL,
    BatchCorruptError,
    check_batch,
    read_varint,
    records_of,
)

RawRecord = tuple[int, int, bytes, bytes | None]  # offset, timestamp, key, value
# Where a fast-path record's value lies in the current chunk: offset, timestamp, start, length.
_Located = tuple[int, int, int, int]

_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 = ABORT, 1 = COMMIT)
_COMMIT = 1
_GENERAL_PATH = CONTROL | TRANSACTIONAL | COMPRESSION_MASK | TIMESTAMP_LOG_APPEND
_key = itemgetter(2)
_offset = itemgetter(0)


class LatestPerKey:
    """Feed log bytes in offset order with `add`; `records()` gives each key's last record."""

    def __init__(self) -> None:
        self._latest: dict[bytes, RawRecord] = {}
        self._pending: dict[int, dict[bytes, RawRecord]] = {}
        self.records_seen = 0  # data records walked, control records not counted

    def add(self, data: bytes) -> None:
        """Take every batch in `data` (whole batches, as a segment file or a fetch holds)."""
        if type(data) is not bytes:
            data = bytes(data)
        latest = self._latest
        # Keys whose newest record so far is a fast-path one in this chunk; such an entry is
        # always newer than the key's entry in `latest`.
        located: dict[bytes, _Located] = {}
        pos = 0
        size = len(data)
        try:
            while pos < size:
                header, end = check_batch(data, pos)
                attributes = header[5]
                if not attributes & _GENERAL_PATH:
                    self.records_seen += _locate_latest(data, pos, end, header, located)
                    pos = end
                    continue
                rows = records_of(data, pos, end, header, False)
                if attributes & CONTROL:
                    self._end_transaction(header[9], rows, located)
                    pos = end
                    continue
                self.records_seen += len(rows)
                if attributes & TRANSACTIONAL:
                    self._pending.setdefault(header[9], {}).update(
                        zip(map(_key, rows), rows, strict=True)
                    )
                else:
                    for row in rows:
                        located.pop(row[2], None)
                        latest[row[2]] = row
                pos = end
        finally:
            # Whatever was read before a failure stays: nothing whole is lost.
            for key, (offset, timestamp, start, length) in located.items():
                value = None if length < 0 else data[start : start + length]
                latest[key] = (offset, timestamp, key, value)
        latest.pop(None, None)  # type: ignore[call-overload]  # keyless records are not state
        for pending in self._pending.values():
            pending.pop(None, None)  # type: ignore[call-overload]

    def _end_transaction(
        self, producer_id: int, rows: list[tuple[object, ...]], located: dict[bytes, _Located]
    ) -> None:
        pending = self._pending.pop(producer_id, {})
        for row in rows:
            marker = row[2]
            if isinstance(marker, bytes) and len(marker) >= 4:
                if _CONTROL_KEY.unpack_from(marker)[1] == _COMMIT:
                    self._commit(pending, located)
                return

    def _commit(self, pending: dict[bytes, RawRecord], located: dict[bytes, _Located]) -> None:
        """Apply a committed transaction's records, except where a record written later in the
        log already replaced them (Kafka's loader also keeps the newer one)."""
        latest = self._latest
        for key, row in pending.items():
            newer = located.get(key) or latest.get(key)
            if newer is None or newer[0] < row[0]:
                located.pop(key, None)
                latest[key] = row

    def records(self) -> list[RawRecord]:
        """Each key's last committed record, in offset order (tombstones included)."""
        return sorted(self._latest.values(), key=_offset)


def latest_per_key(chunks: Iterable[bytes]) -> list[RawRecord]:
    """Each key's last committed record across `chunks` (log bytes in offset order)."""
    table = LatestPerKey()
    for chunk in chunks:
        table.add(chunk)
    return table.records()


def _locate_latest(
    data: bytes, batch_pos: int, stop: int, header: tuple[int, ...], located: dict[bytes, _Located]
) -> int:
    """Walk a plain batch's records, noting where each key's value lies; returns the count.
    Same checks as the general parser; 1- and 2-byte varints are decoded inline."""
    pos = batch_pos + HEADER_SIZE
    count = header[12]
    base_offset = header[0]
    base_timestamp = header[7]
    try:
        for _ in range(count):
            if pos >= stop:
                raise BatchCorruptError(
                    f"batch at byte {batch_pos}: holds fewer records than its count {count}", pos
                )
            b = data[pos]
            if b < 0x80:
                record_end = pos + 1 + ((b >> 1) ^ -(b & 1))
                pos += 2
            elif data[pos + 1] < 0x80:
                zigzag = (b & 0x7F) | (data[pos + 1] << 7)
                record_end = pos + 2 + ((zigzag >> 1) ^ -(zigzag & 1))
                pos += 3
            else:
                length, pos = read_varint(data, pos, stop, batch_pos)
                record_end = pos + length
                pos += 1
            if record_end > stop or record_end < pos:
                raise BatchCorruptError(
                    f"batch at byte {batch_pos}: record overruns the batch", pos
                )
            b = data[pos]
            if b < 0x80:
                timestamp_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                timestamp_delta, pos = read_varint(data, pos, record_end, batch_pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = read_varint(data, pos, record_end, batch_pos)
            b = data[pos]
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                key_length, pos = read_varint(data, pos, record_end, batch_pos)
            if key_length < 0:
                key = None
            else:
                key = data[pos : pos + key_length]
                pos += key_length
            b = data[pos]
            if b < 0x80:
                value_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                value_length, pos = read_varint(data, pos, record_end, batch_pos)
            if pos + max(value_length, 0) >= record_end:  # the header count must remain
                raise BatchCorruptError(
                    f"batch at byte {batch_pos}: record fields do not fill its length", pos
                )
            located[key] = (  # type: ignore[index]
                base_offset + offset_delta, base_timestamp + timestamp_delta, pos, value_length
            )
            pos = record_end
    except IndexError as exc:
        raise BatchCorruptError(
            f"batch at byte {batch_pos}: a record runs past the end of the batch", batch_pos
        ) from exc
    if pos != stop:
        raise BatchCorruptError(
            f"batch at byte {batch_pos}: {stop - pos} bytes after its {count} records", pos
        )
    return count
