"""Where TopicCatalog keeps topics and finds partition logs: the data directory of a single
node (LocalTopics, here) or a cluster's PostgreSQL store (cluster/topic_store.ClusterTopics).

TopicCatalog holds the names, counts and settings every request reads, in memory, and writes
each change through one of these engines first; the engine decides where a change lives and
which partition logs this broker serves. Composition rather than a subclass: the catalogue's
checks (names, collisions, settings) are the same for both, only the storage differs.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from kgroups.broker.cluster.leadership import BrokerEndpoint, Leader
from kgroups.broker.topic_configs import TopicConfigStore
from kgroups.log.manager import LogManager
from kgroups.storage.log_seam import PartitionLogSeam


@dataclass(frozen=True)
class NotLeaderHint:
    """A partition that exists but is led by another broker (or by none right now): what
    NOT_LEADER_OR_FOLLOWER answers name as its leader (KIP-951)."""

    leader: Leader | None
    endpoint: BrokerEndpoint | None


class TopicStorage(Protocol):
    def load(self) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
        """Every topic's partition count and every topic's own settings, as stored now."""

    def save_overrides(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Replace the topic's own settings (none: back to the broker's)."""

    def log(self, topic: str, partition: int) -> PartitionLogSeam | None:
        """The log of an existing partition that this broker serves, else None; an OSError
        when it cannot be opened."""

    def create(self, topic: str, partitions: int, configs: Mapping[str, str]) -> bool:
        """Create the topic's partitions with its own settings (all or none; OSError); False
        if another broker created a topic of that name first."""

    def add_partitions(self, topic: str, current: int, total: int) -> None: ...

    def delete(self, topic: str) -> None:
        """Remove the topic with its records and settings."""

    def topic_id(self, topic: str) -> uuid.UUID | None: ...

    def advance_log_starts(self, targets: Mapping[tuple[str, int], int]
                           ) -> set[tuple[str, int]]:
        """DeleteRecords: move the starts; the partitions this broker no longer leads (an
        OSError when the change could not be made durable)."""

    def open_logs(self, topic: str, count: int) -> Iterator[PartitionLogSeam]:
        """The topic's logs open here (they take new settings at once)."""

    def elsewhere(self, topic: str, partition: int) -> NotLeaderHint | None:
        """For an existing partition `log` gave no log for: who leads it instead."""

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        """The leader epoch this broker leads the partition at; None where epochs are not
        kept (a single node)."""


class LocalTopics:
    """A single node's topics: partition directories under the data directory (the single
    record of a topic) and `__topic_configs` files for the settings."""

    def __init__(self, logs: LogManager) -> None:
        self._logs = logs
        self._configs = TopicConfigStore(logs.data_dir)

    def load(self) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
        counts = dict(sorted(Counter(topic for topic, _ in self._logs.partitions()).items()))
        return counts, self._configs.load_all()

    def save_overrides(self, topic: str, overrides: Mapping[str, str]) -> None:
        if overrides:
            self._configs.save(topic, overrides)
        else:
            self._configs.remove(topic)

    def log(self, topic: str, partition: int) -> PartitionLogSeam | None:
        return self._logs.get(topic, partition)

    def create(self, topic: str, partitions: int, configs: Mapping[str, str]) -> bool:
        """The settings file first (a leftover of a deleted topic must not stick), then the
        partition directories; a failure removes the settings again."""
        self.save_overrides(topic, configs)
        try:
            self._open_partitions(topic, 0, partitions)
        except OSError:
            self._configs.remove(topic)
            raise
        return True

    def add_partitions(self, topic: str, current: int, total: int) -> None:
        self._open_partitions(topic, current, total)

    def _open_partitions(self, topic: str, first: int, end: int) -> None:
        """Create partitions first..end-1, all or none: those made before one that fails are
        deleted again, or a restart would find them on disk and count them in."""
        try:
            for partition in range(first, end):
                self._logs.get_or_create(topic, partition)
        except OSError:
            self._logs.delete_partitions(topic, range(first, end))
            raise

    def delete(self, topic: str) -> None:
        self._logs.delete_topic(topic)
        self._configs.remove(topic)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self._logs.topic_id(topic)

    def advance_log_starts(self, targets: Mapping[tuple[str, int], int]
                           ) -> set[tuple[str, int]]:
        self._logs.advance_log_starts(targets)
        return set()

    def open_logs(self, topic: str, count: int) -> Iterator[PartitionLogSeam]:
        for partition in range(count):
            try:
                log = self._logs.get(topic, partition)
            except OSError:  # offline: it gets the new settings when it opens again
                continue
            if log is not None:
                yield log

    def elsewhere(self, topic: str, partition: int) -> NotLeaderHint | None:
        """Never: a single node leads every partition."""
        return None

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        return None
