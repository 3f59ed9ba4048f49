"""Checks every length and count in a request against the bytes its frame holds, before decoding.

kio's native decoder reserves room for an array from the count the client sent: a 24-byte
Metadata request announcing 2^32-2 topics made it ask for 32 GiB and abort the whole process.
Kafka never trusts such a count (its generated readers compare it with the bytes left), so
neither may kgroups. This module builds, once per kio request class, a checker that walks the
frame as the decoder will and fails if any array, string, bytes or tagged-field length claims
more than what remains. Counts are compared with the smallest size an element can have, so an
accepted frame can make the decoder reserve at most a few times the frame's own size.

It also refuses null where the field is not nullable: Kafka's readers throw on that, and the
broker then closes the connection, which is what kgroups does with a FrameCheckError.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import Field, dataclass, fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

# (frame, position, end) -> position after the checked item; raises FrameCheckError.
Step = Callable[[bytes, int, int], int]

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

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


def _room(pos: int, need: int, end: int, what: str) -> None:
    if need > end - pos:
        raise FrameCheckError(f"{what} claims {need} bytes, {max(end - pos, 0)} remain")


def _advance(size: int) -> Step:
    def step(frame: bytes, pos: int, end: int) -> int:
        _room(pos, size, end, "fixed fields")
        return pos + size

    return step


def _legacy_length(prefix: struct.Struct) -> Callable[[bytes, int, int], tuple[int, int]]:
    """(length or -1 for null, position after the prefix) of an int16/int32 length prefix."""
    unpack = prefix.unpack_from
    size = prefix.size

    def read(frame: bytes, pos: int, end: int) -> tuple[int, int]:
        _room(pos, size, end, "length prefix")
        (length,) = unpack(frame, pos)
        if length < -1:
            raise FrameCheckError(f"negative length {length}")
        return length, pos + size

    return read


def _compact_length(frame: bytes, pos: int, end: int) -> tuple[int, int]:
    value, pos = read_uvarint(frame, pos, end)
    return value - 1, pos


def _length_reader(kafka_type: str, flexible: bool) -> Callable[..., tuple[int, int]]:
    if flexible:
        return _compact_length
    return _legacy_length(_INT16 if kafka_type == "string" else _INT32)


@dataclass(frozen=True, slots=True)
class _Checker:
    """How to check one field: its step and the fewest bytes it can take (for array bounds)."""

    step: Step
    min_size: int
    fixed: bool  # always exactly min_size bytes


def _sized(kafka_type: str, flexible: bool, nullable: bool, name: str) -> _Checker:
    read_length = _length_reader(kafka_type, flexible)

    def step(frame: bytes, pos: int, end: int) -> int:
        length, pos = read_length(frame, pos, end)
        if length < 0:
            if not nullable:
                raise FrameCheckError(f"non-nullable {name} is null")
            return pos
        _room(pos, length, end, name)
        return pos + length

    min_size = 1 if flexible else (2 if kafka_type == "string" else 4)
    return _Checker(step, min_size, False)


def _array(element: _Checker, flexible: bool, nullable: bool, name: str) -> _Checker:
    read_count = _compact_length if flexible else _legacy_length(_INT32)
    element_step, element_size, element_fixed = element.step, element.min_size, element.fixed

    def step(frame: bytes, pos: int, end: int) -> int:
        count, pos = read_count(frame, pos, end)
        if count < 0:
            if not nullable:
                raise FrameCheckError(f"non-nullable array {name} is null")
            return pos
        _room(pos, count * max(element_size, 1), end, f"array {name} of {count}")
        if element_fixed:
            return pos + count * element_size
        for _ in range(count):
            pos = element_step(frame, pos, end)
        return pos

    return _Checker(step, 1 if flexible else 4, False)


def _nullable_entity(inner: _Checker, name: str) -> _Checker:
    inner_step = inner.step

    def step(frame: bytes, pos: int, end: int) -> int:
        _room(pos, 1, end, f"null marker of {name}")
        (marker,) = _INT8.unpack_from(frame, pos)
        if marker < 0:
            return pos + 1
        return inner_step(frame, pos + 1, end)

    return _Checker(step, 1, False)


def _field_checker(field: Field[Any], flexible: bool, is_header: bool, is_tag: bool) -> _Checker:
    kind = classify_field(field)
    nullable = is_tag or is_optional(field)
    if is_header and field.name == "client_id":
        # The request header's client_id is a legacy nullable string in every header version.
        return _sized("string", False, True, field.name)
    if isinstance(kind, EntityField | EntityTupleField):
        inner = entity_checker(kind.type_)
        if isinstance(kind, EntityTupleField):
            return _array(inner, flexible, nullable, field.name)
        return _nullable_entity(inner, field.name) if nullable else inner
    kafka_type = get_schema_field_type(field)
    if kafka_type in _BYTES_LIKE:
        element = _sized(kafka_type, flexible, nullable and not kind.is_array, field.name)
    else:
        size = FIXED_SIZES[kafka_type]
        element = _Checker(_advance(size), size, True)
    if isinstance(kind, PrimitiveTupleField):
        return _array(element, flexible, nullable, field.name)
    assert isinstance(kind, PrimitiveField)
    return element


def _merge_fixed(checkers: Sequence[_Checker]) -> list[Step]:
    """Steps with each run of fixed-size fields folded into one bounds check."""
    steps: list[Step] = []
    run = 0
    for checker in checkers:
        if checker.fixed:
            run += checker.min_size
            continue
        if run:
            steps.append(_advance(run))
            run = 0
        steps.append(checker.step)
    if run:
        steps.append(_advance(run))
    return steps


def _tagged_section(tagged: dict[int, Step]) -> Step:
    def step(frame: bytes, pos: int, end: int) -> int:
        count, pos = read_uvarint(frame, pos, end)
        _room(pos, 2 * count, end, f"{count} tagged fields")
        for _ in range(count):
            tag, pos = read_uvarint(frame, pos, end)
            size, pos = read_uvarint(frame, pos, end)
            _room(pos, size, end, f"tagged field {tag}")
            known = tagged.get(tag)
            if known is not None:
                known(frame, pos, pos + size)
            pos += size
        return pos

    return step


@cache
def entity_checker(entity: type[Any]) -> _Checker:
    """The checker of one kio class (a request, its header, or a struct inside one)."""
    flexible: bool = entity.__flexible__
    is_header = entity.__name__ == "RequestHeader"
    plain: list[_Checker] = []
    tagged: dict[int, Step] = {}
    for field in fields(entity):
        tag = get_field_tag(field)
        if tag is None:
            plain.append(_field_checker(field, flexible, is_header, is_tag=False))
        else:
            tagged[int(tag)] = _field_checker(field, flexible, is_header, is_tag=True).step
    min_size = sum(c.min_size for c in plain) + (1 if flexible else 0)
    if not flexible and all(c.fixed for c in plain):
        return _Checker(_advance(min_size), min_size, True)
    steps = _merge_fixed(plain)
    if flexible:
        steps.append(_tagged_section(tagged))
    steps_tuple = tuple(steps)

    def step(frame: bytes, pos: int, end: int) -> int:
        for each in steps_tuple:
            pos = each(frame, pos, end)
        return pos

    return _Checker(step, min_size, False)


def check_request(schema: type[Any], frame: bytes) -> int:
    """Check header and body of one request frame (no size prefix); return the number of
    bytes they use, which may be fewer than the frame holds (Kafka ignores the rest)."""
    end = len(frame)
    pos = entity_checker(schema.__header_schema__).step(frame, 0, end)
    return entity_checker(schema).step(frame, pos, end)
