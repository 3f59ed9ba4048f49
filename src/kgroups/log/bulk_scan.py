"""Where every record's key and value lie in plain RecordBatch v2 bytes, found with numpy.

A replay walks millions of records, and a Python loop pays about two microseconds for each one.
Records inside a batch can only be found one after another (each starts where the previous one
ends), but batches are independent: this scan takes the first record of every batch at once, then
the second of every batch that has one, and so on, so the Python-level work grows with the
largest record count of a batch, not with the number of records. Only the batch headers are
walked in Python (their lengths chain them) and checked with the C CRC-32C.

The checks are the general record parser's: whole batches, magic 2, CRC-32C, every record inside
its batch, its fields inside its length, and the batch's record count exactly filling it.
`last_of_each_key` then picks each key's last record, also without a Python step per record.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
import numpy as np
import numpy.typing as npt

from kgroups.log.batch import (
    ATTRIBUTES_AT,
    CRC_AT,
    CRC_START,
    HEADER_SIZE,
    LENGTH_AT,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
    RECORDS_COUNT_AT,
    BatchCorruptError,
)

_LENGTH = struct.Struct(f">{LENGTH_AT}xi")  # a batch's length, read from the batch's start
_MAX_LENGTH_VARINT = 5  # a length is an int32 varint
_MAX_DELTA_VARINT = 10  # a delta is an int64 varint

Positions = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class ScannedBatches:
    """Batch starts and ends, plus each one's attributes and record count (batch order)."""

    starts: Positions
    ends: Positions
    attributes: Positions
    counts: Positions


@dataclass(frozen=True, slots=True)
class ScannedRecords:
    """For every record in log order: where its key and value start and their lengths (-1 for
    null)."""

    key_starts: Positions
    key_lengths: Positions
    value_starts: Positions
    value_lengths: Positions


@dataclass(frozen=True, slots=True)
class RecordFraming:
    """For every record in log order, the rest of what the scan reads on the way: what a decoder
    needs to check a record's shape and give it its offset and timestamp without walking it a
    second time (a replay only needs the positions, and does not pay for storing these)."""

    attributes: npt.NDArray[np.uint8]
    timestamp_deltas: Positions
    offset_deltas: Positions
    record_ends: Positions  # one past the record's last byte (its headers included)

    @classmethod
    def empty(cls, total: int) -> RecordFraming:
        return cls(np.empty(total, dtype=np.uint8), np.empty(total, dtype=np.int64),
                   np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64))


def scan_batches(data: bytes) -> ScannedBatches:
    """Chain the batches of `data` by their lengths and check each one's framing and CRC.
    Raises BatchCorruptError naming the byte where the first bad batch starts."""
    size = len(data)
    starts: list[int] = []
    append = starts.append
    length_at = _LENGTH.unpack_from
    last_header = size - HEADER_SIZE  # the loop runs once per batch: as few steps as can be
    pos = 0
    while pos <= last_header:
        append(pos)
        (length,) = length_at(data, pos)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise BatchCorruptError(f"batch at byte {pos}: bad magic or length", pos)
        pos += LOG_OVERHEAD + length
    if pos < size:
        raise BatchCorruptError(f"batch at byte {pos}: truncated header", pos)
    if pos > size:
        raise BatchCorruptError(f"batch at byte {starts[-1]}: bad magic or length", starts[-1])
    buf = np.frombuffer(data, dtype=np.uint8)
    start_array = np.array(starts, dtype=np.int64)
    end_array = np.empty_like(start_array)
    end_array[:-1] = start_array[1:]
    end_array[-1:] = size
    _first_failing(buf[start_array + MAGIC_AT] != MAGIC, start_array, "bad magic or length")
    covered = map(slice, (start_array + CRC_START).tolist(), end_array.tolist())
    computed = np.fromiter(
        map(crc32c.crc32c, map(memoryview(data).__getitem__, covered)),
        dtype=np.uint32,
        count=len(starts),
    )
    _first_failing(computed != _be_uint32(buf, start_array + CRC_AT), start_array, "CRC mismatch")
    counts = _be_uint32(buf, start_array + RECORDS_COUNT_AT).astype(np.int32).astype(np.int64)
    _first_failing(counts < 0, start_array, "negative record count")
    attributes_at = start_array + ATTRIBUTES_AT
    attributes = (buf[attributes_at].astype(np.int64) << 8) | buf[attributes_at + 1]
    return ScannedBatches(start_array, end_array, attributes, counts)


def scan_records(data: bytes, batches: ScannedBatches) -> ScannedRecords:
    """Locate the key and value of every record of uncompressed batches (the caller has checked
    that none is compressed). Raises BatchCorruptError naming the start of a bad batch (the
    first to fail at the record depth where a failure shows first)."""
    return _scan_records(data, batches, None)


def scan_framed_records(data: bytes,
                        batches: ScannedBatches) -> tuple[ScannedRecords, RecordFraming]:
    """`scan_records`, plus every record's attributes, deltas and end."""
    framing = RecordFraming.empty(int(batches.counts.sum()))
    return _scan_records(data, batches, framing), framing


def _scan_records(data: bytes, batches: ScannedBatches,
                  framing: RecordFraming | None) -> ScannedRecords:
    buf = np.frombuffer(data, dtype=np.uint8)
    counts = batches.counts
    total = int(counts.sum())
    first_record = np.zeros(counts.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=first_record[1:])
    key_starts = np.empty(total, dtype=np.int64)
    key_lengths = np.empty(total, dtype=np.int64)
    value_starts = np.empty(total, dtype=np.int64)
    value_lengths = np.empty(total, dtype=np.int64)
    active = np.flatnonzero(counts)
    pos = batches.starts[active] + HEADER_SIZE
    ends = batches.ends[active]
    remaining = counts[active]
    record = first_record[active]
    while active.size:
        _require(pos < ends, batches, active, "fewer than its record count")
        length, pos = _read_varint(buf, pos, ends, batches, active, _MAX_LENGTH_VARINT)
        record_end = pos + length
        _require((length > 0) & (record_end <= ends), batches, active, "a record overruns it")
        if framing is None:
            pos = _skip_varint(buf, pos + 1, record_end, batches, active)  # timestamp delta
            pos = _skip_varint(buf, pos, record_end, batches, active)  # offset delta
        else:
            framing.attributes[record] = buf.take(pos, mode="clip")
            framing.timestamp_deltas[record], pos = _read_varint(
                buf, pos + 1, record_end, batches, active, _MAX_DELTA_VARINT
            )
            framing.offset_deltas[record], pos = _read_varint(
                buf, pos, record_end, batches, active, _MAX_DELTA_VARINT
            )
            framing.record_ends[record] = record_end
        key_length, pos = _read_varint(buf, pos, record_end, batches, active, _MAX_LENGTH_VARINT)
        key_starts[record] = pos
        key_lengths[record] = key_length
        pos = pos + np.maximum(key_length, 0)
        _require(pos < record_end, batches, active, "record fields do not fill its length")
        value_length, pos = _read_varint(
            buf, pos, record_end, batches, active, _MAX_LENGTH_VARINT
        )
        value_starts[record] = pos
        value_lengths[record] = value_length
        # at least the header count must remain after the value
        _require(
            pos + np.maximum(value_length, 0) < record_end,
            batches,
            active,
            "record fields do not fill its length",
        )
        pos = record_end
        remaining = remaining - 1
        record = record + 1
        finished = remaining == 0
        if finished.any():
            _require(
                ~finished | (pos == ends), batches, active, "bytes left after its last record"
            )
            going = ~finished
            active, pos, ends, remaining, record = (
                active[going], pos[going], ends[going], remaining[going], record[going]
            )
    return ScannedRecords(key_starts, key_lengths, value_starts, value_lengths)


def _be_uint32(buf: npt.NDArray[np.uint8], at: Positions) -> Positions:
    return (
        (buf[at].astype(np.int64) << 24)
        | (buf[at + 1].astype(np.int64) << 16)
        | (buf[at + 2].astype(np.int64) << 8)
        | buf[at + 3]
    )


def _read_varint(
    buf: npt.NDArray[np.uint8],
    pos: Positions,
    stop: Positions,
    batches: ScannedBatches,
    active: Positions,
    max_bytes: int,
) -> tuple[Positions, Positions]:
    """Zigzag varints starting at `pos`, each to end before its `stop`: (values, positions
    after them). The common one-byte case costs one gather."""
    byte = buf.take(pos, mode="clip").astype(np.int64)
    more = byte >= 0x80
    if not more.any():
        _require(pos < stop, batches, active, "a record runs past its end")
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value = byte & 0x7F
    width = np.ones_like(pos)
    for shift in range(1, max_bytes):
        going = np.flatnonzero(more)
        if not going.size:
            break
        byte = buf.take(pos[going] + shift, mode="clip").astype(np.int64)
        value[going] |= (byte & 0x7F) << (7 * shift)
        width[going] += 1
        more[going] = byte >= 0x80
    _require(~more, batches, active, "varint too long")
    after = pos + width
    _require(after <= stop, batches, active, "a record runs past its end")
    return (value >> 1) ^ -(value & 1), after


def _skip_varint(
    buf: npt.NDArray[np.uint8],
    pos: Positions,
    stop: Positions,
    batches: ScannedBatches,
    active: Positions,
) -> Positions:
    """Positions after the varints at `pos` (deltas the fold does not need)."""
    more = buf.take(pos, mode="clip") >= 0x80
    width = np.ones_like(pos)
    for shift in range(1, _MAX_DELTA_VARINT):
        going = np.flatnonzero(more)
        if not going.size:
            break
        width[going] += 1
        more[going] = buf.take(pos[going] + shift, mode="clip") >= 0x80
    _require(~more, batches, active, "varint too long")
    after = pos + width
    _require(after <= stop, batches, active, "a record runs past its end")
    return after


def _require(
    ok: npt.NDArray[np.bool_], batches: ScannedBatches, active: Positions, what: str
) -> None:
    if not ok.all():
        start = int(batches.starts[active[int(np.argmin(ok))]])
        raise BatchCorruptError(f"batch at byte {start}: malformed records ({what})", start)


def _first_failing(bad: npt.NDArray[np.bool_], starts: Positions, what: str) -> None:
    if bad.any():
        start = int(starts[int(np.argmax(bad))])
        raise BatchCorruptError(f"batch at byte {start}: {what}", start)


_WORD = 8
_HASHED_KEY_BYTES = 64  # longer keys (never written by a coordinator) take the dict path
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it is a bijection on 64 bits
# _BYTE_MASKS[n] keeps the first n bytes of a little-endian word.
_BYTE_MASKS = np.array([(1 << (8 * n)) - 1 for n in range(_WORD + 1)], dtype=np.uint64)


def last_of_each_key(
    data: bytes, key_starts: Positions, key_lengths: Positions
) -> Positions | None:
    """Indexes of the records that are the last of their key, in log order; None when keys are
    too long to compare as words (the caller then uses a dict). Keys are compared as up to
    eight 8-byte words: records are grouped by a hash of their words and every record is then
    checked word by word against its group's last record, so a hash collision can never merge
    two keys (it sends the caller to the dict path instead)."""
    count = key_starts.size
    if count == 0:
        return np.empty(0, dtype=np.int64)
    longest = int(key_lengths.max())
    if longest > _HASHED_KEY_BYTES:
        return None
    padded = np.zeros(len(data) + _WORD, dtype=np.uint8)
    padded[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    # A uint64 starting at every byte: words of a key are gathered straight from the log.
    words_at = np.ndarray((len(data) + 1,), dtype="<u8", buffer=padded.data, strides=(1,))
    words = []
    digest = key_lengths.astype(np.uint64) * _MIX
    for first in range(0, max(longest, 1), _WORD):
        kept = np.clip(key_lengths - first, 0, _WORD)
        # a key shorter than `first` keeps none of its word, which may then lie past the end
        at = np.minimum(key_starts + first, len(data))
        word = words_at[at] & _BYTE_MASKS[kept]
        words.append(word)
        digest = (digest ^ word) * _MIX
        digest ^= digest >> np.uint64(31)
    order = np.argsort(digest, kind="stable")  # equal keys keep their log order
    grouped = digest[order]
    starts_group = np.empty(count, dtype=bool)
    starts_group[0] = True
    np.not_equal(grouped[1:], grouped[:-1], out=starts_group[1:])
    ends_group = np.empty(count, dtype=bool)
    ends_group[-1] = True
    ends_group[:-1] = starts_group[1:]
    last = order[ends_group]
    representative = last[np.cumsum(starts_group) - 1]
    same = key_lengths[order] == key_lengths[representative]
    for word in words:
        same &= word[order] == word[representative]
    if not same.all():
        return None
    return np.sort(last)
