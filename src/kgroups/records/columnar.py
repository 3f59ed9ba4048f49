"""OffsetCommit records of a __consumer_offsets segment decoded straight into Arrow columns.

Analytics read millions of offset commits, and decoding them one by one in Python costs a few
microseconds each. Here the batches are located by `kgroups.coordinator.bulk_scan` (numpy, with
the general parser's checks) and every field of every OffsetCommit key and value is gathered at
once with numpy, then handed to Arrow as buffers: no Python work per record.

The layouts are the ones `kgroups.records.codec` reads, and only the plain shapes are taken:
key types 0/1, value versions 0-3, tombstones, ASCII strings, records without headers or
attributes, in batches that are neither compressed, transactional nor control batches. Any
batch holding something else (GroupMetadata records, KIP-848 keys, flexible v4 values, non-ASCII
names, odd bytes) is returned untouched for the scalar decoder, so the two paths cannot disagree:
the columnar one only ever answers where its answer is the codec's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kgroups.coordinator.bulk_scan import (
    ScannedBatches,
    ScannedRecords,
    scan_batches,
    scan_records,
)
from kgroups.log.batch import (
    COMPRESSION_MASK,
    CONTROL,
    HEADER_SIZE,
    TIMESTAMP_LOG_APPEND,
    TRANSACTIONAL,
)

OFFSET_COMMIT_SCHEMA = pa.schema(
    [
        ("log_offset", pa.int64()),
        ("record_ts", pa.int64()),
        ("key_version", pa.int16()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("tombstone", pa.bool_()),
        ("value_version", pa.int16()),  # null for tombstones, as every value field
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),  # -1 for versions without it, as the codec gives
        ("metadata", pa.string()),
        ("commit_ts", pa.int64()),
        ("expire_ts", pa.int64()),  # only version 1 carries it
    ]
)

Positions = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

_BASE_OFFSET_AT = 0
_BASE_TIMESTAMP_AT = 27
_MAX_TIMESTAMP_AT = 35
_SCALAR_ONLY = COMPRESSION_MASK | TRANSACTIONAL | CONTROL
_MAX_VARINT = 10
_KEY_FIXED = 10  # type, group length, topic length (int16 each), partition (int32)
_PAD = 16  # zero bytes after the data so that fixed-width reads near the end stay inside


@dataclass(frozen=True, slots=True)
class ColumnarSegment:
    """The columnar part of a segment and what is left for the scalar decoder.

    `commits` holds, in log order, every record of the batches decoded here
    (OFFSET_COMMIT_SCHEMA); `other_batches` lists (start, end) byte ranges of the remaining
    batches, in log order, which the caller decodes the ordinary way."""

    commits: pa.RecordBatch
    other_batches: list[tuple[int, int]]


class _Bytes:
    """The segment as numpy views: single bytes, and big-endian integers readable at any byte
    (strided views over a zero-padded copy, so a read near the end never leaves the array)."""

    def __init__(self, data: bytes) -> None:
        padded = np.zeros(len(data) + _PAD, dtype=np.uint8)
        padded[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.size = len(data)
        self.u8 = padded
        count = len(data) + 1
        self.i16 = np.ndarray((count,), dtype=">i2", buffer=padded.data, strides=(1,))
        self.i32 = np.ndarray((count,), dtype=">i4", buffer=padded.data, strides=(1,))
        self.i64 = np.ndarray((count,), dtype=">i8", buffer=padded.data, strides=(1,))

    def at(self, view: npt.NDArray[np.generic], where: Positions) -> Positions:
        """Values of `view` at `where`, positions clipped into the data (the caller masks
        out records whose positions were out of range)."""
        return view[np.clip(where, 0, self.size)].astype(np.int64)

    def varints(self, where: Positions) -> tuple[Positions, Positions, Mask]:
        """Zigzag varints at `where`: values, positions after them, and which were well
        formed (at most ten bytes)."""
        value = np.zeros_like(where)
        width = np.zeros_like(where)
        going = np.ones(where.size, dtype=bool)
        for shift in range(_MAX_VARINT):
            byte = self.u8[np.clip(where + shift, 0, self.size)].astype(np.int64)
            value |= np.where(going, (byte & 0x7F) << (7 * shift), 0)
            width += going
            going &= byte >= 0x80
            if not going.any():
                break
        return (value >> 1) ^ -(value & 1), where + width, ~going


def decode_offset_commits(data: bytes) -> ColumnarSegment:
    """Decode the plain OffsetCommit batches of one segment file into columns.

    Raises kgroups.log.batch.BatchCorruptError when a batch fails its checks; the caller then
    reads the file the ordinary way, which keeps the records before the damage and reports it.
    """
    batches = scan_batches(data)
    # An empty batch is left to the scalar reader too: it alone checks that nothing follows
    # the (zero) records, and such batches are too rare to be worth a columnar rule.
    plain = ((batches.attributes & _SCALAR_ONLY) == 0) & (batches.counts > 0)
    chosen = ScannedBatches(
        batches.starts[plain], batches.ends[plain], batches.attributes[plain],
        batches.counts[plain],
    )
    located = scan_records(data, chosen)
    view = _Bytes(data)
    batch_of = np.repeat(np.arange(chosen.counts.size), chosen.counts)
    fields, usual = _read_records(view, chosen, batch_of, located)
    # A batch with one unusual record goes whole to the scalar decoder: batches are the unit
    # of the log, so log order per path stays simple.
    unusual_batches = np.zeros(chosen.counts.size, dtype=bool)
    unusual_batches[batch_of[~usual]] = True
    keep = ~unusual_batches[batch_of]
    scalar = ~plain
    scalar[np.flatnonzero(plain)[unusual_batches]] = True
    others = list(zip(batches.starts[scalar].tolist(), batches.ends[scalar].tolist(),
                      strict=True))
    return ColumnarSegment(_to_arrow(view, fields, keep), others)


@dataclass(frozen=True, slots=True)
class _Fields:
    log_offset: Positions
    record_ts: Positions
    key_version: Positions
    group: tuple[Positions, Positions]  # starts, lengths
    topic: tuple[Positions, Positions]
    partition: Positions
    tombstone: Mask
    value_version: Positions
    offset: Positions
    leader_epoch: Positions
    metadata: tuple[Positions, Positions]
    commit_ts: Positions
    expire_ts: Positions
    # group, topic and metadata bytes gathered back to back with their offsets, filled by the
    # ASCII check in that order.
    texts: list[tuple[Positions, Positions]] = field(default_factory=list)


def _read_records(
    view: _Bytes, chosen: ScannedBatches, batch_of: Positions, located: ScannedRecords
) -> tuple[_Fields, Mask]:
    """Every field of every record, and which records have the plain shape (elsewhere the
    fields are meaningless and the record's batch goes to the scalar decoder)."""
    key_starts, key_lengths = located.key_starts, located.key_lengths
    value_starts, value_lengths = located.value_starts, located.value_lengths
    value_ends = value_starts + np.maximum(value_lengths, 0)

    # Each record is re-read from its start (the batch's first record after the header, the
    # others right after the previous record's header count): length, attributes, deltas and
    # key length must lead exactly to the key the scan found, with a zero header count.
    first = np.ones(batch_of.size, dtype=bool)
    first[1:] = batch_of[1:] != batch_of[:-1]
    record_starts = np.empty_like(value_ends)
    record_starts[1:] = value_ends[:-1] + 1
    record_starts[first] = chosen.starts[batch_of[first]] + HEADER_SIZE
    length, pos, ok_length = view.varints(record_starts)
    usual = ok_length & (pos + length == value_ends + 1)
    usual &= view.u8[np.clip(pos, 0, view.size)] == 0  # attributes
    ts_delta, pos, ok_ts = view.varints(pos + 1)
    offset_delta, pos, ok_offset = view.varints(pos)
    _key_length, pos, ok_key = view.varints(pos)
    usual &= ok_ts & ok_offset & ok_key & (pos == key_starts)
    usual &= view.u8[np.clip(value_ends, 0, view.size)] == 0  # header count
    last = np.ones(batch_of.size, dtype=bool)
    last[:-1] = first[1:]
    usual[last] &= value_ends[last] + 1 == chosen.ends[batch_of[last]]

    key_version = view.at(view.i16, key_starts)
    group_length = view.at(view.i16, key_starts + 2)
    topic_at = key_starts + 4 + group_length
    topic_length = view.at(view.i16, topic_at)
    usual &= (key_lengths >= _KEY_FIXED) & ((key_version == 0) | (key_version == 1))
    usual &= (group_length >= 0) & (topic_length >= 0)
    usual &= _KEY_FIXED + group_length + topic_length == key_lengths
    partition = view.at(view.i32, topic_at + 2 + topic_length)

    tombstone = value_lengths < 0
    value_version = view.at(view.i16, value_starts)
    offset = view.at(view.i64, value_starts + 2)
    with_epoch = value_version == 3
    leader_epoch = np.where(with_epoch, view.at(view.i32, value_starts + 10), -1)
    metadata_at = value_starts + 10 + 4 * with_epoch
    metadata_length = view.at(view.i16, metadata_at)
    commit_at = metadata_at + 2 + metadata_length
    with_expire = value_version == 1
    expected_length = commit_at + 8 + 8 * with_expire - value_starts
    usual &= tombstone | (
        (value_lengths >= 2) & (value_version >= 0) & (value_version <= 3)
        & (metadata_length >= 0) & (expected_length == value_lengths)
    )

    base_offsets = view.at(view.i64, chosen.starts + _BASE_OFFSET_AT)
    append_time = (chosen.attributes & TIMESTAMP_LOG_APPEND) != 0
    base_times = view.at(view.i64, chosen.starts + _BASE_TIMESTAMP_AT)
    max_times = view.at(view.i64, chosen.starts + _MAX_TIMESTAMP_AT)
    record_ts = np.where(append_time[batch_of], max_times[batch_of],
                         base_times[batch_of] + ts_delta)
    fields = _Fields(
        log_offset=base_offsets[batch_of] + offset_delta,
        record_ts=record_ts,
        key_version=key_version,
        group=(key_starts + 4, group_length),
        topic=(topic_at + 2, topic_length),
        partition=partition,
        tombstone=tombstone,
        value_version=value_version,
        offset=offset,
        leader_epoch=leader_epoch,
        metadata=(metadata_at + 2, np.where(tombstone, 0, metadata_length)),
        commit_ts=view.at(view.i64, commit_at),
        expire_ts=view.at(view.i64, commit_at + 8),
    )
    for starts, lengths in (fields.group, fields.topic, fields.metadata):
        ascii_only, gathered = _ascii(view, starts, np.where(usual, lengths, 0))
        usual &= ascii_only
        fields.texts.append(gathered)
    return fields, usual


def _gather(view: _Bytes, starts: Positions, lengths: Positions) -> tuple[Positions, Positions]:
    """The bytes of every range back to back, and the Arrow offsets delimiting them."""
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    where = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    return view.u8[where], offsets


def _ascii(view: _Bytes, starts: Positions,
           lengths: Positions) -> tuple[Mask, tuple[Positions, Positions]]:
    """Which ranges hold only ASCII (for them, bytes and UTF-8 text are the same thing), and
    the ranges gathered (the string column itself when every record turns out plain)."""
    gathered, offsets = _gather(view, starts, np.maximum(lengths, 0))
    high = np.zeros(gathered.size + 1, dtype=np.int64)
    np.cumsum(gathered >= 0x80, out=high[1:])
    return high[offsets[1:]] == high[offsets[:-1]], (gathered, offsets)


def _strings(view: _Bytes, starts: Positions, lengths: Positions, valid: Mask | None,
             gathered: tuple[Positions, Positions] | None = None) -> pa.Array:
    """A string column over the ranges (their total stays under 2 GiB: a segment's size is an
    int32), or over ranges already gathered; `valid` marks the non-null ones."""
    data, offsets = gathered if gathered is not None else _gather(view, starts, lengths)
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(), lengths.size,
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
    )


def _to_arrow(view: _Bytes, fields: _Fields, keep: Mask) -> pa.RecordBatch:
    def column(values: Positions, kind: pa.DataType, nulls: Mask | None = None) -> pa.Array:
        dtype = kind.to_pandas_dtype()
        return pa.array(values[keep].astype(dtype), kind,
                        mask=None if nulls is None else nulls[keep])

    tombstone = fields.tombstone[keep]
    present = ~tombstone
    # Every record plain: the ranges gathered for the ASCII check are the columns already.
    group_text, topic_text, metadata_text = fields.texts if keep.all() else (None, None, None)
    no_expire = fields.tombstone | (fields.value_version != 1)
    arrays = [
        column(fields.log_offset, pa.int64()),
        column(fields.record_ts, pa.int64()),
        column(fields.key_version, pa.int16()),
        _strings(view, fields.group[0][keep], fields.group[1][keep], None, group_text),
        _strings(view, fields.topic[0][keep], fields.topic[1][keep], None, topic_text),
        column(fields.partition, pa.int32()),
        pa.array(tombstone, pa.bool_()),
        column(fields.value_version, pa.int16(), fields.tombstone),
        column(fields.offset, pa.int64(), fields.tombstone),
        column(fields.leader_epoch, pa.int32(), fields.tombstone),
        _strings(view, fields.metadata[0][keep], fields.metadata[1][keep], present,
                 metadata_text),
        column(fields.commit_ts, pa.int64(), fields.tombstone),
        column(fields.expire_ts, pa.int64(), no_expire),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=OFFSET_COMMIT_SCHEMA)
