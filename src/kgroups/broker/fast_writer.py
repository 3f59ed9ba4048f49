"""A faster serializer for kio entities, byte-for-byte the same as `kio.serial.entity_writer`.

kio decodes natively but encodes in generic Python: every field goes through phantom-type
checks, every flexible struct opens a scratch buffer for its (usually absent) tagged fields.
Profiles of pipelined small requests showed that writer using about 60% of the broker's CPU.
This module builds, once per kio class, a writer that walks the same fields with precompiled
struct packers and skips the tagged-field buffer when no tagged field differs from its default.
Only the hot primitive writers are replaced; the rest (uuid, datetimes, ...) stay kio's own, and
the field classification is kio's, so the wire format cannot drift from it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import MISSING, Field, fields
from functools import cache
from io import BytesIO
from typing import Any

from kio.serial import writers as kio_writers
from kio.serial._implicit_defaults import get_tagged_field_default
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
from kio.serial._serialize import get_writer

Writer = Callable[[BytesIO, Any], Any]

_NULL_ENTITY = struct.pack(">b", -1)
_PRESENT_ENTITY = struct.pack(">b", 1)
_NULL_LEGACY_STRING = struct.pack(">h", -1)
_NULL_LEGACY_BYTES = struct.pack(">i", -1)
_ZERO_UVARINT = b"\x00"  # an empty tagged-field section, a null compact string or array


def uvarint(value: int) -> bytes:
    """Unsigned LEB128, as Kafka's ByteUtils.writeUnsignedVarint."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _packer(fmt: str) -> Writer:
    pack = struct.Struct(fmt).pack
    return lambda buffer, value: buffer.write(pack(value))


def _compact_string(buffer: BytesIO, value: str | bytes | None) -> None:
    if value is None:
        buffer.write(_ZERO_UVARINT)
        return
    encoded = value.encode() if isinstance(value, str) else value
    buffer.write(uvarint(len(encoded) + 1))
    buffer.write(encoded)


def _legacy_string(buffer: BytesIO, value: str | None) -> None:
    if value is None:
        buffer.write(_NULL_LEGACY_STRING)
        return
    encoded = value.encode()
    buffer.write(struct.pack(">h", len(encoded)))
    buffer.write(encoded)


def _legacy_bytes(buffer: BytesIO, value: bytes | None) -> None:
    if value is None:
        buffer.write(_NULL_LEGACY_BYTES)
        return
    buffer.write(struct.pack(">i", len(value)))
    buffer.write(value)


_pack_int16 = struct.Struct(">h").pack
_pack_int32 = struct.Struct(">i").pack

# kio primitive writer -> equivalent without phantom-type checks. The non-nullable kio writers
# raise on None; these are only ever handed values kio's would accept.
_FAST_PRIMITIVES: dict[Any, Writer] = {
    kio_writers.write_int8: _packer(">b"),
    kio_writers.write_int16: _packer(">h"),
    kio_writers.write_int32: _packer(">i"),
    kio_writers.write_int64: _packer(">q"),
    kio_writers.write_uint8: _packer(">B"),
    kio_writers.write_uint16: _packer(">H"),
    kio_writers.write_uint32: _packer(">I"),
    kio_writers.write_uint64: _packer(">Q"),
    kio_writers.write_boolean: _packer(">?"),
    kio_writers.write_error_code: lambda buffer, code: buffer.write(_pack_int16(code.value)),
    kio_writers.write_timedelta_i32: lambda buffer, delta: buffer.write(
        _pack_int32(round(delta.total_seconds() * 1000))),
    kio_writers.write_compact_string: _compact_string,
    kio_writers.write_nullable_compact_string: _compact_string,
    kio_writers.write_legacy_string: _legacy_string,
    kio_writers.write_nullable_legacy_string: _legacy_string,
    kio_writers.write_legacy_bytes: _legacy_bytes,
    kio_writers.write_nullable_legacy_bytes: _legacy_bytes,
}


def _array(item_writer: Writer, flexible: bool) -> Writer:
    if flexible:
        def write_compact_array(buffer: BytesIO, items: Sequence[Any] | None) -> None:
            if items is None:
                buffer.write(_ZERO_UVARINT)
                return
            buffer.write(uvarint(len(items) + 1))
            for item in items:
                item_writer(buffer, item)

        return write_compact_array

    def write_legacy_array(buffer: BytesIO, items: Sequence[Any] | None) -> None:
        if items is None:
            buffer.write(_NULL_LEGACY_BYTES)
            return
        buffer.write(_pack_int32(len(items)))
        for item in items:
            item_writer(buffer, item)

    return write_legacy_array


def _field_writer(field: Field[Any], flexible: bool, request_header: bool, tagged: bool) -> Writer:
    """The same choice kio.serial._serialize.get_field_writer makes, with fast parts."""
    if request_header and field.name == "client_id":
        return _legacy_string  # Kafka keeps the header's client id a legacy string
    optional = False if tagged else is_optional(field)
    field_class = classify_field(field)
    inner: Writer
    match field_class:
        case PrimitiveField():
            kio_writer = get_writer(get_schema_field_type(field), flexible, optional)
            inner = _FAST_PRIMITIVES.get(kio_writer, kio_writer)
        case PrimitiveTupleField():
            kio_writer = get_writer(get_schema_field_type(field), flexible, False)
            inner = _FAST_PRIMITIVES.get(kio_writer, kio_writer)
        case EntityField(field_type):
            inner = fast_entity_writer(field_type, nullable=optional)
        case EntityTupleField(field_type):
            inner = fast_entity_writer(field_type)
    return _array(inner, flexible) if field_class.is_array else inner


@cache
def fast_entity_writer(entity_type: type[Any], nullable: bool = False) -> Writer:
    """Writer(buffer, entity) for one kio class (cached), output identical to kio's."""
    flexible = bool(entity_type.__flexible__)
    request_header = entity_type.__name__ == "RequestHeader"
    plain: list[tuple[str, Writer]] = []
    tagged: list[tuple[int, Field[Any], Writer, Any]] = []
    for field in fields(entity_type):
        tag = get_field_tag(field)
        writer = _field_writer(field, flexible, request_header, tag is not None)
        if tag is None:
            plain.append((field.name, writer))
        else:
            tagged.append((int(tag), field, writer, get_tagged_field_default(field)))
    tagged.sort(key=lambda entry: entry[0])

    def write_entity(buffer: BytesIO, entity: Any) -> None:
        for name, writer in plain:
            writer(buffer, getattr(entity, name))
        if not flexible:
            return
        present = []
        for tag, field, writer, implicit_default in tagged:
            value = getattr(entity, field.name)
            if value == field.default or (field.default is MISSING and value == implicit_default):
                continue
            scratch = BytesIO()
            writer(scratch, value)
            encoded = scratch.getvalue()
            present.append(uvarint(tag) + uvarint(len(encoded)) + encoded)
        buffer.write(uvarint(len(present)))
        for chunk in present:
            buffer.write(chunk)

    if not nullable:
        return write_entity

    def write_nullable_entity(buffer: BytesIO, entity: Any) -> None:
        if entity is None:
            buffer.write(_NULL_ENTITY)
            return
        buffer.write(_PRESENT_ENTITY)
        write_entity(buffer, entity)

    return write_nullable_entity
