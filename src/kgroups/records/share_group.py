"""KIP-932 share-group records of __consumer_offsets (record types 10 to 15).

A share group is stored as a consumer group is, in several keys: each member's subscription
(10), the group epoch with its subscribed-topics hash (11), the target assignment's epoch (12)
and each member's target (13), each member's current assignment (14), and which share-partitions
of the group are being initialized, are initialized, or have their state being deleted (15).
Keys are type-prefixed and not flexible; values are version 0, flexible. Layouts are Kafka
4.3.1's generated classes' (checked with DumpLogSegments by tests/records): unlike the consumer
group's, the share group's metadata hash is a plain int64 field, while the target assignment's
timestamp is tag 0, written only when non-zero, as for consumer groups.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kgroups.log.batch import uvarint
from kgroups.records.consumer_group import (
    TopicPartitionList,
    _int64_of,
    _int64_tag,
    _partitions,
    _partitions_json,
    _read_partitions,
)
from kgroups.records.wire import (
    INT16,
    INT32,
    INT64,
    fail,
    read_compact_array_length,
    read_compact_nullable_string,
    read_compact_string,
    read_int16,
    read_int32,
    read_int64,
    read_string,
    read_strings,
    read_tagged_fields,
    short,
    write_compact_nullable_string,
    write_string,
)

SHARE_GROUP_KEY_TYPES = (10, 11, 12, 13, 14, 15)


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group: str
    member_id: str
    version: int = 10


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group: str
    version: int = 11


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group: str
    version: int = 12


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group: str
    member_id: str
    version: int = 13


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str
    version: int = 14


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group: str
    version: int = 15


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitionList


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState byte (share members are always STABLE, 0)
    assigned_partitions: TopicPartitionList


@dataclass(frozen=True, slots=True)
class ShareTopicPartitions:
    """A topic of ShareGroupStatePartitionMetadataValue, with its name as recorded."""

    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    """The share-partitions of the group whose state is being initialized, is initialized,
    and the topics whose state is being deleted (name only)."""

    initializing: tuple[ShareTopicPartitions, ...]
    initialized: tuple[ShareTopicPartitions, ...]
    deleting: tuple[tuple[uuid.UUID, str], ...]


ShareGroupKey = (
    ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)
ShareGroupValue = (
    ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)
_MEMBER_KEYS: dict[int, type[Any]] = {
    10: ShareGroupMemberMetadataKey,
    13: ShareGroupTargetAssignmentMemberKey,
    14: ShareGroupCurrentMemberAssignmentKey,
}
_GROUP_KEYS: dict[int, type[Any]] = {
    11: ShareGroupMetadataKey,
    12: ShareGroupTargetAssignmentMetadataKey,
    15: ShareGroupStatePartitionMetadataKey,
}
_VALUE_VERSION = 0
_UUID = struct.Struct(">16s")


# ---------------------------------------------------------------------------------------- keys


def encode_share_group_key(key: ShareGroupKey) -> bytes:
    parts = [INT16.pack(key.version), write_string(key.group)]
    if isinstance(key, ShareGroupMemberMetadataKey | ShareGroupTargetAssignmentMemberKey
                  | ShareGroupCurrentMemberAssignmentKey):
        parts.append(write_string(key.member_id))
    return b"".join(parts)


def decode_share_group_key(key_type: int, data: bytes) -> ShareGroupKey:
    """`data` is the whole key, type included."""
    group, pos = read_string(data, 2, f"key type {key_type} groupId")
    key: ShareGroupKey
    if key_type in _GROUP_KEYS:
        key = _GROUP_KEYS[key_type](group)
    else:
        member_id, pos = read_string(data, pos, f"key type {key_type} memberId")
        key = _MEMBER_KEYS[key_type](group, member_id)
    if pos != len(data):
        raise fail(f"key type {key_type}", pos, f"{len(data) - pos} unexpected trailing bytes")
    return key


# -------------------------------------------------------------------------------------- values


def encode_share_group_value(value: ShareGroupValue) -> bytes:
    parts = [INT16.pack(_VALUE_VERSION)]
    if isinstance(value, ShareGroupMetadataValue):
        parts += [INT32.pack(value.epoch), INT64.pack(value.metadata_hash), b"\x00"]
    elif isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        parts += [INT32.pack(value.assignment_epoch), _int64_tag(value.assignment_timestamp)]
    elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
        parts += [_partitions(value.topic_partitions), b"\x00"]
    elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        parts += [INT32.pack(value.member_epoch), INT32.pack(value.previous_member_epoch),
                  struct.pack(">b", value.state), _partitions(value.assigned_partitions),
                  b"\x00"]
    elif isinstance(value, ShareGroupStatePartitionMetadataValue):
        parts += [_topic_partitions(value.initializing), _topic_partitions(value.initialized),
                  uvarint(len(value.deleting) + 1)]
        for topic_id, name in value.deleting:
            parts += [topic_id.bytes, write_compact_nullable_string(name), b"\x00"]
        parts.append(b"\x00")
    else:
        parts += [
            write_compact_nullable_string(value.rack_id),
            write_compact_nullable_string(value.client_id),
            write_compact_nullable_string(value.client_host),
            uvarint(len(value.subscribed_topic_names) + 1),
            *(write_compact_nullable_string(t) for t in value.subscribed_topic_names),
            b"\x00",
        ]
    return b"".join(parts)


def _topic_partitions(topics: tuple[ShareTopicPartitions, ...]) -> bytes:
    parts = [uvarint(len(topics) + 1)]
    for topic in topics:
        parts += [topic.topic_id.bytes, write_compact_nullable_string(topic.topic_name),
                  uvarint(len(topic.partitions) + 1),
                  *(INT32.pack(p) for p in topic.partitions), b"\x00"]
    return b"".join(parts)


def decode_share_group_value(key: ShareGroupKey, data: bytes) -> ShareGroupValue:
    what = f"{type(key).__name__.removesuffix('Key')}Value"
    version, pos = read_int16(data, 0, f"{what} version")
    if version < 0:
        raise fail(what, 0, f"version {version}")
    value: ShareGroupValue
    if isinstance(key, ShareGroupMetadataKey):
        epoch, pos = read_int32(data, pos, f"{what} epoch")
        metadata_hash, pos = read_int64(data, pos, f"{what} metadataHash")
        _tags, pos = read_tagged_fields(data, pos, what)
        value = ShareGroupMetadataValue(epoch, metadata_hash)
    elif isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        epoch, pos = read_int32(data, pos, f"{what} assignmentEpoch")
        tags, pos = read_tagged_fields(data, pos, what)
        value = ShareGroupTargetAssignmentMetadataValue(epoch, _int64_of(tags, what))
    elif isinstance(key, ShareGroupTargetAssignmentMemberKey):
        partitions, pos = _read_partitions(data, pos, f"{what} topicPartitions")
        _tags, pos = read_tagged_fields(data, pos, what)
        value = ShareGroupTargetAssignmentMemberValue(partitions)
    elif isinstance(key, ShareGroupCurrentMemberAssignmentKey):
        epoch, pos = read_int32(data, pos, f"{what} memberEpoch")
        previous, pos = read_int32(data, pos, f"{what} previousMemberEpoch")
        if pos >= len(data):
            raise short(f"{what} state", pos, 1, data)
        state = struct.unpack_from(">b", data, pos)[0]
        assigned, pos = _read_partitions(data, pos + 1, f"{what} assignedPartitions")
        _tags, pos = read_tagged_fields(data, pos, what)
        value = ShareGroupCurrentMemberAssignmentValue(epoch, previous, state, assigned)
    elif isinstance(key, ShareGroupStatePartitionMetadataKey):
        initializing, pos = _read_topic_partitions(data, pos, f"{what} initializingTopics")
        initialized, pos = _read_topic_partitions(data, pos, f"{what} initializedTopics")
        count, pos = read_compact_array_length(data, pos, f"{what} deletingTopics")
        deleting = []
        for index in range(count):
            topic_id, pos = _read_uuid(data, pos, f"{what} deletingTopics[{index}].topicId")
            name, pos = read_compact_string(data, pos, f"{what} deletingTopics[{index}]")
            _tags, pos = read_tagged_fields(data, pos, f"{what} deletingTopics[{index}]")
            deleting.append((topic_id, name))
        _tags, pos = read_tagged_fields(data, pos, what)
        value = ShareGroupStatePartitionMetadataValue(initializing, initialized,
                                                      tuple(deleting))
    else:
        rack_id, pos = read_compact_nullable_string(data, pos, f"{what} rackId")
        client_id, pos = read_compact_string(data, pos, f"{what} clientId")
        client_host, pos = read_compact_string(data, pos, f"{what} clientHost")
        names, pos = read_strings(data, pos, f"{what} subscribedTopicNames", compact=True)
        _tags, pos = read_tagged_fields(data, pos, what)
        value = ShareGroupMemberMetadataValue(rack_id, client_id, client_host, names)
    if pos != len(data):
        raise fail(what, pos, f"{len(data) - pos} unexpected trailing bytes")
    return value


def _read_uuid(data: bytes, pos: int, what: str) -> tuple[uuid.UUID, int]:
    if pos + 16 > len(data):
        raise short(what, pos, 16, data)
    return uuid.UUID(bytes=_UUID.unpack_from(data, pos)[0]), pos + 16


def _read_topic_partitions(
    data: bytes, pos: int, what: str
) -> tuple[tuple[ShareTopicPartitions, ...], int]:
    count, pos = read_compact_array_length(data, pos, what)
    topics = []
    for index in range(count):
        at = f"{what}[{index}]"
        topic_id, pos = _read_uuid(data, pos, f"{at}.topicId")
        name, pos = read_compact_string(data, pos, f"{at}.topicName")
        size, pos = read_compact_array_length(data, pos, f"{at}.partitions")
        partitions = []
        for _ in range(size):
            partition, pos = read_int32(data, pos, f"{at}.partitions")
            partitions.append(partition)
        _tags, pos = read_tagged_fields(data, pos, at)
        topics.append(ShareTopicPartitions(topic_id, name, tuple(partitions)))
    return tuple(topics), pos


# ---------------------------------------------------------------------------------------- JSON


def share_group_value_json(
    value: ShareGroupValue, to_text: Callable[[uuid.UUID], str]
) -> dict[str, Any]:
    """Kafka's field names and shape, as DumpLogSegments prints them."""
    if isinstance(value, ShareGroupMetadataValue):
        return {"epoch": value.epoch, "metadataHash": value.metadata_hash}
    if isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        data: dict[str, Any] = {"assignmentEpoch": value.assignment_epoch}
        if value.assignment_timestamp:
            data["assignmentTimestamp"] = value.assignment_timestamp
        return data
    if isinstance(value, ShareGroupTargetAssignmentMemberValue):
        return {"topicPartitions": _partitions_json(value.topic_partitions, to_text)}
    if isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        return {"memberEpoch": value.member_epoch,
                "previousMemberEpoch": value.previous_member_epoch, "state": value.state,
                "assignedPartitions": _partitions_json(value.assigned_partitions, to_text)}
    if isinstance(value, ShareGroupStatePartitionMetadataValue):
        def topics(entries: tuple[ShareTopicPartitions, ...]) -> list[dict[str, Any]]:
            return [{"topicId": to_text(t.topic_id), "topicName": t.topic_name,
                     "partitions": list(t.partitions)} for t in entries]
        return {"initializingTopics": topics(value.initializing),
                "initializedTopics": topics(value.initialized),
                "deletingTopics": [{"topicId": to_text(t), "topicName": n}
                                   for t, n in value.deleting]}
    return {"rackId": value.rack_id, "clientId": value.client_id,
            "clientHost": value.client_host,
            "subscribedTopicNames": list(value.subscribed_topic_names)}


def share_group_key_json(key: ShareGroupKey) -> dict[str, Any]:
    data = {"groupId": key.group}
    member_id = getattr(key, "member_id", None)
    if member_id is not None:
        data["memberId"] = member_id
    return {"type": key.version, "data": data}
