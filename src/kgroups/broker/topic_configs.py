"""Per-topic log settings given at CreateTopics (`cleanup.policy=compact`, `retention.ms`, ...).

They are kept in `<data dir>/__topic_configs/<topic>.cfg` (a directory name the log never
takes for a partition; `.cfg` rather than `.properties` so that a topic name of Kafka's
longest, 249 characters, still makes a file name within the 255 bytes file systems allow)
and handed to the LogManager before a partition opens, so a compacted topic stays compacted
after a restart. Settings kgroups cannot honour are refused with
INVALID_CONFIG rather than accepted and ignored.

IncrementalAlterConfigs changes them with Kafka's operations (SET, DELETE, APPEND and SUBTRACT
on list settings) and Kafka's checks and messages (`TOPIC_SETTINGS` holds Kafka 4.3.1's type,
range and broker-level synonyms of each setting kgroups honours).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kgroups.broker.config import parse_properties
from kgroups.log.config import LogConfig

CONFIG_DIRECTORY = "__topic_configs"
_SUFFIX = ".cfg"
# Data directories written before kgroups kept topic names of 245-249 characters: their files
# are renamed at the first start that finds them.
_LEGACY_SUFFIX = ".properties"

# Kafka's topic-level names -> the LogConfig field each sets.
TOPIC_CONFIG_FIELDS: Mapping[str, str] = {
    "cleanup.policy": "cleanup_policy",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "segment.bytes": "segment_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "delete.retention.ms": "delete_retention_ms",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "message.timestamp.type": "message_timestamp_type",
}


@dataclass(frozen=True, slots=True)
class TopicSetting:
    """Kafka's definition of one topic setting (LogConfig's ConfigDef in Kafka 4.3.1)."""

    type: str  # INT, LONG, STRING or LIST
    broker_synonyms: tuple[str, ...]  # the broker settings it defaults to, in Kafka's order
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    default: str | None = None  # the ConfigDef default APPEND/SUBTRACT start from

    def check(self, name: str, raw: str) -> str | None:
        """Kafka's message for a value its ConfigDef refuses, None for a valid one."""
        text = raw.strip()
        if self.type in ("INT", "LONG"):
            bound = 2**31 if self.type == "INT" else 2**63
            try:
                number = int(text)
            except ValueError:
                number = bound
            if not -bound <= number < bound:
                return f"Invalid value {raw} for configuration {name}: Not a number of type " \
                       f"{self.type}"
            if self.minimum is not None and number < self.minimum:
                return f"Invalid value {raw} for configuration {name}: Value must be at least " \
                       f"{self.minimum}"
            return None
        values = [v.strip() for v in text.split(",")] if self.type == "LIST" else [text]
        wrong = [v for v in values if self.choices and v not in self.choices]
        if wrong:
            return f"Invalid value {wrong[0]} for configuration {name}: String must be one " \
                   f"of: {', '.join(self.choices)}"
        return None


TOPIC_SETTINGS: Mapping[str, TopicSetting] = {
    "cleanup.policy": TopicSetting("LIST", ("log.cleanup.policy",),
                                   choices=("compact", "delete"), default="delete"),
    "retention.ms": TopicSetting(
        "LONG", ("log.retention.ms", "log.retention.minutes", "log.retention.hours"), -1),
    "retention.bytes": TopicSetting("LONG", ("log.retention.bytes",)),
    "segment.bytes": TopicSetting("INT", ("log.segment.bytes",), 1024 * 1024),
    "index.interval.bytes": TopicSetting("INT", ("log.index.interval.bytes",), 0),
    "delete.retention.ms": TopicSetting("LONG", ("log.cleaner.delete.retention.ms",), 0),
    "flush.messages": TopicSetting("LONG", ("log.flush.interval.messages",), 1),
    "flush.ms": TopicSetting(
        "LONG", ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"), 0),
    "message.timestamp.type": TopicSetting("STRING", ("log.message.timestamp.type",),
                                           choices=("CreateTime", "LogAppendTime")),
}
# The other topic settings Kafka 4.3.1 defines: known to Kafka, not honoured by kgroups.
KAFKA_ONLY_TOPIC_SETTINGS = frozenset({
    "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "file.delete.delay.ms", "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "min.insync.replicas", "preallocate", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "remote.storage.enable", "segment.index.bytes",
    "segment.jitter.ms", "segment.ms", "unclean.leader.election.enable",
})

# Kafka 4.3.1's defaults of those broker synonyms (its ConfigDef defaults; the ones without a
# default, like log.retention.ms, are absent), as DescribeConfigs lists them among synonyms.
KAFKA_BROKER_DEFAULTS: Mapping[str, str] = {
    "log.cleanup.policy": "delete",
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "log.segment.bytes": "1073741824",
    "log.index.interval.bytes": "4096",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.flush.interval.messages": "9223372036854775807",
    "log.flush.scheduler.interval.ms": "9223372036854775807",
    "log.message.timestamp.type": "CreateTime",
}

# IncrementalAlterConfigs' operations (AlterConfigOp.OpType ids).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class ConfigChange:
    name: str
    operation: int
    value: str | None


class TopicConfigError(ValueError):
    """A topic setting kgroups does not support, or a bad value; the message names the key."""


class InvalidRequestError(ValueError):
    """An IncrementalAlterConfigs resource Kafka refuses as a malformed request."""


def _parts(value: str | None) -> list[str]:
    return [part for part in (value or "").split(",") if part]


def check_shape(changes: Sequence[ConfigChange]) -> None:
    """What Kafka's broker refuses before it looks at the resource: a name twice, a null value
    for anything but DELETE, an operation that does not exist."""
    names = [change.name for change in changes]
    if len(set(names)) < len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    null_values = [c.name for c in changes if c.operation != DELETE and c.value is None]
    if null_values:
        raise InvalidRequestError(f"Null value not supported for : {', '.join(null_values)}")
    unknown = [c.operation for c in changes if c.operation not in (SET, DELETE, APPEND, SUBTRACT)]
    if unknown:
        raise InvalidRequestError(f"Unknown alter configs op type {unknown[0]}")


def apply_changes(current: Mapping[str, str],
                  changes: Sequence[ConfigChange]) -> dict[str, str]:
    """The topic's own settings after `changes` (already through `check_shape`), each
    operation and then every resulting value checked as Kafka checks them."""
    result = dict(current)
    for change in changes:
        setting = TOPIC_SETTINGS.get(change.name)
        if change.operation == DELETE:
            result.pop(change.name, None)
            continue
        value = str(change.value)
        if change.operation in (APPEND, SUBTRACT):
            if setting is None or setting.type != "LIST":
                raise TopicConfigError(
                    f"Can't {'APPEND' if change.operation == APPEND else 'SUBTRACT'} to key "
                    f"{change.name} because its type is not LIST.")
            parts = _parts(result.get(change.name, setting.default))
            for item in value.split(","):
                if change.operation == APPEND and item not in parts:
                    parts.append(item)
                elif change.operation == SUBTRACT and item in parts:
                    parts.remove(item)
            value = ",".join(parts)
        result[change.name] = value
    for name, value in result.items():
        _check_setting(name, value)
    return result


def _check_setting(name: str, value: str) -> None:
    setting = TOPIC_SETTINGS.get(name)
    if setting is None:
        if name in KAFKA_ONLY_TOPIC_SETTINGS:
            supported = ", ".join(sorted(TOPIC_SETTINGS))
            raise TopicConfigError(
                f"topic config {name} is not supported by kgroups (supported: {supported})")
        raise TopicConfigError(f"Unknown topic config name: {name}")
    problem = setting.check(name, value)
    if problem is not None:
        raise TopicConfigError(problem)


def topic_log_config(base: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """The broker-wide config with the topic's own settings on top."""
    changes = {}
    for key, value in overrides.items():
        field = TOPIC_CONFIG_FIELDS.get(key)
        if field is None:
            supported = ", ".join(sorted(TOPIC_CONFIG_FIELDS))
            raise TopicConfigError(f"topic config {key} is not supported (supported: {supported})")
        try:
            parsed = LogConfig.from_properties({key: value})
        except ValueError as exc:
            raise TopicConfigError(str(exc)) from exc
        changes[field] = getattr(parsed, field)
    return replace(base, **changes)


class TopicConfigStore:
    """Reads and writes the per-topic settings files (and, in a directory of their own, the
    dynamic broker settings, dynamic_configs.py)."""

    def __init__(self, data_dir: Path, directory: str = CONFIG_DIRECTORY) -> None:
        self._directory = data_dir / directory

    def _path(self, topic: str) -> Path:
        return self._directory / f"{topic}{_SUFFIX}"

    def load_all(self) -> dict[str, dict[str, str]]:
        if not self._directory.is_dir():
            return {}
        for legacy in self._directory.glob(f"*{_LEGACY_SUFFIX}"):
            legacy.replace(self._path(legacy.name.removesuffix(_LEGACY_SUFFIX)))
        return {
            path.name.removesuffix(_SUFFIX): parse_properties(
                path.read_text(encoding="utf-8"), str(path))
            for path in sorted(self._directory.glob(f"*{_SUFFIX}"))
        }

    def save(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Write atomically and durably: the topic must not come back with other settings."""
        self._directory.mkdir(parents=True, exist_ok=True)
        target = self._path(topic)
        scratch = target.with_suffix(".tmp")
        text = "".join(f"{key}={value}\n" for key, value in sorted(overrides.items()))
        with scratch.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        scratch.replace(target)
        directory = os.open(self._directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def remove(self, topic: str) -> None:
        self._path(topic).unlink(missing_ok=True)
