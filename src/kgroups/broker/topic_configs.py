"""Per-topic log settings given at CreateTopics (`cleanup.policy=compact`, `retention.ms`, ...).

They are kept in `<data dir>/__topic_configs/<topic>.cfg` (a directory name the log never
takes for a partition; `.cfg` rather than `.properties` so that a topic name of Kafka's
longest, 249 characters, still makes a file name within the 255 bytes file systems allow)
and handed to the LogManager before a partition opens, so a compacted topic stays compacted
after a restart. Every setting Kafka 4.3.1 defines is taken, with Kafka's checks and messages
(`TOPIC_SETTINGS` holds each one's type, range, default and broker-level synonyms); those in
`TOPIC_CONFIG_FIELDS` act on the log and on Produce, the others change nothing a single node
without tiered storage does (docs/compatibility.md) and are kept and described as Kafka
describes them.

IncrementalAlterConfigs changes them with Kafka's operations (SET, DELETE, APPEND and SUBTRACT
on list settings).
"""

from __future__ import annotations

import os
import re
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

# Kafka's topic-level names -> the LogConfig field each sets (what kgroups honours; every
# other topic setting is kept and described, and changes nothing a single node does).
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
    "max.message.bytes": "max_message_bytes",
    "compression.type": "compression_type",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
}
_THROTTLED_REPLICAS = re.compile(r"^\d+:\d+$")
_NUMBER_TYPES = {"INT": 2**31, "LONG": 2**63}


@dataclass(frozen=True, slots=True)
class TopicSetting:
    """Kafka's definition of one topic setting (LogConfig's ConfigDef in Kafka 4.3.1)."""

    type: str  # INT, LONG, DOUBLE, BOOLEAN, STRING or LIST
    broker_synonyms: tuple[str, ...]  # the broker settings it defaults to, in Kafka's order
    default: str  # Kafka's default (APPEND/SUBTRACT start from it; described when unset)
    minimum: float | None = None
    maximum: float | None = None
    or_minus_one: bool = False  # Kafka's "[1,...,9] or -1"
    choices: tuple[str, ...] = ()
    replica_list: bool = False  # "*" or partition:broker pairs (the throttled-replica lists)

    def check(self, name: str, raw: str) -> str | None:
        """Kafka's message for a value its ConfigDef refuses, None for a valid one."""
        text = raw.strip()
        prefix = f"Invalid value {raw} for configuration {name}: "
        if self.type in _NUMBER_TYPES or self.type == "DOUBLE":
            return self._check_number(name, raw, text)
        if self.type == "BOOLEAN":
            if text.lower() not in ("true", "false"):
                return prefix + "Expected value to be either true or false"
            return None
        values = [v.strip() for v in text.split(",")] if self.type == "LIST" else [text]
        if self.replica_list and text != "*" and not all(
                _THROTTLED_REPLICAS.match(v) for v in values if v):
            return (f"Invalid value [{', '.join(values)}] for configuration {name}: {name} "
                    "must be the literal '*' or a list of replicas in the following format: "
                    "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
        wrong = [v for v in values if self.choices and v not in self.choices]
        if wrong:
            return f"Invalid value {wrong[0]} for configuration {name}: String must be one " \
                   f"of: {', '.join(self.choices)}"
        return None

    def _check_number(self, name: str, raw: str, text: str) -> str | None:
        number: float
        try:
            number = float(text) if self.type == "DOUBLE" else int(text)
        except ValueError:
            return f"Invalid value {raw} for configuration {name}: Not a number of type " \
                   f"{self.type}"
        bound = _NUMBER_TYPES.get(self.type)
        if bound is not None and not -bound <= number < bound:
            return f"Invalid value {raw} for configuration {name}: Not a number of type " \
                   f"{self.type}"
        prefix = f"Invalid value {number} for configuration {name}: "
        low, high = self.minimum, self.maximum
        if self.or_minus_one:
            if number != -1 and not (low or 0) <= number <= (high or 0):
                return prefix + f"Value must be between {_plain(low)} and {_plain(high)} or " \
                                "equal to -1"
            return None
        if low is not None and number < low:
            return prefix + f"Value must be at least {_plain(low)}"
        if high is not None and number > high:
            return prefix + f"Value must be no more than {_plain(high)}"
        return None


def _plain(number: float | None) -> str:
    return str(int(number)) if number is not None and number == int(number) else str(number)


_LONG_MAX = str(2**63 - 1)
TOPIC_SETTINGS: Mapping[str, TopicSetting] = {
    "cleanup.policy": TopicSetting("LIST", ("log.cleanup.policy",), "delete",
                                   choices=("compact", "delete")),
    "compression.gzip.level": TopicSetting("INT", ("compression.gzip.level",), "-1", 1, 9,
                                           or_minus_one=True),
    "compression.lz4.level": TopicSetting("INT", ("compression.lz4.level",), "9", 1, 17),
    "compression.type": TopicSetting(
        "STRING", ("compression.type",), "producer",
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    "compression.zstd.level": TopicSetting("INT", ("compression.zstd.level",), "3", -131072, 22),
    "delete.retention.ms": TopicSetting("LONG", ("log.cleaner.delete.retention.ms",),
                                        "86400000", 0),
    "file.delete.delay.ms": TopicSetting("LONG", ("log.segment.delete.delay.ms",), "60000", 0),
    "flush.messages": TopicSetting("LONG", ("log.flush.interval.messages",), _LONG_MAX, 1),
    "flush.ms": TopicSetting(
        "LONG", ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"), _LONG_MAX, 0),
    "follower.replication.throttled.replicas": TopicSetting("LIST", (), "", replica_list=True),
    "index.interval.bytes": TopicSetting("INT", ("log.index.interval.bytes",), "4096", 0),
    "leader.replication.throttled.replicas": TopicSetting("LIST", (), "", replica_list=True),
    "local.retention.bytes": TopicSetting("LONG", ("log.local.retention.bytes",), "-2", -2),
    "local.retention.ms": TopicSetting("LONG", ("log.local.retention.ms",), "-2", -2),
    "max.compaction.lag.ms": TopicSetting("LONG", ("log.cleaner.max.compaction.lag.ms",),
                                          _LONG_MAX, 1),
    "max.message.bytes": TopicSetting("INT", ("message.max.bytes",), "1048588", 0),
    "message.timestamp.after.max.ms": TopicSetting(
        "LONG", ("log.message.timestamp.after.max.ms",), "3600000", 0),
    "message.timestamp.before.max.ms": TopicSetting(
        "LONG", ("log.message.timestamp.before.max.ms",), _LONG_MAX, 0),
    "message.timestamp.type": TopicSetting("STRING", ("log.message.timestamp.type",),
                                           "CreateTime", choices=("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": TopicSetting("DOUBLE", ("log.cleaner.min.cleanable.ratio",),
                                              "0.5", 0, 1),
    "min.compaction.lag.ms": TopicSetting("LONG", ("log.cleaner.min.compaction.lag.ms",), "0", 0),
    "min.insync.replicas": TopicSetting("INT", ("min.insync.replicas",), "1", 1),
    "preallocate": TopicSetting("BOOLEAN", ("log.preallocate",), "false"),
    "remote.log.copy.disable": TopicSetting("BOOLEAN", (), "false"),
    "remote.log.delete.on.disable": TopicSetting("BOOLEAN", (), "false"),
    "remote.storage.enable": TopicSetting("BOOLEAN", (), "false"),
    "retention.bytes": TopicSetting("LONG", ("log.retention.bytes",), "-1"),
    "retention.ms": TopicSetting(
        "LONG", ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        "604800000", -1),
    "segment.bytes": TopicSetting("INT", ("log.segment.bytes",), "1073741824", 1024 * 1024),
    "segment.index.bytes": TopicSetting("INT", ("log.index.size.max.bytes",), "10485760", 4),
    "segment.jitter.ms": TopicSetting("LONG", ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                                      "0", 0),
    "segment.ms": TopicSetting("LONG", ("log.roll.ms", "log.roll.hours"), "604800000", 1),
    "unclean.leader.election.enable": TopicSetting(
        "BOOLEAN", ("unclean.leader.election.enable",), "false"),
}
# Kafka refuses this one while tiered storage is off, as it always is on a kgroups node.
_TIERED_STORAGE_OFF = ("Tiered Storage functionality is disabled in the broker. Topic cannot be "
                       "configured with remote log storage.")

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
    "compression.type": "producer",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "message.max.bytes": "1048588",
    "min.insync.replicas": "1",
    "log.local.retention.ms": "-2",
    "log.local.retention.bytes": "-2",
    "log.cleaner.max.compaction.lag.ms": "9223372036854775807",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.segment.delete.delay.ms": "60000",
    "log.message.timestamp.after.max.ms": "3600000",
    "log.message.timestamp.before.max.ms": "9223372036854775807",
    "log.preallocate": "false",
    "log.index.size.max.bytes": "10485760",
    "unclean.leader.election.enable": "false",
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


def merged_list(start: str | None, change: ConfigChange) -> str:
    """A LIST setting after an APPEND (items not yet there, at the end) or a SUBTRACT (items
    removed): topic and broker configs take the same two operations."""
    parts = [part for part in (start or "").split(",") if part]
    for item in str(change.value).split(","):
        if change.operation == APPEND and item not in parts:
            parts.append(item)
        elif change.operation == SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)


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
            value = merged_list(result.get(change.name, setting.default), change)
        result[change.name] = value
    for name, value in result.items():
        _check_setting(name, value)
    return result


def _check_setting(name: str, value: str) -> None:
    setting = TOPIC_SETTINGS.get(name)
    if setting is None:
        raise TopicConfigError(f"Unknown topic config name: {name}")
    problem = setting.check(name, value)
    if problem is not None:
        raise TopicConfigError(problem)
    if name == "remote.storage.enable" and value.strip().lower() == "true":
        raise TopicConfigError(_TIERED_STORAGE_OFF)


def topic_log_config(base: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """The broker-wide config with the topic's own settings on top, each checked as Kafka
    checks it (TopicConfigError names the first refused)."""
    changes = {}
    for key, value in overrides.items():
        _check_setting(key, value)
        field = TOPIC_CONFIG_FIELDS.get(key)
        if field is None:
            continue
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
