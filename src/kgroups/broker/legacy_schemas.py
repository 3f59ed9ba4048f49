"""Message versions Kafka 4 removed (KIP-896) that kio therefore does not generate, written in
kio's form so the frame checker, decoder and fast writer handle them like any other version.

Only versions a tool still in wide use needs are here: ListOffsets v0, which Burrow 1.2 (the
lag monitor Debian ships) sends whatever `kafka-version` it is given, and Fetch v0-v3, which it
sends with a client profile older than Kafka 0.11 (Debian's sample configuration names 0.10.0).
The layouts are Kafka 3.9's ListOffsetsRequest.json / ListOffsetsResponse.json at version 0
(`MaxNumOffsets` in the request and an array of offsets, `OldStyleOffsets`, in the response
instead of one offset) and FetchRequest.json / FetchResponse.json at versions 0-3 (no
isolation level, sessions or log start offset; `MaxBytes` from v3, throttle time from v1).
The field names are those kio gives the same fields in later versions, so one handler reads
every version.
"""

# No `from __future__ import annotations`: kio reads the field types as objects, not strings.
from dataclasses import dataclass, field, make_dataclass
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})
    max_num_offsets: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    replica_id: BrokerId = field(metadata={"kafka_type": "int32"})
    topics: tuple[ListOffsetsTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionResponse:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicResponse:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionResponse, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topics: tuple[ListOffsetsTopicResponse, ...]


def _kafka(kafka_type: str) -> Any:
    return field(metadata={"kafka_type": kafka_type})


def _entity(name: str, kind: EntityType, version: int, header: type[Any],
            fields: list[tuple[str, Any, Any]]) -> type[Any]:
    """A kio-shaped frozen dataclass of Fetch (API 1) at `version`."""
    entity = make_dataclass(name, fields, frozen=True, slots=True, kw_only=True)
    entity.__module__ = __name__
    entity.__qualname__ = f"{name}V{version}"
    entity.__type__ = kind  # type: ignore[attr-defined]
    entity.__version__ = i16(version)  # type: ignore[attr-defined]
    entity.__flexible__ = False  # type: ignore[attr-defined]
    entity.__api_key__ = i16(1)  # type: ignore[attr-defined]
    entity.__header_schema__ = header  # type: ignore[attr-defined]
    return entity


def _fetch_request(version: int) -> type[Any]:
    partition = _entity("FetchPartition", EntityType.nested, version, RequestHeader, [
        ("partition", i32, _kafka("int32")), ("fetch_offset", i64, _kafka("int64")),
        ("partition_max_bytes", i32, _kafka("int32"))])
    topic = _entity("FetchTopic", EntityType.nested, version, RequestHeader, [
        ("topic", TopicName, _kafka("string")),
        ("partitions", tuple[partition, ...], field())])  # type: ignore[valid-type]
    max_bytes = [("max_bytes", i32, _kafka("int32"))] if version >= 3 else []
    return _entity("FetchRequest", EntityType.request, version, RequestHeader, [
        ("replica_id", BrokerId, _kafka("int32")),
        ("max_wait", i32Timedelta, _kafka("timedelta_i32")),
        ("min_bytes", i32, _kafka("int32")), *max_bytes,
        ("topics", tuple[topic, ...], field())])  # type: ignore[valid-type]


def _fetch_response(version: int) -> type[Any]:
    partition = _entity("PartitionData", EntityType.nested, version, ResponseHeader, [
        ("partition_index", i32, _kafka("int32")),
        ("error_code", ErrorCode, _kafka("error_code")),
        ("high_watermark", i64, _kafka("int64")),
        ("records", Records | None, _kafka("records"))])
    topic = _entity("FetchableTopicResponse", EntityType.nested, version, ResponseHeader, [
        ("topic", TopicName, _kafka("string")),
        ("partitions", tuple[partition, ...], field())])  # type: ignore[valid-type]
    throttle = [("throttle_time", i32Timedelta, _kafka("timedelta_i32"))] if version >= 1 else []
    return _entity("FetchResponse", EntityType.response, version, ResponseHeader, [
        *throttle, ("responses", tuple[topic, ...], field())])  # type: ignore[valid-type]


# (api key, version) -> (request class, response class).
LEGACY_SCHEMAS: dict[tuple[int, int], tuple[type[Any], type[Any]]] = {
    (2, 0): (ListOffsetsRequest, ListOffsetsResponse),
    **{(1, version): (_fetch_request(version), _fetch_response(version))
       for version in range(4)},
}


def nested(entity: type[Any], field_name: str) -> type[Any]:
    """The element class of an array field (Fetch v0-v3's classes share names across
    versions, so they are reached through their parent rather than by name)."""
    (element,) = [f.type for f in entity.__dataclass_fields__.values()
                  if f.name == field_name]
    return element.__args__[0]
