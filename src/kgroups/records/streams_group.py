"""KIP-1071 streams-group records of __consumer_offsets (record types 17 and 19-23).

A streams group is stored as a consumer group is, in several keys: the group epoch with the
metadata hash, the topology epoch whose topics were last validated and the assignment configs
the target was computed with (17), each member's metadata (19), the target assignment's epoch
(20) and each member's target tasks (21), each member's current tasks and epochs (22), and the
topology the members run (23). Type 18 (the partition metadata of early 4.x) is no longer written
by Kafka 4.3.1 and is not read here. Keys are type-prefixed and not flexible; values are version 0,
flexible. Tagged fields, as Kafka 4.3.1 writes them: StreamsGroupMetadataValue tag 0
ValidatedTopologyEpoch (int32, written when not -1) and tag 1 LastAssignmentConfigs (written when
not empty); StreamsGroupTargetAssignmentMetadataValue tag 0 AssignmentTimestamp (int64, written
when not 0); each task list entry of StreamsGroupCurrentMemberAssignmentValue tag 0
AssignmentEpochs ([]int32, written when not empty). Layouts were read from the generated
classes of kafka-group-coordinator-4.3.1.jar (their write methods).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kgroups.log.batch import uvarint
from kgroups.records.group_keys import decode_group_key, encode_group_key
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
    read_strings,
    read_tagged_fields,
    short,
    write_compact_nullable_string,
)

_T = TypeVar("_T")
Pairs = tuple[tuple[str, str], ...]  # key/value configs and client tags, in record order


@dataclass(frozen=True, slots=True)
class StreamsGroupMetadataKey:
    group: str
    version: int = 17


@dataclass(frozen=True, slots=True)
class StreamsGroupMemberMetadataKey:
    group: str
    member_id: str
    version: int = 19


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMetadataKey:
    group: str
    version: int = 20


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMemberKey:
    group: str
    member_id: str
    version: int = 21


@dataclass(frozen=True, slots=True)
class StreamsGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str
    version: int = 22


@dataclass(frozen=True, slots=True)
class StreamsGroupTopologyKey:
    group: str
    version: int = 23


@dataclass(frozen=True, slots=True)
class TaskIds:
    """The tasks of one subtopology: its partition numbers and, in a current assignment, the
    epoch at which each came to the member (None: the entry has none)."""

    subtopology_id: str
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = None


TaskList = tuple[TaskIds, ...]


@dataclass(frozen=True, slots=True)
class StreamsGroupMetadataValue:
    epoch: int
    metadata_hash: int
    validated_topology_epoch: int = -1
    last_assignment_configs: Pairs = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None  # (host, port) for interactive queries
    client_tags: Pairs


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMemberValue:
    active_tasks: TaskList
    standby_tasks: TaskList
    warmup_tasks: TaskList


@dataclass(frozen=True, slots=True)
class StreamsGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's streams MemberState byte: 1 STABLE, 2 UNREVOKED_TASKS, 3 UNRELEASED
    active_tasks: TaskList
    standby_tasks: TaskList
    warmup_tasks: TaskList
    active_tasks_pending_revocation: TaskList = ()
    standby_tasks_pending_revocation: TaskList = ()
    warmup_tasks_pending_revocation: TaskList = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """An internal topic the topology asks for: partitions 0 = not fixed (always 0 for a
    changelog topic), replication factor 0 = the broker's default."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    topic_configs: Pairs = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    """Indexes into the subtopology's source topics, regexes and repartition source topics."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupTopologyValue:
    epoch: int
    subtopologies: tuple[Subtopology, ...]


StreamsGroupKey = (
    StreamsGroupMetadataKey
    | StreamsGroupMemberMetadataKey
    | StreamsGroupTargetAssignmentMetadataKey
    | StreamsGroupTargetAssignmentMemberKey
    | StreamsGroupCurrentMemberAssignmentKey
    | StreamsGroupTopologyKey
)
StreamsGroupValue = (
    StreamsGroupMetadataValue
    | StreamsGroupMemberMetadataValue
    | StreamsGroupTargetAssignmentMetadataValue
    | StreamsGroupTargetAssignmentMemberValue
    | StreamsGroupCurrentMemberAssignmentValue
    | StreamsGroupTopologyValue
)
STREAMS_GROUP_KEY_TYPES = (17, 19, 20, 21, 22, 23)
STREAMS_GROUP_KEYS = (
    StreamsGroupMetadataKey, StreamsGroupMemberMetadataKey,
    StreamsGroupTargetAssignmentMetadataKey, StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupCurrentMemberAssignmentKey, StreamsGroupTopologyKey,
)
_GROUP_KEYS: dict[int, type[Any]] = {
    17: StreamsGroupMetadataKey, 20: StreamsGroupTargetAssignmentMetadataKey,
    23: StreamsGroupTopologyKey,
}
_MEMBER_KEYS: dict[int, type[Any]] = {
    19: StreamsGroupMemberMetadataKey, 21: StreamsGroupTargetAssignmentMemberKey,
    22: StreamsGroupCurrentMemberAssignmentKey,
}
_VALUE_VERSION = 0
_INT8 = struct.Struct(">b")
_UINT16 = struct.Struct(">H")


# ---------------------------------------------------------------------------------------- keys


def encode_streams_group_key(key: StreamsGroupKey) -> bytes:
    return encode_group_key(key.version, key.group, getattr(key, "member_id", None))


def decode_streams_group_key(key_type: int, data: bytes) -> StreamsGroupKey:
    """`data` is the whole key, type included."""
    key: StreamsGroupKey = decode_group_key(key_type, data, _GROUP_KEYS, _MEMBER_KEYS)
    return key


# -------------------------------------------------------------------------------------- writing


def _string(value: str) -> bytes:
    return write_compact_nullable_string(value)


def _array(items: tuple[_T, ...], write: Callable[[_T], bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(write(item) for item in items)


def _pairs(pairs: Pairs) -> bytes:
    return _array(pairs, lambda kv: _string(kv[0]) + _string(kv[1]) + b"\x00")


def _strings(values: tuple[str, ...]) -> bytes:
    return _array(values, _string)


def _tagged(fields: list[tuple[int, bytes]]) -> bytes:
    return uvarint(len(fields)) + b"".join(
        uvarint(tag) + uvarint(len(body)) + body for tag, body in fields)


def _task_ids(entry: TaskIds) -> bytes:
    body = _string(entry.subtopology_id) + _array(entry.partitions, INT32.pack)
    epochs = entry.assignment_epochs
    return body + _tagged([(0, _array(epochs, INT32.pack))] if epochs else [])


def _task_list(tasks: TaskList) -> bytes:
    return _array(tasks, _task_ids)


def _topic_info(info: TopicInfo) -> bytes:
    return (_string(info.name) + INT32.pack(info.partitions) + INT16.pack(info.replication_factor)
            + _pairs(info.topic_configs) + b"\x00")


def _copartition_group(group: CopartitionGroup) -> bytes:
    return (_array(group.source_topics, INT16.pack) + _array(group.source_topic_regex, INT16.pack)
            + _array(group.repartition_source_topics, INT16.pack) + b"\x00")


def _subtopology(sub: Subtopology) -> bytes:
    return b"".join((
        _string(sub.subtopology_id), _strings(sub.source_topics), _strings(sub.source_topic_regex),
        _array(sub.state_changelog_topics, _topic_info), _strings(sub.repartition_sink_topics),
        _array(sub.repartition_source_topics, _topic_info),
        _array(sub.copartition_groups, _copartition_group), b"\x00"))


def encode_streams_group_value(value: StreamsGroupValue) -> bytes:
    parts = [INT16.pack(_VALUE_VERSION)]
    if isinstance(value, StreamsGroupMetadataValue):
        tags = []
        if value.validated_topology_epoch != -1:
            tags.append((0, INT32.pack(value.validated_topology_epoch)))
        if value.last_assignment_configs:
            tags.append((1, _pairs(value.last_assignment_configs)))
        parts += [INT32.pack(value.epoch), INT64.pack(value.metadata_hash), _tagged(tags)]
    elif isinstance(value, StreamsGroupMemberMetadataValue):
        endpoint = value.user_endpoint
        parts += [
            write_compact_nullable_string(value.instance_id),
            write_compact_nullable_string(value.rack_id),
            _string(value.client_id), _string(value.client_host),
            INT32.pack(value.rebalance_timeout_ms), INT32.pack(value.topology_epoch),
            _string(value.process_id),
            _INT8.pack(-1) if endpoint is None
            else _INT8.pack(1) + _string(endpoint[0]) + _UINT16.pack(endpoint[1]) + b"\x00",
            _pairs(value.client_tags), b"\x00",
        ]
    elif isinstance(value, StreamsGroupTargetAssignmentMetadataValue):
        tags = [(0, INT64.pack(value.assignment_timestamp))] if value.assignment_timestamp else []
        parts += [INT32.pack(value.assignment_epoch), _tagged(tags)]
    elif isinstance(value, StreamsGroupTargetAssignmentMemberValue):
        parts += [_task_list(value.active_tasks), _task_list(value.standby_tasks),
                  _task_list(value.warmup_tasks), b"\x00"]
    elif isinstance(value, StreamsGroupCurrentMemberAssignmentValue):
        parts += [
            INT32.pack(value.member_epoch), INT32.pack(value.previous_member_epoch),
            _INT8.pack(value.state),
            *(_task_list(tasks) for tasks in _current_lists(value)), b"\x00",
        ]
    else:
        parts += [INT32.pack(value.epoch), _array(value.subtopologies, _subtopology), b"\x00"]
    return b"".join(parts)


def _current_lists(value: StreamsGroupCurrentMemberAssignmentValue) -> tuple[TaskList, ...]:
    return (value.active_tasks, value.standby_tasks, value.warmup_tasks,
            value.active_tasks_pending_revocation, value.standby_tasks_pending_revocation,
            value.warmup_tasks_pending_revocation)


# -------------------------------------------------------------------------------------- reading


def _read_array(data: bytes, pos: int, what: str,
                read: Callable[[bytes, int, str], tuple[_T, int]]) -> tuple[tuple[_T, ...], int]:
    count, pos = read_compact_array_length(data, pos, what)
    items = []
    for index in range(count):
        item, pos = read(data, pos, f"{what}[{index}]")
        items.append(item)
    return tuple(items), pos


def _read_pair(data: bytes, pos: int, what: str) -> tuple[tuple[str, str], int]:
    key, pos = read_compact_string(data, pos, f"{what}.key")
    value, pos = read_compact_string(data, pos, f"{what}.value")
    _tags, pos = read_tagged_fields(data, pos, what)
    return (key, value), pos


def _read_pairs(data: bytes, pos: int, what: str) -> tuple[Pairs, int]:
    return _read_array(data, pos, what, _read_pair)


def _read_task_ids(data: bytes, pos: int, what: str) -> tuple[TaskIds, int]:
    subtopology, pos = read_compact_string(data, pos, f"{what}.subtopologyId")
    partitions, pos = _read_array(data, pos, f"{what}.partitions", read_int32)
    tags, pos = read_tagged_fields(data, pos, what)
    epochs = None
    if 0 in tags:
        epochs, end = _read_array(tags[0], 0, f"{what}.assignmentEpochs", read_int32)
        if end != len(tags[0]):
            raise fail(f"{what}.assignmentEpochs", pos, "trailing bytes in tagged field")
    return TaskIds(subtopology, partitions, epochs), pos


def _read_task_list(data: bytes, pos: int, what: str) -> tuple[TaskList, int]:
    return _read_array(data, pos, what, _read_task_ids)


def _read_topic_info(data: bytes, pos: int, what: str) -> tuple[TopicInfo, int]:
    name, pos = read_compact_string(data, pos, f"{what}.name")
    partitions, pos = read_int32(data, pos, f"{what}.partitions")
    factor, pos = read_int16(data, pos, f"{what}.replicationFactor")
    configs, pos = _read_pairs(data, pos, f"{what}.topicConfigs")
    _tags, pos = read_tagged_fields(data, pos, what)
    return TopicInfo(name, partitions, factor, configs), pos


def _read_copartition_group(data: bytes, pos: int, what: str) -> tuple[CopartitionGroup, int]:
    sources, pos = _read_array(data, pos, f"{what}.sourceTopics", read_int16)
    regexes, pos = _read_array(data, pos, f"{what}.sourceTopicRegex", read_int16)
    repartition, pos = _read_array(data, pos, f"{what}.repartitionSourceTopics", read_int16)
    _tags, pos = read_tagged_fields(data, pos, what)
    return CopartitionGroup(sources, regexes, repartition), pos


def _read_subtopology(data: bytes, pos: int, what: str) -> tuple[Subtopology, int]:
    sub_id, pos = read_compact_string(data, pos, f"{what}.subtopologyId")
    sources, pos = read_strings(data, pos, f"{what}.sourceTopics", compact=True)
    regexes, pos = read_strings(data, pos, f"{what}.sourceTopicRegex", compact=True)
    changelogs, pos = _read_array(data, pos, f"{what}.stateChangelogTopics", _read_topic_info)
    sinks, pos = read_strings(data, pos, f"{what}.repartitionSinkTopics", compact=True)
    repartition, pos = _read_array(data, pos, f"{what}.repartitionSourceTopics",
                                   _read_topic_info)
    groups, pos = _read_array(data, pos, f"{what}.copartitionGroups", _read_copartition_group)
    _tags, pos = read_tagged_fields(data, pos, what)
    return Subtopology(sub_id, sources, regexes, changelogs, sinks, repartition, groups), pos


def decode_streams_group_value(key: StreamsGroupKey, data: bytes) -> StreamsGroupValue:
    what = f"{type(key).__name__.removesuffix('Key')}Value"
    version, pos = read_int16(data, 0, f"{what} version")
    if version < 0:
        raise fail(what, 0, f"version {version}")
    value: StreamsGroupValue
    if isinstance(key, StreamsGroupMetadataKey):
        epoch, pos = read_int32(data, pos, f"{what} epoch")
        metadata_hash, pos = read_int64(data, pos, f"{what} metadataHash")
        tags, pos = read_tagged_fields(data, pos, what)
        validated = -1
        if 0 in tags:
            validated = read_int32(tags[0], 0, f"{what} validatedTopologyEpoch")[0]
        configs: Pairs = ()
        if 1 in tags:
            configs = _read_pairs(tags[1], 0, f"{what} lastAssignmentConfigs")[0]
        value = StreamsGroupMetadataValue(epoch, metadata_hash, validated, configs)
    elif isinstance(key, StreamsGroupMemberMetadataKey):
        value, pos = _read_member_metadata(data, pos, what)
    elif isinstance(key, StreamsGroupTargetAssignmentMetadataKey):
        epoch, pos = read_int32(data, pos, f"{what} assignmentEpoch")
        tags, pos = read_tagged_fields(data, pos, what)
        stamp = read_int64(tags[0], 0, f"{what} assignmentTimestamp")[0] if 0 in tags else 0
        value = StreamsGroupTargetAssignmentMetadataValue(epoch, stamp)
    elif isinstance(key, StreamsGroupTargetAssignmentMemberKey):
        active, pos = _read_task_list(data, pos, f"{what} activeTasks")
        standby, pos = _read_task_list(data, pos, f"{what} standbyTasks")
        warmup, pos = _read_task_list(data, pos, f"{what} warmupTasks")
        _tags, pos = read_tagged_fields(data, pos, what)
        value = StreamsGroupTargetAssignmentMemberValue(active, standby, warmup)
    elif isinstance(key, StreamsGroupCurrentMemberAssignmentKey):
        epoch, pos = read_int32(data, pos, f"{what} memberEpoch")
        previous, pos = read_int32(data, pos, f"{what} previousMemberEpoch")
        if pos >= len(data):
            raise short(f"{what} state", pos, 1, data)
        state = _INT8.unpack_from(data, pos)[0]
        pos += 1
        lists = []
        for name in ("activeTasks", "standbyTasks", "warmupTasks",
                     "activeTasksPendingRevocation", "standbyTasksPendingRevocation",
                     "warmupTasksPendingRevocation"):
            tasks, pos = _read_task_list(data, pos, f"{what} {name}")
            lists.append(tasks)
        _tags, pos = read_tagged_fields(data, pos, what)
        value = StreamsGroupCurrentMemberAssignmentValue(epoch, previous, state, *lists)
    else:
        epoch, pos = read_int32(data, pos, f"{what} epoch")
        subtopologies, pos = _read_array(data, pos, f"{what} subtopologies", _read_subtopology)
        _tags, pos = read_tagged_fields(data, pos, what)
        value = StreamsGroupTopologyValue(epoch, subtopologies)
    if pos != len(data):
        raise fail(what, pos, f"{len(data) - pos} unexpected trailing bytes")
    return value


def _read_member_metadata(
    data: bytes, pos: int, what: str
) -> tuple[StreamsGroupMemberMetadataValue, int]:
    instance_id, pos = read_compact_nullable_string(data, pos, f"{what} instanceId")
    rack_id, pos = read_compact_nullable_string(data, pos, f"{what} rackId")
    client_id, pos = read_compact_string(data, pos, f"{what} clientId")
    client_host, pos = read_compact_string(data, pos, f"{what} clientHost")
    timeout, pos = read_int32(data, pos, f"{what} rebalanceTimeoutMs")
    topology_epoch, pos = read_int32(data, pos, f"{what} topologyEpoch")
    process_id, pos = read_compact_string(data, pos, f"{what} processId")
    if pos >= len(data):
        raise short(f"{what} userEndpoint", pos, 1, data)
    present = _INT8.unpack_from(data, pos)[0]
    pos += 1
    endpoint = None
    if present >= 0:
        host, pos = read_compact_string(data, pos, f"{what} userEndpoint.host")
        if pos + 2 > len(data):
            raise short(f"{what} userEndpoint.port", pos, 2, data)
        port = _UINT16.unpack_from(data, pos)[0]
        _tags, pos = read_tagged_fields(data, pos + 2, f"{what} userEndpoint")
        endpoint = (host, port)
    tags_list, pos = _read_pairs(data, pos, f"{what} clientTags")
    _tags, pos = read_tagged_fields(data, pos, what)
    return StreamsGroupMemberMetadataValue(
        instance_id, rack_id, client_id, client_host, timeout, topology_epoch, process_id,
        endpoint, tags_list), pos


# ----------------------------------------------------------------------------------------- JSON


def streams_group_key_json(key: StreamsGroupKey) -> dict[str, Any]:
    data = {"groupId": key.group}
    member_id = getattr(key, "member_id", None)
    if member_id is not None:
        data["memberId"] = member_id
    return {"type": key.version, "data": data}


def _pairs_json(pairs: Pairs) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in pairs]


def _tasks_json(tasks: TaskList) -> list[dict[str, Any]]:
    result = []
    for entry in tasks:
        item: dict[str, Any] = {"subtopologyId": entry.subtopology_id,
                                "partitions": list(entry.partitions)}
        if entry.assignment_epochs is not None:
            item["assignmentEpochs"] = list(entry.assignment_epochs)
        result.append(item)
    return result


def _topic_info_json(info: TopicInfo) -> dict[str, Any]:
    return {"name": info.name, "partitions": info.partitions,
            "replicationFactor": info.replication_factor,
            "topicConfigs": _pairs_json(info.topic_configs)}


def streams_group_value_json(value: StreamsGroupValue) -> dict[str, Any]:
    """Kafka's field names, as its JSON converters print them (tagged fields only when they
    hold more than their default)."""
    if isinstance(value, StreamsGroupMetadataValue):
        data: dict[str, Any] = {"epoch": value.epoch, "metadataHash": value.metadata_hash}
        if value.validated_topology_epoch != -1:  # tagged fields: shown when not default
            data["validatedTopologyEpoch"] = value.validated_topology_epoch
        if value.last_assignment_configs:
            data["lastAssignmentConfigs"] = _pairs_json(value.last_assignment_configs)
        return data
    if isinstance(value, StreamsGroupMemberMetadataValue):
        endpoint = value.user_endpoint
        return {"instanceId": value.instance_id, "rackId": value.rack_id,
                "clientId": value.client_id, "clientHost": value.client_host,
                "rebalanceTimeoutMs": value.rebalance_timeout_ms,
                "topologyEpoch": value.topology_epoch, "processId": value.process_id,
                "userEndpoint": None if endpoint is None
                else {"host": endpoint[0], "port": endpoint[1]},
                "clientTags": _pairs_json(value.client_tags)}
    if isinstance(value, StreamsGroupTargetAssignmentMetadataValue):
        if not value.assignment_timestamp:
            return {"assignmentEpoch": value.assignment_epoch}
        return {"assignmentEpoch": value.assignment_epoch,
                "assignmentTimestamp": value.assignment_timestamp}
    if isinstance(value, StreamsGroupTargetAssignmentMemberValue):
        return {"activeTasks": _tasks_json(value.active_tasks),
                "standbyTasks": _tasks_json(value.standby_tasks),
                "warmupTasks": _tasks_json(value.warmup_tasks)}
    if isinstance(value, StreamsGroupCurrentMemberAssignmentValue):
        names = ("activeTasks", "standbyTasks", "warmupTasks", "activeTasksPendingRevocation",
                 "standbyTasksPendingRevocation", "warmupTasksPendingRevocation")
        return {"memberEpoch": value.member_epoch,
                "previousMemberEpoch": value.previous_member_epoch, "state": value.state,
                **{name: _tasks_json(tasks) for name, tasks in zip(names, _current_lists(value),
                                                                   strict=True)}}
    return {"epoch": value.epoch, "subtopologies": [
        {"subtopologyId": s.subtopology_id, "sourceTopics": list(s.source_topics),
         "sourceTopicRegex": list(s.source_topic_regex),
         "stateChangelogTopics": [_topic_info_json(t) for t in s.state_changelog_topics],
         "repartitionSinkTopics": list(s.repartition_sink_topics),
         "repartitionSourceTopics": [_topic_info_json(t) for t in s.repartition_source_topics],
         "copartitionGroups": [
             {"sourceTopics": list(g.source_topics), "sourceTopicRegex": list(g.source_topic_regex),
              "repartitionSourceTopics": list(g.repartition_source_topics)}
             for g in s.copartition_groups]}
        for s in value.subtopologies]}

