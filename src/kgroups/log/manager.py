"""Every partition log under one data directory, named `<topic>-<partition>` as Kafka names them.

The log start offsets DeleteRecords moved are kept in the data directory's
`log-start-offset-checkpoint`, Kafka's file (see start_offsets.py): written before a new start
is applied, read when a partition opens.

A partition whose log cannot be opened (a damaged older segment, an I/O error) is kept offline:
asking for it raises PartitionOfflineError, Kafka's KAFKA_STORAGE_ERROR, instead of retrying
the open on every request; the cause is logged once. Its files are left untouched for an
operator to look at; restarting the broker tries again. Running out of file descriptors
(EMFILE, ENFILE) is not the log's fault: that open fails (KAFKA_STORAGE_ERROR too) and the next
use tries again.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from kgroups.log.batch import BatchCorruptError
from kgroups.log.config import OFFSETS_TOPIC, LogConfig
from kgroups.log.partition_log import PartitionLog
from kgroups.log.start_offsets import read_log_start_offsets, write_log_start_offsets
from kgroups.log.topic_ids import new_topic_id, read_partition_metadata, write_partition_metadata

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
# Directories a Kafka log dir holds that are not topic partitions: KRaft's metadata log (a copy
# of a Kafka broker's log dir must serve its topics, not the controller's Raft log).
NOT_TOPICS = frozenset({"__cluster_metadata"})
OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})

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
        # What the log-start-offset checkpoint holds (a bad file stops the broker here, naming
        # file and line: starting without it would bring deleted records back).
        self._checkpointed = read_log_start_offsets(self.data_dir)

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

    def advance_log_starts(self, targets: Mapping[tuple[str, int], int]) -> None:
        """Move open partitions' log start offsets up to their targets (DeleteRecords; the
        caller checked each is within its log). The checkpoint is written first, so a start a
        client is told about survives a crash, and an OSError writing it changes nothing;
        then the segments left wholly below are deleted (or, failing that, by the next
        retention check)."""
        planned = self._checkpoint_entries()
        moved = [(key, offset) for key, offset in targets.items()
                 if offset > self._logs[key].log_start_offset]
        if not moved:
            return
        planned.update(moved)
        write_log_start_offsets(self.data_dir, planned)
        self._checkpointed = planned
        for key, offset in moved:
            log = self._logs[key]
            log.advance_log_start(offset)
            try:
                log.drop_segments_below_start()
            except OSError as exc:
                logger.error("deleting segments of %s-%d below its log start offset %d failed "
                             "(%s): retention tries again", key[0], key[1], offset, exc)

    def _checkpoint_entries(self) -> dict[tuple[str, int], int]:
        """The starts the checkpoint must hold: each open log's where it lies above its first
        segment, and what the file said of the partitions not opened since."""
        entries = {key: start for key, start in self._checkpointed.items()
                   if key not in self._logs}
        for key, log in self._logs.items():
            if log.log_start_offset > log.segments()[0].base_offset:
                entries[key] = log.log_start_offset
        return entries

    def delete_topic(self, topic: str) -> None:
        self._topic_ids.pop(topic, None)
        if any(name == topic for name, _ in self._checkpointed):
            # A topic created later under this name must not inherit the deleted one's start.
            kept = {key: start for key, start in self._checkpoint_entries().items()
                    if key[0] != topic}
            try:
                write_log_start_offsets(self.data_dir, kept)
                self._checkpointed = kept
            except OSError as exc:
                logger.error("could not remove %s from the log start offset checkpoint (%s)",
                             topic, exc)
        self.delete_partitions(topic, [p for name, p in self.partitions() if name == topic])

    def delete_partitions(self, topic: str, partitions: Iterable[int]) -> None:
        """Close and remove these partitions of `topic` (a creation undone half-way)."""
        for partition in partitions:
            self._offline.pop((topic, partition), None)
            log = self._logs.pop((topic, partition), None)
            if log is not None:
                log.close()
            shutil.rmtree(self._directory(topic, partition), ignore_errors=True)

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
                                    check_older_segments=topic != OFFSETS_TOPIC,
                                    log_start_offset=self._checkpointed.get((topic, partition), 0))
        except OSError as exc:
            if exc.errno not in OUT_OF_DESCRIPTORS:
                raise self._offline_for_good(topic, partition, exc) from exc
            # Nothing is wrong with the log: it opens at a later use, once descriptors are free.
            logger.warning("partition %s-%d cannot be opened now: %s", topic, partition, exc)
            raise PartitionOfflineError(topic, partition, exc) from exc
        except BatchCorruptError as exc:
            raise self._offline_for_good(topic, partition, exc) from exc
        self._logs[(topic, partition)] = log
        known = self._topic_ids.get(topic)
        if known is not None and read_partition_metadata(log.directory) is None:
            write_partition_metadata(log.directory, known)  # a partition added to a known topic
        return log

    def _offline_for_good(self, topic: str, partition: int,
                          exc: Exception) -> PartitionOfflineError:
        """Keep the partition offline until a restart (the module says why)."""
        offline = PartitionOfflineError(topic, partition, exc)
        self._offline[(topic, partition)] = offline
        logger.error("partition %s-%d is offline: %s", topic, partition, exc)
        return offline
