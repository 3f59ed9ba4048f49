"""Every partition log under one data directory, named `<topic>-<partition>` as Kafka names them.

A partition whose log cannot be opened (a damaged older segment, an I/O error) is kept offline:
asking for it raises PartitionOfflineError, Kafka's KAFKA_STORAGE_ERROR, instead of retrying
the open on every request; the cause is logged once. Its files are left untouched for an
operator to look at; restarting the broker tries again.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from pathlib import Path

from kgroups.log.batch import BatchCorruptError
from kgroups.log.config import OFFSETS_TOPIC, LogConfig
from kgroups.log.partition_log import PartitionLog
from kgroups.log.topic_ids import new_topic_id, read_partition_metadata, write_partition_metadata

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
# Directories a Kafka log dir holds that are not topic partitions: KRaft's metadata log (a copy
# of a Kafka broker's log dir must serve its topics, not the controller's Raft log).
NOT_TOPICS = frozenset({"__cluster_metadata"})

logger = logging.getLogger(__name__)


class PartitionOfflineError(OSError):
    """The partition's log could not be opened; `cause` says why (file and byte if damaged)."""

    def __init__(self, topic: str, partition: int, cause: Exception) -> None:
        super().__init__(f"{topic}-{partition} is offline: {cause}")
        self.cause = cause


class LogManager:
    """Opens partition logs on first use and keeps them open; each topic gets its config from
    `LogConfig.for_topic` (so __consumer_offsets is compacted) unless overridden. The older
    segments of __consumer_offsets are not walked on open: the coordinator's load that follows
    checks every batch of them, CRC included."""

    def __init__(
        self,
        data_dir: Path,
        config: LogConfig,
        topic_configs: dict[str, LogConfig] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self._topic_configs = dict(topic_configs or {})
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._offline: dict[tuple[str, int], PartitionOfflineError] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic) or self.config.for_topic(topic)

    def set_topic_config(self, topic: str, config: LogConfig) -> None:
        """Use `config` for partitions of `topic` opened from now on."""
        self._topic_configs[topic] = config

    def partitions(self) -> list[tuple[str, int]]:
        """Every partition with a directory on disk or an open log, sorted. The directory's
        entry types come with the listing (no stat per entry): creating a topic asks for them,
        and a stat per partition made creating a thousand topics quadratic in system calls."""
        found = set(self._logs)
        with os.scandir(self.data_dir) as entries:
            for entry in entries:
                match = _PARTITION_DIR.match(entry.name)
                if match and entry.is_dir() and match.group(1) not in NOT_TOPICS:
                    found.add((match.group(1), int(match.group(2))))
        return sorted(found)

    def open_logs(self) -> list[PartitionLog]:
        """The logs opened so far (only they can hold unflushed appends)."""
        return list(self._logs.values())

    def offline(self) -> dict[tuple[str, int], PartitionOfflineError]:
        """Partitions that could not be opened, with why."""
        return dict(self._offline)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log if it exists (opening it from disk if needed), else None;
        raises PartitionOfflineError if it exists but cannot be opened."""
        log = self._logs.get((topic, partition))
        if log is None and self._directory(topic, partition).is_dir():
            log = self._open(topic, partition)
        return log

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        return self._logs.get((topic, partition)) or self._open(topic, partition)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's stable id (None when it has no partition): read from the first
        partition.metadata found, or created and written into every partition directory of
        the topic when none has one yet (a topic made before kgroups kept ids)."""
        known = self._topic_ids.get(topic)
        if known is not None:
            return known
        directories = [self._directory(name, p) for name, p in self.partitions() if name == topic]
        directories = [d for d in directories if d.is_dir()]
        if not directories:
            return None
        found = next((i for i in map(read_partition_metadata, directories) if i is not None), None)
        topic_id = found or new_topic_id()
        for directory in directories:
            if read_partition_metadata(directory) != topic_id:
                write_partition_metadata(directory, topic_id)
        self._topic_ids[topic] = topic_id
        return topic_id

    def delete_topic(self, topic: str) -> None:
        self._topic_ids.pop(topic, None)
        for name, partition in self.partitions():
            if name != topic:
                continue
            self._offline.pop((name, partition), None)
            log = self._logs.pop((name, partition), None)
            if log is not None:
                log.close()
            shutil.rmtree(self._directory(name, partition), ignore_errors=True)

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    def _directory(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _open(self, topic: str, partition: int) -> PartitionLog:
        if partition < 0:
            raise ValueError(f"partition must be >= 0, not {partition}")
        if not topic or "/" in topic or topic in (".", ".."):
            raise ValueError(f"{topic!r} is not a usable topic name")
        offline = self._offline.get((topic, partition))
        if offline is not None:
            raise offline
        try:
            log = PartitionLog.open(self._directory(topic, partition), self.config_for(topic),
                                    check_older_segments=topic != OFFSETS_TOPIC)
        except (BatchCorruptError, OSError) as exc:
            offline = PartitionOfflineError(topic, partition, exc)
            self._offline[(topic, partition)] = offline
            logger.error("partition %s-%d is offline: %s", topic, partition, exc)
            raise offline from exc
        self._logs[(topic, partition)] = log
        known = self._topic_ids.get(topic)
        if known is not None and read_partition_metadata(log.directory) is None:
            write_partition_metadata(log.directory, known)  # a partition added to a known topic
        return log
