"""ConsumerProtocol subscription and assignment payloads (protocol type "consumer").

These are the opaque bytes Java, librdkafka, kafka-python and aiokafka put in JoinGroup metadata
and SyncGroup assignments, and that GroupMetadataValue stores per member. The layout is never
flexible; later versions only append fields, so a version newer than 3 is read as v3 and the
fields it appended are skipped, as Kafka's own ConsumerProtocol does.
"""

from __future__ import annotations

import base64
from typing import Any

from kgroups.records.schema import ConsumerAssignment, ConsumerSubscription, TopicPartitions
from kgroups.records.wire import (
    INT16,
    INT32,
    RecordDecodeError,
    array_length,
    read_int16,
    read_int32,
    read_nullable_bytes,
    read_nullable_string,
    read_string,
    read_strings,
    write_nullable_bytes,
    write_nullable_string,
    write_string,
)

HIGHEST_KNOWN_VERSION = 3


def encode_subscription(sub: ConsumerSubscription) -> bytes:
    """Encode in `sub.version`; fields that version lacks must hold their defaults."""
    version = sub.version
    if version < 0:
        raise ValueError(f"ConsumerProtocol subscription version must be >= 0, not {version}")
    if version < 1 and sub.owned_partitions:
        raise ValueError("ConsumerProtocol subscription v0 has no ownedPartitions; v1+ do")
    if version < 2 and sub.generation_id != -1:
        raise ValueError(f"ConsumerProtocol subscription v{version} has no generationId; v2+ do")
    if version < 3 and sub.rack_id is not None:
        raise ValueError(f"ConsumerProtocol subscription v{version} has no rackId; v3+ do")
    parts = [INT16.pack(version), INT32.pack(len(sub.topics))]
    parts.extend(write_string(topic) for topic in sub.topics)
    parts.append(write_nullable_bytes(sub.user_data))
    if version >= 1:
        parts.append(_write_topic_partitions(sub.owned_partitions))
    if version >= 2:
        parts.append(INT32.pack(sub.generation_id))
    if version >= 3:
        parts.append(write_nullable_string(sub.rack_id))
    return b"".join(parts)


def decode_subscription(data: bytes) -> ConsumerSubscription:
    version, pos, what = _read_version(data, "subscription")
    topics, pos = read_strings(data, pos, f"{what} topics", compact=False)
    user_data, pos = read_nullable_bytes(data, pos, f"{what} userData")
    owned: tuple[TopicPartitions, ...] = ()
    generation_id = -1
    rack_id = None
    if version >= 1:
        owned, pos = _read_topic_partitions(data, pos, f"{what} ownedPartitions")
    if version >= 2:
        generation_id, pos = read_int32(data, pos, f"{what} generationId")
    if version >= 3:
        rack_id, pos = read_nullable_string(data, pos, f"{what} rackId")
    _expect_end(data, pos, version, what)
    return ConsumerSubscription(topics, user_data, owned, generation_id, rack_id, version)


def encode_assignment(a: ConsumerAssignment) -> bytes:
    if a.version < 0:
        raise ValueError(f"ConsumerProtocol assignment version must be >= 0, not {a.version}")
    return b"".join(
        (
            INT16.pack(a.version),
            _write_topic_partitions(a.assigned_partitions),
            write_nullable_bytes(a.user_data),
        )
    )


def decode_assignment(data: bytes) -> ConsumerAssignment:
    version, pos, what = _read_version(data, "assignment")
    assigned, pos = _read_topic_partitions(data, pos, f"{what} assignedPartitions")
    user_data, pos = read_nullable_bytes(data, pos, f"{what} userData")
    _expect_end(data, pos, version, what)
    return ConsumerAssignment(assigned, user_data, version)


def subscription_to_json(data: bytes) -> dict[str, Any]:
    """The JSON shape of a subscription; a field its version lacks is absent."""
    sub = decode_subscription(data)
    out: dict[str, Any] = {"topics": list(sub.topics), "userData": _b64(sub.user_data)}
    if sub.version >= 1:
        out["ownedPartitions"] = _topic_partitions_json(sub.owned_partitions)
    if sub.version >= 2:
        out["generationId"] = sub.generation_id
    if sub.version >= 3:
        out["rackId"] = sub.rack_id
    return out


def assignment_to_json(data: bytes) -> dict[str, Any]:
    assignment = decode_assignment(data)
    return {
        "assignedPartitions": _topic_partitions_json(assignment.assigned_partitions),
        "userData": _b64(assignment.user_data),
    }


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _topic_partitions_json(items: tuple[TopicPartitions, ...]) -> list[dict[str, Any]]:
    return [{"topic": item.topic, "partitions": list(item.partitions)} for item in items]


def _write_topic_partitions(items: tuple[TopicPartitions, ...]) -> bytes:
    parts = [INT32.pack(len(items))]
    for item in items:
        parts.append(write_string(item.topic))
        parts.append(INT32.pack(len(item.partitions)))
        parts.append(b"".join(INT32.pack(p) for p in item.partitions))
    return b"".join(parts)


def _read_topic_partitions(
    data: bytes, pos: int, what: str
) -> tuple[tuple[TopicPartitions, ...], int]:
    count, pos = array_length(data, pos, what)
    items = []
    for index in range(count):
        topic, pos = read_string(data, pos, f"{what}[{index}].topic")
        n, pos = array_length(data, pos, f"{what}[{index}].partitions")
        end = pos + 4 * n
        if end > len(data):
            raise RecordDecodeError(
                f"cannot read {what}[{index}].partitions at byte {pos}: needs {4 * n} bytes, "
                f"{len(data) - pos} left",
                pos,
            )
        partitions = tuple(INT32.unpack_from(data, pos + 4 * i)[0] for i in range(n))
        items.append(TopicPartitions(topic, partitions))
        pos = end
    return tuple(items), pos


def _read_version(data: bytes, kind: str) -> tuple[int, int, str]:
    """The version a subscription or assignment starts with (never negative), the position
    after it, and the name its errors give it."""
    version, pos = read_int16(data, 0, f"{kind} version")
    if version < 0:
        raise RecordDecodeError(f"cannot read {kind} version at byte 0: {version}", 0)
    return version, pos, f"{kind} v{version}"


def _expect_end(data: bytes, pos: int, version: int, what: str) -> None:
    """Trailing bytes are fields of a newer version (skipped) or garbage (an error)."""
    if pos != len(data) and version <= HIGHEST_KNOWN_VERSION:
        raise RecordDecodeError(
            f"cannot read {what} at byte {pos}: {len(data) - pos} unexpected trailing bytes", pos
        )
