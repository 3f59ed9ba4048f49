"""RecordBatch v2 (magic 2), the one format Kafka keeps on disk and sends on the wire.

A batch is a 61-byte header followed by its records, optionally compressed as one block. The
CRC-32C covers everything from the attributes to the end, so the broker may rewrite the base
offset (and the partition leader epoch) without recomputing it. Decoding is on the hot path of
every log replay, so the record walk is one flat loop over precompiled structs with a 1-byte
fast path for varints, and `iter_records_raw` yields plain tuples without building objects.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import crc32c

from kgroups.log import batch_native
from kgroups.log.compression import Compression, CompressionError, compress, decompress

__all__ = [
    "HEADER_SIZE",
    "BatchCorruptError",
    "BatchHeader",
    "Compression",
    "Record",
    "RecordBatch",
    "ValueSpan",
    "build_batch",
    "check_batch",
    "decode_batch",
    "iter_batches",
    "iter_records_raw",
    "locate_values",
    "peek_batch_header",
    "read_header",
    "read_varint",
    "records_of",
]



class BatchHeader(NamedTuple):
    """The 61-byte RecordBatch v2 header, field by field (HEADER unpacks it in this order)."""

    base_offset: int
    length: int  # bytes after the length field itself (LOG_OVERHEAD not counted)
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


# The header in its two parts around the CRC, which covers the second part and the records
# (`_assemble` packs them apart), and whole.
_UNCOVERED_HEADER = struct.Struct(">qiibI")  # base offset, length, leader epoch, magic, CRC
_COVERED_HEADER = struct.Struct(">hiqqqhii")  # attributes ... records count
HEADER = struct.Struct(_UNCOVERED_HEADER.format + _COVERED_HEADER.format.removeprefix(">"))
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + length: the part of the header the length does not count
MAGIC = 2
# Byte positions of header fields, for scanners that read one field of many batches at once.
LENGTH_AT = 8
MAGIC_AT = 16
CRC_AT = 17
CRC_START = _UNCOVERED_HEADER.size  # 21: the CRC covers the batch from the attributes onwards
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
BASE_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
PRODUCER_ID_AT = 43
RECORDS_COUNT_AT = 57
_BASE_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_read_header = HEADER.unpack_from
_make_header = BatchHeader._make


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at `pos`, unchecked (the caller knows 61 bytes are there)."""
    return _make_header(_read_header(buf, pos))

COMPRESSION_MASK = 0x07
TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
DELETE_HORIZON = 0x40


# A record located rather than copied: offset, timestamp, key, value position, value length
# (a length of -1 is a null value).
ValueSpan = tuple[int, int, bytes | None, int, int]


class BatchCorruptError(ValueError):
    """Bytes that are not a whole, intact batch; `position` is where the batch starts or where
    reading it failed."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(slots=True)
class RecordBatch:
    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record] = field(default_factory=list)

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        """Set by compaction: `base_timestamp` then holds when the batch's tombstones may go."""
        return bool(self.attributes & DELETE_HORIZON)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


# ------------------------------------------------------------------------------------ encoding


def uvarint(value: int) -> bytes:
    """Unsigned LEB128, as Kafka's ByteUtils.writeUnsignedVarint: the counts and lengths of
    flexible messages and records, and (zigzagged) every length and delta inside a record."""
    if value < 0x80:
        return _SMALL_VARINTS[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint(value: int) -> bytes:
    """Zigzag varint, as every length and delta inside a record is written."""
    return uvarint((value << 1) ^ (value >> 63))


_SMALL_VARINTS = [bytes((n,)) for n in range(0x80)]
_NULL = _varint(-1)


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    parts = [b"\x00", _varint(timestamp_delta), _varint(offset_delta)]
    for blob in (key, value):
        if blob is None:
            parts.append(_NULL)
        else:
            parts.append(_varint(len(blob)))
            parts.append(blob)
    parts.append(_varint(len(headers)))
    for name, header_value in headers:
        raw_name = name.encode()
        parts.append(_varint(len(raw_name)))
        parts.append(raw_name)
        if header_value is None:
            parts.append(_NULL)
        else:
            parts.append(_varint(len(header_value)))
            parts.append(header_value)
    body = b"".join(parts)
    return _varint(len(body)) + body


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, int]],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode `(key, value, timestamp)` records as one batch with consecutive offsets: in
    compiled code when it is built and the batch is uncompressed (`batch_native`)."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    attributes = int(compression) | (TRANSACTIONAL if transactional else 0)
    attributes |= CONTROL if control else 0
    if batch_native.compiled is not None and not compression and type(records) is list:
        return batch_native.compiled.build_batch(
            records, base_offset, partition_leader_epoch, attributes, producer_id,
            producer_epoch, base_sequence)
    base_timestamp = records[0][2]
    body = b"".join([
        _encode_record(delta, timestamp - base_timestamp, key, value)
        for delta, (key, value, timestamp) in enumerate(records)
    ])
    return _assemble(
        body=compress(Compression(compression), body) if compression else body,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=len(records) - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max([timestamp for _, _, timestamp in records]),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        count=len(records),
    )


def encode_batch(batch: RecordBatch) -> bytes:
    """Re-encode a decoded (possibly filtered) batch, keeping its header fields and offsets:
    compaction uses this to write the records it retains."""
    base = batch.base_timestamp
    body = b"".join(
        _encode_record(r.offset - batch.base_offset, r.timestamp - base, r.key, r.value, r.headers)
        for r in batch.records
    )
    return _assemble(
        body=compress(batch.compression, body),
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=batch.attributes,
        last_offset_delta=batch.last_offset_delta,
        base_timestamp=base,
        max_timestamp=batch.max_timestamp,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        count=len(batch.records),
    )


def recompress_batch(batch: bytes, codec: Compression) -> bytes:
    """A whole batch (already passed by `check_batch`) with its records section in `codec`,
    every header field but the codec bits (and the length, the CRC) kept: a topic whose
    compression.type names a codec stores batches so, as Kafka's broker does."""
    header = read_header(batch)
    source = Compression(header.attributes & COMPRESSION_MASK)
    if source is codec:
        return batch
    body = decompress(source, batch[HEADER_SIZE:])
    return _assemble(
        body=compress(codec, body),
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=(header.attributes & ~COMPRESSION_MASK) | int(codec),
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        count=header.records_count,
    )


def _assemble(
    *,
    body: bytes,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
) -> bytes:
    # Each part of the header packed once and joined once with the records (an offset commit
    # appends a batch of its own).
    covered = _COVERED_HEADER.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                                   producer_id, producer_epoch, base_sequence, count)
    crc = crc32c.crc32c(body, crc32c.crc32c(covered))
    return b"".join((
        _UNCOVERED_HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body),
                               partition_leader_epoch, MAGIC, crc),
        covered, body))


# ------------------------------------------------------------------------------------ decoding


def peek_batch_header(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """(base offset, last offset, total size) of the batch at `pos`, without checking its CRC
    or reading its records: enough to index and to serve fetches."""
    if pos + HEADER_SIZE > len(buf):
        raise BatchCorruptError(
            f"batch header at byte {pos} is cut short ({len(buf) - pos} of {HEADER_SIZE} bytes)",
            pos,
        )
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    if buf[pos + MAGIC_AT] != MAGIC:
        raise BatchCorruptError(
            f"batch at byte {pos} has magic {buf[pos + MAGIC_AT]}, not 2", pos)
    if length < HEADER_SIZE - LOG_OVERHEAD:
        raise BatchCorruptError(f"batch at byte {pos} has impossible length {length}", pos)
    (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(buf, pos + LAST_OFFSET_DELTA_AT)
    return base_offset, base_offset + last_delta, LOG_OVERHEAD + length


def check_batch(buf: bytes, pos: int = 0) -> tuple[BatchHeader, int]:
    """Validate the batch at `pos` (whole, magic 2, CRC) and return its header and end."""
    _, _, size = peek_batch_header(buf, pos)
    end = pos + size
    if end > len(buf):
        raise BatchCorruptError(
            f"batch at byte {pos} is cut short ({len(buf) - pos} of {size} bytes)", pos
        )
    header = _make_header(_read_header(buf, pos))
    if crc32c.crc32c(buf[pos + CRC_START : end]) != header.crc:
        raise BatchCorruptError(f"batch at byte {pos} fails its CRC-32C check", pos)
    return header, end


def decode_batch(buf: bytes | memoryview, pos: int = 0) -> tuple[RecordBatch, int]:
    """Decode and verify the batch at `pos`; returns it and the position after it."""
    data = bytes(buf) if isinstance(buf, memoryview) else buf
    header, end = check_batch(data, pos)
    batch = RecordBatch(
        header.base_offset, header.partition_leader_epoch, header.attributes,
        header.last_offset_delta, header.base_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence,
    )
    rows = records_of(data, pos, end, header, True)
    batch.records = [Record(*row) for row in rows]
    return batch, end


def iter_batches(buf: bytes | memoryview, pos: int = 0) -> Iterator[RecordBatch]:
    data = bytes(buf) if isinstance(buf, memoryview) else buf
    while pos < len(data):
        batch, pos = decode_batch(data, pos)
        yield batch


def iter_records_raw(
    buf: bytes | memoryview, pos: int = 0
) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every data record in `buf`, skipping control
    batches (transaction markers); the fast path for replaying a log."""
    data = bytes(buf) if isinstance(buf, memoryview) else buf
    size = len(data)
    while pos < size:
        header, end = check_batch(data, pos)
        if not header.attributes & CONTROL:
            yield from records_of(data, pos, end, header, False)
        pos = end


def read_varint(data: bytes, pos: int, stop: int, batch_pos: int) -> tuple[int, int]:
    """A zigzag varint of any length ending before `stop` (the record walks inline the 1-byte
    case and call this for the rest); `batch_pos` names the batch in errors."""
    result = 0
    shift = 0
    while True:
        if pos >= stop:
            raise BatchCorruptError(f"batch at byte {batch_pos}: a record runs past its end", pos)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise BatchCorruptError(f"batch at byte {batch_pos}: varint too long", pos)


def record_section(
    buf: bytes, batch_pos: int, batch_end: int, header: BatchHeader
) -> tuple[bytes, int, int]:
    """(data, start, stop): where the records of a batch already passed by `check_batch` lie,
    decompressed if the batch is compressed."""
    attributes = header.attributes
    if not attributes & COMPRESSION_MASK:
        return buf, batch_pos + HEADER_SIZE, batch_end
    try:
        data = decompress(
            Compression(attributes & COMPRESSION_MASK), buf[batch_pos + HEADER_SIZE : batch_end]
        )
    except (CompressionError, ValueError) as exc:
        raise BatchCorruptError(f"batch at byte {batch_pos}: {exc}", batch_pos) from exc
    return data, 0, len(data)


def records_of(
    buf: bytes, batch_pos: int, batch_end: int, header: BatchHeader, with_headers: bool,
    limit: int | None = None,
) -> list[tuple[Any, ...]]:
    """The records of a batch already passed by `check_batch`, as (offset, timestamp, key,
    value[, headers]) tuples; with `limit`, only the first `limit` of them (the rest are not
    parsed, so a reader that needs a few records of a huge batch pays for those only)."""
    rows: list[tuple[Any, ...]] = []
    data, start, stop = record_section(buf, batch_pos, batch_end, header)
    whole = limit is None or limit >= header.records_count
    if not whole:
        header = header._replace(records_count=max(limit or 0, 0))
    _walk(data, start, stop, header, batch_pos, with_headers, False, rows, whole)
    return rows


def keyless_records(buf: bytes, batch_pos: int, batch_end: int, header: BatchHeader,
                    quoted: int) -> tuple[int, list[int]]:
    """How many records of a batch already passed by `check_batch` have no key, and the
    indexes of the first `quoted` of them: what a compacted topic refuses. Records are checked
    as strictly as `records_of` with headers checks them (the log cleaner reads them so later)
    but none is built: a batch may hold a million empty records in a compressed megabyte."""
    data, pos, stop = record_section(buf, batch_pos, batch_end, header)
    keyless = 0
    first: list[int] = []
    try:
        for index in range(header.records_count):
            if pos >= stop:
                raise BatchCorruptError(f"batch at byte {batch_pos}: holds fewer records than "
                                        f"its count {header.records_count}", pos)
            length, pos = _varint_at(data, pos, stop, batch_pos)
            record_end = pos + length
            if record_end > stop or record_end <= pos:
                raise BatchCorruptError(f"batch at byte {batch_pos}: record overruns the batch",
                                        pos)
            pos += 1  # attributes
            _, pos = _varint_at(data, pos, record_end, batch_pos)  # timestamp delta
            _, pos = _varint_at(data, pos, record_end, batch_pos)  # offset delta
            size, pos = _varint_at(data, pos, record_end, batch_pos)
            if size < 0:
                keyless += 1
                if len(first) < quoted:
                    first.append(index)
            else:
                pos += size
            size, pos = _varint_at(data, pos, record_end, batch_pos)
            pos += max(size, 0)
            if data[pos] == 0:  # no headers, the common case
                pos += 1
            else:
                _, pos = _read_headers(data, pos, record_end, batch_pos)
            if pos != record_end:
                raise BatchCorruptError(
                    f"batch at byte {batch_pos}: record fields do not fill its length", pos)
    except IndexError as exc:
        raise BatchCorruptError(
            f"batch at byte {batch_pos}: a record runs past the end of the batch", batch_pos
        ) from exc
    if pos != stop:
        raise BatchCorruptError(
            f"batch at byte {batch_pos}: {stop - pos} bytes after its records", pos)
    return keyless, first


def _varint_at(data: bytes, pos: int, stop: int, batch_pos: int) -> tuple[int, int]:
    """`read_varint` with the one-byte case first."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return read_varint(data, pos, stop, batch_pos)


def locate_values(
    buf: bytes,
    batch_pos: int,
    batch_end: int,
    header: BatchHeader,
    spans_by_key: dict[bytes | None, ValueSpan],
) -> None:
    """File each record of an uncompressed batch already passed by `check_batch` under its key
    in `spans_by_key` as (offset, timestamp, key, value position in `buf`, value length), a
    later record replacing an earlier one: a reader that keeps only each key's last value
    copies out just those. The same walk and checks as `records_of` (headers are not read,
    only required to be there); records filed before a corrupt one stay filed."""
    _walk(buf, batch_pos + HEADER_SIZE, batch_end, header, batch_pos, False, True, spans_by_key)


def _walk(
    data: bytes,
    start: int,
    stop: int,
    header: BatchHeader,
    batch_pos: int,
    with_headers: bool,
    value_spans: bool,
    out: list[tuple[Any, ...]] | dict[bytes | None, ValueSpan],
    whole: bool = True,
) -> None:
    """`_parse_section` over data[start:stop], the records of the batch with `header` at
    `batch_pos`, reporting a record cut short by the end of the data as a corrupt batch;
    without `whole`, the records are only the first of the section's."""
    append_time = header.max_timestamp if header.attributes & TIMESTAMP_LOG_APPEND else None
    try:
        _parse_section(
            data, start, stop, header.records_count, header.base_offset, header.base_timestamp,
            append_time, batch_pos,
            with_headers, value_spans, out, whole,
        )
    except IndexError as exc:
        raise BatchCorruptError(
            f"batch at byte {batch_pos}: a record runs past the end of the batch", batch_pos
        ) from exc


def _parse_section(
    data: bytes,
    pos: int,
    stop: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int | None,
    batch_pos: int,
    with_headers: bool,
    value_spans: bool,
    out: list[tuple[Any, ...]] | dict[bytes | None, ValueSpan],
    whole: bool = True,
) -> None:
    """Walk `count` records in data[pos:stop] in one flat loop (with `whole`, they must fill
    it). Each record is appended to the list `out` as (offset, timestamp, key, value[,
    headers]) or, with `value_spans`, filed in the dict `out` under its key as (offset,
    timestamp, key, value position, value length).
    Varints under 0x80 are decoded inline, which covers nearly every length and delta in a
    __consumer_offsets record. One loop serves every mode, at a flag test per record, so that
    the checks exist once; filing spans here rather than in a list for the caller to file
    keeps the replay's walk as fast as when it had a copy of this loop of its own."""
    if not value_spans:
        append = out.append  # type: ignore[union-attr]
    for _ in range(count):
        if pos >= stop:
            raise BatchCorruptError(
                f"batch at byte {batch_pos}: holds fewer records than its count {count}", pos
            )
        b = data[pos]
        if b < 0x80:
            record_end = pos + 1 + ((b >> 1) ^ -(b & 1))
            pos += 2  # the length byte and the (unused) attributes byte
        elif data[pos + 1] < 0x80:  # records of 64-8191 bytes: a 2-byte length
            zigzag = (b & 0x7F) | (data[pos + 1] << 7)
            record_end = pos + 2 + ((zigzag >> 1) ^ -(zigzag & 1))
            pos += 3
        else:
            length, pos = read_varint(data, pos, stop, batch_pos)
            record_end = pos + length
            pos += 1
        if record_end > stop or record_end < pos:
            raise BatchCorruptError(f"batch at byte {batch_pos}: record overruns the batch", pos)
        b = data[pos]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            ts_delta, pos = read_varint(data, pos, record_end, batch_pos)
        b = data[pos]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            offset_delta, pos = read_varint(data, pos, record_end, batch_pos)
        b = data[pos]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            size, pos = read_varint(data, pos, record_end, batch_pos)
        if size < 0:
            key = None
        else:
            key = data[pos : pos + size]
            pos += size
        b = data[pos]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            size, pos = read_varint(data, pos, record_end, batch_pos)
        timestamp = base_timestamp + ts_delta if append_time is None else append_time
        if value_spans:
            if pos + max(size, 0) >= record_end:  # at least the header count must remain
                raise BatchCorruptError(
                    f"batch at byte {batch_pos}: record fields do not fill its length", pos
                )
            out[key] = (  # type: ignore[call-overload]
                base_offset + offset_delta, timestamp, key, pos, size
            )
            pos = record_end
            continue
        if size < 0:
            value = None
        else:
            value = data[pos : pos + size]
            pos += size
        if with_headers:
            headers, pos = _read_headers(data, pos, record_end, batch_pos)
            if pos != record_end:
                raise BatchCorruptError(
                    f"batch at byte {batch_pos}: record fields do not fill its length", pos
                )
            append((base_offset + offset_delta, timestamp, key, value, headers))
        else:
            if pos >= record_end:  # at least the header count must remain
                raise BatchCorruptError(
                    f"batch at byte {batch_pos}: record fields do not fill its length", pos
                )
            pos = record_end
            append((base_offset + offset_delta, timestamp, key, value))
    if pos != stop and whole:
        raise BatchCorruptError(
            f"batch at byte {batch_pos}: {stop - pos} bytes after its {count} records", pos
        )


def _read_headers(
    data: bytes, pos: int, record_end: int, batch_pos: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = read_varint(data, pos, record_end, batch_pos)
    headers = []
    for _ in range(count):
        name_len, pos = read_varint(data, pos, record_end, batch_pos)
        if name_len < 0 or pos + name_len > record_end:
            raise BatchCorruptError(f"batch at byte {batch_pos}: bad header name", pos)
        try:
            name = data[pos : pos + name_len].decode()
        except UnicodeDecodeError as exc:
            raise BatchCorruptError(
                f"batch at byte {batch_pos}: header name is not UTF-8", pos
            ) from exc
        pos += name_len
        value_len, pos = read_varint(data, pos, record_end, batch_pos)
        value = None
        if value_len >= 0:
            value = data[pos : pos + value_len]
            pos += value_len
        headers.append((name, value))
    return tuple(headers), pos


def set_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The batch with its base offset replaced (outside the CRC, so no recomputation)."""
    return _BASE_OFFSET.pack(base_offset) + batch[8:]
