"""__share_group_state records: the share coordinator's two record types (KIP-932).

Every record is keyed by one share-partition (group id, topic id, partition). The key (not
flexible) starts with its record type: 0 ShareSnapshot, the whole state of the share-partition,
1 ShareUpdate, a change to merge into the last snapshot. Both values are version 0, flexible:
ShareSnapshot carries the snapshot epoch, state epoch, leader epoch, start offset, create and
write timestamps and the state batches; ShareUpdate the snapshot epoch it applies to, leader
epoch, start offset (-1: unchanged) and the changed batches. Each value carries the count of
delivered offsets (KIP-1226) as tagged field 0, written only when it is not -1. A ShareSnapshot
key with a null value is a tombstone: the share-partition's state was deleted.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from kgroups.log.batch import uvarint
from kgroups.records.wire import (
    INT16,
    INT32,
    INT64,
    fail,
    read_compact_array_length,
    read_int16,
    read_int32,
    read_int64,
    read_string,
    read_tagged_fields,
    short,
    skip_tagged_fields,
    write_string,
)

SHARE_SNAPSHOT_KEY_TYPE = 0
SHARE_UPDATE_KEY_TYPE = 1
UNKNOWN_COUNT = -1
_INT8 = struct.Struct(">b")
_UUID_SIZE = 16
_COUNT_TAG = 0
_BATCH = struct.Struct(">qqbh")


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """Which share-partition; `snapshot` tells the record type (ShareSnapshot or ShareUpdate)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int
    snapshot: bool = True


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_COUNT


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_COUNT


ShareStateValue = ShareSnapshotValue | ShareUpdateValue


def encode_share_state_key(key: ShareStateKey) -> bytes:
    key_type = SHARE_SNAPSHOT_KEY_TYPE if key.snapshot else SHARE_UPDATE_KEY_TYPE
    return (INT16.pack(key_type) + write_string(key.group_id) + key.topic_id.bytes
            + INT32.pack(key.partition))


def decode_share_state_key(data: bytes) -> ShareStateKey:
    key_type, pos = read_int16(data, 0, "ShareStateKey type")
    if key_type not in (SHARE_SNAPSHOT_KEY_TYPE, SHARE_UPDATE_KEY_TYPE):
        raise fail("ShareStateKey type", 0, f"{key_type} is not a share state key")
    what = "ShareSnapshotKey" if key_type == SHARE_SNAPSHOT_KEY_TYPE else "ShareUpdateKey"
    group_id, pos = read_string(data, pos, f"{what} groupId")
    if pos + _UUID_SIZE > len(data):
        raise short(f"{what} topicId", pos, _UUID_SIZE, data)
    topic_id = uuid.UUID(bytes=data[pos:pos + _UUID_SIZE])
    partition, _ = read_int32(data, pos + _UUID_SIZE, f"{what} partition")
    return ShareStateKey(group_id, topic_id, partition, key_type == SHARE_SNAPSHOT_KEY_TYPE)


def encode_share_state_value(value: ShareStateValue) -> bytes:
    """Version 0 of either value type (the only one Kafka 4.3.1 has)."""
    parts = [INT16.pack(0), INT32.pack(value.snapshot_epoch)]
    if isinstance(value, ShareSnapshotValue):
        parts += [INT32.pack(value.state_epoch), INT32.pack(value.leader_epoch),
                  INT64.pack(value.start_offset), INT64.pack(value.create_timestamp),
                  INT64.pack(value.write_timestamp)]
    else:
        parts += [INT32.pack(value.leader_epoch), INT64.pack(value.start_offset)]
    parts.append(uvarint(len(value.state_batches) + 1))
    for batch in value.state_batches:
        parts.append(_BATCH.pack(batch.first_offset, batch.last_offset, batch.delivery_state,
                                 batch.delivery_count) + b"\x00")
    if value.delivery_complete_count == UNKNOWN_COUNT:
        parts.append(b"\x00")
    else:
        parts.append(uvarint(1) + uvarint(_COUNT_TAG) + uvarint(4)
                     + INT32.pack(value.delivery_complete_count))
    return b"".join(parts)


def decode_share_state_value(key: ShareStateKey, data: bytes | None) -> ShareStateValue | None:
    """The value of `key`'s record type; None for a tombstone."""
    if data is None:
        return None
    what = "ShareSnapshotValue" if key.snapshot else "ShareUpdateValue"
    version, pos = read_int16(data, 0, f"{what} version")
    if version != 0:
        raise fail(f"{what} version", 0, f"unknown version {version}")
    snapshot_epoch, pos = read_int32(data, pos, f"{what} snapshotEpoch")
    if key.snapshot:
        state_epoch, pos = read_int32(data, pos, f"{what} stateEpoch")
    leader_epoch, pos = read_int32(data, pos, f"{what} leaderEpoch")
    start_offset, pos = read_int64(data, pos, f"{what} startOffset")
    if key.snapshot:
        created, pos = read_int64(data, pos, f"{what} createTimestamp")
        written, pos = read_int64(data, pos, f"{what} writeTimestamp")
    batches, pos = _read_batches(data, pos, f"{what} stateBatches")
    tags, _ = read_tagged_fields(data, pos, what)
    count = UNKNOWN_COUNT
    if _COUNT_TAG in tags:
        count = read_int32(tags[_COUNT_TAG], 0, f"{what} deliveryCompleteCount")[0]
    if key.snapshot:
        return ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start_offset,
                                  created, written, batches, count)
    return ShareUpdateValue(snapshot_epoch, leader_epoch, start_offset, batches, count)


def _read_batches(data: bytes, pos: int, what: str) -> tuple[tuple[StateBatch, ...], int]:
    count, pos = read_compact_array_length(data, pos, what)
    batches = []
    for index in range(count):
        if pos + _BATCH.size > len(data):
            raise short(f"{what}[{index}]", pos, _BATCH.size, data)
        batches.append(StateBatch(*_BATCH.unpack_from(data, pos)))
        pos = skip_tagged_fields(data, pos + _BATCH.size, f"{what}[{index}]")
    return tuple(batches), pos
