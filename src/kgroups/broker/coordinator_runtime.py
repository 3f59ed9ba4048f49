"""Runs the sans-IO group coordinator on the broker's event loop.

The shard decides; this shell does the I/O it asks for: replies resolve the futures the group
handlers await, writes become RecordBatch v2 appends to __consumer_offsets (the reply that waits
on a write is released only after the fsync, via GroupCommit), and the shard's timers collapse to
one loop timer at `next_deadline()`. On start every __consumer_offsets partition is replayed into
the shard in the background; requests for a partition still loading get
COORDINATOR_LOAD_IN_PROGRESS from the shard and clients retry, as with Kafka.

A partition that cannot be loaded (a damaged segment, an I/O error, a bug in the loader) is
failed, as Kafka's coordinator runtime fails it: one ERROR line says why (file and byte for
damage), its groups answer NOT_COORDINATOR to group requests, and FindCoordinator answers
COORDINATOR_NOT_AVAILABLE with that reason, which `kgroups groups describe` prints. Nothing of
a damaged partition is loaded: loading what precedes the damage would move committed offsets
back, and the next compaction would make that permanent.

In cluster mode (docs/cluster.md) the broker coordinates only the `__consumer_offsets`
partitions it holds the lease of: the membership runtime calls `partition_gained` (begin
loading, read the partition's batches from the store, load them, then serve) and
`partition_lost` (unload: NOT_COORDINATOR). A write the store refuses because the lease was
lost (FencedError) fails with NOT_COORDINATOR and the partition is unloaded and given up; a
write the store could not be reached for fails with COORDINATOR_NOT_AVAILABLE (retriable),
never a success.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, assert_never

from kgroups.broker.background import BackgroundTasks, TaskCounts
from kgroups.broker.cluster.offsets_reader import cluster_reader
from kgroups.broker.events import log_event
from kgroups.broker.topics import OFFSETS_TOPIC
from kgroups.coordinator import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    PartitionImage,
    latest_values,
    messages,
)
from kgroups.coordinator.bulk_load import OpenTransactions
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from kgroups.coordinator.effects import Effects, GroupEvent, MemberRemoved, RebalanceStarted, Write
from kgroups.coordinator.share_messages import (
    AlterShareOffsetsRequest,
    DeleteShareOffsetsRequest,
    DescribeShareOffsetsRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
    ShareGroupInitializedRequest,
    ShareStateDeletedRequest,
)
from kgroups.coordinator.streams_messages import (
    StreamsGroupDescribeRequest,
    StreamsGroupHeartbeatRequest,
)
from kgroups.errors import ErrorCode
from kgroups.log.batch import BatchCorruptError, build_batch
from kgroups.log.compaction import compact
from kgroups.log.partition_log import PartitionLog
from kgroups.log.segment import Segment, SegmentCorruptError
from kgroups.log.topic_ids import PartitionMetadataError
from kgroups.log.transactions import control_batch
from kgroups.records.codec import encode_record
from kgroups.storage.log_seam import PartitionLogSeam
from kgroups.storage.postgresql import FencedError, StorageUnavailableError

if TYPE_CHECKING:
    from kgroups.broker.appends import AppendNotifier
    from kgroups.broker.config import BrokerConfig
    from kgroups.broker.metrics import CoordinatorMetrics, MetricsServer
    from kgroups.broker.topics import TopicCatalog
    from kgroups.log.durability import GroupCommit
    from kgroups.log.manager import LogManager

logger = logging.getLogger("kgroups.coordinator")

# Kafka's log.cleaner.backoff.ms: how often the offsets partitions are compacted.
_DEFAULT_CLEANER_BACKOFF_MS = 15_000
# Requests naming one group that the shard takes per event-loop turn; the group's others wait,
# in arrival order, for the next turn. Many connections pipelining joins into one group have
# them read in one turn; without the bound the shard would run them all before anyone else's
# request (other groups' commits and heartbeats, fetches) was looked at. (One connection
# yields after connection.FRAMES_IN_A_ROW requests.) Four connections' turns' worth: a request
# that waits costs a future and a task step (~10% of a Heartbeat's CPU), which at 32 every
# request of a group whose 16 members keep 8 requests in flight each paid (bench/broker.py's
# Heartbeat figure), while a turn's 128 joins still cost the others milliseconds.
GROUP_REQUESTS_PER_TURN = 128
# `_apply`'s answer when the effects hold no reply to the request that made them.
_NOT_YET = object()
# Every message the coordinator shard takes; `_dispatch` routes each type to its method.
CoordinatorMessage = (
    messages.JoinGroupRequest | messages.SyncGroupRequest | messages.HeartbeatRequest
    | messages.LeaveGroupRequest | messages.OffsetCommitRequest | messages.OffsetFetchRequest
    | messages.OffsetDeleteRequest | messages.DescribeGroupsRequest | messages.ListGroupsRequest
    | messages.DeleteGroupsRequest | ConsumerGroupHeartbeatRequest
    | ConsumerGroupDescribeRequest | messages.TxnOffsetCommitRequest
    | messages.CompleteTransactionRequest | StreamsGroupHeartbeatRequest
    | StreamsGroupDescribeRequest | ShareGroupHeartbeatRequest
    | ShareGroupDescribeRequest | ShareGroupInitializedRequest | DescribeShareOffsetsRequest
    | AlterShareOffsetsRequest | DeleteShareOffsetsRequest | ShareStateDeletedRequest)


def _groups_named(request: CoordinatorMessage) -> tuple[str, ...]:
    """The groups a request is about: a describe waits behind its groups' earlier requests
    too, so it sees what they did (as Kafka answers a connection's requests in order)."""
    group_id = getattr(request, "group_id", None)
    if group_id is not None:
        return (group_id,)
    if isinstance(request, messages.OffsetFetchRequest):
        return tuple(dict.fromkeys(group.group_id for group in request.groups))
    return tuple(dict.fromkeys(getattr(request, "group_ids", ())))


def batch_of(write: Write, now: int) -> bytes:
    """The batch a write appends: its producer's marker, its producer's transactional batch
    (TxnOffsetCommit: the producer's id and epoch, base sequence 0, as Kafka 4.3.1 writes it),
    or a plain batch of the coordinator's own records (no producer, no sequence)."""
    if write.marker is not None:
        return control_batch(write.producer_id, write.producer_epoch, write.marker.commits,
                             write.marker.coordinator_epoch, now)
    encoded = [encode_record(record) for record in write.records]
    transactional = write.producer_id >= 0
    return build_batch([(key, value, now) for key, value in encoded],
                       producer_id=write.producer_id, producer_epoch=write.producer_epoch,
                       base_sequence=0 if transactional else -1, transactional=transactional)


EncodedRecords = list[tuple[bytes, bytes | None]]


def mergeable(write: Write) -> bool:
    """Whether a write may share its batch with others of its partition: the coordinator's own
    records (a producer's batch or marker stands alone, as its producer wrote it)."""
    return write.marker is None and write.producer_id < 0 and bool(write.records)


def plain_batch(records: EncodedRecords, now: int) -> bytes:
    """A batch of the coordinator's own records: no producer, no sequence."""
    return build_batch([(key, value, now) for key, value in records])


def merged_runs(writes: list[Write], limit: int) -> list[tuple[list[int], EncodedRecords]]:
    """One partition's mergeable writes, in order, encoded and cut into runs of at most
    `limit` bytes of record keys and values (a larger write is a run of its own): each run's
    write ids and records, one batch's worth."""
    runs: list[tuple[list[int], EncodedRecords]] = []
    size = limit
    for write in writes:
        records = []
        write_size = 0
        for record in write.records:  # one loop: no list comprehension and generator per write
            key, value = encoded = encode_record(record)
            records.append(encoded)
            write_size += len(key) + len(value or b"")
        if size + write_size > limit:
            runs.append(([], []))
            size = 0
        runs[-1][0].append(write.write_id)
        runs[-1][1].extend(records)
        size += write_size
    return runs


def wall_clock_ms() -> int:
    """Group timestamps are persisted and compared across restarts, so they are wall-clock."""
    return time.time_ns() // 1_000_000


def coordinator_config(config: BrokerConfig) -> GroupCoordinatorConfig:
    """The coordinator's settings from the broker's group.* / offsets.* properties."""
    properties = config.with_prefixes("group.", "offsets.")
    properties["offsets.topic.num.partitions"] = str(config.offsets_topic_num_partitions)
    return GroupCoordinatorConfig.from_properties(properties)


def read_partition_image(log: PartitionLog) -> tuple[PartitionImage, int, int]:
    """Fold one __consumer_offsets partition into its latest value per key (off the loop: a
    big log takes a while) by the coordinator's bulk replay path. Returns the image, the data
    records read, and how many keys were skipped because their last record does not decode
    (they cannot be replayed; the caller logs them). Damage raises SegmentCorruptError naming
    the segment file and the byte in it."""
    segments = log.segments()
    data = b"".join(s.pread(s.size, 0) for s in segments)
    try:
        return image_of(data)
    except BatchCorruptError as exc:
        raise _locate(segments, exc) from exc


def image_of(data: bytes) -> tuple[PartitionImage, int, int]:
    """The image of a partition's batches (BatchCorruptError at damage), with the data
    records read and the keys skipped: `read_partition_image`'s fold, whatever held them."""
    open_transactions: OpenTransactions = {}
    latest, count = latest_values(data, open_transactions)
    image = PartitionImage()
    skipped = image.apply_raw(latest.items(), skip_undecodable=True)
    for (producer_id, producer_epoch), records in open_transactions.items():
        image.hold_raw(producer_id, producer_epoch, records)
    return image, count, skipped


def _locate(segments: list[Segment], exc: BatchCorruptError) -> SegmentCorruptError:
    """The segment file and byte of a position in the segments' concatenated bytes."""
    position = exc.position
    for segment in segments:
        if position < segment.size or segment is segments[-1]:
            reason = str(exc).replace(f" at byte {exc.position}", "")
            return SegmentCorruptError(segment.log_path, position, reason)
        position -= segment.size
    raise exc  # no segments: nothing to blame


class CoordinatorRuntime:
    """The group coordinator's shell: owned by the Broker as `broker.coordinator`; it reaches
    the topics and logs (for __consumer_offsets), the append notifier (Fetch of
    __consumer_offsets) and the group commit, nothing else of the broker."""

    def __init__(self, config: BrokerConfig, topics: TopicCatalog, logs: LogManager,
                 appends: AppendNotifier, group_commit: GroupCommit,
                 task_counts: TaskCounts | None = None) -> None:
        self._topics = topics
        # Cluster mode: partitions are loaded as their leases are gained, read by `_reader`;
        # `give_up` hands a fenced partition's lease back (set by the broker).
        self._reader = cluster_reader(config)
        self.give_up: Callable[[int], None] = lambda partition: None
        # Each gained partition's load, so a partition lost and gained again mid-load is
        # loaded once, from the newer lease.
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._logs = logs
        self._metrics_address = config.metrics_address
        self.metrics_server: MetricsServer | None = None
        self._appends = appends
        self._group_commit = group_commit
        self.config = coordinator_config(config)
        self.shard = GroupCoordinator(self.config, new_uuid=uuid.uuid4)  # member ids
        self._request_ids = itertools.count(1)
        self._waiting: dict[messages.RequestId, asyncio.Future[Any]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        # Offsets partitions with a failed write the shard has not been told of yet.
        self._failing: set[int] = set()
        # The coordinator's plain writes of this loop turn by partition, appended together at
        # its end (`_append_pending`), as Kafka's coordinator batches its appends.
        self._pending: dict[int, list[Write]] = {}
        self._pending_due: asyncio.Handle | None = None
        self.background = BackgroundTasks(task_counts)
        self.failed_partitions: dict[int, str] = {}  # offsets partition -> why it is not served
        self._loaded = asyncio.Event()
        self._cleaner_backoff_ms = int(
            config.properties.get("log.cleaner.backoff.ms", _DEFAULT_CLEANER_BACKOFF_MS)
        )
        # Kept whether or not metrics are served (rebalances are rare, loads happen once).
        self.rebalance_counts: dict[str, Counter[str]] = {}  # group -> cause -> rebalances
        self.load_seconds: dict[int, float] = {}  # offsets partition -> time to load it
        self._rebalancing_since: dict[str, float] = {}  # group -> monotonic start
        # Set by the broker when metrics are served; None keeps the request path free of them.
        self.metrics: CoordinatorMetrics | None = None
        # The per-group bound of each loop turn (GROUP_REQUESTS_PER_TURN): requests taken this
        # turn, requests waiting for a later one (in order), and requests let go at the turn's
        # start whose tasks have not run yet (a newcomer must not overtake them).
        self._taken: dict[str, int] = {}
        self._waiting_turn: dict[str, deque[asyncio.Future[None]]] = {}
        self._released: Counter[str] = Counter()
        self._turn_ends: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # `_running_loop`

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop running this runtime, kept while it runs: CPython 3.11's
        asyncio.get_running_loop() makes a getpid system call each time (its fork check), and
        the request path asked for the loop several times per request."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Create __consumer_offsets if needed and replay it in the background."""
        partitions = self.config.offsets_topic_num_partitions
        existing = self._topics.partition_count(OFFSETS_TOPIC)
        if existing is None:
            self._topics.create(OFFSETS_TOPIC, partitions)
        elif existing != partitions:
            raise RuntimeError(
                f"{OFFSETS_TOPIC} has {existing} partitions on disk but "
                f"offsets.topic.num.partitions is {partitions}; group placement would change"
            )
        if self._reader is not None:  # cluster mode: each partition loads when leased here
            self._loaded.set()
            if self._metrics_address is not None:
                await self._serve_metrics(*self._metrics_address)
            return
        for partition in range(partitions):
            self.shard.begin_loading(partition)
        self.background.spawn("offsets-loader", self._load_all(partitions),
                              on_crash=self._loader_crashed)
        self.background.supervise("offsets-cleaner",
                                  lambda: self._compact_periodically(partitions))
        if self._metrics_address is not None:
            await self._serve_metrics(*self._metrics_address)

    async def _serve_metrics(self, host: str, port: int) -> None:
        """Metrics are imported and recorded only when served (see kgroups.broker.metrics)."""
        from kgroups.broker.metrics import CoordinatorMetrics, MetricsServer

        self.metrics = CoordinatorMetrics(self, self._logs)
        self.metrics_server = MetricsServer(self.metrics)
        await self.metrics_server.start(host, port)

    async def wait_loaded(self) -> None:
        await self._loaded.wait()

    async def stop(self) -> None:
        """Append the turn's pending writes, then cancel the timer and background work
        (loading, compaction, fsync waits); whatever was appended is made durable by the
        Broker's final flush of every log."""
        self._append_pending()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.background.cancel_all()
        for load in self._loads.values():
            load.cancel()
        self._loads.clear()
        if self._reader is not None:
            self._reader.close()
        for future in self._waiting.values():
            if not future.done():
                future.cancel()
        self._waiting.clear()

    def partition_failure(self, group_id: str) -> str | None:
        """Why the group's __consumer_offsets partition is not served, if it failed."""
        return self.failed_partitions.get(self.shard.partition_of(group_id))

    async def _load_all(self, partitions: int) -> None:
        started = time.monotonic()
        total = 0
        for partition in range(partitions):
            partition_started = time.monotonic()
            try:
                log = self._logs.get_or_create(OFFSETS_TOPIC, partition)
                image, count, skipped = await asyncio.to_thread(read_partition_image, log)
            except (BatchCorruptError, OSError) as exc:
                self._fail_partition(partition, exc)
                continue
            if skipped:
                log_event(logger, logging.WARNING, "offsets_records_skipped",
                          partition=partition, count=skipped)
            total += count
            try:
                self._apply(self.shard.load_image(partition, image, wall_clock_ms()))
            except ValueError as exc:
                # Records of groups placed elsewhere (written by hand through Produce): the
                # partition stays unowned rather than serving groups from the wrong place.
                self._fail_partition(partition, exc)
                continue
            self.load_seconds[partition] = time.monotonic() - partition_started
        self._loaded.set()
        log_event(logger, logging.INFO, "offsets_loaded", partitions=partitions, records=total,
                  failed=len(self.failed_partitions),
                  ms=round((time.monotonic() - started) * 1000))

    # -- cluster mode ------------------------------------------------------------------------

    def partition_gained(self, partition: int) -> None:
        """This broker now leads `__consumer_offsets-<partition>`: its groups answer
        COORDINATOR_LOAD_IN_PROGRESS until the store's batches are read and loaded."""
        self.failed_partitions.pop(partition, None)
        self.shard.begin_loading(partition)
        self._loads[partition] = self._running_loop().create_task(
            self._load_leased(partition), name=f"offsets-load-{partition}")

    def partition_lost(self, partition: int) -> None:
        """Another broker leads it now (or will): its groups answer NOT_COORDINATOR."""
        load = self._loads.pop(partition, None)
        if load is not None:
            load.cancel()
        self._append_pending_of(partition)  # emitted while it was ours: appended (or fenced)
        self._apply(self.shard.unload_partition(partition, wall_clock_ms()))

    async def _load_leased(self, partition: int) -> None:
        assert self._reader is not None
        started = time.monotonic()
        try:
            data = await self._reader.read(OFFSETS_TOPIC, partition)
            image, count, skipped = await asyncio.to_thread(image_of, data)
        except BatchCorruptError as exc:
            self._loads.pop(partition, None)
            self._fail_partition(partition, exc)
            return
        except StorageUnavailableError as exc:
            # Not loaded, and nothing to serve it from: give the lease up so that it is
            # taken again (here or elsewhere) and the load is tried afresh.
            self._loads.pop(partition, None)
            log_event(logger, logging.WARNING, "offsets_load_failed", partition=partition,
                      error=exc)
            self._apply(self.shard.unload_partition(partition, wall_clock_ms()))
            self.give_up(partition)
            return
        self._loads.pop(partition, None)
        if skipped:
            log_event(logger, logging.WARNING, "offsets_records_skipped",
                      partition=partition, count=skipped)
        try:
            self._apply(self.shard.load_image(partition, image, wall_clock_ms()))
        except ValueError as exc:  # records of groups placed elsewhere (see _load_all)
            self._fail_partition(partition, exc)
            return
        self.load_seconds[partition] = time.monotonic() - started
        log_event(logger, logging.INFO, "offsets_partition_loaded", partition=partition,
                  records=count, ms=round(self.load_seconds[partition] * 1000))

    def _fail_partition(self, partition: int, error: BaseException) -> None:
        """Stop loading `partition` for good: its groups get NOT_COORDINATOR from now on."""
        self.failed_partitions[partition] = f"{OFFSETS_TOPIC}-{partition} failed to load: {error}"
        log_event(logger, logging.ERROR, "offsets_partition_failed", partition=partition,
                  error=error)
        self._apply(self.shard.unload_partition(partition, wall_clock_ms()))

    def _loader_crashed(self, error: BaseException) -> None:
        """The loader died of something unforeseen: what it had not loaded fails with it."""
        for partition in sorted(self.shard.loading_partitions):
            self._fail_partition(partition, error)
        self._loaded.set()

    async def _compact_periodically(self, partitions: int) -> None:
        """Kafka's log cleaner for __consumer_offsets: keep the latest record per key."""
        await self._loaded.wait()
        while True:
            await asyncio.sleep(self._cleaner_backoff_ms / 1000)
            for partition in range(partitions):
                if partition in self.failed_partitions:
                    continue
                try:
                    log = self._logs.get(OFFSETS_TOPIC, partition)
                    if log is None or len(log.segments()) < 2:
                        continue
                    result = compact(log, wall_clock_ms())
                except OSError as exc:  # a full disk, say: try again next round
                    log_event(logger, logging.ERROR, "offsets_compaction_failed",
                              partition=partition, error=exc)
                    continue
                if result.records_removed:
                    log_event(logger, logging.INFO, "offsets_compacted", partition=partition,
                              removed=result.records_removed, kept=result.records_kept)
                await asyncio.sleep(0)

    def topics_changed(self) -> None:
        """Give the shard the topics as they are now (name, stable id, partition count): the
        catalogue calls this whenever a topic is created, grown or deleted, so consumer groups
        see the change at their next heartbeat, as Kafka's coordinator sees a metadata image."""
        topics = {}
        for name, count in self._topics.partition_counts().items():
            try:
                topic_id = self._topics.topic_id(name)
            except (OSError, PartitionMetadataError) as exc:
                # Unreadable or unwritable partition.metadata: the topic stays out of consumer
                # groups' view (it cannot be named by id) rather than stopping the broker.
                log_event(logger, logging.WARNING, "topic_id_unavailable", topic=name, error=exc)
                continue
            if topic_id is not None:
                topics[name] = TopicInfo(topic_id, count)
        self.shard.set_topics(topics, wall_clock_ms())

    # -- requests --------------------------------------------------------------------------

    async def call(self, make_request: Callable[[messages.RequestId], CoordinatorMessage]) -> Any:
        """Hand one request to the shard and wait for its reply (which may come much later:
        a JoinGroup is answered when the rebalance completes). A reply in the request's own
        effects (a Heartbeat's, an OffsetFetch's) is returned at once, without a future."""
        request_id = next(self._request_ids)
        metrics = self.metrics
        started = 0.0 if metrics is None else time.monotonic()
        request = make_request(request_id)
        for group_id in _groups_named(request):
            if not self._take_turn(group_id):
                await self._wait_turn(group_id)
        try:
            answer = self._apply(self._dispatch(request, wall_clock_ms()), request_id)
            if answer is _NOT_YET:
                future: asyncio.Future[Any] = self._running_loop().create_future()
                self._waiting[request_id] = future
                try:
                    answer = await future
                finally:
                    self._waiting.pop(request_id, None)
            return answer
        finally:
            if metrics is not None:
                metrics.observe_request(type(request).__name__.removesuffix("Request"),
                                        time.monotonic() - started)

    def _take_turn(self, group_id: str) -> bool:
        """Count a request for `group_id` against this turn, if the group has room in it and
        no earlier request of the group is still waiting or about to run."""
        taken = self._taken.get(group_id, 0)
        if taken >= GROUP_REQUESTS_PER_TURN or group_id in self._waiting_turn \
                or self._released.get(group_id):  # (get: a Counter's miss is Python)
            return False
        self._taken[group_id] = taken + 1
        if self._turn_ends is None:
            self._end_turn_later()
        return True

    async def _wait_turn(self, group_id: str) -> None:
        turn: asyncio.Future[None] = self._running_loop().create_future()
        self._waiting_turn.setdefault(group_id, deque()).append(turn)
        self._end_turn_later()
        try:
            await turn
        finally:
            if turn.done() and not turn.cancelled():
                self._released[group_id] -= 1
                if not self._released[group_id]:
                    del self._released[group_id]

    def _end_turn_later(self) -> None:
        if self._turn_ends is None:
            self._turn_ends = self._running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """A new loop turn: every group's count starts again, and each group's waiting
        requests go on, up to the bound, in the order they came."""
        self._turn_ends = None
        self._taken = {}
        for group_id, queue in list(self._waiting_turn.items()):
            taken = 0
            while queue and taken < GROUP_REQUESTS_PER_TURN:
                turn = queue.popleft()
                if turn.done():  # its request was cancelled (the connection closed)
                    continue
                turn.set_result(None)
                taken += 1
            if not queue:
                del self._waiting_turn[group_id]
            if taken:
                self._taken[group_id] = taken
                self._released[group_id] += taken
        if self._taken:
            self._end_turn_later()

    def _dispatch(self, request: CoordinatorMessage, now: int) -> Effects:
        shard = self.shard
        match request:
            case messages.JoinGroupRequest():
                return shard.join_group(request, now)
            case messages.SyncGroupRequest():
                return shard.sync_group(request, now)
            case messages.HeartbeatRequest():
                return shard.heartbeat(request, now)
            case messages.LeaveGroupRequest():
                return shard.leave_group(request, now)
            case messages.OffsetCommitRequest():
                return shard.offset_commit(request, now)
            case messages.OffsetFetchRequest():
                return shard.offset_fetch(request, now)
            case messages.OffsetDeleteRequest():
                return shard.offset_delete(request, now)
            case messages.DescribeGroupsRequest():
                return shard.describe_groups(request, now)
            case messages.ListGroupsRequest():
                return shard.list_groups(request, now)
            case messages.DeleteGroupsRequest():
                return shard.delete_groups(request, now)
            case ConsumerGroupHeartbeatRequest():
                return shard.consumer_group_heartbeat(request, now)
            case ConsumerGroupDescribeRequest():
                return shard.consumer_group_describe(request, now)
            case messages.TxnOffsetCommitRequest():
                return shard.txn_offset_commit(request, now)
            case messages.CompleteTransactionRequest():
                return shard.complete_transaction(request, now)
            case StreamsGroupHeartbeatRequest():
                return shard.streams_group_heartbeat(request, now)
            case StreamsGroupDescribeRequest():
                return shard.streams_group_describe(request, now)
            case ShareGroupHeartbeatRequest():
                return shard.share_group_heartbeat(request, now)
            case ShareGroupDescribeRequest():
                return shard.share_group_describe(request, now)
            case ShareGroupInitializedRequest():
                return shard.share_group_initialized(request, now)
            case (DescribeShareOffsetsRequest() | AlterShareOffsetsRequest()
                  | DeleteShareOffsetsRequest() | ShareStateDeletedRequest()):
                return shard.share_offsets(request, now)
        assert_never(request)

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   commits: bool, coordinator_epoch: int) -> ErrorCode:
        """The transaction coordinator's marker for `__consumer_offsets-<partition>`: appended
        in this runtime's write order for the partition (after the producer's offsets), then
        the producer's pending offsets there are committed or dropped; NONE once durable."""
        answer: messages.CompleteTransactionResponse = await self.call(
            lambda request_id: messages.CompleteTransactionRequest(
                request_id, partition, producer_id, producer_epoch, commits, coordinator_epoch))
        return answer.error

    # -- effects ---------------------------------------------------------------------------

    def _apply(self, effects: Effects, caller: messages.RequestId | None = None) -> Any:
        """Carry the shard's effects out; the reply to `caller` (the request whose call made
        them) is returned rather than handed to a future (_NOT_YET: there is none yet)."""
        for write in effects.writes:
            self._append(write)
        own: Any = _NOT_YET
        for reply in effects.replies:
            if reply.request_id == caller:
                own = reply.response
                continue
            future = self._waiting.pop(reply.request_id, None)
            if future is not None and not future.done():
                future.set_result(reply.response)
        # Removals first: within one call, a member's removal precedes the state change it causes.
        for removal in effects.removals:
            self._log_member_removed(removal)
        for rebalance in effects.rebalances:
            self._rebalance_started(rebalance)
        for event in effects.events:
            self._log_group_event(event)
            self._time_rebalance(event)
        self._rearm_timer()
        return own

    def _rebalance_started(self, rebalance: RebalanceStarted) -> None:
        """Kafka's "Preparing to rebalance group X in state Y with old generation N (reason:
        ...)" as a structured event, and the count by cause that metrics export."""
        log_event(logger, logging.INFO, "preparing_rebalance", group=rebalance.group_id,
                  state=rebalance.old_state, old_generation=rebalance.old_generation,
                  cause=rebalance.cause.value, reason=rebalance.detail)
        self.rebalance_counts.setdefault(rebalance.group_id, Counter())[rebalance.cause.value] += 1
        self._rebalancing_since.setdefault(rebalance.group_id, time.monotonic())

    def _time_rebalance(self, event: GroupEvent) -> None:
        """A rebalance ends when its group is Stable again (or Empty: everyone left). A group
        that is gone (deleted, expired, moved) takes its counts with it, so groups that come
        and go (console consumers' random ids) do not grow them forever."""
        if event.new_state not in ("Stable", "Empty", "Dead"):
            return
        started = self._rebalancing_since.pop(event.group_id, None)
        if event.new_state == "Dead":
            self.rebalance_counts.pop(event.group_id, None)
        elif started is not None and self.metrics is not None:
            self.metrics.observe_rebalance(time.monotonic() - started)

    def _append(self, write: Write) -> None:
        """Append in the order the shard emitted the writes: the coordinator's own records at
        the end of this loop turn, in one batch with the turn's other writes of the partition
        (an OffsetCommit is acknowledged after that batch, as before after its own: the answer
        waits for no later point than the append, or the fsync, that holds it); a producer's
        batch or marker at once, after the partition's pending writes."""
        partition = write.offsets_partition
        if partition in self._failing:
            self._fail(partition, [write.write_id], ErrorCode.KAFKA_STORAGE_ERROR)
            return
        if mergeable(write):
            self._pending.setdefault(partition, []).append(write)
            if self._pending_due is None:
                self._pending_due = self._running_loop().call_soon(self._append_pending)
            return
        self._append_pending_of(partition)
        self._append_batch(partition, [write.write_id], lambda now: batch_of(write, now), None)

    def _append_pending(self) -> None:
        """The turn's writes, one batch per partition (split at max.message.bytes); once every
        batch is appended, the writes the log acknowledges at once complete together, in one
        call to the shard (one set of effects for the turn's commits to every partition, not
        one per partition; and no completion's effects can append ahead of a batch of the turn
        still to go). This runs from the event loop, outside any `_apply`."""
        self._pending_due = None
        pending, self._pending = self._pending, {}
        appended: list[int] = []
        for partition, writes in pending.items():
            self._append_merged(partition, writes, appended)
        if appended:
            self._complete_all(appended, None)

    def _append_pending_of(self, partition: int) -> None:
        """A partition's pending writes, appended now (before a write that must follow them);
        completed on the next loop turn, as they are appended from inside `_apply`."""
        self._append_merged(partition, self._pending.pop(partition, []), None)

    def _append_merged(self, partition: int, writes: list[Write],
                       appended: list[int] | None) -> None:
        for write_ids, records in merged_runs(writes, self._logs.config.max_message_bytes):
            self._append_batch(partition, write_ids, functools.partial(plain_batch, records),
                               appended)

    def _append_batch(self, partition: int, write_ids: list[int],
                      batch: Callable[[int], bytes], appended: list[int] | None) -> None:
        """Append the batch holding the writes `write_ids` (one partition's; `batch` makes it
        for a timestamp); each completes when the log's flush policy lets it be acknowledged
        (after an fsync in the background where flush.messages asks for one); one the log
        acknowledges at once is added to `appended` for the caller to complete, or (None)
        completed on the next loop turn. Once a write of a partition fails, the later ones already
        emitted are not appended: the shard fails them with it (it reverts to the failed write,
        as Kafka does), so the log must never hold them without it."""
        if partition in self._failing:
            self._fail(partition, write_ids, ErrorCode.KAFKA_STORAGE_ERROR)
            return
        log: PartitionLogSeam | None = (self._topics.log(OFFSETS_TOPIC, partition)
                                        if self._reader is not None
                                        else self._logs.get(OFFSETS_TOPIC, partition))
        error: ErrorCode | None = None
        try:
            if log is None:
                raise FileNotFoundError(f"{OFFSETS_TOPIC}-{partition} is missing")
            log.append_batch(batch(wall_clock_ms()))
        except FencedError as exc:
            # Another broker took the partition (this one was paused, or cut off): nothing
            # was written. NOT_COORDINATOR to the writer, and the partition is given up.
            log_event(logger, logging.WARNING, "offsets_append_fenced", partition=partition,
                      error=exc)
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            self._running_loop().call_soon(self._fenced, partition)
        except StorageUnavailableError as exc:
            # Maybe not written: a retriable error (never a success); the client retries.
            log_event(logger, logging.ERROR, "offsets_append_failed", partition=partition,
                      error=exc)
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        except Exception as exc:
            log_event(logger, logging.ERROR, "offsets_append_failed", partition=partition,
                      error=exc)
            error = ErrorCode.KAFKA_STORAGE_ERROR
        if error is not None:
            self._fail(partition, write_ids, error)
            return
        self._appends.notify()
        # Acknowledged once in the log file (Kafka's default), or at once from the store's
        # log: its append returned after PostgreSQL committed it.
        if isinstance(log, PartitionLog) and log.flush_due:
            self.background.spawn("offsets-fsync", self._await_flush(write_ids, log))
        elif appended is None:
            self._running_loop().call_soon(self._complete_all, write_ids, None)
        else:
            appended.extend(write_ids)

    def _fail(self, partition: int, write_ids: list[int], error: ErrorCode) -> None:
        """Answer the writes with `error` on the next loop turn; until then their partition's
        later writes are failed too instead of appended."""
        self._failing.add(partition)

        def complete() -> None:
            self._failing.discard(partition)  # writes the revert emits append
            self._complete_all(write_ids, error)

        self._running_loop().call_soon(complete)

    def _fenced(self, partition: int) -> None:
        if partition in self.shard.owned_partitions:
            self.partition_lost(partition)
            self.give_up(partition)

    async def _await_flush(self, write_ids: list[int], log: PartitionLog) -> None:
        error: ErrorCode | None = None
        try:
            await self._group_commit.settle(log)
        except Exception as exc:
            # Whatever failed, the write is answered (never left pending); only a disk error is
            # expected, anything else gets its traceback.
            log_event(logger, logging.ERROR, "offsets_fsync_failed", error=exc)
            if not isinstance(exc, OSError):
                logger.error("offsets fsync wait crashed", exc_info=exc)
            error = ErrorCode.KAFKA_STORAGE_ERROR
        self._complete_all(write_ids, error)

    def _complete_all(self, write_ids: list[int], error: ErrorCode | None) -> None:
        self._apply(self.shard.writes_completed(write_ids, error, wall_clock_ms()))

    def _rearm_timer(self) -> None:
        deadline = self.shard.next_deadline()
        if deadline == self._timer_deadline and (deadline is None or self._timer is not None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is not None:
            delay = max(deadline - wall_clock_ms(), 0) / 1000
            self._timer = self._running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline = None
        self._apply(self.shard.advance_time(wall_clock_ms()))

    @staticmethod
    def _log_member_removed(removal: MemberRemoved) -> None:
        log_event(logger, logging.INFO, "member_removed", group=removal.group_id,
                  member=removal.member_id, instance=removal.group_instance_id or "-",
                  reason=removal.reason.value)

    @staticmethod
    def _log_group_event(event: GroupEvent) -> None:
        if event.old_state == "CompletingRebalance" and event.new_state == "Stable":
            log_event(logger, logging.INFO, "rebalance_completed", group=event.group_id,
                      generation=event.generation, members=event.member_count)
        else:
            log_event(logger, logging.INFO, "group_state_changed", group=event.group_id,
                      old=event.old_state or "-", new=event.new_state,
                      generation=event.generation, members=event.member_count)
