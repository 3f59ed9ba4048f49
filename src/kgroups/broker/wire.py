"""Kafka wire framing on top of kio: request headers in, size-prefixed responses out.

kio generates one dataclass per API version; the helpers here let a handler be written once
for all versions (`build` keeps only the fields a version has) and keep reader/writer lookups
cached, since they sit on the hot path of every request.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime
import importlib
import pkgutil
import struct
import sys
from functools import cache
from typing import Any, NamedTuple, get_args

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader
from kio.static.constants import EntityType

from kgroups.broker import legacy_schemas
from kgroups.broker.class_cache import class_cache
from kgroups.broker.fast_writer import Encoder, entity_encoder
from kgroups.broker.frame_check import FrameCheckError, check_request
from kgroups.broker.legacy_schemas import LEGACY_SCHEMAS
from kgroups.errors import ErrorCode

# Every answer's throttle_time: kgroups enforces no quotas, so it never asks a client to wait.
NO_THROTTLE = datetime.timedelta(0)

_SIZE = struct.Struct(">i")
_API_KEY_VERSION_CORRELATION = struct.Struct(">hhi")


class FrameDecodeError(ValueError):
    """The bytes of a request do not parse as the request they claim to be."""


class DecodedRequest(NamedTuple):
    """One request as read from its frame (a tuple: built for every request, it is cheaper
    than a frozen dataclass and just as immutable)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    unused_bytes: int  # left after the last field; Kafka ignores them, and so does kgroups


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the prefix every request header version shares."""
    if len(frame) < _API_KEY_VERSION_CORRELATION.size:
        raise FrameDecodeError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _API_KEY_VERSION_CORRELATION.unpack_from(frame)
    return api_key, api_version, correlation_id


def has_message_schema(api_key: int, api_version: int) -> bool:
    """Whether this API version has a request and a response class (kio's, or ours for a
    version Kafka 4 removed), known from kio's index without importing them: importing every
    version's module to check a broker's handlers took most of its start-up (0.6 s), and a
    class is imported on its first request anyway."""
    if (api_key, api_version) in LEGACY_SCHEMAS:
        return True
    entities = schema_name_map.get(api_key_map.get(api_key, ""), {}).get(api_version, {})
    return EntityType.request in entities and EntityType.response in entities


@cache
def request_type(api_key: int, api_version: int) -> type[Any]:
    """kio's class, or ours for a version Kafka 4 removed that old tools still send."""
    legacy = LEGACY_SCHEMAS.get((api_key, api_version))
    return legacy[0] if legacy is not None else load_request_schema(api_key, api_version)


@cache
def response_type(api_key: int, api_version: int) -> type[Any]:
    legacy = LEGACY_SCHEMAS.get((api_key, api_version))
    return legacy[1] if legacy is not None else load_response_schema(api_key, api_version)


@class_cache
def _reader(entity: type[Any]) -> Any:
    return entity_reader(entity)


def _encoder(entity: type[Any]) -> Encoder:
    return entity_encoder(entity)


@class_cache
def _response_head(response: type[Any]) -> tuple[struct.Struct, int]:
    """The packer of size prefix + response header, and the header's size: the correlation id,
    then (header v1, flexible responses) an empty tagged-field section."""
    flexible = bool(response.__header_schema__.__flexible__)
    return struct.Struct(">iix" if flexible else ">ii"), 5 if flexible else 4


# Small frames decoded lately, by their bytes but the correlation id: a client sends the same
# Heartbeat and Metadata over and over, and a kio request is immutable, so one decoding serves
# them all. Bounded in entries and frame size; emptied when full.
_DECODED: dict[bytes, tuple[str | None, Any, int]] = {}
_DECODED_ENTRIES = 1024
_DECODED_FRAME_BYTES = 1024


def decode_request(frame: bytes | memoryview) -> DecodedRequest:
    """Parse header and body of one frame (no size prefix), or take them from a frame seen
    lately that differs only in its correlation id (`_DECODED`).

    Every length and count is first checked against the frame (frame_check), so no client can
    make the native decoder reserve more memory than its frame justifies. Bytes left after the
    last field are not an error: Kafka reads a request's fields and ignores the rest, and
    librdkafka 2.13+ sends Metadata v12 with three such bytes (its issue #5049)."""
    api_key, api_version, correlation_id = peek_header(frame)
    seen = None
    if type(frame) is bytes and len(frame) <= _DECODED_FRAME_BYTES:
        seen = frame[:4] + frame[8:]
        decoded = _DECODED.get(seen)
        if decoded is not None:
            return DecodedRequest(api_key, api_version, correlation_id, *decoded)
    schema = request_type(api_key, api_version)
    try:
        used = check_request(schema, frame)
    except FrameCheckError as exc:
        raise FrameDecodeError(f"{schema.__name__} v{api_version}: {exc}") from exc
    try:
        header, header_size = _reader(schema.__header_schema__)(frame, 0)
        body, body_size = _reader(schema)(frame, header_size)
    except Exception as exc:  # the native decoder raises several types on arbitrary bytes
        raise FrameDecodeError(f"cannot decode {schema.__name__} v{api_version}: {exc}") from exc
    if header_size + body_size != used:
        raise FrameDecodeError(
            f"{schema.__name__} v{api_version}: decoder used {header_size + body_size} bytes, "
            f"the length check {used}"
        )
    if seen is not None:
        if len(_DECODED) >= _DECODED_ENTRIES:
            _DECODED.clear()
        _DECODED[seen] = (header.client_id, body, len(frame) - used)
    return DecodedRequest(api_key, api_version, correlation_id, header.client_id, body,
                          len(frame) - used)


class SelfEncodingResponse(abc.ABC):
    """An answer that writes its own body rather than being one kio object: Metadata, whose
    topic entries are kept encoded (metadata_answer). Its bytes must be those kio would write
    for the `response_class` object it stands for."""

    __slots__ = ()

    @property
    @abc.abstractmethod
    def response_class(self) -> type[Any]:
        """The kio response class: its header version frames the answer."""

    @abc.abstractmethod
    def write_body(self, out: list[Any]) -> None:
        """Append the body's bytes to `out`, in pieces."""


@class_cache
def _self_encoding(response_class: type[Any]) -> bool:
    """Whether answers of this class write their own body: asked once per class (an ABC's
    isinstance runs Python code at every call, and every answer asked it)."""
    return issubclass(response_class, SelfEncodingResponse)


@dataclasses.dataclass(frozen=True, slots=True)
class EncodedAnswer(SelfEncodingResponse):
    """A whole answer's body, encoded once and written as is to every request it answers
    (a Metadata answer per what was asked, an OffsetCommit answer per what it says): only the
    correlation id in the header differs."""

    answer_class: type[Any]
    body: bytes

    @property
    def response_class(self) -> type[Any]:
        return self.answer_class

    def write_body(self, out: list[Any]) -> None:
        out.append(self.body)

    @classmethod
    def of(cls, response: Any) -> EncodedAnswer:
        """`response` (a kio response object) encoded."""
        out: list[Any] = []
        encode_entity(response, out)
        return cls(type(response), b"".join(out))


def encode_entity(entity: Any, out: list[Any]) -> None:
    """Append the bytes of one kio object (a response or a struct in one) to `out`."""
    _encoder(type(entity))(entity, out)


def encode_response(correlation_id: int, response: Any) -> bytes:
    """Size prefix + response header (the version kio ties to this response) + body, joined
    once from the pieces the generated encoder appends."""
    out: list[Any] = [b""]
    if type(response) is EncodedAnswer:  # the kept answers, most of a busy broker's
        response_class = response.answer_class
        out.append(response.body)
    elif _self_encoding(type(response)):
        response_class = response.response_class
        response.write_body(out)
    else:
        response_class = type(response)
        _encoder(response_class)(response, out)
    head, header_size = _response_head(response_class)
    out[0] = head.pack(sum(map(len, out)) + header_size, correlation_id)
    return b"".join(out)


def encode_request(correlation_id: int, client_id: str | None, request: Any) -> bytes:
    """Client side of the framing, for the admin CLI, the tests and the benchmarks."""
    header_schema = type(request).__header_schema__
    header = header_schema(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out: list[Any] = [b""]
    _encoder(header_schema)(header, out)
    _encoder(type(request))(request, out)
    out[0] = _SIZE.pack(sum(map(len, out)))
    return b"".join(out)


def decode_response(response_schema: type[Any], frame: bytes) -> tuple[int, Any]:
    """(correlation_id, body) of a response frame without its size prefix."""
    header, header_size = _reader(response_schema.__header_schema__)(frame, 0)
    body, _ = _reader(response_schema)(frame, header_size)
    return header.correlation_id, body


@class_cache
def _field_names(entity: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(entity))


@class_cache
def _names_in_any_version(entity: type[Any]) -> frozenset[str]:
    """The fields of `entity`'s class in every version of its message: kio generates one
    module per version (e.g. kio.schema.join_group.v9.response), legacy_schemas.py holds the
    versions kio lacks, all under the same class names. A name outside them is a misspelling,
    not a field some version lacks."""
    api_key = int(entity.__api_key__)
    kind = "request" if entity.__header_schema__.__name__ == "RequestHeader" else "response"
    api_package = f"kio.schema.{api_key_map[api_key]}"
    listed = [version.name
              for version in pkgutil.iter_modules(importlib.import_module(api_package).__path__)]
    if not listed:
        # pkgutil says nothing when it cannot list the package (EMFILE): raising keeps that
        # empty answer out of the cache, which would refuse every answer of this class after.
        raise OSError(f"cannot list the versions of {api_package}")
    versions = [importlib.import_module(f"{api_package}.{name}.{kind}") for name in listed]
    names: set[str] = set(_field_names(entity))
    for module in versions:
        same_class = getattr(module, entity.__name__, None)
        if same_class is not None:
            names |= _field_names(same_class)
    for (legacy_key, _version), (request, response) in LEGACY_SCHEMAS.items():
        top = request if kind == "request" else response
        same_class = {top.__name__: top, **_reachable(top)}.get(entity.__name__)
        if legacy_key == api_key and same_class is not None:
            names |= _field_names(same_class)
    return frozenset(names)


class UnknownFieldError(TypeError):
    """`build` was given a field that no version of the message has."""


def build(entity: type[Any], **values: Any) -> Any:
    """Construct `entity` from the values its version has; the others are dropped, as Kafka
    drops fields a version does not carry. A name that no version has is refused, so a
    misspelled field fails at once instead of leaving its default in the answer."""
    names = _field_names(entity)
    if names.issuperset(values):  # every value is a field of this version: the common case
        return entity(**values)
    kept = {k: v for k, v in values.items() if k in names}
    if len(kept) < len(values):
        unknown = set(values) - _names_in_any_version(entity)
        if unknown:
            raise UnknownFieldError(
                f"{entity.__module__}.{entity.__name__} has no field {', '.join(sorted(unknown))}"
                " in any version")
    return entity(**kept)


def sibling(entity: type[Any], name: str) -> type[Any]:
    """A nested kio class of the same API version (e.g. the topic class of a response); for
    a version kio lacks, found among the classes `entity`'s fields hold (legacy_schemas.py
    builds one set per version under the same names, so they are not module attributes)."""
    if entity.__module__ == legacy_schemas.__name__:
        return _reachable(entity)[name]
    found: type[Any] = getattr(sys.modules[entity.__module__], name)
    return found


@class_cache
def _reachable(entity: type[Any]) -> dict[str, type[Any]]:
    """The classes nested in `entity`'s fields, at any depth, by name."""
    found: dict[str, type[Any]] = {}
    pending = [entity]
    while pending:
        for item in dataclasses.fields(pending.pop()):
            for candidate in (item.type, *get_args(item.type)):
                if dataclasses.is_dataclass(candidate) and isinstance(candidate, type) \
                        and candidate.__name__ not in found:
                    found[candidate.__name__] = candidate
                    pending.append(candidate)
    return found


def has_field(entity: type[Any], name: str) -> bool:
    return name in _field_names(entity)


def kio_error(code: ErrorCode | int) -> KioErrorCode:
    return KioErrorCode(int(code))
