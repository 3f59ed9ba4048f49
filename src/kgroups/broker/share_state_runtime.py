"""The broker's home for the share coordinator: its `__share_group_state` partitions, and the
`ShareStatePersister` the share partitions and the group coordinator call.

The topic is created on first use as Kafka 4.3.1 creates it (share.coordinator.state.topic.*
settings; `cleanup.policy=delete` with `retention.ms=-1`: Kafka keeps every record and trims the
log itself, it does not compact it). At start every partition's records are replayed in log
order into the sans-IO coordinator (kgroups.share_coordinator.shard): a ShareUpdate means
something only on top of the ShareSnapshot before it. A request's record is appended under the
partition's gate and made durable (fsynced, as __consumer_offsets writes are) before the
coordinator applies it and the caller hears back, so an answered write survives kill -9. Requests
of one `__share_group_state` partition are taken one at a time: each record is decided on the
state the previous one left.

Housekeeping runs as Kafka's does: every `share.coordinator.state.topic.prune.interval.ms` each
partition's log start moves up to the oldest record still needed (the records below are
deleted as DeleteRecords deletes them), and every
`share.coordinator.cold.partition.snapshot.interval.ms` share-partitions whose snapshot is that
old are snapshotted afresh, so the oldest record needed keeps moving.

On one broker every partition is served here. In cluster mode (docs/share-groups.md, "In a
cluster") the broker coordinates the share-partitions of the `__share_group_state` partitions it
holds the lease of, as the transaction coordinator does for `__transaction_state`:
`partition_gained` reads the partition back from the store and replays it (its share-partitions
answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), `partition_lost` forgets them
(NOT_COORDINATOR), and every record goes through the store's fenced append, so a broker that
lost the lease writes nothing and gives the partition up. The housekeeping (pruning, cold
snapshots) runs on a single broker only: in a cluster the store keeps every record.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kgroups.broker.append_gates import gate_of
from kgroups.broker.appends import AppendNotifier
from kgroups.broker.background import BackgroundTasks, TaskCounts
from kgroups.broker.cluster.offsets_reader import cluster_reader
from kgroups.broker.config import BrokerConfig
from kgroups.broker.events import log_event
from kgroups.broker.share_persister import ReadStateResult
from kgroups.broker.topics import SHARE_STATE_TOPIC, TopicCatalog
from kgroups.errors import ErrorCode
from kgroups.log.batch import BatchCorruptError, build_batch, iter_records_raw
from kgroups.log.durability import GroupCommit
from kgroups.log.manager import LogManager
from kgroups.log.partition_log import PartitionLog
from kgroups.records.share_state import (
    StateBatch,
    decode_share_state_key,
    decode_share_state_value,
    encode_share_state_key,
    encode_share_state_value,
)
from kgroups.share.persisted import (
    DeliveryState,
    PersistedBatch,
    PersistedShareState,
    SharePartitionKey,
)
from kgroups.share_coordinator.shard import (
    Answer,
    Key,
    ShareCoordinatorShard,
    StateRecord,
    WriteRequest,
)
from kgroups.storage.postgresql import FencedError, StorageUnavailableError

logger = logging.getLogger("kgroups.share_state")

# Kafka's names and defaults for what this runtime reads.
SHARE_STATE_DEFAULTS = {
    "share.coordinator.state.topic.num.partitions": "50",
    "share.coordinator.snapshot.update.records.per.snapshot": "500",
    "share.coordinator.state.topic.segment.bytes": "104857600",
    "share.coordinator.state.topic.prune.interval.ms": "300000",
    "share.coordinator.cold.partition.snapshot.interval.ms": "300000",
}


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ShareStateSettings:
    num_partitions: int
    snapshot_every: int
    segment_bytes: int
    prune_interval_ms: int
    cold_snapshot_interval_ms: int

    @classmethod
    def of(cls, config: BrokerConfig) -> ShareStateSettings:
        def value(key: str) -> int:
            return int(config.properties.get(key, SHARE_STATE_DEFAULTS[key]))

        return cls(value("share.coordinator.state.topic.num.partitions"),
                   value("share.coordinator.snapshot.update.records.per.snapshot"),
                   value("share.coordinator.state.topic.segment.bytes"),
                   value("share.coordinator.state.topic.prune.interval.ms"),
                   value("share.coordinator.cold.partition.snapshot.interval.ms"))


class ShareStateRuntime:
    """Serves the share coordinator's requests (the wire APIs 83-87 and the in-process
    `ShareStatePersister` calls) from `__share_group_state`."""

    def __init__(self, config: BrokerConfig, topics: TopicCatalog, logs: LogManager,
                 group_commit: GroupCommit, appends: AppendNotifier, task_counts: TaskCounts,
                 cluster_mode: bool = False) -> None:
        self.settings = ShareStateSettings.of(config)
        self.shard = ShareCoordinatorShard(self.settings.snapshot_every,
                                           self.settings.num_partitions)
        self._topics = topics
        self._logs = logs
        self._group_commit = group_commit
        self._appends = appends
        self._cluster_mode = cluster_mode
        self._locks: dict[int, asyncio.Lock] = {}
        # Cluster mode: partitions are loaded as their leases are gained, read by `_reader`;
        # `give_up` hands a fenced partition's lease back (set by the broker).
        self._reader = cluster_reader(config) if cluster_mode else None
        self.give_up: Callable[[int], None] = lambda partition: None
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._served: set[int] = set()
        self.loaded = False
        self.background = BackgroundTasks(task_counts)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Replay `__share_group_state` if it exists; start the housekeeping."""
        if self._cluster_mode:
            return
        self.background.supervise("share-state-pruner", self._prune_periodically)
        self.background.supervise("share-state-cold-snapshots",
                                  self._snapshot_cold_periodically)
        existing = self._topics.partition_count(SHARE_STATE_TOPIC)
        if existing is None:
            return
        if existing != self.settings.num_partitions:
            raise RuntimeError(
                f"{SHARE_STATE_TOPIC} has {existing} partitions on disk but "
                f"share.coordinator.state.topic.num.partitions is {self.settings.num_partitions};"
                f" share-partitions would change coordinator partition")
        self._load()

    def ensure_topic(self) -> None:
        """Create `__share_group_state` on first use, as Kafka does when the share coordinator
        is first looked for. OSError when the partitions cannot be created."""
        if self._topics.partition_count(SHARE_STATE_TOPIC) is None:
            self._topics.create(SHARE_STATE_TOPIC, self.settings.num_partitions, {
                "cleanup.policy": "delete", "retention.ms": "-1",
                "segment.bytes": str(self.settings.segment_bytes)})
        if not self.loaded and not self._cluster_mode:
            self._load()

    async def stop(self) -> None:
        await self.background.cancel_all()
        for load in self._loads.values():
            load.cancel()
        self._loads.clear()
        if self._reader is not None:
            self._reader.close()

    def _load(self) -> None:
        """Every partition's records from its log start (those below were pruned), in order."""
        records = 0
        for partition in range(self.settings.num_partitions):
            log = self._logs.get_or_create(SHARE_STATE_TOPIC, partition)
            data = b"".join(s.pread(s.size, 0) for s in log.segments())
            start = log.log_start_offset
            for offset, _, key_bytes, value_bytes in iter_records_raw(data):
                if key_bytes is None or offset < start:
                    continue
                key = decode_share_state_key(key_bytes)
                self.shard.replay(StateRecord(key, decode_share_state_value(key, value_bytes)),
                                  offset)
                records += 1
        self.loaded = True
        log_event(logger, logging.INFO, "share_state_loaded",
                  partitions=self.settings.num_partitions, records=records,
                  share_partitions=len(self.shard.states))

    def refusal(self, create_topic: bool, key: Key | None = None) -> ErrorCode | None:
        """Why no request (for the share-partition `key`) is served now (None: they are).
        Kafka creates `__share_group_state` when the share coordinator is first looked for
        (FindCoordinator, which its persister always sends first): before that a request on
        the wire answers NOT_COORDINATOR, as Kafka's does; FindCoordinator and the in-process
        persister (`create_topic`) create it. In cluster mode a share-partition whose
        partition another broker leads answers NOT_COORDINATOR, one being replayed here
        COORDINATOR_LOAD_IN_PROGRESS."""
        if not create_topic and self._topics.partition_count(SHARE_STATE_TOPIC) is None:
            return ErrorCode.NOT_COORDINATOR
        try:
            self.ensure_topic()
        except OSError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not self._cluster_mode or key is None:
            return None
        partition = self.shard.partition_of(key)
        if partition in self._served:
            return None
        if partition in self._loads:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    # -- cluster mode ------------------------------------------------------------------------

    def partition_gained(self, partition: int) -> None:
        """This broker now leads `__share_group_state-<partition>`: its share-partitions answer
        COORDINATOR_LOAD_IN_PROGRESS until the store's records are replayed."""
        self.partition_lost(partition)
        self._loads[partition] = asyncio.get_running_loop().create_task(
            self._load_leased(partition), name=f"share-state-load-{partition}")

    def partition_lost(self, partition: int) -> None:
        """Another broker leads it now (or will): its share-partitions answer NOT_COORDINATOR."""
        load = self._loads.pop(partition, None)
        if load is not None:
            load.cancel()
        self._served.discard(partition)
        self.shard.unload(partition)

    async def _load_leased(self, partition: int) -> None:
        assert self._reader is not None
        started = time.monotonic()
        try:
            data = await self._reader.read(SHARE_STATE_TOPIC, partition)
            records = await asyncio.to_thread(_state_records, data)
        except (StorageUnavailableError, BatchCorruptError) as exc:
            # Nothing to serve it from: the lease is given up and taken again afresh.
            self._loads.pop(partition, None)
            log_event(logger, logging.WARNING, "share_state_load_failed", partition=partition,
                      error=exc)
            self.give_up(partition)
            return
        self._loads.pop(partition, None)
        for offset, record in records:
            self.shard.replay(record, offset)
        self._served.add(partition)
        log_event(logger, logging.INFO, "share_state_partition_loaded", partition=partition,
                  records=len(records), ms=round((time.monotonic() - started) * 1000))

    def _fenced(self, partition: int) -> None:
        if partition in self._served:
            self.partition_lost(partition)
            self.give_up(partition)

    def topic_partitions(self, topic_id: uuid.UUID) -> int | None:
        """How many partitions the topic of `topic_id` has (None: no such topic)."""
        for name, count in self._topics.partition_counts().items():
            if self._topics.topic_id(name) == topic_id:
                return count
        return None

    # -- requests ----------------------------------------------------------------------------

    async def _serve(self, group_id: str, topic_id: uuid.UUID, partition: int,
                     decide: Callable[[], Answer], create_topic: bool) -> Answer:
        """Decide on the current state, append the record (if any) durably, then apply it;
        one request at a time per `__share_group_state` partition."""
        key = (group_id, topic_id, partition)
        refused = self.refusal(create_topic, key)
        if refused is not None:
            return Answer(refused)
        state_partition_index = self.shard.partition_of(key)
        lock = self._locks.setdefault(state_partition_index, asyncio.Lock())
        async with lock:
            refused = self.refusal(create_topic, key)  # lost while waiting for the lock
            if refused is not None:
                return Answer(refused)
            answer = decide()
            if answer.record is None:
                return answer
            error = await self._append_and_apply(state_partition_index, answer.record)
            return answer if error is ErrorCode.NONE else Answer(error)

    async def _append_and_apply(self, partition: int, record: StateRecord) -> ErrorCode:
        """Append `record` durably, then apply it (the caller holds the partition's lock)."""
        log = self._topics.log(SHARE_STATE_TOPIC, partition)
        if log is None:
            return ErrorCode.NOT_COORDINATOR if self._cluster_mode \
                else ErrorCode.COORDINATOR_NOT_AVAILABLE
        value = None if record.value is None else encode_share_state_value(record.value)
        batch = build_batch([(encode_share_state_key(record.key), value, wall_clock_ms())])
        try:
            async with gate_of(log):
                offset, _ = log.append_batch(batch)
            if isinstance(log, PartitionLog):
                await self._group_commit.wait_durable(log)
        except FencedError as exc:
            # Another broker took the partition (this one was paused or cut off): nothing was
            # written, and the partition is given up to be loaded afresh wherever it goes.
            log_event(logger, logging.WARNING, "share_state_append_fenced",
                      partition=partition, group_id=record.key.group_id, error=exc)
            asyncio.get_running_loop().call_soon(self._fenced, partition)
            return ErrorCode.NOT_COORDINATOR
        except OSError as exc:  # StorageUnavailableError among them
            # Maybe written, never a success: the state stays where it was (Kafka answers a
            # failed append of its coordinator runtime as a retriable coordinator error).
            log_event(logger, logging.ERROR, "share_state_append_failed", partition=partition,
                      group_id=record.key.group_id, error=exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.shard.replay(record, offset)
        self._appends.notify()
        return ErrorCode.NONE

    # -- housekeeping ------------------------------------------------------------------------

    async def _prune_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.prune_interval_ms / 1000)
            self.prune()

    def prune(self) -> None:
        """Move each partition's log start up to its oldest record still needed."""
        if not self.loaded:
            return
        targets = {}
        for partition in range(self.settings.num_partitions):
            offset = self.shard.redundant_offset(partition)
            log = self._topics.log(SHARE_STATE_TOPIC, partition)
            if offset is not None and log is not None and offset > log.log_start_offset:
                targets[(SHARE_STATE_TOPIC, partition)] = offset
        if targets:
            self._topics.advance_log_starts(targets)
            log_event(logger, logging.INFO, "share_state_pruned", partitions=len(targets))

    async def _snapshot_cold_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.cold_snapshot_interval_ms / 1000)
            await self.snapshot_cold()

    async def snapshot_cold(self) -> None:
        """A fresh snapshot of each share-partition whose last one is old enough."""
        if not self.loaded:
            return
        for record in self.shard.cold_snapshots(wall_clock_ms(),
                                                self.settings.cold_snapshot_interval_ms):
            key = (record.key.group_id, record.key.topic_id, record.key.partition)
            partition = self.shard.partition_of(key)
            async with self._locks.setdefault(partition, asyncio.Lock()):
                if key in self.shard.states:  # not deleted meanwhile
                    await self._append_and_apply(partition, record)

    def initialize_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         state_epoch: int, start_offset: int, *, create_topic: bool = False
                         ) -> Awaitable[Answer]:
        return self._serve(group_id, topic_id, partition, lambda: self.shard.initialize(
            group_id, topic_id, partition, state_epoch, start_offset, self.topic_partitions,
            wall_clock_ms()), create_topic)

    def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                   leader_epoch: int, *, create_topic: bool = False) -> Awaitable[Answer]:
        return self._serve(group_id, topic_id, partition, lambda: self.shard.read(
            group_id, topic_id, partition, leader_epoch, self.topic_partitions,
            wall_clock_ms()), create_topic)

    def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                    request: WriteRequest, *, create_topic: bool = False) -> Awaitable[Answer]:
        return self._serve(group_id, topic_id, partition, lambda: self.shard.write(
            group_id, topic_id, partition, request, self.topic_partitions, wall_clock_ms()),
            create_topic)

    def read_state_summary(self, group_id: str, topic_id: uuid.UUID, partition: int, *,
                           create_topic: bool = False) -> Awaitable[Answer]:
        return self._serve(group_id, topic_id, partition, lambda: self.shard.read_summary(
            group_id, topic_id, partition, self.topic_partitions), create_topic)

    def delete_state(self, group_id: str, topic_id: uuid.UUID, partition: int, *,
                     create_topic: bool = False) -> Awaitable[Answer]:
        return self._serve(group_id, topic_id, partition, lambda: self.shard.delete(
            group_id, topic_id, partition, self.topic_partitions), create_topic)

    # -- ShareStatePersister -----------------------------------------------------------------

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> ErrorCode:
        answer = await self.initialize_state(key.group_id, uuid.UUID(bytes=key.topic_id),
                                             key.partition, state_epoch, start_offset,
                                             create_topic=True)
        return answer.error

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        """The state; a share-partition never initialized answers INVALID_REQUEST, as
        ReadShareGroupState does on the wire."""
        topic_id = uuid.UUID(bytes=key.topic_id)
        return _result(await self.read_state(key.group_id, topic_id, key.partition,
                                             leader_epoch, create_topic=True), with_batches=True)

    async def write(self, key: SharePartitionKey, state: PersistedShareState) -> ErrorCode:
        request = WriteRequest(state.state_epoch, state.leader_epoch, state.start_offset,
                               tuple(StateBatch(b.first_offset, b.last_offset,
                                                int(b.delivery_state), b.delivery_count)
                                     for b in state.batches),
                               state.delivery_complete_count)
        answer = await self.write_state(key.group_id, uuid.UUID(bytes=key.topic_id),
                                        key.partition, request, create_topic=True)
        return answer.error

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        answer = await self.read_state_summary(key.group_id, uuid.UUID(bytes=key.topic_id),
                                               key.partition, create_topic=True)
        return _result(answer, with_batches=False)

    async def delete(self, key: SharePartitionKey) -> ErrorCode:
        answer = await self.delete_state(key.group_id, uuid.UUID(bytes=key.topic_id),
                                         key.partition, create_topic=True)
        return answer.error


def _result(answer: Answer, with_batches: bool) -> ReadStateResult:
    if answer.error is not ErrorCode.NONE or answer.state is None:
        return ReadStateResult(answer.error, None, answer.message)
    state = answer.state
    batches = tuple(PersistedBatch(b.first_offset, b.last_offset,
                                   DeliveryState(b.delivery_state), b.delivery_count)
                    for b in state.batches) if with_batches else ()
    return ReadStateResult(ErrorCode.NONE, PersistedShareState(
        state.state_epoch, state.leader_epoch, state.start_offset, batches,
        state.delivery_complete_count))


def _state_records(data: bytes) -> list[tuple[int, StateRecord]]:
    """The records of a `__share_group_state` partition read back from the store, with their
    offsets, in log order."""
    return [(offset, StateRecord(key, decode_share_state_value(key, value_bytes)))
            for offset, _, key_bytes, value_bytes in iter_records_raw(data)
            if key_bytes is not None
            for key in (decode_share_state_key(key_bytes),)]
