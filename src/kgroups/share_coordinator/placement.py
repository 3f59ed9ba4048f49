"""Which `__share_group_state` partition holds a share-partition's records.

Kafka names a share-partition by the text "group:topicId:partition" (the topic id as Kafka
prints a Uuid: URL-safe base64 without padding) and places it as a group is placed:
abs(String.hashCode) modulo `share.coordinator.state.topic.num.partitions`. FindCoordinator's
key type 2 carries that same text.
"""

from __future__ import annotations

import base64
import uuid

from kgroups.coordinator.placement import partition_for

# Kafka's share.coordinator.state.topic.num.partitions default.
STATE_TOPIC_PARTITIONS = 50


def uuid_text(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError when `text` is not one."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a topic id")
    return uuid.UUID(bytes=raw)


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group_id}:{uuid_text(topic_id)}:{partition}"


def parse_coordinator_key(key: str) -> tuple[str, uuid.UUID, int]:
    """The share-partition a FindCoordinator key names; ValueError when it names none (the
    group id may itself hold colons: the last two parts are the topic id and partition)."""
    group_id, topic_id, partition = key.rsplit(":", 2)
    if not group_id:
        raise ValueError("empty group id")
    return group_id, parse_uuid(topic_id), int(partition)


def state_partition(key: str, num_partitions: int = STATE_TOPIC_PARTITIONS) -> int:
    """The `__share_group_state` partition of a coordinator key."""
    return partition_for(key, num_partitions)
