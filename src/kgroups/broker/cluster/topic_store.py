"""A cluster broker's topics: the PostgreSQL store's topics tables, shared by every broker, and
a PostgreSQL log for each partition whose lease this broker holds (TopicCatalog's engine in a
cluster; topic_storage.py has the single node's).

A partition's log is served only between `gain` (the membership runtime took its lease) and
`lose`; for the others `elsewhere` names the leader the LeadershipView last read, for the
NOT_LEADER_OR_FOLLOWER answer's hint. The store's fencing, not these maps, keeps a broker that
lost a lease without knowing it yet from writing: its appends raise FencedError.

The store is one psycopg connection, used on the event loop's thread only: each call is one
short transaction (a topic's rows, one batch, one read), acceptable on the loop for now.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping

from kgroups.broker.cluster.leadership import LeadershipView
from kgroups.broker.topic_storage import NotLeaderHint
from kgroups.log.compaction import CompactionResult
from kgroups.log.config import OFFSETS_TOPIC, LogConfig
from kgroups.storage.log_seam import PartitionLogSeam
from kgroups.storage.postgres_log import PostgresPartitionLog
from kgroups.storage.postgresql import FencedError, Lease, PostgresStore


class ClusterTopics:
    def __init__(self, store: PostgresStore, leadership: LeadershipView,
                 config_for: Callable[[str], LogConfig]) -> None:
        self.store = store
        self.leadership = leadership
        self._config_for = config_for
        self._led: dict[tuple[str, int], PostgresPartitionLog] = {}
        self._ids: dict[str, uuid.UUID] = {}

    # ------------------------------------------------------------------ leadership

    def gain(self, lease: Lease) -> None:
        """Serve the lease's partition with a log fenced by its epoch. The same epoch again (a
        renewal) keeps the log, and with it the producers' state; a new epoch replaces it."""
        key = (lease.topic, lease.partition)
        old = self._led.get(key)
        if old is not None and old.lease.epoch == lease.epoch:
            old.lease = lease
            return
        self.lose(*key)
        self._led[key] = PostgresPartitionLog(self.store, lease,
                                              self._config_for(lease.topic))

    def lose(self, topic: str, partition: int) -> None:
        log = self._led.pop((topic, partition), None)
        if log is not None:
            log.close()

    def forget_missing(self, counts: Mapping[str, int]) -> None:
        """Close the logs of partitions that no longer exist (their topic was deleted)."""
        for topic, partition in list(self._led):
            if partition >= counts.get(topic, 0):
                self.lose(topic, partition)

    def clean(self, now_ms: int) -> list[tuple[str, int, int, CompactionResult]]:
        """Retention and compaction of every topic partition this broker leads, as Kafka's
        leader runs them (the log cleaner's schedule): per partition, (topic, partition,
        batches deleted by retention, compaction's result). __consumer_offsets is the
        coordinator's. A partition whose lease was lost meanwhile is dropped, untouched."""
        done = []
        for (topic, partition), log in list(self._led.items()):
            if topic == OFFSETS_TOPIC:
                continue
            try:
                compacted = (log.compact(now_ms) if log.config.compacted
                             else CompactionResult(0, 0, 0))
                done.append((topic, partition, log.apply_retention(now_ms), compacted))
            except FencedError:
                self.lose(topic, partition)
        return done

    # ------------------------------------------------------------------ TopicStorage

    def load(self) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
        topics = self.store.topics()
        self._ids = {name: topic_id for name, (topic_id, _) in topics.items()}
        return ({name: count for name, (_, count) in topics.items()},
                self.store.catalog.topic_configs())

    def save_overrides(self, topic: str, overrides: Mapping[str, str]) -> None:
        self.store.catalog.set_topic_configs(topic, overrides)

    def log(self, topic: str, partition: int) -> PartitionLogSeam | None:
        return self._led.get((topic, partition))

    def create(self, topic: str, partitions: int, configs: Mapping[str, str]) -> bool:
        topic_id = uuid.uuid4()
        created = self.store.create_topic(topic, topic_id, partitions, configs)
        if created:
            self._ids[topic] = topic_id
        return created

    def add_partitions(self, topic: str, current: int, total: int) -> None:
        self.store.add_partitions(topic, total)

    def delete(self, topic: str) -> None:
        """The store drops the topic's partitions, records and settings with it (a topic
        another broker deleted first is simply gone)."""
        self.store.delete_topic(topic)
        self._ids.pop(topic, None)
        for name, partition in list(self._led):
            if name == topic:
                self.lose(name, partition)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self._ids.get(topic)

    def advance_log_starts(self, targets: Mapping[tuple[str, int], int]
                           ) -> set[tuple[str, int]]:
        """Each start is moved in its own fenced transaction."""
        fenced = {key for key in targets if key not in self._led}
        for key, offset in targets.items():
            if key in fenced:
                continue
            try:
                self._led[key].advance_log_start(offset)
            except FencedError:
                fenced.add(key)
                self.lose(*key)
        return fenced

    def open_logs(self, topic: str, count: int) -> Iterator[PartitionLogSeam]:
        for partition in range(count):
            log = self._led.get((topic, partition))
            if log is not None:
                yield log

    def elsewhere(self, topic: str, partition: int) -> NotLeaderHint | None:
        leader = self.leadership.leader(topic, partition)
        endpoint = None if leader is None else self.leadership.endpoint(leader.node_id)
        return NotLeaderHint(leader, endpoint)

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        log = self._led.get((topic, partition))
        return None if log is None else log.lease.epoch
