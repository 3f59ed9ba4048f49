"""The replay fast path: the last value of every key in __consumer_offsets log bytes.

Loading a partition only needs each key's final record (later commits overwrite earlier ones,
the premise of log compaction), so this walk keeps a dict of raw key -> raw value and decodes
nothing; `PartitionImage.apply_raw` then decodes each survivor once. It handles the batches a
coordinator writes (uncompressed, non-transactional) in one tight loop that touches only the
bytes it needs per record; any other batch in the bytes (compressed, transactional, control)
sends the whole chunk through `kgroups.log.replay.LatestPerKey`, the general walker that honours
transaction markers. CRCs are checked either way.
"""

from __future__ import annotations

import struct

import crc32c

from kgroups.log.batch import (
    COMPRESSION_MASK,
    CONTROL,
    MAGIC,
    TRANSACTIONAL,
    BatchCorruptError,
)
from kgroups.log.replay import LatestPerKey

_HEADER = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE = _HEADER.size
_LOG_OVERHEAD = 12
_CRC_START = 21
_NOT_PLAIN = COMPRESSION_MASK | TRANSACTIONAL | CONTROL


def latest_values(data: bytes) -> tuple[dict[bytes, bytes | None], int]:
    """(last value per key, data records walked) for a partition's whole batches in offset
    order (pass all of them at once: a transaction may span any split). A None value is a
    tombstone. Raises BatchCorruptError (with the byte position) on bad bytes."""
    if not _all_plain(data):
        table = LatestPerKey()
        table.add(data)
        return {key: value for _, _, key, value in table.records()}, table.records_seen
    latest: dict[bytes, bytes | None] = {}
    walked = 0
    pos = 0
    size = len(data)
    unpack = _HEADER.unpack_from
    crc = crc32c.crc32c
    while pos < size:
        header = unpack(data, pos)
        end = pos + _LOG_OVERHEAD + header[1]
        if crc(data[pos + _CRC_START : end]) != header[4]:
            raise BatchCorruptError(f"batch at byte {pos}: CRC mismatch", pos)
        count = header[12]
        try:
            _walk_records(data, pos + _HEADER_SIZE, end, count, latest)
        except (IndexError, ValueError) as error:
            message = f"batch at byte {pos}: malformed records ({error})"
            raise BatchCorruptError(message, pos) from error
        walked += count
        pos = end
    return latest, walked


def _all_plain(data: bytes) -> bool:
    """Whether every batch is one this walker may take (checks framing on the way)."""
    pos = 0
    size = len(data)
    while pos < size:
        if size - pos < _HEADER_SIZE:
            raise BatchCorruptError(f"batch at byte {pos}: truncated header", pos)
        header = _HEADER.unpack_from(data, pos)
        end = pos + _LOG_OVERHEAD + header[1]
        if header[3] != MAGIC or header[1] < _HEADER_SIZE - _LOG_OVERHEAD or end > size:
            raise BatchCorruptError(f"batch at byte {pos}: bad magic or length", pos)
        if header[5] & _NOT_PLAIN:
            return False
        pos = end
    return True


def _walk_records(
    data: bytes, p: int, end: int, count: int, latest: dict[bytes, bytes | None]
) -> None:
    """Record layout: length, attributes, timestampDelta, offsetDelta, key, value, headers; all
    lengths and deltas zigzag varints. Only the length, key and value are decoded."""
    for _ in range(count):
        b = data[p]
        if b < 0x80:
            record_end = p + 1 + (b >> 1)
            p += 2
        elif data[p + 1] < 0x80:  # most offset commit records are 64-8191 bytes long
            record_end = p + 2 + (((b & 0x7F) | data[p + 1] << 7) >> 1)
            p += 3
        else:
            length, p = _varint(data, p)
            record_end = p + length
            p += 1
        while data[p] & 0x80:  # timestamp delta
            p += 1
        p += 1
        while data[p] & 0x80:  # offset delta
            p += 1
        p += 1
        b = data[p]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            size, p = _varint(data, p)
        if size >= 0:
            key = data[p : p + size]
            p += size
        else:
            key = None
        b = data[p]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            size, p = _varint(data, p)
        if record_end > end or p + size > record_end:
            raise ValueError("a record overruns its batch")
        if key is not None:
            latest[key] = data[p : p + size] if size >= 0 else None
        p = record_end
    if p != end:
        raise ValueError(f"{end - p} bytes left after {count} records")


def _varint(data: bytes, p: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), p
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
