"""Which `__share_group_state` partition holds a share-partition's records.

Kafka names a share-partition by the text "group:topicId:partition" (the topic id as Kafka
prints a Uuid: URL-safe base64 without padding) and places it as a group is placed:
abs(String.hashCode) modulo `share.coordinator.state.topic.num.partitions`. FindCoordinator's
key type 2 carries that same text.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid

from kgroups.coordinator.placement import partition_for

# Kafka's share.coordinator.state.topic.num.partitions default.
STATE_TOPIC_PARTITIONS = 50
_JAVA_INT = re.compile(r"[+-]?[0-9]{1,10}")


def uuid_text(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString (strict URL-safe base64 of 16 bytes); ValueError otherwise."""
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except binascii.Error as exc:
        raise ValueError(f"{text!r} is not a topic id") from exc
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a topic id")
    return uuid.UUID(bytes=raw)


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group_id}:{uuid_text(topic_id)}:{partition}"


def parse_coordinator_key(key: str) -> tuple[str, uuid.UUID, int]:
    """The share-partition a FindCoordinator key names, read as Kafka reads it (Java's split
    on ":", which drops trailing empty parts; the group id is everything before the last two
    parts and may itself hold colons, but not be blank); ValueError when it names none."""
    parts = key.split(":")
    while parts and not parts[-1]:
        parts.pop()
    if len(parts) < 3:
        raise ValueError(f"{key!r} is not group:topicId:partition")
    group_id = ":".join(parts[:-2])
    if not group_id.strip():
        raise ValueError("GroupId must not be empty")
    if not _JAVA_INT.fullmatch(parts[-1]):
        raise ValueError(f"{parts[-1]!r} is not a partition")
    return group_id, parse_uuid(parts[-2]), int(parts[-1])


def state_partition(key: str, num_partitions: int = STATE_TOPIC_PARTITIONS) -> int:
    """The `__share_group_state` partition of a coordinator key."""
    return partition_for(key, num_partitions)
