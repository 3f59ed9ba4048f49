"""Per-topic log settings given at CreateTopics (`cleanup.policy=compact`, `retention.ms`, ...).

They are kept in `<data dir>/__topic_configs/<topic>.properties` (a directory name the log never
takes for a partition) and handed to the LogManager before a partition opens, so a compacted
topic stays compacted after a restart. Settings kgroups cannot honour are refused with
INVALID_CONFIG rather than accepted and ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from kgroups.broker.config import parse_properties
from kgroups.log.config import LogConfig

CONFIG_DIRECTORY = "__topic_configs"

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
}


class TopicConfigError(ValueError):
    """A topic setting kgroups does not support, or a bad value; the message names the key."""


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
    """Reads and writes the per-topic settings files."""

    def __init__(self, data_dir: Path) -> None:
        self._directory = data_dir / CONFIG_DIRECTORY

    def _path(self, topic: str) -> Path:
        return self._directory / f"{topic}.properties"

    def load_all(self) -> dict[str, dict[str, str]]:
        if not self._directory.is_dir():
            return {}
        return {
            path.name.removesuffix(".properties"): parse_properties(
                path.read_text(encoding="utf-8"), str(path))
            for path in sorted(self._directory.glob("*.properties"))
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
