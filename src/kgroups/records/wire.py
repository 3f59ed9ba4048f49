"""Readers and writers for Kafka's primitive types, shared by the record and ConsumerProtocol
codecs.

Every reader takes `(data, pos, what)` and returns `(value, next_pos)`; `what` names the field so
that a failure can say exactly what could not be read and at which byte. The structs are
precompiled once because the pipeline and the broker's replay decode tens of millions of values.
"""

from __future__ import annotations

import struct

from kgroups.log.batch import uvarint

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


class RecordDecodeError(ValueError):
    """Bytes that do not decode; `position` is the byte offset where reading failed."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


def fail(what: str, pos: int, reason: str) -> RecordDecodeError:
    """The error for a field that is present but holds something it may not."""
    return RecordDecodeError(f"cannot read {what} at byte {pos}: {reason}", pos)


def short(what: str, pos: int, size: int, data: bytes) -> RecordDecodeError:
    """The error for a field that runs past the end of the input."""
    left = max(len(data) - pos, 0)
    return RecordDecodeError(
        f"cannot read {what} at byte {pos}: needs {size} bytes, {left} left", pos
    )


def read_int16(data: bytes, pos: int, what: str) -> tuple[int, int]:
    if pos + 2 > len(data):
        raise short(what, pos, 2, data)
    return INT16.unpack_from(data, pos)[0], pos + 2


def read_int32(data: bytes, pos: int, what: str) -> tuple[int, int]:
    if pos + 4 > len(data):
        raise short(what, pos, 4, data)
    return INT32.unpack_from(data, pos)[0], pos + 4


def read_int64(data: bytes, pos: int, what: str) -> tuple[int, int]:
    if pos + 8 > len(data):
        raise short(what, pos, 8, data)
    return INT64.unpack_from(data, pos)[0], pos + 8


def _text(data: bytes, start: int, end: int, what: str) -> str:
    if end > len(data):
        raise short(what, start, end - start, data)
    try:
        return data[start:end].decode()
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(
            f"cannot read {what} at byte {start}: not valid UTF-8", start
        ) from exc


def read_string(data: bytes, pos: int, what: str) -> tuple[str, int]:
    """A non-nullable string: int16 length then UTF-8 bytes."""
    length, start = read_int16(data, pos, what)
    if length < 0:
        raise fail(what, pos, "null where a string is required")
    end = start + length
    return _text(data, start, end, what), end


def read_nullable_string(data: bytes, pos: int, what: str) -> tuple[str | None, int]:
    length, start = read_int16(data, pos, what)
    if length == -1:
        return None, start
    if length < 0:
        raise fail(what, pos, f"length {length}")
    end = start + length
    return _text(data, start, end, what), end


def read_nullable_bytes(data: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    length, start = read_int32(data, pos, what)
    if length == -1:
        return None, start
    if length < 0:
        raise fail(what, pos, f"length {length}")
    end = start + length
    if end > len(data):
        raise short(what, start, length, data)
    return bytes(data[start:end]), end


def read_bytes(data: bytes, pos: int, what: str) -> tuple[bytes, int]:
    value, end = read_nullable_bytes(data, pos, what)
    if value is None:
        raise fail(what, pos, "null where bytes are required")
    return value, end


def read_uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """An unsigned LEB128 varint (the flexible versions' lengths and tags)."""
    result = 0
    shift = 0
    start = pos
    end = len(data)
    while True:
        if pos >= end:
            raise short(what, start, pos - start + 1, data)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise RecordDecodeError(f"cannot read {what} at byte {start}: varint too long", start)


def read_compact_nullable_string(data: bytes, pos: int, what: str) -> tuple[str | None, int]:
    length_plus_one, start = read_uvarint(data, pos, what)
    if length_plus_one == 0:
        return None, start
    end = start + length_plus_one - 1
    return _text(data, start, end, what), end


def read_compact_string(data: bytes, pos: int, what: str) -> tuple[str, int]:
    value, end = read_compact_nullable_string(data, pos, what)
    if value is None:
        raise fail(what, pos, "null where a string is required")
    return value, end


def read_compact_bytes(data: bytes, pos: int, what: str) -> tuple[bytes, int]:
    length_plus_one, start = read_uvarint(data, pos, what)
    if length_plus_one == 0:
        raise fail(what, pos, "null where bytes are required")
    end = start + length_plus_one - 1
    if end > len(data):
        raise short(what, start, end - start, data)
    return bytes(data[start:end]), end


def read_compact_array_length(data: bytes, pos: int, what: str) -> tuple[int, int]:
    length_plus_one, end = read_uvarint(data, pos, what)
    if length_plus_one == 0:
        raise fail(what, pos, "null where an array is required")
    return length_plus_one - 1, end


def read_tagged_fields(data: bytes, pos: int, what: str) -> tuple[dict[int, bytes], int]:
    """A tagged-field section as {tag: raw bytes} (callers pick the tags they know)."""
    tags: dict[int, bytes] = {}
    count, pos = read_uvarint(data, pos, f"{what} tagged-field count")
    for _ in range(count):
        tag, pos = read_uvarint(data, pos, f"{what} tag")
        size, pos = read_uvarint(data, pos, f"{what} tagged-field size")
        if pos + size > len(data):
            raise short(f"{what} tagged field {tag}", pos, size, data)
        tags[tag] = bytes(data[pos : pos + size])
        pos += size
    return tags, pos


def skip_tagged_fields(data: bytes, pos: int, what: str) -> int:
    """Skip a tagged-field section: unknown tags are allowed by design and never an error."""
    return read_tagged_fields(data, pos, what)[1]


def array_length(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """A non-nullable int32 array count."""
    count, end = read_int32(data, pos, what)
    if count < 0:
        raise fail(what, pos, f"count {count}")
    return count, end


def read_strings(data: bytes, pos: int, what: str, compact: bool) -> tuple[tuple[str, ...], int]:
    """An array of strings (topic names), in the compact (flexible) encoding or the classic
    one; each error names the element it stopped at."""
    length, string = ((read_compact_array_length, read_compact_string) if compact
                      else (array_length, read_string))
    count, pos = length(data, pos, what)
    strings = []
    for index in range(count):
        text, pos = string(data, pos, f"{what}[{index}]")
        strings.append(text)
    return tuple(strings), pos


def write_string(value: str) -> bytes:
    raw = value.encode()
    return INT16.pack(len(raw)) + raw


def write_nullable_string(value: str | None) -> bytes:
    return INT16.pack(-1) if value is None else write_string(value)


def write_nullable_bytes(value: bytes | None) -> bytes:
    return INT32.pack(-1) if value is None else INT32.pack(len(value)) + value


def write_compact_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


def write_compact_bytes(value: bytes) -> bytes:
    return uvarint(len(value) + 1) + value


EMPTY_TAGGED_FIELDS = b"\x00"
