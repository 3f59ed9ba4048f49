"""Log settings under Kafka's names, with Kafka's defaults.

`from_properties` reads a broker's property set (`log.segment.bytes`, ...) or a topic's overrides
(`segment.bytes`, ...); keys that are not log settings are left to whoever owns them, so the
broker can hand over its whole configuration. A log setting with a bad value is an error naming
the key, never silently replaced by a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

OFFSETS_TOPIC = "__consumer_offsets"
NEVER = 2**63 - 1  # Kafka's Long.MAX_VALUE default of the flush settings: no forced fsync
CLEANUP_POLICIES = frozenset({"delete", "compact", "compact,delete", "delete,compact"})
TIMESTAMP_TYPES = frozenset({"CreateTime", "LogAppendTime"})
# compression.type: "producer" keeps each batch as produced; a codec has every batch stored in it.
COMPRESSION_TYPES = frozenset({"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"})


@dataclass(frozen=True, slots=True)
class LogConfig:
    # log.segment.bytes / segment.bytes: a segment rolls before it would exceed this.
    segment_bytes: int = 1024 * 1024 * 1024
    # log.index.interval.bytes / index.interval.bytes: bytes between offset-index entries.
    index_interval_bytes: int = 4096
    # log.retention.ms (or .minutes, .hours) / retention.ms: -1 keeps segments forever.
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    # log.retention.bytes / retention.bytes: -1 means no size limit.
    retention_bytes: int = -1
    # log.cleanup.policy / cleanup.policy.
    cleanup_policy: str = "delete"
    # log.cleaner.delete.retention.ms / delete.retention.ms: how long compaction keeps tombstones.
    delete_retention_ms: int = 24 * 60 * 60 * 1000
    # offsets.topic.segment.bytes: segment size of __consumer_offsets (Kafka: 100 MiB).
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    # log.flush.interval.messages / flush.messages: fsync before acknowledging once this many
    # messages are unflushed (1: every append is fsynced first). Kafka's default: never.
    flush_messages: int = NEVER
    # log.flush.interval.ms / flush.ms: fsync a log whose oldest unflushed append is this old.
    flush_ms: int = NEVER
    # log.flush.scheduler.interval.ms: how often the flusher looks for logs due a flush.
    flush_scheduler_interval_ms: int = NEVER
    # log.message.timestamp.type / message.timestamp.type: LogAppendTime has the broker stamp
    # each appended batch with its own clock; CreateTime keeps the producer's timestamps.
    message_timestamp_type: str = "CreateTime"
    # message.max.bytes / max.message.bytes: the largest batch a producer may append.
    max_message_bytes: int = 1048588
    # compression.type (broker and topic): "producer", or the codec batches are stored in.
    compression_type: str = "producer"
    # log.message.timestamp.before.max.ms / .after.max.ms and the topic names without `log.`:
    # how far before or after the broker's clock a CreateTime record's timestamp may be.
    message_timestamp_before_max_ms: int = NEVER
    message_timestamp_after_max_ms: int = 60 * 60 * 1000

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    def for_topic(self, topic: str) -> LogConfig:
        """The configuration a topic's partitions get: __consumer_offsets is compacted and uses
        its own segment size, as in Kafka."""
        if topic == OFFSETS_TOPIC:
            return replace(
                self, cleanup_policy="compact", segment_bytes=self.offsets_topic_segment_bytes
            )
        return self

    @classmethod
    def from_properties(cls, properties: Mapping[str, str | int]) -> LogConfig:
        values: dict[str, int | str] = {}
        for key, raw in properties.items():
            name = _INT_SETTINGS.get(key)
            if name is not None:
                values[name] = _parse_int(key, raw)
            elif key in ("log.cleanup.policy", "cleanup.policy"):
                policy = str(raw).replace(" ", "")
                if policy not in CLEANUP_POLICIES:
                    raise ValueError(f"{key}={raw!r}: expected delete, compact or compact,delete")
                values["cleanup_policy"] = policy
            elif key in ("log.message.timestamp.type", "message.timestamp.type"):
                if str(raw).strip() not in TIMESTAMP_TYPES:
                    raise ValueError(f"{key}={raw!r}: expected CreateTime or LogAppendTime")
                values["message_timestamp_type"] = str(raw).strip()
            elif key == "compression.type":
                if str(raw).strip() not in COMPRESSION_TYPES:
                    raise ValueError(f"{key}={raw!r}: expected one of "
                                     f"{', '.join(sorted(COMPRESSION_TYPES))}")
                values["compression_type"] = str(raw).strip()
        # Kafka lets .ms win over .minutes over .hours; apply in that precedence.
        for key in ("log.retention.hours", "log.retention.minutes", "log.retention.ms"):
            if key in properties:
                values["retention_ms"] = _retention(key, properties[key])
        config = cls(**values)  # type: ignore[arg-type]
        _validate(config)
        return config


_INT_SETTINGS = {
    "log.segment.bytes": "segment_bytes",
    "segment.bytes": "segment_bytes",
    "log.index.interval.bytes": "index_interval_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "log.retention.bytes": "retention_bytes",
    "retention.bytes": "retention_bytes",
    "log.cleaner.delete.retention.ms": "delete_retention_ms",
    "delete.retention.ms": "delete_retention_ms",
    "offsets.topic.segment.bytes": "offsets_topic_segment_bytes",
    "log.flush.interval.messages": "flush_messages",
    "flush.messages": "flush_messages",
    "log.flush.interval.ms": "flush_ms",
    "flush.ms": "flush_ms",
    "log.flush.scheduler.interval.ms": "flush_scheduler_interval_ms",
    "message.max.bytes": "max_message_bytes",
    "max.message.bytes": "max_message_bytes",
    "log.message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "log.message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
}
_RETENTION_SCALE = {
    "log.retention.hours": 3_600_000,
    "log.retention.minutes": 60_000,
    "log.retention.ms": 1,
}
# Every key `from_properties` reads, so the broker can tell them from settings nobody reads.
PROPERTY_NAMES = frozenset(
    {*_INT_SETTINGS, *_RETENTION_SCALE, "log.cleanup.policy", "cleanup.policy",
     "log.message.timestamp.type", "message.timestamp.type", "compression.type"})


def _parse_int(key: str, raw: str | int) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{key}={raw!r}: expected an integer") from None


def _retention(key: str, raw: str | int) -> int:
    value = _parse_int(key, raw)
    return -1 if value < 0 else value * _RETENTION_SCALE[key]


def _validate(config: LogConfig) -> None:
    if config.segment_bytes < 14:
        raise ValueError(f"segment.bytes={config.segment_bytes}: must be at least 14")
    if config.offsets_topic_segment_bytes < 14:
        raise ValueError("offsets.topic.segment.bytes must be at least 14")
    if config.index_interval_bytes < 0:
        raise ValueError(f"index.interval.bytes={config.index_interval_bytes}: must be >= 0")
    for name, value in (("flush.messages", config.flush_messages),
                        ("flush.ms", config.flush_ms),
                        ("log.flush.scheduler.interval.ms", config.flush_scheduler_interval_ms)):
        if value < 1 and not (name == "flush.ms" and value == 0):
            raise ValueError(f"{name}={value}: must be at least 1")
    for name, value in (("max.message.bytes", config.max_message_bytes),
                        ("message.timestamp.before.max.ms", config.message_timestamp_before_max_ms),
                        ("message.timestamp.after.max.ms", config.message_timestamp_after_max_ms)):
        if value < 0:
            raise ValueError(f"{name}={value}: must be >= 0")
    if config.delete_retention_ms < 0:
        raise ValueError(f"delete.retention.ms={config.delete_retention_ms}: must be >= 0")
