"""Checks every length and count in a request against the bytes its frame holds, before decoding.

kio's native decoder reserves room for an array from the count the client sent: a 24-byte
Metadata request announcing 2^32-2 topics made it ask for 32 GiB and abort the whole process.
Kafka never trusts such a count (its generated readers compare it with the bytes left), so
neither may kgroups. This module walks the frame as the decoder will and fails if any array,
string, bytes or tagged-field length claims more than what remains. Array counts are compared
with the smallest size an element can have, so an accepted frame makes the decoder reserve at
most a few times the frame's own size.

It also refuses null where the field is not nullable: Kafka's readers throw on that, and the
broker then closes the connection, which is what kgroups does with a FrameCheckError.

The walk runs on every request, so it is generated once per kio class as straight-line Python
(fields inlined, fixed-size runs folded into one bounds check, arrays of fixed-size elements
skipped in one step): a closure per field cost ten times the native decode on a 100-partition
OffsetCommit.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import Field, fields
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from kgroups.broker.class_cache import class_cache
from kgroups.broker.generated_code import FunctionSource

# (frame, position, end) -> position after the checked entity; raises FrameCheckError.
Checker = Callable[[bytes | memoryview, int, int], int]

FIXED_SIZES: dict[str, int] = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_BYTES_LIKE = frozenset({"string", "bytes", "records"})
_MAX_UVARINT_BYTES = 5  # Kafka's unsigned varints hold an int32


class FrameCheckError(ValueError):
    """A length, count or null in the frame that the request cannot hold."""


def read_uvarint(frame: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of an unsigned varint, bounded to `end` and to 5 bytes."""
    value = 0
    for shift in range(0, 7 * _MAX_UVARINT_BYTES, 7):
        if pos >= end:
            raise FrameCheckError("varint runs past the end of the frame")
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
    raise FrameCheckError("varint longer than 5 bytes")


def _short(what: str, need: int, pos: int, end: int) -> FrameCheckError:
    return FrameCheckError(f"{what} claims {need} bytes, {max(end - pos, 0)} remain")


def _null(what: str) -> FrameCheckError:
    return FrameCheckError(f"non-nullable {what} is null")


def _negative(what: str, length: int) -> FrameCheckError:
    return FrameCheckError(f"{what} has negative length {length}")


def _tagged_fields(frame: bytes, pos: int, end: int, known: dict[int, Checker]) -> int:
    """The tagged-field section of a flexible struct. A tag the decoder knows is read as its
    field, from where it starts, whatever size it announced (Kafka's generated readers and kio
    both do so); an unknown one is skipped by its size, which must fit in the frame."""
    count, pos = read_uvarint(frame, pos, end)
    if 2 * count > end - pos:
        raise _short(f"{count} tagged fields", 2 * count, pos, end)
    for _ in range(count):
        tag, pos = read_uvarint(frame, pos, end)
        size, pos = read_uvarint(frame, pos, end)
        checker = known.get(tag)
        if checker is not None:
            pos = checker(frame, pos, end)
            continue
        if size > end - pos:
            raise _short(f"tagged field {tag}", size, pos, end)
        pos += size
    return pos


_GLOBALS: dict[str, Any] = {
    "FrameCheckError": FrameCheckError, "read_uvarint": read_uvarint, "_short": _short,
    "_null": _null, "_negative": _negative, "_tagged_fields": _tagged_fields,
    "_int16": struct.Struct(">h").unpack_from, "_int32": struct.Struct(">i").unpack_from,
    "_int8": struct.Struct(">b").unpack_from,
}


class _Emitter(FunctionSource):
    """Writes the body of one generated checker; `pos`, `frame` and `end` are its locals."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        super().__init__(namespace)
        self.pending_fixed = 0

    def compile(self, label: str) -> Checker:
        """The checker function: the emitted lines, then the position reached."""
        checker: Checker = self.define(["def check(frame, pos, end):"], ["    return pos"],
                                       "check", f"<frame check of {label}>")
        return checker

    def flush_fixed(self, indent: int) -> None:
        if self.pending_fixed:
            size = self.pending_fixed
            self.line(indent, f"if end - pos < {size}: raise _short('fixed fields', {size}, "
                              "pos, end)")
            self.line(indent, f"pos += {size}")
            self.pending_fixed = 0

    def length(self, indent: int, flexible: bool, legacy_reader: str) -> None:
        """Leave the length (or count) in `n`, -1 for null."""
        if flexible:
            self.line(indent, "if pos >= end: raise _short('length', 1, pos, end)")
            self.line(indent, "n = frame[pos]")
            self.line(indent, "if n < 0x80: pos += 1")
            self.line(indent, "else: n, pos = read_uvarint(frame, pos, end)")
            self.line(indent, "n -= 1")
        else:
            size = 2 if legacy_reader == "_int16" else 4
            self.line(indent, f"if end - pos < {size}: raise _short('length', {size}, pos, end)")
            self.line(indent, f"(n,) = {legacy_reader}(frame, pos)")
            self.line(indent, f"pos += {size}")

    def null_check(self, indent: int, nullable: bool, what: str) -> None:
        """After `length`: accept or refuse null, refuse other negatives; `n >= 0` after."""
        name = self.constant(what)
        self.line(indent, "if n < 0:")
        self.line(indent + 1, f"if n != -1: raise _negative({name}, n)")
        if not nullable:
            self.line(indent + 1, f"raise _null({name})")

    def sized(self, indent: int, kafka_type: str, flexible: bool, nullable: bool,
              what: str) -> None:
        self.length(indent, flexible, "_int16" if kafka_type == "string" else "_int32")
        self.null_check(indent, nullable, what)
        name = self.constant(what)
        self.line(indent, f"elif n > end - pos: raise _short({name}, n, pos, end)")
        self.line(indent, "else: pos += n")


def _element_min_size(kind: Any, field: Field[Any], flexible: bool) -> tuple[int, bool]:
    """(fewest bytes one array element takes, whether it always takes exactly that)."""
    if isinstance(kind, EntityTupleField):
        return _entity_min_size(kind.type_)
    kafka_type = get_schema_field_type(field)
    if kafka_type in _BYTES_LIKE:
        return (1 if flexible else (2 if kafka_type == "string" else 4)), False
    return FIXED_SIZES[kafka_type], True


@class_cache
def _entity_min_size(entity: type[Any]) -> tuple[int, bool]:
    flexible: bool = entity.__flexible__
    total = 1 if flexible else 0
    fixed = not flexible
    for field in fields(entity):
        if get_field_tag(field) is not None:
            continue
        kind = classify_field(field)
        if kind.is_array:
            total += 1 if flexible else 4
            fixed = False
        elif isinstance(kind, EntityField):
            size, inner_fixed = _entity_min_size(kind.type_)
            nullable = is_optional(field)
            total += size + (1 if nullable else 0)
            fixed = fixed and inner_fixed and not nullable
        else:
            size, inner_fixed = _element_min_size(kind, field, flexible)
            total += size
            fixed = fixed and inner_fixed
    return total, fixed


def _emit_field(out: _Emitter, indent: int, field: Field[Any], flexible: bool,
                is_header: bool, is_tag: bool) -> None:
    kind = classify_field(field)
    nullable = is_tag or is_optional(field)
    what = field.name
    if is_header and field.name == "client_id":
        # The request header's client_id is a legacy nullable string in every header version.
        out.flush_fixed(indent)
        out.sized(indent, "string", False, True, what)
        return
    if kind.is_array:
        out.flush_fixed(indent)
        size, element_fixed = _element_min_size(kind, field, flexible)
        out.length(indent, flexible, "_int32")
        out.null_check(indent, nullable, f"array {what}")
        name = out.constant(f"array {what}")
        out.line(indent, f"elif n * {max(size, 1)} > end - pos: "
                         f"raise _short({name}, n * {max(size, 1)}, pos, end)")
        if element_fixed:
            out.line(indent, f"else: pos += n * {size}")
        elif isinstance(kind, EntityTupleField):
            element = out.constant(entity_checker(kind.type_))
            out.line(indent, "else:")
            out.line(indent + 1, f"for _ in range(n): pos = {element}(frame, pos, end)")
        else:
            out.line(indent, "else:")
            out.line(indent + 1, "for _ in range(n):")
            out.sized(indent + 2, get_schema_field_type(field), flexible, False, what)
        return
    if isinstance(kind, EntityField):
        size, entity_fixed = _entity_min_size(kind.type_)
        if entity_fixed and not nullable:
            out.pending_fixed += size
            return
        out.flush_fixed(indent)
        inner = out.constant(entity_checker(kind.type_))
        if nullable:
            out.line(indent, f"if pos >= end: raise _short('null marker of {what}', 1, pos, end)")
            out.line(indent, "if _int8(frame, pos)[0] < 0: pos += 1")
            out.line(indent, f"else: pos = {inner}(frame, pos + 1, end)")
        else:
            out.line(indent, f"pos = {inner}(frame, pos, end)")
        return
    kafka_type = get_schema_field_type(field)
    if kafka_type in _BYTES_LIKE:
        out.flush_fixed(indent)
        out.sized(indent, kafka_type, flexible, nullable, what)
    else:
        out.pending_fixed += FIXED_SIZES[kafka_type]


@class_cache
def entity_checker(entity: type[Any]) -> Checker:
    """The generated checker of one kio class (a request, its header, or a struct in one)."""
    flexible: bool = entity.__flexible__
    is_header = entity.__name__ == "RequestHeader"
    out = _Emitter(dict(_GLOBALS))
    tagged: dict[int, Checker] = {}
    for field in fields(entity):
        tag = get_field_tag(field)
        if tag is None:
            _emit_field(out, 1, field, flexible, is_header, is_tag=False)
        else:
            tagged[int(tag)] = _tag_checker(field, flexible, is_header)
    out.flush_fixed(1)
    if flexible:
        known = out.constant(tagged)
        out.line(1, "if pos < end and frame[pos] == 0: pos += 1")
        out.line(1, f"else: pos = _tagged_fields(frame, pos, end, {known})")
    return out.compile(entity.__qualname__)


def _tag_checker(field: Field[Any], flexible: bool, is_header: bool) -> Checker:
    """The checker of one tagged field's value, run right after its tag and size."""
    out = _Emitter(dict(_GLOBALS))
    _emit_field(out, 1, field, flexible, is_header, is_tag=True)
    out.flush_fixed(1)
    return out.compile(f"tag {field.name}")


def check_request(schema: type[Any], frame: bytes | memoryview) -> int:
    """Check header and body of one request frame (no size prefix); return the number of
    bytes they use, which may be fewer than the frame holds (Kafka ignores the rest)."""
    end = len(frame)
    pos = entity_checker(schema.__header_schema__)(frame, 0, end)
    return entity_checker(schema)(frame, pos, end)
