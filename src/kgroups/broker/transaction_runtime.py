"""The broker's home for the transaction coordinator: its __transaction_state partitions, its
timers and the second phase of every transaction.

The topic (compacted, transaction.state.log.num.partitions partitions) is created on first
use, as Kafka does, and at each start each partition's last record per transactional id is
replayed into the sans-IO coordinator (kgroups.transactions). A decision's record is appended
under the partition's gate and made durable before the coordinator applies it and the client
hears back. Once a Prepare
record is durable the markers go out through `send_markers` (the broker's
kgroups.broker.txn_markers.write_markers) and the Complete record follows; a transaction a
kill -9 left prepared is found prepared by the replay and completed the same way.

In cluster mode (docs/transactions.md, "In a cluster") the broker coordinates the ids of the
`__transaction_state` partitions it holds the lease of, as the group coordinator does for
`__consumer_offsets`: `partition_gained` reads the partition back from the store on a reader
thread and replays it (its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), then completes
the transactions a lost broker left prepared; `partition_lost` forgets its ids
(NOT_COORDINATOR). The coordinator epoch of its markers is the lease's leader epoch, and every
record goes through the store's fenced append: a broker that lost the lease writes nothing,
answers NOT_COORDINATOR and gives the partition up.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kgroups.broker.append_gates import gate_of
from kgroups.broker.appends import AppendNotifier
from kgroups.broker.background import BackgroundTasks, TaskCounts
from kgroups.broker.cluster.offsets_reader import cluster_reader
from kgroups.broker.config import BrokerConfig
from kgroups.broker.events import log_event
from kgroups.broker.topics import TRANSACTION_STATE_TOPIC, TopicCatalog
from kgroups.errors import ErrorCode
from kgroups.log.batch import BatchCorruptError, build_batch
from kgroups.log.durability import GroupCommit
from kgroups.log.manager import LogManager
from kgroups.log.partition_log import PartitionLog
from kgroups.log.replay import LatestPerKey
from kgroups.storage.postgresql import FencedError, StorageUnavailableError
from kgroups.transactions.coordinator import TransactionCoordinator, TxnConfig
from kgroups.transactions.messages import Decision, MarkerWrite, TxnWrite
from kgroups.transactions.state import PREPARE_STATES, TxnState

if TYPE_CHECKING:
    from kgroups.broker.metrics import TransactionMetrics

logger = logging.getLogger("kgroups.transactions")

# Kafka's names and defaults for what this runtime reads.
TRANSACTION_DEFAULTS = {
    "transaction.state.log.num.partitions": "50",
    "transaction.max.timeout.ms": "900000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
}
# Marker errors worth another try (the partition moving or its disk failing for a while);
# a partition that no longer exists is left out, as Kafka does.
RETRY_MARKER_AFTER_S = 0.1
MarkerSender = Callable[[Sequence[MarkerWrite]], Awaitable[list[ErrorCode]]]


def wall_clock_ms() -> int:
    """Transaction timestamps are stored and compared across restarts: wall-clock."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    num_partitions: int
    max_timeout_ms: int
    id_expiration_ms: int
    abort_interval_ms: int
    expire_interval_ms: int

    @classmethod
    def of(cls, config: BrokerConfig) -> TransactionSettings:
        def value(key: str) -> int:
            return int(config.properties.get(key, TRANSACTION_DEFAULTS[key]))

        return cls(value("transaction.state.log.num.partitions"),
                   value("transaction.max.timeout.ms"), value("transactional.id.expiration.ms"),
                   value("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                   value("transaction.remove.expired.transaction.cleanup.interval.ms"))


class TransactionRuntime:
    def __init__(self, config: BrokerConfig, topics: TopicCatalog, logs: LogManager,
                 group_commit: GroupCommit, appends: AppendNotifier, task_counts: TaskCounts,
                 allocate_producer_id: Callable[[], int], send_markers: MarkerSender) -> None:
        self.settings = TransactionSettings.of(config)
        self.coordinator = TransactionCoordinator(
            TxnConfig(max_timeout_ms=self.settings.max_timeout_ms,
                      id_expiration_ms=self.settings.id_expiration_ms,
                      num_partitions=self.settings.num_partitions,
                      offsets_partitions=config.offsets_topic_num_partitions),
            allocate_producer_id)
        self._topics = topics
        self._logs = logs
        self._group_commit = group_commit
        self._appends = appends
        self._send_markers = send_markers
        # Cluster mode: partitions are loaded as their leases are gained, read by `_reader`;
        # `give_up` hands a fenced partition's lease back (set by the broker).
        self._reader = cluster_reader(config)
        self.give_up: Callable[[int], None] = lambda partition: None
        self._loads: dict[int, asyncio.Task[None]] = {}
        # Partition -> which load of it is served (a count over every load), so a second
        # phase begun before the partition was lost and gained again stops: the new load
        # completes the transaction itself.
        self._served: dict[int, int] = {}
        self._load_count = itertools.count(1)
        self.background = BackgroundTasks(task_counts)
        self.loaded = False
        # Set by the broker when metrics are served (kgroups.broker.metrics).
        self.metrics: TransactionMetrics | None = None

    @property
    def cluster_mode(self) -> bool:
        return self._reader is not None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Replay __transaction_state if it exists (in cluster mode each partition is replayed
        when its lease is gained), finish what was left prepared and start the timers."""
        existing = self._topics.partition_count(TRANSACTION_STATE_TOPIC)
        if existing is not None:
            if existing != self.settings.num_partitions:
                raise RuntimeError(
                    f"{TRANSACTION_STATE_TOPIC} has {existing} partitions on disk but "
                    f"transaction.state.log.num.partitions is {self.settings.num_partitions}; "
                    f"transactional ids would change coordinator partition")
            if not self.cluster_mode:
                self._load()
        self.background.supervise("transaction-aborter", self._abort_timed_out_periodically)
        self.background.supervise("transactional-id-expirer", self._expire_periodically)

    def ensure_topic(self) -> None:
        """Create __transaction_state (compacted) on first use, as Kafka does when a client
        first looks for a transaction coordinator (in cluster mode in the store, where the
        brokers' lease steps then share its partitions out). OSError when the partitions
        cannot be created."""
        if self._topics.partition_count(TRANSACTION_STATE_TOPIC) is None:
            self._topics.create(TRANSACTION_STATE_TOPIC, self.settings.num_partitions,
                                {"cleanup.policy": "compact"})
        if not self.loaded and not self.cluster_mode:
            self._load()

    def _load(self) -> None:
        records = 0
        for partition in range(self.settings.num_partitions):
            log = self._logs.get_or_create(TRANSACTION_STATE_TOPIC, partition)
            table = LatestPerKey()
            table.add(b"".join(s.pread(s.size, 0) for s in log.segments()))
            records += self._replay(table)
        self.loaded = True
        prepared = self.coordinator.prepared()
        log_event(logger, logging.INFO, "transactions_loaded",
                  partitions=self.settings.num_partitions, transactional_ids=records,
                  prepared=len(prepared))
        for transactional_id in prepared:
            self._complete_later(transactional_id)

    def _replay(self, table: LatestPerKey) -> int:
        records = 0
        for _, _, key, value in table.records():
            self.coordinator.replay(key, value)
            records += 1
        return records

    async def stop(self) -> None:
        """Cancel the timers and the second phases in flight: a prepared transaction stays
        prepared in the log and is completed at the next start (or by the next coordinator)."""
        await self.background.cancel_all()
        for load in self._loads.values():
            load.cancel()
        self._loads.clear()
        if self._reader is not None:
            self._reader.close()

    def refusal(self, transactional_id: str) -> ErrorCode | None:
        """Why this broker does not answer for the id now (NOT_COORDINATOR: another broker
        leads its partition, or nothing is loaded yet; COORDINATOR_LOAD_IN_PROGRESS: its
        partition is being replayed here), None when it does."""
        partition = self.coordinator.partition_of(transactional_id)
        if self._serves(partition):
            return None
        if partition in self._loads:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def listing_refusal(self) -> ErrorCode | None:
        """ListTransactions lists the ids of the partitions served here; refused while one
        of them is loading (Kafka's answer) or, on a single broker, before the first load."""
        if self.cluster_mode:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._loads else None
        return None if self.loaded else ErrorCode.NOT_COORDINATOR

    def _serves(self, partition: int) -> bool:
        return partition in self._served if self.cluster_mode else self.loaded

    def _term(self, partition: int) -> int | None:
        """Which load of `partition` is served (0 on a single broker, which loads once)."""
        return self._served.get(partition) if self.cluster_mode else 0

    # -- cluster mode ------------------------------------------------------------------------

    def partition_gained(self, partition: int) -> None:
        """This broker now leads `__transaction_state-<partition>`: its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until the store's records are replayed."""
        self.partition_lost(partition)
        self._loads[partition] = asyncio.get_running_loop().create_task(
            self._load_leased(partition), name=f"transactions-load-{partition}")

    def partition_lost(self, partition: int) -> None:
        """Another broker leads it now (or will): its ids answer NOT_COORDINATOR, and its
        second phases in flight stop at their next step (the next coordinator redoes them)."""
        load = self._loads.pop(partition, None)
        if load is not None:
            load.cancel()
        self._served.pop(partition, None)
        self.coordinator.unload(partition)

    async def _load_leased(self, partition: int) -> None:
        assert self._reader is not None
        started = time.monotonic()
        try:
            data = await self._reader.read(TRANSACTION_STATE_TOPIC, partition)
            table = LatestPerKey()
            await asyncio.to_thread(table.add, data)
        except (StorageUnavailableError, BatchCorruptError) as exc:
            # Nothing to serve it from: the lease is given up and taken again afresh.
            self._loads.pop(partition, None)
            log_event(logger, logging.WARNING, "transactions_load_failed", partition=partition,
                      error=exc)
            self.give_up(partition)
            return
        self._loads.pop(partition, None)
        records = self._replay(table)
        self._served[partition] = next(self._load_count)
        prepared = [t for t in self.coordinator.prepared()
                    if self.coordinator.partition_of(t) == partition]
        log_event(logger, logging.INFO, "transactions_partition_loaded", partition=partition,
                  transactional_ids=records, prepared=len(prepared),
                  ms=round((time.monotonic() - started) * 1000))
        for transactional_id in prepared:
            self._complete_later(transactional_id)

    def _fenced(self, partition: int) -> None:
        if partition in self._served:
            self.partition_lost(partition)
            self.give_up(partition)

    def coordinates(self, transactional_id: str) -> bool:
        """Whether this broker is the transaction coordinator of the id (a single broker is of
        every id; in cluster mode, of the ids whose partition it serves now): what a partition
        leader asks before verifying a transactional write with it in-process
        (kgroups.broker.txn_verification). `available` tells whether it can answer yet."""
        if not transactional_id:
            return False
        return not self.cluster_mode or self.refusal(transactional_id) is None

    @property
    def available(self) -> bool:
        """Whether the coordinator holds its state: on a single broker, once __transaction_state
        exists and was replayed (before that no transactional producer can exist); in cluster
        mode a served partition is always loaded."""
        return self.cluster_mode or self.loaded

    # -- requests ----------------------------------------------------------------------------

    async def run(self, decision: Decision, abort_cause: str | None = None) -> Decision:
        """Make `decision`'s record durable and apply it; the decision as the client must hear
        it (a failed write answers as Kafka maps an append failure). A PrepareAbort is counted
        by cause: `abort_cause` when the runtime's timer aborts, else fenced when it comes
        from InitProducerId (answered CONCURRENT_TRANSACTIONS), else the client's EndTxn."""
        write = decision.write
        if write is None:
            return decision
        error = await self._append(write)
        if error is not ErrorCode.NONE:
            self.coordinator.write_failed(write)
            return Decision(error)
        self.coordinator.apply(write)
        if write.metadata is not None and write.metadata.state in PREPARE_STATES:
            if self.metrics is not None and write.metadata.state is TxnState.PREPARE_ABORT:
                self.metrics.aborted(abort_cause or (
                    "fenced" if decision.error is ErrorCode.CONCURRENT_TRANSACTIONS
                    else "client"))
            self._complete_later(write.transactional_id)
        return decision

    async def _append(self, write: TxnWrite) -> ErrorCode:
        partition = self.coordinator.partition_of(write.transactional_id)
        log = self._topics.log(TRANSACTION_STATE_TOPIC, partition)
        if log is None or not self._serves(partition):
            return ErrorCode.NOT_COORDINATOR if self.cluster_mode \
                else ErrorCode.COORDINATOR_NOT_AVAILABLE
        batch = build_batch([(write.key(), write.value(self.coordinator.config.log_value_version),
                              wall_clock_ms())])
        try:
            async with gate_of(log):
                log.append_batch(batch)
            if isinstance(log, PartitionLog):
                await self._group_commit.wait_durable(log)
        except FencedError as exc:
            # Another broker took the partition (this one was paused or cut off): nothing was
            # written, and the partition is given up to be loaded afresh wherever it goes.
            log_event(logger, logging.WARNING, "transaction_state_append_fenced",
                      partition=partition, transactional_id=write.transactional_id, error=exc)
            asyncio.get_running_loop().call_soon(self._fenced, partition)
            return ErrorCode.NOT_COORDINATOR
        except StorageUnavailableError as exc:
            # Maybe written: retriable, never a success; the state stays where it was.
            log_event(logger, logging.ERROR, "transaction_state_append_failed",
                      partition=partition, transactional_id=write.transactional_id, error=exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        except OSError as exc:
            log_event(logger, logging.ERROR, "transaction_state_append_failed",
                      partition=partition, transactional_id=write.transactional_id, error=exc)
            return ErrorCode.NOT_COORDINATOR
        self._appends.notify()
        return ErrorCode.NONE

    # -- the second phase --------------------------------------------------------------------

    def _complete_later(self, transactional_id: str) -> None:
        self.background.spawn("transaction-markers", self._complete(transactional_id))

    async def _complete(self, transactional_id: str) -> None:
        """Write the markers of a prepared transaction until each is written (or its partition
        is gone), then its Complete record; a failed Complete write is tried again."""
        partition = self.coordinator.partition_of(transactional_id)
        # Kafka's coordinator epoch is the partition's leader epoch: the lease's in a cluster.
        epoch = self._topics.leader_epoch(TRANSACTION_STATE_TOPIC, partition) or 0
        prepared = self.coordinator.get(transactional_id)
        completion = self.coordinator.completion(transactional_id, epoch, wall_clock_ms())
        if completion is None:
            return
        term = self._term(partition)
        pending = list(completion.markers)
        while pending and term is not None and self._term(partition) == term:
            errors = await self._send_markers(pending)
            failed = [(m, e) for m, e in zip(pending, errors, strict=True)
                      if e not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
            for marker, error in failed:
                log_event(logger, logging.WARNING, "transaction_marker_retry",
                          transactional_id=transactional_id, topic=marker.topic,
                          partition=marker.partition, error=error.name)
            pending = [m for m, _ in failed]
            if pending:
                await asyncio.sleep(RETRY_MARKER_AFTER_S)
        if term is None or self._term(partition) != term:
            # The partition was lost (and perhaps loaded again): whoever serves it now
            # completes the transaction, with its own coordinator epoch.
            self.coordinator.write_failed(completion.write)
            return
        if await self._append(completion.write) is ErrorCode.NONE:
            self.coordinator.apply(completion.write)
            if self.metrics is not None and prepared is not None:
                self.metrics.completed(prepared.state is TxnState.PREPARE_COMMIT,
                                       prepared.start_timestamp_ms,
                                       prepared.last_update_timestamp_ms, wall_clock_ms())
            return
        self.coordinator.write_failed(completion.write)
        await asyncio.sleep(RETRY_MARKER_AFTER_S)
        self._complete_later(transactional_id)

    # -- timers ------------------------------------------------------------------------------

    async def _abort_timed_out_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.abort_interval_ms / 1000)
            for write in self.coordinator.abort_timed_out(wall_clock_ms()):
                log_event(logger, logging.INFO, "transaction_timed_out",
                          transactional_id=write.transactional_id)
                await self.run(Decision(ErrorCode.NONE, write), abort_cause="timeout")

    async def _expire_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.expire_interval_ms / 1000)
            for write in self.coordinator.expire_transactional_ids(wall_clock_ms()):
                await self.run(Decision(ErrorCode.NONE, write))
