"""KIP-848 consumer-group records of __consumer_offsets (record types 3, 5, 6, 7 and 8).

The consumer protocol stores a group as several keys instead of one GroupMetadata blob: the
group epoch (3), each member's subscription (5), the target assignment's epoch (6) and each
member's target (7), each member's current assignment and epochs (8), and each regular
expression the members subscribe with and the topics it resolved to (16). Keys are type-prefixed
and not flexible; values are version 0, flexible, with the tagged fields Kafka 4.x adds
(ConsumerGroupMetadataValue.MetadataHash and ConsumerGroupTargetAssignmentMetadataValue.
AssignmentTimestamp, both tag 0, int64, written only when non-zero;
ConsumerGroupMemberMetadataValue.ClassicMemberMetadata, tag 0, kept as raw bytes so a record
Kafka wrote for a migrated member re-encodes byte for byte). Type 4 (subscription metadata,
deprecated in Kafka 4.1, which only tombstones it) is decoded and re-encoded for the dump tools,
but is not among CONSUMER_GROUP_KEY_TYPES: no group state is rebuilt from it.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kgroups.log.batch import uvarint
from kgroups.records.classic_member import decode_classic_member_metadata
from kgroups.records.group_keys import decode_group_key
from kgroups.records.wire import (
    INT16,
    INT32,
    INT64,
    RecordDecodeError,
    fail,
    read_compact_array_length,
    read_compact_nullable_string,
    read_compact_string,
    read_int16,
    read_int32,
    read_int64,
    read_strings,
    read_tagged_fields,
    short,
    write_compact_nullable_string,
    write_string,
)

# (topic id, sorted partitions) pairs, as the records and the heartbeat list them.
TopicPartitionList = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group: str
    version: int = 3


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str
    version: int = 5


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str
    version: int = 6


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str
    version: int = 7


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str
    version: int = 8


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group: str
    regular_expression: str
    version: int = 16


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group: str
    version: int = 4


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: bytes | None = None  # tag 0, raw (migrated classic members)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitionList


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """`assigned_epochs` / `pending_epochs`: Kafka 4.3's per-partition assignment epochs
    (tag 0 of each TopicPartitions entry), one entry per topic of the matching list (None where
    the entry has none), or empty when no entry has them (what kgroups writes)."""

    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState byte: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED
    assigned_partitions: TopicPartitionList
    partitions_pending_revocation: TopicPartitionList
    assigned_epochs: tuple[tuple[int, ...] | None, ...] = ()
    pending_epochs: tuple[tuple[int, ...] | None, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    """`topics` in the order the record lists them (Kafka writes a hash set's order; kgroups
    writes them sorted), `version` the topic catalogue's version the regex was resolved
    against, `timestamp` when (ms)."""

    topics: tuple[str, ...]
    version: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class SubscribedTopicMetadata:
    """One topic of ConsumerGroupPartitionMetadataValue; `partition_racks` is Kafka 3.7-4.0's
    PartitionMetadata: (partition, its replicas' racks) for each partition with racks."""

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Type 4: the metadata of the group's subscribed topics when its epoch last moved."""

    topics: tuple[SubscribedTopicMetadata, ...]


ConsumerGroupKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
    | ConsumerGroupPartitionMetadataKey
)
ConsumerGroupValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
    | ConsumerGroupPartitionMetadataValue
)
CONSUMER_GROUP_KEY_TYPES = (3, 5, 6, 7, 8, 16)
PARTITION_METADATA_KEY_TYPE = 4  # decoded, never replayed (see the module doc)
_MEMBER_KEYS: dict[int, type[Any]] = {
    5: ConsumerGroupMemberMetadataKey,
    7: ConsumerGroupTargetAssignmentMemberKey,
    8: ConsumerGroupCurrentMemberAssignmentKey,
}
_GROUP_KEYS: dict[int, type[Any]] = {
    3: ConsumerGroupMetadataKey,
    4: ConsumerGroupPartitionMetadataKey,
    6: ConsumerGroupTargetAssignmentMetadataKey,
}
_REGEX_KEY_TYPE = 16
_VALUE_VERSION = 0
_UUID = struct.Struct(">16s")


# ---------------------------------------------------------------------------------------- keys


def encode_consumer_group_key(key: ConsumerGroupKey) -> bytes:
    parts = [INT16.pack(key.version), write_string(key.group)]
    if isinstance(key, ConsumerGroupMemberMetadataKey | ConsumerGroupTargetAssignmentMemberKey
                  | ConsumerGroupCurrentMemberAssignmentKey):
        parts.append(write_string(key.member_id))
    elif isinstance(key, ConsumerGroupRegularExpressionKey):
        parts.append(write_string(key.regular_expression))
    return b"".join(parts)


def decode_consumer_group_key(key_type: int, data: bytes) -> ConsumerGroupKey:
    """`data` is the whole key, type included."""
    key: ConsumerGroupKey = decode_group_key(
        key_type, data, _GROUP_KEYS,
        {**_MEMBER_KEYS, _REGEX_KEY_TYPE: ConsumerGroupRegularExpressionKey},
        {_REGEX_KEY_TYPE: "regularExpression"})
    return key


# -------------------------------------------------------------------------------------- values


def encode_consumer_group_value(value: ConsumerGroupValue) -> bytes:
    parts = [INT16.pack(_VALUE_VERSION)]
    if isinstance(value, ConsumerGroupMetadataValue):
        parts += [INT32.pack(value.epoch), _int64_tag(value.metadata_hash)]
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        parts += [INT32.pack(value.assignment_epoch), _int64_tag(value.assignment_timestamp)]
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        parts += [_partitions(value.topic_partitions), b"\x00"]
    elif isinstance(value, ConsumerGroupPartitionMetadataValue):
        parts.append(uvarint(len(value.topics) + 1))
        for topic in value.topics:
            parts += [topic.topic_id.bytes, write_compact_nullable_string(topic.topic_name),
                      INT32.pack(topic.num_partitions),
                      uvarint(len(topic.partition_racks) + 1)]
            for partition, racks in topic.partition_racks:
                parts += [INT32.pack(partition), uvarint(len(racks) + 1),
                          *(write_compact_nullable_string(r) for r in racks), b"\x00"]
            parts.append(b"\x00")
        parts.append(b"\x00")
    elif isinstance(value, ConsumerGroupRegularExpressionValue):
        parts += [
            uvarint(len(value.topics) + 1),
            *(write_compact_nullable_string(t) for t in value.topics),
            INT64.pack(value.version), INT64.pack(value.timestamp), b"\x00",
        ]
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        parts += [
            INT32.pack(value.member_epoch), INT32.pack(value.previous_member_epoch),
            struct.pack(">b", value.state),
            _partitions(value.assigned_partitions, value.assigned_epochs),
            _partitions(value.partitions_pending_revocation, value.pending_epochs), b"\x00",
        ]
    else:
        parts += [
            write_compact_nullable_string(value.instance_id),
            write_compact_nullable_string(value.rack_id),
            write_compact_nullable_string(value.client_id),
            write_compact_nullable_string(value.client_host),
            uvarint(len(value.subscribed_topic_names) + 1),
            *(write_compact_nullable_string(t) for t in value.subscribed_topic_names),
            write_compact_nullable_string(value.subscribed_topic_regex),
            INT32.pack(value.rebalance_timeout_ms),
            write_compact_nullable_string(value.server_assignor),
        ]
        classic = value.classic_member_metadata
        if classic is None:
            parts.append(b"\x00")
        else:
            parts += [uvarint(1), uvarint(0), uvarint(len(classic)), classic]
    return b"".join(parts)


def _int64_tag(number: int) -> bytes:
    """A section holding tag 0 = `number` (int64), or nothing when it is 0 (its default)."""
    if number == 0:
        return b"\x00"
    return uvarint(1) + uvarint(0) + uvarint(8) + INT64.pack(number)


def _partitions(
    topics: TopicPartitionList, epochs: tuple[tuple[int, ...] | None, ...] = ()
) -> bytes:
    """A compact array of {TopicId uuid, Partitions []int32} structs; an entry's tag 0 holds
    its per-partition epochs when `epochs` has them."""
    parts = [uvarint(len(topics) + 1)]
    for index, (topic_id, partitions) in enumerate(topics):
        parts += [topic_id.bytes, uvarint(len(partitions) + 1)]
        parts += [INT32.pack(p) for p in partitions]
        topic_epochs = epochs[index] if index < len(epochs) else None
        if topic_epochs is None:
            parts.append(b"\x00")
            continue
        body = uvarint(len(topic_epochs) + 1) + b"".join(INT32.pack(e) for e in topic_epochs)
        parts += [uvarint(1), uvarint(0), uvarint(len(body)), body]
    return b"".join(parts)


def decode_consumer_group_value(key: ConsumerGroupKey, data: bytes) -> ConsumerGroupValue:
    what = f"{type(key).__name__.removesuffix('Key')}Value"
    version, pos = read_int16(data, 0, f"{what} version")
    if version < 0:
        raise fail(what, 0, f"version {version}")
    # KIP-915: versions above 0 may only add tagged fields, so they read with v0's layout.
    value: ConsumerGroupValue
    if isinstance(key, ConsumerGroupMetadataKey):
        epoch, pos = read_int32(data, pos, f"{what} epoch")
        tags, pos = read_tagged_fields(data, pos, what)
        value = ConsumerGroupMetadataValue(epoch, _int64_of(tags, what))
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        epoch, pos = read_int32(data, pos, f"{what} assignmentEpoch")
        tags, pos = read_tagged_fields(data, pos, what)
        value = ConsumerGroupTargetAssignmentMetadataValue(epoch, _int64_of(tags, what))
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        partitions, pos = _read_partitions(data, pos, f"{what} topicPartitions")
        _tags, pos = read_tagged_fields(data, pos, what)
        value = ConsumerGroupTargetAssignmentMemberValue(partitions)
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        epoch, pos = read_int32(data, pos, f"{what} memberEpoch")
        previous, pos = read_int32(data, pos, f"{what} previousMemberEpoch")
        if pos >= len(data):
            raise short(f"{what} state", pos, 1, data)
        state = struct.unpack_from(">b", data, pos)[0]
        assigned, assigned_epochs, pos = _read_partitions_epochs(
            data, pos + 1, f"{what} assignedPartitions")
        pending, pending_epochs, pos = _read_partitions_epochs(
            data, pos, f"{what} partitionsPendingRevocation")
        _tags, pos = read_tagged_fields(data, pos, what)
        value = ConsumerGroupCurrentMemberAssignmentValue(
            epoch, previous, state, assigned, pending, assigned_epochs, pending_epochs)
    elif isinstance(key, ConsumerGroupRegularExpressionKey):
        value, pos = _read_regular_expression(data, pos, what)
    elif isinstance(key, ConsumerGroupPartitionMetadataKey):
        value, pos = _read_partition_metadata(data, pos, what)
    else:
        value, pos = _read_member_metadata(data, pos, what)
    if pos != len(data):
        raise fail(what, pos, f"{len(data) - pos} unexpected trailing bytes")
    return value


def _read_member_metadata(
    data: bytes, pos: int, what: str
) -> tuple[ConsumerGroupMemberMetadataValue, int]:
    instance_id, pos = read_compact_nullable_string(data, pos, f"{what} instanceId")
    rack_id, pos = read_compact_nullable_string(data, pos, f"{what} rackId")
    client_id, pos = read_compact_string(data, pos, f"{what} clientId")
    client_host, pos = read_compact_string(data, pos, f"{what} clientHost")
    names, pos = read_strings(data, pos, f"{what} subscribedTopicNames", compact=True)
    regex, pos = read_compact_nullable_string(data, pos, f"{what} subscribedTopicRegex")
    timeout, pos = read_int32(data, pos, f"{what} rebalanceTimeoutMs")
    assignor, pos = read_compact_nullable_string(data, pos, f"{what} serverAssignor")
    tags, pos = read_tagged_fields(data, pos, what)
    return ConsumerGroupMemberMetadataValue(
        instance_id, rack_id, client_id, client_host, names, regex, timeout, assignor,
        tags.get(0),
    ), pos


def _read_regular_expression(
    data: bytes, pos: int, what: str
) -> tuple[ConsumerGroupRegularExpressionValue, int]:
    topics, pos = read_strings(data, pos, f"{what} topics", compact=True)
    version, pos = read_int64(data, pos, f"{what} version")
    timestamp, pos = read_int64(data, pos, f"{what} timestamp")
    _tags, pos = read_tagged_fields(data, pos, what)
    return ConsumerGroupRegularExpressionValue(topics, version, timestamp), pos


def _read_partition_metadata(
    data: bytes, pos: int, what: str
) -> tuple[ConsumerGroupPartitionMetadataValue, int]:
    count, pos = read_compact_array_length(data, pos, f"{what} topics")
    topics = []
    for index in range(count):
        at = f"{what} topics[{index}]"
        if pos + 16 > len(data):
            raise short(f"{at}.topicId", pos, 16, data)
        topic_id = uuid.UUID(bytes=_UUID.unpack_from(data, pos)[0])
        name, pos = read_compact_string(data, pos + 16, f"{at}.topicName")
        partitions, pos = read_int32(data, pos, f"{at}.numPartitions")
        entries, pos = read_compact_array_length(data, pos, f"{at}.partitionMetadata")
        racks_of = []
        for entry in range(entries):
            partition, pos = read_int32(data, pos, f"{at}.partitionMetadata[{entry}]")
            size, pos = read_compact_array_length(data, pos, f"{at}.partitionMetadata racks")
            racks = []
            for _ in range(size):
                rack, pos = read_compact_string(data, pos, f"{at}.partitionMetadata racks")
                racks.append(rack)
            _tags, pos = read_tagged_fields(data, pos, f"{at}.partitionMetadata[{entry}]")
            racks_of.append((partition, tuple(racks)))
        _tags, pos = read_tagged_fields(data, pos, at)
        topics.append(SubscribedTopicMetadata(topic_id, name, partitions, tuple(racks_of)))
    _tags, pos = read_tagged_fields(data, pos, what)
    return ConsumerGroupPartitionMetadataValue(tuple(topics)), pos


def _read_partitions(data: bytes, pos: int, what: str) -> tuple[TopicPartitionList, int]:
    topics, _epochs, pos = _read_partitions_epochs(data, pos, what)
    return topics, pos


def _read_partitions_epochs(
    data: bytes, pos: int, what: str
) -> tuple[TopicPartitionList, tuple[tuple[int, ...] | None, ...], int]:
    """The array and, per entry, the epochs of its tag 0 (empty when no entry has any)."""
    count, pos = read_compact_array_length(data, pos, what)
    topics = []
    epochs: list[tuple[int, ...] | None] = []
    for index in range(count):
        if pos + 16 > len(data):
            raise short(f"{what}[{index}].topicId", pos, 16, data)
        topic_id = uuid.UUID(bytes=_UUID.unpack_from(data, pos)[0])
        size, pos = read_compact_array_length(data, pos + 16, f"{what}[{index}].partitions")
        partitions = []
        for _ in range(size):
            partition, pos = read_int32(data, pos, f"{what}[{index}].partitions")
            partitions.append(partition)
        tags, pos = read_tagged_fields(data, pos, f"{what}[{index}]")
        topics.append((topic_id, tuple(partitions)))
        epochs.append(None if 0 not in tags else _int32_array(tags[0], f"{what}[{index}]"))
    return tuple(topics), (tuple(epochs) if any(e is not None for e in epochs) else ()), pos


def _int32_array(raw: bytes, what: str) -> tuple[int, ...]:
    count, pos = read_compact_array_length(raw, 0, f"{what} epochs")
    values = []
    for _ in range(count):
        value, pos = read_int32(raw, pos, f"{what} epochs")
        values.append(value)
    if pos != len(raw):
        raise fail(f"{what} epochs", pos, f"{len(raw) - pos} unexpected trailing bytes")
    return tuple(values)


def _int64_of(tags: dict[int, bytes], what: str) -> int:
    raw = tags.get(0)
    if raw is None:
        return 0
    if len(raw) != 8:
        raise RecordDecodeError(f"cannot read {what} tag 0: {len(raw)} bytes, not 8", 0)
    return int(INT64.unpack(raw)[0])


# ---------------------------------------------------------------------------------------- JSON


def _partitions_json(
    topics: TopicPartitionList, to_text: Callable[[uuid.UUID], str],
    epochs: tuple[tuple[int, ...] | None, ...] = (),
) -> list[dict[str, Any]]:
    """Each entry's `assignmentEpochs` (its tag 0) is shown only when the entry has them, as
    DumpLogSegments omits a tagged field left at its default."""
    entries = []
    for index, (topic_id, partitions) in enumerate(topics):
        entry: dict[str, Any] = {"topicId": to_text(topic_id), "partitions": list(partitions)}
        topic_epochs = epochs[index] if index < len(epochs) else None
        if topic_epochs is not None:
            entry["assignmentEpochs"] = list(topic_epochs)
        entries.append(entry)
    return entries


def _tagged_int64(data: dict[str, Any], name: str, number: int) -> dict[str, Any]:
    """An int64 tagged field is printed only when it is not its default 0 (as Kafka does)."""
    if number != 0:
        data[name] = number
    return data


def consumer_group_value_json(
    value: ConsumerGroupValue, to_text: Callable[[uuid.UUID], str]
) -> dict[str, Any]:
    """Kafka's field names and shape, as DumpLogSegments prints them (checked against it by
    tests/tools/test_log_files.py)."""
    if isinstance(value, ConsumerGroupMetadataValue):
        return _tagged_int64({"epoch": value.epoch}, "metadataHash", value.metadata_hash)
    if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        return _tagged_int64({"assignmentEpoch": value.assignment_epoch},
                             "assignmentTimestamp", value.assignment_timestamp)
    if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        return {"topicPartitions": _partitions_json(value.topic_partitions, to_text)}
    if isinstance(value, ConsumerGroupPartitionMetadataValue):
        return {"topics": [
            {"topicId": to_text(t.topic_id), "topicName": t.topic_name,
             "numPartitions": t.num_partitions,
             "partitionMetadata": [{"partition": p, "racks": list(racks)}
                                   for p, racks in t.partition_racks]}
            for t in value.topics]}
    if isinstance(value, ConsumerGroupRegularExpressionValue):
        return {"topics": list(value.topics), "version": value.version,
                "timestamp": value.timestamp}
    if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        return {
            "memberEpoch": value.member_epoch,
            "previousMemberEpoch": value.previous_member_epoch,
            "state": value.state,
            "assignedPartitions": _partitions_json(value.assigned_partitions, to_text,
                                                   value.assigned_epochs),
            "partitionsPendingRevocation": _partitions_json(
                value.partitions_pending_revocation, to_text, value.pending_epochs),
        }
    data: dict[str, Any] = {
        "instanceId": value.instance_id,
        "rackId": value.rack_id,
        "clientId": value.client_id,
        "clientHost": value.client_host,
        "subscribedTopicNames": list(value.subscribed_topic_names),
        "subscribedTopicRegex": value.subscribed_topic_regex,
        "rebalanceTimeoutMs": value.rebalance_timeout_ms,
        "serverAssignor": value.server_assignor,
    }
    if value.classic_member_metadata is not None:  # DumpLogSegments omits an absent tag 0
        data["classicMemberMetadata"] = _classic_member_metadata_json(
            value.classic_member_metadata)
    return data


# What Kafka 4.3.1 writes in tag 0 for a member that never was a classic one (seen in its logs);
# DumpLogSegments prints that as null (and prints nothing when the tag is absent, as in the
# records kgroups writes).
_NO_CLASSIC_METADATA = b"\x00"


def _classic_member_metadata_json(raw: bytes) -> dict[str, Any] | str | None:
    """null as DumpLogSegments prints it for a member without classic metadata; a migrated
    member's as it prints it (session timeout, protocols with base64 metadata); bytes that do
    not parse, as hex."""
    if raw == _NO_CLASSIC_METADATA:
        return None
    try:
        classic = decode_classic_member_metadata(raw)
    except RecordDecodeError:
        return raw.hex()
    if classic is None:
        return None
    return {"sessionTimeoutMs": classic.session_timeout_ms, "supportedProtocols": [
        {"name": name, "metadata": base64.b64encode(metadata).decode()}
        for name, metadata in classic.supported_protocols]}


def consumer_group_key_json(key: ConsumerGroupKey) -> dict[str, Any]:
    data = {"groupId": key.group}
    member_id = getattr(key, "member_id", None)
    if member_id is not None:
        data["memberId"] = member_id
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        data["regularExpression"] = key.regular_expression
    return {"type": key.version, "data": data}
