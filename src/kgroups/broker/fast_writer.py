"""A faster serializer for kio entities, byte-for-byte the same as `kio.serial.entity_writer`.

kio decodes natively but encodes in generic Python: every field goes through phantom-type
checks and a writer call, every flexible struct opens a scratch buffer for its (usually absent)
tagged fields. Profiles of pipelined small requests showed that writer using about 60% of the
broker's CPU, and a closure per field (this module's first form) still a fifth of a Heartbeat.

So, as frame_check does for reading, the encoder of each kio class is generated once as
straight-line Python: each run of fixed-size fields (and the empty tagged-field section that
ends it) becomes one precompiled struct pack, strings and arrays are inlined, nested structs
call their own generated encoder, and the pieces are appended to one list that the caller joins
once. The field classification and the choice of wire type per field are kio's, so the format
cannot drift from it (tests/broker/test_fast_writer.py and the in-process broker tests compare
every answer with kio's own writer).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from typing import Any

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.constants import uuid_zero

from kgroups.broker.class_cache import class_cache
from kgroups.broker.generated_code import FunctionSource
from kgroups.log.batch import uvarint

# encode(entity, out): appends the entity's bytes to `out`, in pieces; b"".join(out) is the wire.
Encoder = Callable[[Any, list[Any]], None]

# Fixed-size wire types: the struct code and the expression (of `v`) that gives the value packed.
_FIXED: dict[str, tuple[str, str]] = {
    "bool": ("?", "{v}"), "int8": ("b", "{v}"), "uint8": ("B", "{v}"),
    "int16": ("h", "{v}"), "uint16": ("H", "{v}"), "int32": ("i", "{v}"),
    "uint32": ("I", "{v}"), "int64": ("q", "{v}"), "uint64": ("Q", "{v}"),
    "float64": ("d", "{v}"), "error_code": ("h", "{v}.value"),
    "timedelta_i32": ("i", "round({v}.total_seconds() * 1000)"),
    "timedelta_i64": ("q", "round({v}.total_seconds() * 1000)"),
    "datetime_i64": ("q", "round({v}.timestamp() * 1000)"),
    "uuid": ("16s", "(_UUID_ZERO if {v} is None else {v}.bytes)"),
}
_NULLABLE_DATETIME = "(-1 if {v} is None else round({v}.timestamp() * 1000))"

_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))


_GLOBALS: dict[str, Any] = {
    "_uvarint": uvarint, "_ONE_BYTE": _ONE_BYTE, "_UUID_ZERO": uuid_zero.bytes,
    "_int16": struct.Struct(">h").pack, "_int32": struct.Struct(">i").pack,
    "_pack": struct.pack, "_join": b"".join,
}


class _Emitter(FunctionSource):
    """Writes the body of one generated encoder; `e` is the entity, `a` appends to `out`."""

    def __init__(self) -> None:
        super().__init__(dict(_GLOBALS))
        self.codes = ""  # the pending run of fixed-size fields: struct codes ...
        self.values: list[str] = []  # ... and the expressions packed

    def compile(self, label: str) -> Encoder:
        self.flush_fixed(1)
        encoder: Encoder = self.define(["def encode(e, out):", "    a = out.append"], [],
                                       "encode", f"<encoder of {label}>")
        return encoder

    def fixed(self, code: str, value: str | None) -> None:
        """Add a fixed-size field (or, with no value, a zero pad byte) to the pending run."""
        self.codes += code
        if value is not None:
            self.values.append(value)

    def flush_fixed(self, indent: int) -> None:
        if self.codes:
            packer = self.constant(struct.Struct(">" + self.codes).pack)
            self.line(indent, f"a({packer}({', '.join(self.values)}))")
            self.codes, self.values = "", []

    def length(self, indent: int, flexible: bool, count: str) -> None:
        """Append the length or count `count` (an expression) as this struct encodes it."""
        if flexible:
            self.line(indent, f"n = {count} + 1")
            self.line(indent, "a(_ONE_BYTE[n] if n < 128 else _uvarint(n))")
        else:
            self.line(indent, f"a(_int32({count}))")

    def null(self, indent: int, flexible: bool) -> None:
        self.line(indent, "a(b'\\x00')" if flexible else "a(b'\\xff\\xff\\xff\\xff')")

    def value(self, getter: str) -> None:
        """The pending fixed-size run written, then the field read into the local `v`."""
        self.flush_fixed(1)
        self.line(1, f"v = {getter}")

    def array_prefix(self, flexible: bool) -> None:
        """An array `v`: null, or its count with the elements to follow at indent 2."""
        self.line(1, "if v is None:")
        self.null(2, flexible)
        self.line(1, "else:")
        self.length(2, flexible, "len(v)")

    def sized(self, indent: int, kafka_type: str, flexible: bool, value: str) -> None:
        """A string or bytes value `value` (a local name), None written as null."""
        if flexible:
            self.line(indent, f"if {value} is None: a(b'\\x00')")
            self.line(indent, "else:")
            self.line(indent + 1, f"if isinstance({value}, str): {value} = {value}.encode()")
            self.length(indent + 1, True, f"len({value})")
            self.line(indent + 1, f"a({value})")
        elif kafka_type == "string":
            self.line(indent, f"if {value} is None: a(b'\\xff\\xff')")
            self.line(indent, "else:")
            self.line(indent + 1, f"{value} = {value}.encode()")
            self.line(indent + 1, f"a(_int16(len({value})))")
            self.line(indent + 1, f"a({value})")
        else:
            self.line(indent, f"if {value} is None: a(b'\\xff\\xff\\xff\\xff')")
            self.line(indent, "else:")
            self.line(indent + 1, f"a(_int32(len({value})))")
            self.line(indent + 1, f"a({value})")


def _emit_field(out: _Emitter, field: Field[Any], flexible: bool, is_header: bool,
                is_tag: bool) -> None:
    """Append the code writing `e.<field>` (kio's get_field_writer, generated)."""
    getter = f"e.{field.name}"
    if is_header and field.name == "client_id":
        # Kafka keeps the request header's client id a legacy string in every version.
        out.value(getter)
        out.sized(1, "string", False, "v")
        return
    # A tagged field is written only when set, so kio treats it as not nullable.
    optional = False if is_tag else is_optional(field)
    kind = classify_field(field)
    if isinstance(kind, EntityField | EntityTupleField):
        element = out.constant(entity_encoder(kind.type_))
        out.value(getter)
        if kind.is_array:
            out.array_prefix(flexible)
            out.line(2, f"for x in v: {element}(x, out)")
        elif optional:
            out.line(1, "if v is None: a(b'\\xff')")
            out.line(1, f"else: a(b'\\x01'); {element}(v, out)")
        else:
            out.line(1, f"{element}(v, out)")
        return
    kafka_type = get_schema_field_type(field)
    if kafka_type in _FIXED:
        code, expression = _FIXED[kafka_type]
        if kafka_type == "datetime_i64" and optional and not kind.is_array:
            expression = _NULLABLE_DATETIME
        if not kind.is_array:
            out.fixed(code, expression.format(v=getter))
            return
        out.value(getter)
        out.array_prefix(flexible)
        if expression == "{v}":  # the elements pack as they are: one pack for the array
            out.line(2, f"a(_pack('>%d{code}' % len(v), *v))")
        else:
            packer = out.constant(struct.Struct(">" + code).pack)
            out.line(2, f"for x in v: a({packer}({expression.format(v='x')}))")
        return
    assert isinstance(kind, PrimitiveTupleField) or not kind.is_array
    out.value(getter)
    if kind.is_array:
        out.array_prefix(flexible)
        out.line(2, "for x in v:")
        out.sized(3, kafka_type, flexible, "x")
    else:
        out.sized(1, kafka_type, flexible, "v")


def _tagged_section(out: _Emitter, tagged: list[tuple[int, Field[Any]]], flexible: bool,
                    is_header: bool) -> None:
    """The tagged fields that differ from their default, by ascending tag, each as tag, size
    and value (kio's rule: a field's declared default, else its type's implicit one)."""
    if not tagged:
        out.fixed("x", None)  # no tagged fields: a count of zero, one zero byte
        return
    out.flush_fixed(1)
    out.line(1, "t = []")
    for tag, field in sorted(tagged, key=lambda entry: entry[0]):
        default = field.default if field.default is not MISSING else (
            get_tagged_field_default(field))
        value_encoder = _Emitter()
        _emit_field(value_encoder, field, flexible, is_header, is_tag=True)
        encode_value = out.constant(value_encoder.compile(f"tag {field.name}"))
        head = out.constant(uvarint(tag))
        out.line(1, f"if not (e.{field.name} == {out.constant(default)}):")
        out.line(2, "s = []")
        out.line(2, f"{encode_value}(e, s)")
        out.line(2, "s = _join(s)")
        out.line(2, f"t.append({head} + _uvarint(len(s)) + s)")
    out.line(1, "a(_uvarint(len(t)))")
    out.line(1, "out.extend(t)")


@class_cache
def entity_encoder(entity_type: type[Any]) -> Encoder:
    """The generated encoder of one kio class (a response, a header, or a struct in one)."""
    flexible = bool(entity_type.__flexible__)
    is_header = entity_type.__name__ == "RequestHeader"
    out = _Emitter()
    tagged: list[tuple[int, Field[Any]]] = []
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            _emit_field(out, field, flexible, is_header, is_tag=False)
        else:
            tagged.append((int(tag), field))
    if flexible:
        _tagged_section(out, tagged, flexible, is_header)
    return out.compile(entity_type.__qualname__)

