"""`kgroups topics --delete-records --offset-json-file FILE`: kafka-delete-records over the wire.

The file is kafka-delete-records' own, `{"partitions": [{"topic": "t", "partition": 0,
"offset": 5}], "version": 1}` (offset -1: up to the high watermark), read with its rules (version
1 when absent, a partition named twice refused), and the output is the tool's, line for line:
one `partition: <topic>-<n>\tlow_watermark: <offset>` per partition, or `error:` and the Java
exception Kafka's admin client would raise, so scripts written for one read the other. Kafka's
client retries retriable errors (an unknown partition) until its timeout; this prints them at
once. Partitions are printed sorted (Kafka's tool prints them in hash order).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kgroups.errors import KAFKA_MESSAGES, ErrorCode
from kgroups.tools import topic_admin
from kgroups.tools.admin import AdminError
from kgroups.tools.wire_client import KafkaWireClient

SUPPORTED_VERSION = 1
# What Kafka's admin client raises for each error DeleteRecords answers (Errors' exceptions,
# with their messages from KAFKA_MESSAGES).
JAVA_EXCEPTIONS: dict[ErrorCode, str] = {
    ErrorCode.OFFSET_OUT_OF_RANGE: "OffsetOutOfRangeException",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionException",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "InvalidTopicException",
    ErrorCode.POLICY_VIOLATION: "PolicyViolationException",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationException",
    ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageException",
}


class OffsetFileError(AdminError):
    """The offset JSON file cannot be used; nothing was sent to the broker."""


def parse_offset_json(text: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset, by kafka-delete-records' rules."""
    try:
        document = json.loads(text)
    except ValueError:
        raise OffsetFileError("The input string is not a valid JSON") from None
    if not isinstance(document, dict):
        raise OffsetFileError("The input string is not a JSON object")
    version = document.get("version", SUPPORTED_VERSION)
    if version != SUPPORTED_VERSION:
        raise OffsetFileError(f"Not supported version field value {version}")
    entries = document.get("partitions")
    if entries is None:
        raise OffsetFileError("Missing partitions field")
    if not isinstance(entries, list):
        raise OffsetFileError("partitions must be a list")
    offsets: dict[tuple[str, int], int] = {}
    duplicates: list[str] = []
    for index, entry in enumerate(entries):
        topic, partition, offset = (_field(entry, index, name, kind) for name, kind in
                                    (("topic", str), ("partition", int), ("offset", int)))
        key = (topic, partition)
        if key in offsets and f"{topic}-{partition}" not in duplicates:
            duplicates.append(f"{topic}-{partition}")
        offsets[key] = offset
    if duplicates:
        raise OffsetFileError("Offset json file contains duplicate topic partitions: "
                              + ",".join(duplicates))
    return offsets


def _field(entry: Any, index: int, name: str, kind: type) -> Any:
    value = entry.get(name) if isinstance(entry, dict) else None
    # JSON true/false are ints to Python; a partition or offset must be a number.
    if not isinstance(value, kind) or isinstance(value, bool):
        wanted = "a string" if kind is str else "an integer"
        raise OffsetFileError(f"partitions[{index}]: {name!r} must be {wanted}")
    return value


def read_offset_file(path: Path) -> dict[tuple[str, int], int]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OffsetFileError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
                              ) from None
    return parse_offset_json(text)


def result_line(topic: str, partition: int, error: ErrorCode, low_watermark: int) -> str:
    if error == ErrorCode.NONE:
        return f"partition: {topic}-{partition}\tlow_watermark: {low_watermark}"
    name = JAVA_EXCEPTIONS.get(error)
    if name is None:
        name, message = "ApiException", f"{error.name} ({int(error)})"
    else:
        message = KAFKA_MESSAGES[error]
    return (f"partition: {topic}-{partition}\terror: "
            f"org.apache.kafka.common.errors.{name}: {message}")


def run(client: KafkaWireClient, offsets: Mapping[tuple[str, int], int]) -> int:
    """Delete what the file (read by `read_offset_file`) asks; exit status 0 even when some
    partitions failed, as Kafka's tool (each failure is on its line)."""
    print("Executing records delete operation")
    results = topic_admin.delete_records(client, offsets)
    print("Records delete operation completed:")
    for (topic, partition), (error, low_watermark) in sorted(results.items()):
        print(result_line(topic, partition, error, low_watermark))
    return 0
