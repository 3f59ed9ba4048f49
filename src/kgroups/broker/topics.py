"""Which topics exist and how many partitions each has, read from the log itself.

The partition directories are the single record of a topic, so a restart (or a kill -9) can
never leave a topic catalogue and the data disagreeing: there is no second file to go stale.
The counts are read from disk once at start and then kept in memory, because Metadata asks for
them on every request; topics must therefore be created and deleted through this catalogue.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping

from kgroups.broker.topic_configs import (
    TOPIC_CONFIG_FIELDS,
    TOPIC_SETTINGS,
    TopicConfigStore,
    topic_log_config,
)
from kgroups.errors import ErrorCode
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager
from kgroups.log.partition_log import PartitionLog
from kgroups.storage.postgres_log import PostgresPartitionLog
from kgroups.storage.postgresql import Lease, PostgresStore

OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
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
    """Create, list and delete topics on top of a LogManager."""

    def __init__(self, logs: LogManager, store: PostgresStore | None = None) -> None:
        self._logs = logs
        # Cluster mode: the event loop's store, and the logs of the partitions leased here.
        self._store = store
        self._leased: dict[tuple[str, int], PostgresPartitionLog] = {}
        self._configs = TopicConfigStore(logs.data_dir)
        self._overrides = self._configs.load_all()
        for topic, overrides in self._overrides.items():
            logs.set_topic_config(topic, topic_log_config(logs.config, overrides))
        self._counts: dict[str, int] = dict(
            sorted(Counter(topic for topic, _ in logs.partitions()).items())
        )
        self._listeners: list[Callable[[], None]] = []

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

    def log(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log, or None unless the topic exists and has that partition. Data
        requests go through here, so a client-chosen name (say `x/../other`) never reaches
        the file system."""
        count = self._counts.get(topic)
        if count is None or not 0 <= partition < count:
            return None
        return self._logs.get(topic, partition)

    def leadership_gained(self, lease: Lease) -> None:
        """This broker now leads the partition: its log in the store, fenced by `lease`."""
        assert self._store is not None, "leases exist in cluster mode only"
        self._leased[(lease.topic, lease.partition)] = PostgresPartitionLog(
            self._store, lease, self._logs.config_for(lease.topic))

    def leadership_lost(self, topic: str, partition: int) -> None:
        log = self._leased.pop((topic, partition), None)
        if log is not None:
            log.closed = True

    def leased_log(self, topic: str, partition: int) -> PostgresPartitionLog | None:
        """The store's log of a partition this broker leads, None otherwise."""
        return self._leased.get((topic, partition))

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
            self._configs.save(topic, configs)
            self._overrides[topic] = dict(configs)
            self._logs.set_topic_config(topic, log_config)
        else:
            self._forget_config(topic)
        try:
            self._open_partitions(topic, 0, num_partitions)
        except OSError:
            self._forget_config(topic)
            raise
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
        if overrides:
            self._configs.save(topic, overrides)
            self._overrides[topic] = dict(overrides)
            self._logs.set_topic_config(topic, log_config)
        else:
            self._forget_config(topic)
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
        for partition in range(self._counts.get(topic, 0)):
            try:
                log = self._logs.get(topic, partition)
            except OSError:  # offline: it gets the new settings when it opens again
                continue
            if log is not None:
                log.config = log_config

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow an existing topic to `total` partitions (the caller checked it is an increase);
        the new partitions start empty, as in Kafka. An OSError adds none."""
        current = self._counts[topic]
        self._open_partitions(topic, current, total)
        self._counts = dict(sorted({**self._counts, topic: total}.items()))
        self._changed()

    def _open_partitions(self, topic: str, first: int, end: int) -> None:
        """Create partitions first..end-1, all or none: those made before one that fails are
        deleted again, or a restart would find them on disk and count them in."""
        try:
            for partition in range(first, end):
                self._logs.get_or_create(topic, partition)
        except OSError:
            self._logs.delete_partitions(topic, range(first, end))
            raise

    def _forget_config(self, topic: str) -> None:
        """Back to the broker-wide settings (a leftover of a deleted topic must not stick)."""
        self._configs.remove(topic)
        self._overrides.pop(topic, None)
        self._logs.set_topic_config(topic, self._logs.config.for_topic(topic))

    def delete(self, topic: str) -> ErrorCode:
        if self.partition_count(topic) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        self._logs.delete_topic(topic)
        self._forget_config(topic)
        del self._counts[topic]
        self._changed()
        return ErrorCode.NONE
