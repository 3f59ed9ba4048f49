"""Byte codecs for __consumer_offsets keys and values, every version Kafka ever wrote.

A key starts with an int16 that is the record type: 0 and 1 are OffsetCommitKey, 2 is
GroupMetadataKey, 3, 5-8 and 16 are KIP-848's consumer-group records (`records.consumer_group`),
10-15 KIP-932's share-group records (`records.share_group`); other types are kept as opaque
`UnknownKey`s so that a log written by a newer Kafka still reads.
A value starts with its own int16 schema version; v4 is Kafka's flexible encoding (compact
strings, tagged-field sections), whose unknown tags are skipped rather than rejected, as Kafka's
readers do.
"""

from __future__ import annotations

import base64
import dataclasses
import struct
from typing import Any

from kgroups.log import batch_native
from kgroups.log.batch import uvarint
from kgroups.records import consumer_protocol
from kgroups.records.consumer_group import (
    CONSUMER_GROUP_KEY_TYPES,
    PARTITION_METADATA_KEY_TYPE,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupValue,
    consumer_group_key_json,
    consumer_group_value_json,
    decode_consumer_group_key,
    decode_consumer_group_value,
    encode_consumer_group_key,
    encode_consumer_group_value,
)
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecord,
    RecordKey,
    RecordValue,
    UnknownKey,
)
from kgroups.records.share_group import (
    SHARE_GROUP_KEY_TYPES,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupValue,
    decode_share_group_key,
    decode_share_group_value,
    encode_share_group_key,
    encode_share_group_value,
    share_group_key_json,
    share_group_value_json,
)
from kgroups.records.streams_group import (
    STREAMS_GROUP_KEY_TYPES,
    STREAMS_GROUP_KEYS,
    StreamsGroupValue,
    decode_streams_group_key,
    decode_streams_group_value,
    encode_streams_group_key,
    encode_streams_group_value,
    streams_group_key_json,
    streams_group_value_json,
)
from kgroups.records.wire import (
    EMPTY_TAGGED_FIELDS,
    INT16,
    INT32,
    INT64,
    RecordDecodeError,
    array_length,
    read_bytes,
    read_compact_array_length,
    read_compact_bytes,
    read_compact_nullable_string,
    read_compact_string,
    read_int16,
    read_int32,
    read_int64,
    read_nullable_string,
    read_string,
    read_uvarint,
    skip_tagged_fields,
    write_compact_bytes,
    write_compact_nullable_string,
    write_nullable_bytes,
    write_nullable_string,
    write_string,
)

__all__ = [
    "RecordDecodeError",
    "decode_key",
    "decode_offset_commit_fields",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_record",
    "encode_value",
    "record_to_json",
    "value_version",
]

# Versions kgroups writes. Reading accepts any version >= 0: since KIP-915 a version above 4
# may only add tagged fields, so it is read with the v4 layout.
OFFSET_COMMIT_VALUE_VERSIONS = range(5)
GROUP_METADATA_VALUE_VERSIONS = range(5)
FLEXIBLE_VERSION = 4

_OFFSET_COMMIT_KEY_TYPES = (0, 1)
_GROUP_METADATA_KEY_TYPE = 2
_TYPE_AND_LEN = struct.Struct(">hh")  # key type, then the group's string length
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leaderEpoch, metadata length
_TOPIC_ID_TAG = 0  # OffsetCommitValue v4's tagged topicId
_CONSUMER_GROUP_KEYS = (
    ConsumerGroupMetadataKey, ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupRegularExpressionKey,
    ConsumerGroupPartitionMetadataKey,
)
_SHARE_GROUP_KEYS = (
    ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey,
    ShareGroupStatePartitionMetadataKey,
)
_UUID_SIZE = 16

# OffsetCommitKey and OffsetCommitValue are frozen dataclasses, whose __init__ goes through
# object.__setattr__ per field. They are nearly every record of an offsets log, so the fast
# paths fill their slots through the slot descriptors directly (about twice as fast). These
# checks keep that honest if the schema ever gains a field.
if tuple(f.name for f in dataclasses.fields(OffsetCommitKey)) != (
    "group", "topic", "partition", "version"
) or tuple(f.name for f in dataclasses.fields(OffsetCommitValue)) != (
    "offset", "metadata", "commit_timestamp", "leader_epoch", "expire_timestamp", "topic_id"
):
    raise ImportError("OffsetCommitKey/OffsetCommitValue fields changed; update codec fast paths")
_set_key_group = OffsetCommitKey.__dict__["group"].__set__
_set_key_topic = OffsetCommitKey.__dict__["topic"].__set__
_set_key_partition = OffsetCommitKey.__dict__["partition"].__set__
_set_key_version = OffsetCommitKey.__dict__["version"].__set__


# ---------------------------------------------------------------------------------------- keys


def encode_key(key: RecordKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        if key.version not in _OFFSET_COMMIT_KEY_TYPES:
            raise ValueError(f"OffsetCommitKey type must be 0 or 1, not {key.version}")
        if batch_native.compiled is not None:
            return batch_native.compiled.offset_commit_key(
                key.version, key.group, key.topic, key.partition)
        return b"".join(
            (INT16.pack(key.version), write_string(key.group), write_string(key.topic),
             INT32.pack(key.partition))
        )
    if isinstance(key, GroupMetadataKey):
        if key.version != _GROUP_METADATA_KEY_TYPE:
            raise ValueError(f"GroupMetadataKey type must be 2, not {key.version}")
        return INT16.pack(key.version) + write_string(key.group)
    if isinstance(key, _CONSUMER_GROUP_KEYS):
        return encode_consumer_group_key(key)
    if isinstance(key, STREAMS_GROUP_KEYS):
        return encode_streams_group_key(key)
    if isinstance(key, _SHARE_GROUP_KEYS):
        return encode_share_group_key(key)
    if key.version <= _GROUP_METADATA_KEY_TYPE or key.version in (
            *CONSUMER_GROUP_KEY_TYPES, PARTITION_METADATA_KEY_TYPE, *STREAMS_GROUP_KEY_TYPES,
            *SHARE_GROUP_KEY_TYPES):
        raise ValueError(f"UnknownKey type must be 3 or more, not {key.version}")
    return INT16.pack(key.version) + key.data


def decode_key(data: bytes) -> RecordKey:
    """Decode a key. Keys repeat throughout a log (every commit of a partition has the same
    one) and decoded keys are immutable, so recent ones are shared from a bounded cache."""
    if type(data) is not bytes:
        data = bytes(data)
    key = _key_cache.get(data)
    if key is None:
        key = _decode_key_uncached(data)
        if len(_key_cache) >= _KEY_CACHE_LIMIT:
            _key_cache.clear()
        _key_cache[data] = key
    return key


_KEY_CACHE_LIMIT = 1 << 16
_key_cache: dict[bytes, RecordKey] = {}


def _decode_key_uncached(data: bytes) -> RecordKey:
    """The common, well-formed case takes one flat path; anything else goes to the
    field-by-field reader that names what is wrong and where."""
    try:
        key_type, group_len = _TYPE_AND_LEN.unpack_from(data, 0)
        group_end = 4 + group_len
        if key_type == _GROUP_METADATA_KEY_TYPE and group_end == len(data) and group_len >= 0:
            return GroupMetadataKey(data[4:group_end].decode())
        if 0 <= key_type <= 1 and group_len >= 0:
            (topic_len,) = INT16.unpack_from(data, group_end)
            topic_end = group_end + 2 + topic_len
            if topic_len >= 0 and topic_end + 4 == len(data):
                key = _new_object(OffsetCommitKey)
                _set_key_group(key, data[4:group_end].decode())
                _set_key_topic(key, data[group_end + 2 : topic_end].decode())
                _set_key_partition(key, INT32.unpack_from(data, topic_end)[0])
                _set_key_version(key, key_type)
                return key
    except (struct.error, UnicodeDecodeError):
        pass
    return _decode_key_checked(data)


def _decode_key_checked(data: bytes) -> RecordKey:
    key_type, pos = read_int16(data, 0, "key type")
    if key_type in _OFFSET_COMMIT_KEY_TYPES:
        group, pos = read_string(data, pos, "OffsetCommitKey group")
        topic, pos = read_string(data, pos, "OffsetCommitKey topic")
        partition, pos = read_int32(data, pos, "OffsetCommitKey partition")
        _expect_end(data, pos, "OffsetCommitKey")
        return OffsetCommitKey(group, topic, partition, key_type)
    if key_type == _GROUP_METADATA_KEY_TYPE:
        group, pos = read_string(data, pos, "GroupMetadataKey group")
        _expect_end(data, pos, "GroupMetadataKey")
        return GroupMetadataKey(group)
    if key_type < 0:
        raise RecordDecodeError(f"cannot read key type at byte 0: {key_type} is negative", 0)
    if key_type in CONSUMER_GROUP_KEY_TYPES or key_type == PARTITION_METADATA_KEY_TYPE:
        return decode_consumer_group_key(key_type, data)
    if key_type in STREAMS_GROUP_KEY_TYPES:
        return decode_streams_group_key(key_type, data)
    if key_type in SHARE_GROUP_KEY_TYPES:
        return decode_share_group_key(key_type, data)
    return UnknownKey(key_type, bytes(data[2:]))


def _expect_end(data: bytes, pos: int, what: str) -> None:
    if pos != len(data):
        raise RecordDecodeError(
            f"cannot read {what} at byte {pos}: {len(data) - pos} unexpected trailing bytes", pos
        )


# -------------------------------------------------------------------------------------- values


def value_version(data: bytes) -> int:
    """The schema version a value was written with (its leading int16)."""
    return read_int16(data, 0, "value version")[0]


def encode_value(value: RecordValue, version: int | None = None) -> bytes:
    """Encode as Kafka writes by default (OffsetCommitValue v3, or v1 when an expire timestamp
    is set; GroupMetadataValue v3), or in the given version; a field the version cannot hold
    is an error rather than silently lost."""
    if isinstance(value, OffsetCommitValue):
        if version is None:
            version = 3 if value.expire_timestamp is None else 1
        return _encode_offset_commit_value(value, version)
    if not isinstance(value, GroupMetadataValue):
        if version not in (None, 0):
            raise ValueError(
                f"consumer-, streams- and share-group values have version 0, not {version}")
        if isinstance(value, StreamsGroupValue):
            return encode_streams_group_value(value)
        if isinstance(value, ShareGroupValue):
            return encode_share_group_value(value)
        return encode_consumer_group_value(value)
    return _encode_group_metadata_value(value, 3 if version is None else version)


def _encode_offset_commit_value(value: OffsetCommitValue, version: int) -> bytes:
    if version not in OFFSET_COMMIT_VALUE_VERSIONS:
        raise ValueError(f"OffsetCommitValue has versions 0-4, not {version}")
    if value.expire_timestamp is not None and version != 1:
        raise ValueError(f"OffsetCommitValue v{version} has no expireTimestamp; only v1 does")
    if value.leader_epoch != -1 and version < 3:
        raise ValueError(f"OffsetCommitValue v{version} has no leaderEpoch; v3+ do")
    if value.topic_id is not None and version != FLEXIBLE_VERSION:
        raise ValueError(f"OffsetCommitValue v{version} has no topicId; v4 does")
    if batch_native.compiled is not None and version != FLEXIBLE_VERSION:
        return batch_native.compiled.offset_commit_value(
            version, value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
            -1 if value.expire_timestamp is None else value.expire_timestamp)
    parts = [INT16.pack(version), INT64.pack(value.offset)]
    if version >= 3:
        parts.append(INT32.pack(value.leader_epoch))
    if version == FLEXIBLE_VERSION:
        parts.append(write_compact_nullable_string(value.metadata))
    else:
        parts.append(write_string(value.metadata))
    parts.append(INT64.pack(value.commit_timestamp))
    if version == 1:
        expire = -1 if value.expire_timestamp is None else value.expire_timestamp
        parts.append(INT64.pack(expire))
    if version == FLEXIBLE_VERSION:
        parts.append(_offset_commit_tags(value.topic_id))
    return b"".join(parts)


def _offset_commit_tags(topic_id: bytes | None) -> bytes:
    """v4's tagged-field section: topicId (tag 0) when there is one, as Kafka writes it."""
    if topic_id is None:
        return EMPTY_TAGGED_FIELDS
    if len(topic_id) != _UUID_SIZE:
        raise ValueError(f"OffsetCommitValue topicId must be {_UUID_SIZE} bytes")
    return uvarint(1) + uvarint(_TOPIC_ID_TAG) + uvarint(_UUID_SIZE) + topic_id


def _read_offset_commit_tags(data: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    """v4's tagged fields: topicId (tag 0) is read, any other tag skipped as Kafka does."""
    topic_id = None
    count, pos = read_uvarint(data, pos, f"{what} tagged-field count")
    for _ in range(count):
        tag, pos = read_uvarint(data, pos, f"{what} tag")
        size, pos = read_uvarint(data, pos, f"{what} tagged-field size")
        if pos + size > len(data):
            raise RecordDecodeError(
                f"cannot read {what} tagged field {tag} at byte {pos}: needs {size} bytes, "
                f"{len(data) - pos} left", pos)
        if tag == _TOPIC_ID_TAG:
            if size != _UUID_SIZE:
                raise RecordDecodeError(
                    f"cannot read {what} topicId at byte {pos}: {size} bytes, not {_UUID_SIZE}",
                    pos)
            topic_id = bytes(data[pos : pos + size])
        pos += size
    return topic_id, pos


def _encode_group_metadata_value(value: GroupMetadataValue, version: int) -> bytes:
    if version not in GROUP_METADATA_VALUE_VERSIONS:
        raise ValueError(f"GroupMetadataValue has versions 0-4, not {version}")
    flexible = version == FLEXIBLE_VERSION
    string = write_compact_nullable_string if flexible else write_string
    nullable = write_compact_nullable_string if flexible else write_nullable_string
    blob = write_compact_bytes if flexible else write_nullable_bytes
    parts = [
        INT16.pack(version),
        string(value.protocol_type),
        INT32.pack(value.generation),
        nullable(value.protocol),
        nullable(value.leader),
    ]
    if version >= 2:
        parts.append(INT64.pack(value.current_state_timestamp))
    count = len(value.members)
    parts.append(uvarint(count + 1) if flexible else INT32.pack(count))
    for member in value.members:
        parts.append(string(member.member_id))
        if version >= 3:
            parts.append(nullable(member.group_instance_id))
        elif member.group_instance_id is not None:
            raise ValueError(f"GroupMetadataValue v{version} has no groupInstanceId; v3+ do")
        parts.append(string(member.client_id))
        parts.append(string(member.client_host))
        if version >= 1:
            parts.append(INT32.pack(member.rebalance_timeout))
        parts.append(INT32.pack(member.session_timeout))
        parts.append(blob(member.subscription))
        parts.append(blob(member.assignment))
        if flexible:
            parts.append(EMPTY_TAGGED_FIELDS)
    if flexible:
        parts.append(EMPTY_TAGGED_FIELDS)
    return b"".join(parts)


def decode_value(key: RecordKey, data: bytes | None) -> RecordValue | None:
    """Decode the value that belongs to `key`; `None` for a tombstone. Values under an
    `UnknownKey` are not interpreted (their schemas are the newer protocol's) and give `None`."""
    if data is None or isinstance(key, UnknownKey):
        return None
    if isinstance(key, OffsetCommitKey):
        return _decode_offset_commit_value(data)
    if isinstance(key, GroupMetadataKey):
        return _decode_group_metadata_value(data)
    if isinstance(key, STREAMS_GROUP_KEYS):
        return decode_streams_group_value(key, data)
    if isinstance(key, _SHARE_GROUP_KEYS):
        return decode_share_group_value(key, data)
    return decode_consumer_group_value(key, data)


def decode_offset_commit_fields(data: bytes) -> tuple[int, int, str, int, int | None]:
    """An OffsetCommitValue as a plain tuple (offset, leaderEpoch, metadata, commitTimestamp,
    expireTimestamp): for replays that keep their own structures and should not pay for a
    model object per record. Same versions and errors as `decode_value`."""
    try:
        version, offset, leader_epoch, metadata_len = _V3_HEAD.unpack_from(data, 0)
        metadata_end = _V3_HEAD.size + metadata_len
        if version == 3 and metadata_len >= 0 and metadata_end + 8 == len(data):
            return (
                offset,
                leader_epoch,
                data[_V3_HEAD.size : metadata_end].decode(),
                INT64.unpack_from(data, metadata_end)[0],
                None,
            )
    except (struct.error, UnicodeDecodeError):
        pass
    value = _decode_offset_commit_value_checked(data)
    return (
        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
        value.expire_timestamp,
    )


def _decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """v3 (what Kafka writes) takes one flat path; other versions and anything malformed go
    through the field-by-field reader."""
    try:
        version, offset, leader_epoch, metadata_len = _V3_HEAD.unpack_from(data, 0)
        metadata_end = _V3_HEAD.size + metadata_len
        if version == 3 and metadata_len >= 0 and metadata_end + 8 == len(data):
            value = _new_object(OffsetCommitValue)
            _set_offset(value, offset)
            _set_metadata(value, data[_V3_HEAD.size : metadata_end].decode())
            _set_commit_timestamp(value, INT64.unpack_from(data, metadata_end)[0])
            _set_leader_epoch(value, leader_epoch)
            _set_expire_timestamp(value, None)
            _set_topic_id(value, None)
            return value
    except (struct.error, UnicodeDecodeError):
        pass
    return _decode_offset_commit_value_checked(data)


_new_object = object.__new__
_set_offset = OffsetCommitValue.__dict__["offset"].__set__
_set_metadata = OffsetCommitValue.__dict__["metadata"].__set__
_set_commit_timestamp = OffsetCommitValue.__dict__["commit_timestamp"].__set__
_set_leader_epoch = OffsetCommitValue.__dict__["leader_epoch"].__set__
_set_expire_timestamp = OffsetCommitValue.__dict__["expire_timestamp"].__set__
_set_topic_id = OffsetCommitValue.__dict__["topic_id"].__set__


def _decode_offset_commit_value_checked(data: bytes) -> OffsetCommitValue:
    version, pos = read_int16(data, 0, "OffsetCommitValue version")
    if version < 0:
        raise RecordDecodeError(f"cannot read OffsetCommitValue at byte 0: version {version}", 0)
    what = f"OffsetCommitValue v{version}"
    version = min(version, FLEXIBLE_VERSION)  # KIP-915: later versions only add tagged fields
    offset, pos = read_int64(data, pos, f"{what} offset")
    leader_epoch = -1
    if version >= 3:
        leader_epoch, pos = read_int32(data, pos, f"{what} leaderEpoch")
    if version == FLEXIBLE_VERSION:
        metadata, pos = read_compact_string(data, pos, f"{what} metadata")
    else:
        metadata, pos = read_string(data, pos, f"{what} metadata")
    commit_timestamp, pos = read_int64(data, pos, f"{what} commitTimestamp")
    expire_timestamp = None
    if version == 1:
        expire_timestamp, pos = read_int64(data, pos, f"{what} expireTimestamp")
    topic_id = None
    if version == FLEXIBLE_VERSION:
        topic_id, pos = _read_offset_commit_tags(data, pos, what)
    _expect_end(data, pos, what)
    return OffsetCommitValue(
        offset, metadata, commit_timestamp, leader_epoch, expire_timestamp, topic_id
    )


def _decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """Read once with constant field labels (building a label per field of every member costs
    more than the reading), and only on failure again with exact ones for the message."""
    try:
        return _read_group_metadata_value(data, named=False)
    except RecordDecodeError:
        return _read_group_metadata_value(data, named=True)


_MEMBER_FIELDS = (
    "memberId", "groupInstanceId", "clientId", "clientHost", "rebalanceTimeout",
    "sessionTimeout", "subscription", "assignment",
)
_QUIET_LABEL = "GroupMetadataValue"
_QUIET_MEMBER_LABELS = (_QUIET_LABEL,) * (len(_MEMBER_FIELDS) + 1)


def _member_labels(what: str, index: int) -> tuple[str, ...]:
    where = f"{what} members[{index}]"
    return (where, *(f"{where}.{field}" for field in _MEMBER_FIELDS))


def _read_group_metadata_value(data: bytes, *, named: bool) -> GroupMetadataValue:
    version, pos = read_int16(data, 0, "GroupMetadataValue version")
    if version < 0:
        raise RecordDecodeError(f"cannot read GroupMetadataValue at byte 0: version {version}", 0)
    what = f"GroupMetadataValue v{version}"
    version = min(version, FLEXIBLE_VERSION)  # KIP-915: later versions only add tagged fields
    flexible = version == FLEXIBLE_VERSION
    string = read_compact_string if flexible else read_string
    nullable = read_compact_nullable_string if flexible else read_nullable_string
    blob = read_compact_bytes if flexible else read_bytes
    label = what if named else _QUIET_LABEL
    protocol_type, pos = string(data, pos, f"{label} protocolType" if named else label)
    generation, pos = read_int32(data, pos, f"{label} generation" if named else label)
    protocol, pos = nullable(data, pos, f"{label} protocol" if named else label)
    leader, pos = nullable(data, pos, f"{label} leader" if named else label)
    current_state_timestamp = -1
    if version >= 2:
        current_state_timestamp, pos = read_int64(
            data, pos, f"{label} currentStateTimestamp" if named else label
        )
    counter = read_compact_array_length if flexible else array_length
    count, pos = counter(data, pos, f"{label} members" if named else label)
    members = []
    for index in range(count):
        labels = _member_labels(what, index) if named else _QUIET_MEMBER_LABELS
        member_id, pos = string(data, pos, labels[1])
        instance_id = None
        if version >= 3:
            instance_id, pos = nullable(data, pos, labels[2])
        client_id, pos = string(data, pos, labels[3])
        client_host, pos = string(data, pos, labels[4])
        rebalance_timeout = None
        if version >= 1:
            rebalance_timeout, pos = read_int32(data, pos, labels[5])
        session_timeout, pos = read_int32(data, pos, labels[6])
        subscription, pos = blob(data, pos, labels[7])
        assignment, pos = blob(data, pos, labels[8])
        if flexible:
            pos = skip_tagged_fields(data, pos, labels[0])
        members.append(
            MemberMetadata(
                member_id=member_id,
                client_id=client_id,
                client_host=client_host,
                session_timeout=session_timeout,
                # v0 has no rebalance timeout; Kafka's loader uses the session timeout instead.
                rebalance_timeout=(
                    session_timeout if rebalance_timeout is None else rebalance_timeout
                ),
                subscription=subscription,
                assignment=assignment,
                group_instance_id=instance_id,
            )
        )
    if flexible:
        pos = skip_tagged_fields(data, pos, what)
    _expect_end(data, pos, what)
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )


# ------------------------------------------------------------------------------------- records


def encode_record(record: OffsetsRecord) -> tuple[bytes, bytes | None]:
    value = None if record.value is None else encode_value(record.value)
    return encode_key(record.key), value


def decode_record(key: bytes, value: bytes | None) -> OffsetsRecord:
    decoded_key = decode_key(key)
    return OffsetsRecord(decoded_key, decode_value(decoded_key, value))


# ---------------------------------------------------------------------------------------- JSON


def record_to_json(record: OffsetsRecord, value_version: int | None = None) -> dict[str, Any]:
    """The JSON shape `kgroups records decode` prints, with Kafka's field names. A field that
    the value's version lacks is absent; `value_version` is the version the value was read
    from (the default is the version `encode_value` would write)."""
    key = record.key
    if isinstance(key, UnknownKey):
        return {
            "key": {"type": key.version, "data": None, "note": "not a classic-protocol record"},
            "value": None,
        }
    value = record.value
    if isinstance(key, _CONSUMER_GROUP_KEYS):
        value_json = None
        if value is not None:
            if not isinstance(value, ConsumerGroupValue):
                raise _mismatched(key, value)
            value_json = {"version": 0, "data": consumer_group_value_json(value, _uuid_text)}
        return {"key": consumer_group_key_json(key), "value": value_json}
    if isinstance(key, STREAMS_GROUP_KEYS):
        if value is not None and not isinstance(value, StreamsGroupValue):
            raise _mismatched(key, value)
        return {"key": streams_group_key_json(key), "value": None if value is None else
                {"version": 0, "data": streams_group_value_json(value)}}
    if isinstance(key, _SHARE_GROUP_KEYS):
        share_json = None
        if value is not None:
            if not isinstance(value, ShareGroupValue):
                raise _mismatched(key, value)
            share_json = {"version": 0, "data": share_group_value_json(value, _uuid_text)}
        return {"key": share_group_key_json(key), "value": share_json}
    if isinstance(key, OffsetCommitKey):
        key_json: dict[str, Any] = {
            "type": key.version,
            "data": {"group": key.group, "topic": key.topic, "partition": key.partition},
        }
    else:
        key_json = {"type": key.version, "data": {"group": key.group}}
    if value is None:
        return {"key": key_json, "value": None}
    if isinstance(value, OffsetCommitValue):
        version = value_version
        if version is None:
            version = 3 if value.expire_timestamp is None else 1
        data = _offset_commit_value_json(value, version)
    elif isinstance(value, GroupMetadataValue):
        version = 3 if value_version is None else value_version
        data = _group_metadata_value_json(value, version)
    else:
        raise _mismatched(key, value)
    return {"key": key_json, "value": {"version": version, "data": data}}


def _mismatched(key: RecordKey, value: RecordValue) -> TypeError:
    """A record built by hand with a value of another record type (decode never makes one)."""
    return TypeError(f"a {type(key).__name__} record cannot hold a {type(value).__name__}")


def _uuid_text(topic_id: Any) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def _offset_commit_value_json(value: OffsetCommitValue, version: int) -> dict[str, Any]:
    data: dict[str, Any] = {"offset": value.offset}
    if version >= 3:
        data["leaderEpoch"] = value.leader_epoch
    data["metadata"] = value.metadata
    data["commitTimestamp"] = value.commit_timestamp
    if version == 1:
        data["expireTimestamp"] = value.expire_timestamp
    if value.topic_id is not None and any(value.topic_id):
        # Kafka prints a Uuid as URL-safe base64 without padding and omits the zero Uuid.
        data["topicId"] = base64.urlsafe_b64encode(value.topic_id).decode().rstrip("=")
    return data


def _group_metadata_value_json(value: GroupMetadataValue, version: int) -> dict[str, Any]:
    data: dict[str, Any] = {
        "protocolType": value.protocol_type,
        "generation": value.generation,
        "protocol": value.protocol,
        "leader": value.leader,
    }
    if version >= 2:
        data["currentStateTimestamp"] = value.current_state_timestamp
    consumer = value.protocol_type == "consumer"
    members = []
    for index, member in enumerate(value.members):
        entry: dict[str, Any] = {"memberId": member.member_id}
        if version >= 3:
            entry["groupInstanceId"] = member.group_instance_id
        entry["clientId"] = member.client_id
        entry["clientHost"] = member.client_host
        if version >= 1:
            entry["rebalanceTimeout"] = member.rebalance_timeout
        entry["sessionTimeout"] = member.session_timeout
        if consumer:
            entry["subscription"] = _nested(
                consumer_protocol.subscription_to_json, member.subscription,
                f"members[{index}].subscription",
            )
            entry["assignment"] = _nested(
                consumer_protocol.assignment_to_json, member.assignment,
                f"members[{index}].assignment",
            )
        else:
            entry["subscription"] = base64.b64encode(member.subscription).decode()
            entry["assignment"] = base64.b64encode(member.assignment).decode()
        members.append(entry)
    data["members"] = members
    return data


def _nested(to_json: Any, payload: bytes, where: str) -> dict[str, Any]:
    """Decode a ConsumerProtocol payload inside a member, naming the member on failure."""
    try:
        return to_json(payload)
    except RecordDecodeError as exc:
        raise RecordDecodeError(f"{where}: {exc} (byte within {where})", exc.position) from exc
