"""Which topics exist and how many partitions each has, with their settings and logs.

On a single node the partition directories are the single record of a topic, so a restart (or
a kill -9) can never leave a topic catalogue and the data disagreeing: there is no second file
to go stale. In a cluster the record is the PostgreSQL store's topics tables, shared by every
broker (topic_storage.py names both engines). Either way the counts are read once at start and
then kept in memory, because Metadata asks for them on every request; topics must therefore be
created and deleted through this catalogue, and a cluster's catalogue re-reads the store when
another broker changed it (`catalog_changed`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping

from kgroups.broker.cluster.leadership import LeadershipView
from kgroups.broker.cluster.topic_store import ClusterTopics
from kgroups.broker.topic_configs import TOPIC_CONFIG_FIELDS, TOPIC_SETTINGS, topic_log_config
from kgroups.broker.topic_storage import LocalTopics, NotLeaderHint, TopicStorage
from kgroups.errors import ErrorCode
from kgroups.log.compaction import CompactionResult
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager
from kgroups.storage.log_seam import PartitionLogSeam
from kgroups.storage.postgresql import Lease, PostgresStore

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC})
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: str | None) -> str | None:
    """Kafka's rules (org.apache.kafka.common.internals.Topic.validate); None when legal."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (f"Topic name is invalid: the length of '{name}' is longer than the max allowed "
                f"length {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_', '-'"
    return None


class TopicCatalog:
    """Create, list and delete topics, and find their partitions' logs, on a storage engine:
    the data directory (`TopicCatalog(logs)`) or a cluster's store (`TopicCatalog.on_store`).
    The LogManager holds the log settings of both (broker-wide and per topic)."""

    def __init__(self, logs: LogManager, cluster: ClusterTopics | None = None) -> None:
        self._logs = logs
        self._cluster = cluster
        self._storage: TopicStorage = cluster if cluster is not None else LocalTopics(logs)
        self._counts: dict[str, int] = {}
        self._overrides: dict[str, dict[str, str]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._reload()

    @classmethod
    def on_store(cls, logs: LogManager, store: PostgresStore,
                 leadership: LeadershipView) -> TopicCatalog:
        """A cluster broker's catalogue: topics, ids and settings from the store (`store` is
        used on the event loop's thread only); partition logs only for the leases
        `leadership_gained` hands it; the leaders of the others from `leadership`."""
        return cls(logs, cluster=ClusterTopics(store, leadership, logs.config_for))

    def _reload(self) -> bool:
        """Read counts and settings from the storage; whether the set of topics or a count
        changed."""
        counts, overrides = self._storage.load()
        for topic in set(self._overrides) | set(overrides):
            if self._overrides.get(topic) != overrides.get(topic):
                log_config = topic_log_config(self._logs.config.for_topic(topic),
                                              overrides.get(topic, {}))
                self._logs.set_topic_config(topic, log_config)
                self._apply_to_open(topic, log_config)
        self._overrides = overrides
        changed = counts != self._counts
        self._counts = dict(sorted(counts.items()))
        return changed

    def catalog_changed(self) -> None:
        """Another broker may have changed topics or their settings (the store's catalog
        version moved): read them again, tell the listeners if topics or counts changed, and
        drop the logs of deleted topics. Call on the event loop's thread."""
        changed = self._reload()
        if self._cluster is not None:
            self._cluster.forget_missing(self._counts)
        if changed:
            self._changed()

    def leadership_gained(self, lease: Lease) -> None:
        """This broker now leads the lease's partition: `log` serves it from now on (its
        appends fenced by the lease's epoch). A partition of a topic not read yet makes the
        catalogue read the store first."""
        cluster = self._cluster_engine()
        count = self._counts.get(lease.topic)
        if count is None or lease.partition >= count:
            self.catalog_changed()
        cluster.gain(lease)

    def leadership_lost(self, topic: str, partition: int) -> None:
        """This broker no longer leads the partition: `log` gives None for it from now on."""
        self._cluster_engine().lose(topic, partition)

    def clean_led_partitions(self, now_ms: int) -> list[tuple[str, int, int, CompactionResult]]:
        """A cluster broker's retention and compaction of the partitions it leads
        (ClusterTopics.clean); nothing on a single node, whose LogManager is cleaned."""
        return [] if self._cluster is None else self._cluster.clean(now_ms)

    def _cluster_engine(self) -> ClusterTopics:
        if self._cluster is None:
            raise RuntimeError("leadership changes only reach a cluster broker's catalogue")
        return self._cluster

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` now and after every topic created, grown or deleted (the group
        coordinator follows the topics its consumer groups subscribe to)."""
        self._listeners.append(listener)
        listener()

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    def partition_counts(self) -> dict[str, int]:
        """Topic -> partition count, in name order (a copy: callers may keep it)."""
        return dict(self._counts)

    def partition_count(self, topic: str) -> int | None:
        return self._counts.get(topic)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id (None when there is no such topic)."""
        return self._storage.topic_id(topic) if topic in self._counts else None

    def config_entries(self, topic: str) -> list[tuple[str, str | None, bool]]:
        """(name, value, set on the topic?) for every topic-level setting, as DescribeConfigs
        and CreateTopics report them; the value is None for a setting kgroups keeps without
        acting on it that the topic does not set (the broker's settings decide it). A value
        the topic gets from kgroups itself rather than the broker's settings
        (`__consumer_offsets` is compacted) counts as set on the topic, as Kafka creates that
        topic with those settings."""
        overrides = self._overrides.get(topic, {})
        effective = self._logs.config_for(topic)
        entries: list[tuple[str, str | None, bool]] = []
        for name in sorted(TOPIC_SETTINGS):
            field = TOPIC_CONFIG_FIELDS.get(name)
            if field is None:
                entries.append((name, overrides.get(name), name in overrides))
                continue
            value = getattr(effective, field)
            own = name in overrides or value != getattr(self._logs.config, field)
            entries.append((name, str(value), own))
        return entries

    def collision(self, topic: str) -> str | None:
        """An existing topic whose name differs from `topic` only by '.' against '_', which
        Kafka refuses: both would name the same metric."""
        if topic in self._counts:
            return None
        folded = topic.replace(".", "_")
        return next((name for name in self._counts if name.replace(".", "_") == folded), None)

    def log(self, topic: str, partition: int) -> PartitionLogSeam | None:
        """The partition's log, or None unless the topic exists, has that partition and this
        broker serves it (`elsewhere` tells the two apart). Data requests go through here, so
        a client-chosen name (say `x/../other`) never reaches the file system."""
        count = self._counts.get(topic)
        if count is None or not 0 <= partition < count:
            return None
        return self._storage.log(topic, partition)

    def elsewhere(self, topic: str, partition: int) -> NotLeaderHint | None:
        """For a partition `log` gave None for: who leads it, when it exists but another
        broker (or none, for now) leads it; None when there is no such partition."""
        count = self._counts.get(topic)
        if count is None or not 0 <= partition < count:
            return None
        return self._storage.elsewhere(topic, partition)

    def unserved_error(self, topic: str, partition: int) -> ErrorCode:
        """What a data request is answered for a partition `log` gave None for:
        NOT_LEADER_OR_FOLLOWER when it exists but is led elsewhere (or by none, for now),
        UNKNOWN_TOPIC_OR_PARTITION when there is no such partition."""
        return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if self.elsewhere(topic, partition) is None
                else ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        """The epoch this broker leads the partition at (None on a single node, which keeps
        no epochs: its answers carry -1, and requests' epochs go unchecked)."""
        return self._storage.leader_epoch(topic, partition)

    def advance_log_starts(self, targets: Mapping[tuple[str, int], int]
                           ) -> set[tuple[str, int]]:
        """DeleteRecords: move the log starts of led partitions up to their targets (the
        caller checked each is within its log), durably before returning; the partitions
        found led elsewhere meanwhile (nothing moved there). OSError: not durable."""
        return self._storage.advance_log_starts(targets)

    def create(
        self, topic: str, num_partitions: int, configs: Mapping[str, str] | None = None
    ) -> ErrorCode:
        """Create every partition's log (with the topic's own log settings, if any); the error
        Kafka's CreateTopics would give otherwise. Bad settings raise TopicConfigError; a
        partition that cannot be created (OSError) undoes the others and raises."""
        if topic_name_error(topic) is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if num_partitions < 1:
            return ErrorCode.INVALID_PARTITIONS
        if self.partition_count(topic) is not None:
            return ErrorCode.TOPIC_ALREADY_EXISTS
        if self.collision(topic) is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if configs:
            log_config = topic_log_config(self._logs.config, configs)
            self._overrides[topic] = dict(configs)
            self._logs.set_topic_config(topic, log_config)
        else:
            self._reset_config(topic)
        try:
            created = self._storage.create(topic, num_partitions, dict(configs or {}))
        except OSError:
            self._reset_config(topic)
            raise
        if not created:  # another broker's, not read yet
            self._reset_config(topic)
            self.catalog_changed()
            return ErrorCode.TOPIC_ALREADY_EXISTS
        self._counts = dict(sorted({**self._counts, topic: num_partitions}.items()))
        self._changed()
        return ErrorCode.NONE

    def overrides(self, topic: str) -> dict[str, str]:
        """The settings given to the topic itself (a copy)."""
        return dict(self._overrides.get(topic, {}))

    def set_overrides(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Replace the topic's own settings (IncrementalAlterConfigs): written durably first,
        then applied to its open partitions and to those opened later. Bad settings raise
        TopicConfigError and change nothing."""
        log_config = topic_log_config(self._logs.config.for_topic(topic), overrides)
        self._storage.save_overrides(topic, overrides)
        if overrides:
            self._overrides[topic] = dict(overrides)
            self._logs.set_topic_config(topic, log_config)
        else:
            self._reset_config(topic)
        self._apply_to_open(topic, log_config)

    def rebase(self, base: LogConfig) -> None:
        """New broker-wide log settings (a dynamic broker config changed): every topic's
        settings are rebuilt on them, its own overrides on top, open partitions included."""
        self._logs.config = base
        for topic in self._counts:
            log_config = topic_log_config(base.for_topic(topic), self._overrides.get(topic, {}))
            self._logs.set_topic_config(topic, log_config)
            self._apply_to_open(topic, log_config)

    def _apply_to_open(self, topic: str, log_config: LogConfig) -> None:
        for log in self._storage.open_logs(topic, self._counts.get(topic, 0)):
            log.config = log_config

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow an existing topic to `total` partitions (the caller checked it is an increase);
        the new partitions start empty, as in Kafka. An OSError adds none."""
        current = self._counts[topic]
        self._storage.add_partitions(topic, current, total)
        self._counts = dict(sorted({**self._counts, topic: total}.items()))
        self._changed()

    def _reset_config(self, topic: str) -> None:
        """Back to the broker-wide settings, in memory (a leftover of a deleted topic must
        not stick)."""
        self._overrides.pop(topic, None)
        self._logs.set_topic_config(topic, self._logs.config.for_topic(topic))

    def delete(self, topic: str) -> ErrorCode:
        if self.partition_count(topic) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        self._storage.delete(topic)
        self._reset_config(topic)
        del self._counts[topic]
        self._changed()
        return ErrorCode.NONE
