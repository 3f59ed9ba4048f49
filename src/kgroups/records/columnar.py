"""OffsetCommit records of a __consumer_offsets segment decoded straight into Arrow columns.

Analytics read millions of offset commits, and decoding them one by one in Python costs a few
microseconds each. Here the batches and records are located by `kgroups.log.bulk_scan`
(numpy, with the general parser's checks) and every value field of every record is read at once
with numpy, then handed to Arrow as buffers: no Python work per record.

Keys are not read per record at all. A partition's commits repeat a few thousand keys (one per
group, topic and partition), so the keys are hashed in place by Arrow (a binary-view column
pointing into the segment, no copy) and only the distinct ones are decoded, by
`kgroups.records.codec.decode_key` itself; the group, topic and partition columns are then taken
from them.

Only the plain shapes are taken: OffsetCommit keys (types 0/1), value versions 0-3, tombstones,
ASCII metadata, records without headers or attributes, in batches that are neither compressed,
transactional nor control batches. Any batch holding something else (GroupMetadata records,
KIP-848 keys, flexible v4 values, odd bytes) is returned untouched for the scalar decoder, so
the two paths cannot disagree: the columnar one only ever answers where its answer is the
codec's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kgroups.log.batch import (
    BASE_TIMESTAMP_AT,
    COMPRESSION_MASK,
    CONTROL,
    MAX_TIMESTAMP_AT,
    TIMESTAMP_LOG_APPEND,
    TRANSACTIONAL,
)
from kgroups.log.bulk_scan import (
    RecordFraming,
    ScannedBatches,
    ScannedRecords,
    scan_batches,
    scan_framed_records,
)
from kgroups.records.codec import decode_key
from kgroups.records.schema import OffsetCommitKey

# Group and topic names repeat on every commit: they are dictionary columns, which every step
# after the decoding (hashing for the latest offsets, Parquet pages) handles as small integers.
NAME = pa.dictionary(pa.int32(), pa.string())

OFFSET_COMMIT_SCHEMA = pa.schema(
    [
        ("log_offset", pa.int64()),
        ("record_ts", pa.int64()),
        ("key_version", pa.int16()),
        ("group", NAME),
        ("topic", NAME),
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
_Scalar = TypeVar("_Scalar", bound=np.generic)

_SCALAR_ONLY = COMPRESSION_MASK | TRANSACTIONAL | CONTROL
# Zero bytes after the data: fixed-width reads a few bytes past a value's start (at most 14
# bytes in, 8 wide) stay inside the array without clipping.
_PAD = 32
_INLINE_VIEW = 12  # Arrow keeps binary-view values of up to 12 bytes inside the view itself


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
    (strided views over a zero-padded copy, so a read a little past the end stays inside)."""

    def __init__(self, data: bytes) -> None:
        padded = np.zeros(len(data) + _PAD, dtype=np.uint8)
        padded[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.size = len(data)
        self.u8 = padded
        count = len(data) + _PAD - 8
        self.i16 = np.ndarray((count,), dtype=">i2", buffer=padded.data, strides=(1,))
        self.i32 = np.ndarray((count,), dtype=">i4", buffer=padded.data, strides=(1,))
        self.i64 = np.ndarray((count,), dtype=">i8", buffer=padded.data, strides=(1,))
        self.le32 = np.ndarray((count,), dtype="<i4", buffer=padded.data, strides=(1,))

    def at(self, view: npt.NDArray[np.generic], where: Positions) -> Positions:
        """Values of `view` at `where`, which must lie at most _PAD - 8 bytes past the data."""
        return view[where].astype(np.int64)

    def clipped(self, view: npt.NDArray[np.generic], where: Positions) -> Positions:
        """Values of `view` at `where`, positions clipped into the data (the caller masks out
        records whose positions were out of range)."""
        return view[np.minimum(np.maximum(where, 0), self.size)].astype(np.int64)


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
    located, framing = scan_framed_records(data, chosen)
    view = _Bytes(data)
    batch_of = np.repeat(np.arange(chosen.counts.size), chosen.counts)
    keys = _Keys.of(data, view, located)
    values = _Values.read(view, located)
    usual = keys.usual & values.usual & _plain_framing(view, framing, values.value_ends)
    # A batch with one unusual record goes whole to the scalar decoder: batches are the unit
    # of the log, so log order per path stays simple.
    unusual_batches = np.zeros(chosen.counts.size, dtype=bool)
    unusual_batches[batch_of[~usual]] = True
    keep = None if not unusual_batches.any() else ~unusual_batches[batch_of]
    scalar = ~plain
    scalar[np.flatnonzero(plain)[unusual_batches]] = True
    others = list(zip(batches.starts[scalar].tolist(), batches.ends[scalar].tolist(),
                      strict=True))
    positions = _log_positions(view, chosen, batch_of, framing)
    return ColumnarSegment(_to_arrow(positions, keys, values, keep), others)


def _plain_framing(view: _Bytes, framing: RecordFraming, value_ends: Positions) -> Mask:
    """Records with no attributes and no headers: the value is followed by a zero header
    count, which is the record's last byte."""
    return (
        (framing.attributes == 0)
        & (value_ends + 1 == framing.record_ends)
        & (view.u8[value_ends] == 0)
    )


def _log_positions(view: _Bytes, chosen: ScannedBatches, batch_of: Positions,
                   framing: RecordFraming) -> tuple[Positions, Positions]:
    """Every record's offset and timestamp (a LogAppendTime batch stamps all its records with
    its max timestamp)."""
    base_offsets = view.at(view.i64, chosen.starts)  # the base offset opens the header
    base_times = view.at(view.i64, chosen.starts + BASE_TIMESTAMP_AT)
    log_offsets = base_offsets[batch_of] + framing.offset_deltas
    record_ts = base_times[batch_of] + framing.timestamp_deltas
    append_time = (chosen.attributes & TIMESTAMP_LOG_APPEND) != 0
    if append_time.any():
        max_times = view.at(view.i64, chosen.starts + MAX_TIMESTAMP_AT)
        record_ts = np.where(append_time[batch_of], max_times[batch_of], record_ts)
    return log_offsets, record_ts


@dataclass(frozen=True, slots=True)
class _Keys:
    """Every record's key as an index into the segment's distinct keys, decoded once each."""

    codes: npt.NDArray[np.int32]
    # Per distinct key: its version, the index of its group in `groups` and of its topic in
    # `topics` (the distinct names), and its partition.
    versions: Positions
    group_codes: npt.NDArray[np.int32]
    topic_codes: npt.NDArray[np.int32]
    partitions: Positions
    groups: pa.Array
    topics: pa.Array
    usual: Mask  # per record: its key is an OffsetCommit key

    @classmethod
    def of(cls, data: bytes, view: _Bytes, located: ScannedRecords) -> _Keys:
        lengths = np.maximum(located.key_lengths, 0)
        encoded = pc.dictionary_encode(_binary_views(data, view, located.key_starts, lengths))
        codes = np.frombuffer(encoded.indices.buffers()[1], dtype=np.int32,
                              count=len(encoded.indices), offset=encoded.indices.offset * 4)
        groups: dict[str, int] = {}
        topics: dict[str, int] = {}
        fields = []  # (offset commit?, version, group code, topic code, partition) per key
        for raw in encoded.dictionary.to_pylist():
            try:
                key = decode_key(raw)
            except ValueError:  # RecordDecodeError, UnicodeDecodeError: the scalar path reports
                key = None
            if isinstance(key, OffsetCommitKey):
                fields.append((True, key.version, groups.setdefault(key.group, len(groups)),
                               topics.setdefault(key.topic, len(topics)), key.partition))
            else:
                fields.append((False, 0, 0, 0, 0))
        per_key = np.array(fields, dtype=np.int64).reshape(-1, 5)
        usual = per_key[:, 0].astype(bool)[codes] & (located.key_lengths >= 0)
        return cls(codes, per_key[:, 1], per_key[:, 2].astype(np.int32),
                   per_key[:, 3].astype(np.int32), per_key[:, 4],
                   pa.array(list(groups), pa.string()), pa.array(list(topics), pa.string()),
                   usual)


def _binary_views(data: bytes, view: _Bytes, starts: Positions, lengths: Positions) -> pa.Array:
    """The ranges as an Arrow binary-view column over the segment itself (no bytes copied):
    each view holds the length and either the first four bytes and the position, or, for
    values of up to 12 bytes, the bytes themselves."""
    words = np.empty((starts.size, 4), dtype=np.int32)
    words[:, 0] = lengths
    words[:, 1] = view.le32[starts]
    words[:, 2] = 0  # the one data buffer
    words[:, 3] = starts
    short = np.flatnonzero(lengths <= _INLINE_VIEW)
    if short.size:
        kept = lengths[short]
        for word in range(3):
            inline = view.le32[starts[short] + 4 * word].astype(np.int64)
            keep_bytes = np.clip(kept - 4 * word, 0, 4)
            mask = (np.int64(1) << (8 * keep_bytes)) - 1
            words[short, 1 + word] = (inline & mask).astype(np.uint32).view(np.int32)
    return pa.Array.from_buffers(
        pa.binary_view(), starts.size, [None, pa.py_buffer(words), pa.py_buffer(data)]
    )


@dataclass(frozen=True, slots=True)
class _Values:
    """Every record's OffsetCommit value fields (meaningless where `usual` is false)."""

    tombstone: Mask
    version: Positions
    offset: Positions
    leader_epoch: Positions
    metadata: tuple[npt.NDArray[np.uint8], Positions]  # gathered ASCII bytes, Arrow offsets
    commit_ts: Positions
    expire_ts: Positions
    value_ends: Positions
    usual: Mask

    @classmethod
    def read(cls, view: _Bytes, located: ScannedRecords) -> _Values:
        starts, lengths = located.value_starts, located.value_lengths
        tombstone = lengths < 0
        version = view.at(view.i16, starts)
        with_epoch = version == 3
        metadata_at = starts + 10 + 4 * with_epoch
        metadata_length = view.at(view.i16, metadata_at)
        commit_at = metadata_at + 2 + metadata_length
        with_expire = version == 1
        usual = tombstone | (
            (lengths >= 2) & (version >= 0) & (version <= 3) & (metadata_length >= 0)
            & (commit_at + 8 + 8 * with_expire - starts == lengths)
        )
        ascii_only, metadata = _ascii(view, metadata_at + 2,
                                      np.where(usual & ~tombstone, metadata_length, 0))
        # Versions 0, 2 and 3 carry no expire timestamp: most segments need no read for it.
        expire_ts = (view.clipped(view.i64, commit_at + 8) if with_expire.any()
                     else np.zeros_like(starts))
        return cls(
            tombstone=tombstone,
            version=version,
            offset=view.at(view.i64, starts + 2),
            leader_epoch=np.where(with_epoch, view.at(view.i32, starts + 10), -1),
            metadata=metadata,
            commit_ts=view.clipped(view.i64, commit_at),
            expire_ts=expire_ts,
            value_ends=starts + np.maximum(lengths, 0),
            usual=usual & ascii_only,
        )


def _gather(source: npt.NDArray[np.uint8], starts: Positions,
            lengths: Positions) -> tuple[npt.NDArray[np.uint8], Positions]:
    """The bytes of every range of `source` back to back, and the Arrow offsets delimiting
    them."""
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] == 0:
        return np.empty(0, dtype=np.uint8), offsets
    where = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    return source[where], offsets


def _ascii(view: _Bytes, starts: Positions,
           lengths: Positions) -> tuple[Mask, tuple[npt.NDArray[np.uint8], Positions]]:
    """Which ranges hold only ASCII (for them, bytes and UTF-8 text are the same thing), and
    the ranges gathered (the string column's bytes)."""
    gathered, offsets = _gather(view.u8, starts, lengths)
    if not gathered.size:
        return np.ones(lengths.size, dtype=bool), (gathered, offsets)
    high = np.zeros(gathered.size + 1, dtype=np.int64)
    np.cumsum(gathered >= 0x80, out=high[1:])
    return high[offsets[1:]] == high[offsets[:-1]], (gathered, offsets)


_INT16, _INT32, _INT64 = np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64)


def _to_arrow(positions: tuple[Positions, Positions], keys: _Keys, values: _Values,
              keep: Mask | None) -> pa.RecordBatch:
    """The kept records (every one when `keep` is None) as OFFSET_COMMIT_SCHEMA."""

    def kept(array: npt.NDArray[_Scalar]) -> npt.NDArray[_Scalar]:
        return array if keep is None else array[keep]

    def column(values_: Positions, kind: pa.DataType, dtype: np.dtype[np.generic],
               nulls: Mask | None) -> pa.Array:
        # Without nulls Arrow takes the numpy buffer as it is.
        return pa.array(kept(values_).astype(dtype, copy=False), kind,
                        mask=None if nulls is None else kept(nulls))

    codes = kept(keys.codes)
    tombstones = values.tombstone if values.tombstone.any() else None  # the value nulls
    no_expire = values.tombstone | (values.version != 1)
    metadata, metadata_offsets = values.metadata
    if keep is not None:
        metadata, metadata_offsets = _gather(
            metadata, metadata_offsets[:-1][keep], np.diff(metadata_offsets)[keep]
        )
    present = ~kept(values.tombstone)
    arrays = [
        column(positions[0], pa.int64(), _INT64, None),
        column(positions[1], pa.int64(), _INT64, None),
        pa.array(keys.versions.astype(_INT16)[codes], pa.int16()),
        pa.DictionaryArray.from_arrays(keys.group_codes[codes], keys.groups),
        pa.DictionaryArray.from_arrays(keys.topic_codes[codes], keys.topics),
        pa.array(keys.partitions.astype(_INT32)[codes], pa.int32()),
        pa.array(kept(values.tombstone), pa.bool_()),
        column(values.version, pa.int16(), _INT16, tombstones),
        column(values.offset, pa.int64(), _INT64, tombstones),
        column(values.leader_epoch, pa.int32(), _INT32, tombstones),
        _strings(metadata, metadata_offsets, present),
        column(values.commit_ts, pa.int64(), _INT64, tombstones),
        column(values.expire_ts, pa.int64(), _INT64, no_expire),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=OFFSET_COMMIT_SCHEMA)


def _strings(data: npt.NDArray[np.uint8], offsets: Positions, valid: Mask) -> pa.Array:
    """A string column over gathered bytes (their total stays under 2 GiB: a segment's size
    is an int32); `valid` marks the non-null ones."""
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(), offsets.size - 1,
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
    )
