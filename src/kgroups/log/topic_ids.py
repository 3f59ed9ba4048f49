"""Topic ids: the stable UUID of a topic, kept in each partition directory as Kafka keeps it.

KIP-848's consumer protocol names topics by id, so an id must survive restarts and must change
when a topic is deleted and created again (a member's assignment of the old topic then names
nothing). Kafka writes `partition.metadata` in every partition directory:

    version: 0
    topic_id: <the id as URL-safe base64 without padding>

kgroups writes the same file, so a data directory moved between the two keeps its ids.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

PARTITION_METADATA_FILE = "partition.metadata"
_VERSION_LINE = "version: 0"
_TOPIC_ID_PREFIX = "topic_id: "


class PartitionMetadataError(ValueError):
    """A partition.metadata file that is not Kafka's version 0 layout."""


def topic_id_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, padding dropped."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise PartitionMetadataError(f"topic id {text!r} is not 16 bytes")
    return uuid.UUID(bytes=raw)


def new_topic_id() -> uuid.UUID:
    """A random id Kafka would also accept: never the zero id or the metadata topic's id (1),
    and, as Kafka's Uuid.randomUuid, never one whose string starts with '-' (it would read as
    a command-line option)."""
    while True:
        candidate = uuid.uuid4()
        if candidate.int > 1 and not topic_id_string(candidate).startswith("-"):
            return candidate


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id stored in `directory`, or None when it has no partition.metadata."""
    try:
        text = (directory / PARTITION_METADATA_FILE).read_text()
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    if len(lines) < 2 or lines[0] != _VERSION_LINE or not lines[1].startswith(_TOPIC_ID_PREFIX):
        raise PartitionMetadataError(
            f"{directory / PARTITION_METADATA_FILE} is not 'version: 0' / 'topic_id: <id>'"
        )
    return parse_topic_id(lines[1][len(_TOPIC_ID_PREFIX):].strip())


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    """Write the file atomically (temporary file, fsync, rename), so a crash leaves either no
    id or the whole id: a torn file would give the topic a new id at the next start."""
    path = directory / PARTITION_METADATA_FILE
    temporary = path.with_name(PARTITION_METADATA_FILE + ".tmp")
    with open(temporary, "w") as handle:
        handle.write(f"{_VERSION_LINE}\n{_TOPIC_ID_PREFIX}{topic_id_string(topic_id)}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
