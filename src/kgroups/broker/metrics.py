"""Prometheus metrics of the group coordinator, served on a loopback HTTP port when asked.

Off by default (`kgroups.metrics.port`, or `kgroups serve --metrics-port`): a broker nobody
scrapes pays nothing on its request path. Names follow Kafka's own metrics (the request
metrics, the group coordinator's) and kafka-lag-exporter's for the per-partition figures, so
existing dashboards and alerts carry over.

Two kinds of figures:
- counted as things happen (request latencies, rebalance durations): prometheus_client
  histograms the coordinator runtime feeds through `CoordinatorMetrics`;
- read at scrape time (groups by state, members, rebalances by cause, offsets, lag, load times,
  expired offsets, crashes and restarts of background tasks, which are counted whether or not
  metrics are served, transactional ids by state): `CoordinatorMetrics.snapshot` walks the
  coordinator's summaries and the logs, so an OffsetCommit costs nothing extra and a scrape
  sees one consistent moment.
The transaction coordinator's figures (`TransactionMetrics`: aborts by cause, time to commit)
are fed by the transaction runtime once the broker hands it one (`watch_transactions`).
The HTTP server runs on the broker's event loop, so the snapshot reads the coordinator's state
without locks, between two requests; a custom collector turns it into metric families and
prometheus_client formats them in a worker thread, where the loop does not wait for them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, GCCollector, Histogram
from prometheus_client import Counter as PrometheusCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from kgroups.broker.events import log_event
from kgroups.broker.lag_time import RecordTimes, lag_seconds
from kgroups.share.counts import ShareCounts

if TYPE_CHECKING:
    from kgroups.broker.background import BackgroundTasks
    from kgroups.coordinator import GroupCoordinator, GroupSummary
    from kgroups.log.manager import LogManager
    from kgroups.transactions.coordinator import TransactionCoordinator

logger = logging.getLogger("kgroups.metrics")

# Group requests last from microseconds (a heartbeat) to a rebalance timeout (a parked join).
_REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# A transaction lasts from milliseconds (a produce and a commit) to its timeout (15 min at most).
_TRANSACTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                        60.0, 300.0, 900.0)
# Why a transaction was aborted: its producer asked (EndTxn), it outlived its timeout, or a new
# producer with its transactional id fenced the old one (InitProducerId).
ABORT_CAUSES = ("client", "timeout", "fenced")
_MAX_REQUEST_HEAD = 16 * 1024


class CoordinatorState(Protocol):
    """What the collector reads of the coordinator runtime (which imports this module)."""

    shard: GroupCoordinator
    rebalance_counts: dict[str, Counter[str]]  # group -> cause -> rebalances started
    load_seconds: dict[int, float]  # offsets partition -> time to load it
    background: BackgroundTasks  # its counts are the whole broker's (background.TaskCounts)


class CoordinatorMetrics:
    """What the runtime records as it happens, and the scrape-time figures (`snapshot`)."""

    def __init__(self, runtime: CoordinatorState, logs: LogManager) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        # Python's garbage collector by generation (prometheus_client's python_gc_*): a full
        # collection stalls every client (gc_tuning).
        GCCollector(registry=self.registry)
        # Kafka's RequestMetrics TotalTimeMs per request name; its _count gives the rate.
        self.request_time = Histogram(
            "kafka_network_request_total_time_seconds",
            "Time from receiving a group request to its answer, by Kafka request name",
            ["request"], registry=self.registry, buckets=_REQUEST_BUCKETS)
        self.rebalance_time = Histogram(
            "kafka_group_coordinator_rebalance_duration_seconds",
            "Time from a classic group entering PreparingRebalance to Stable (or Empty)",
            registry=self.registry, buckets=_REBALANCE_BUCKETS)
        self._runtime = runtime
        self._logs = logs
        self._transactions: TransactionCoordinator | None = None
        self._share_counts: ShareCounts | None = None

    def watch_share_partitions(self, counts: ShareCounts) -> None:
        """The share partitions' running totals, read at each scrape."""
        self._share_counts = counts

    def watch_transactions(self, coordinator: TransactionCoordinator) -> TransactionMetrics:
        """The transaction coordinator's figures: its ids by state at each scrape, and the
        recorder its runtime feeds as transactions end."""
        self._transactions = coordinator
        return TransactionMetrics(self.registry)

    def observe_request(self, request: str, seconds: float) -> None:
        self.request_time.labels(request).observe(seconds)

    def observe_rebalance(self, seconds: float) -> None:
        self.rebalance_time.observe(seconds)

    async def exposition(self) -> bytes:
        """The text format: the figures read on the loop (`snapshot`), formatted in a thread,
        since formatting 100k samples takes a second the broker's requests should not wait."""
        snapshot = self.snapshot()
        return await asyncio.to_thread(self._render, snapshot)

    def _render(self, snapshot: Snapshot) -> bytes:
        scraped = CollectorRegistry(auto_describe=False)
        scraped.register(SnapshotCollector(snapshot))
        return generate_latest(self.registry) + generate_latest(scraped)

    def snapshot(self) -> Snapshot:
        """Everything read at scrape time, as plain data (on the loop: no locks needed)."""
        runtime = self._runtime
        summaries = runtime.shard.group_summaries()
        now = time.time_ns() // 1_000_000  # record timestamps are wall-clock ms
        # Per partition, once per scrape: its log end and a reader of record timestamps.
        partitions: dict[tuple[str, int], tuple[int, RecordTimes, int] | None] = {}
        rows: list[OffsetRow] = []
        for summary in summaries:
            committed_here = {(topic, partition): committed
                              for topic, partition, committed in summary.offsets}
            # The group's assigned partitions never committed have a row too, with no offset
            # (kafka-lag-exporter's rule: the series exist, their values NaN).
            never = [key for key in summary.assigned if key not in committed_here]
            for key, committed in [*committed_here.items(), *((k, None) for k in never)]:
                if key not in partitions:
                    partitions[key] = self._partition(*key)
                known = partitions[key]
                if known is None or committed is None:
                    rows.append((summary.group_id, *key, committed,
                                 None if known is None else known[0], None))
                    continue
                log_end, times, _ = known
                timestamp = times.first_unconsumed(committed) if committed < log_end else None
                rows.append((summary.group_id, *key, committed, log_end,
                             lag_seconds(committed, log_end, timestamp, now)))
        return Snapshot(
            summaries=summaries,
            rebalance_counts={group: dict(causes)
                              for group, causes in runtime.rebalance_counts.items()},
            offsets_expired=runtime.shard.offsets_expired_total,
            load_seconds=dict(runtime.load_seconds),
            offsets=rows,
            log_ends={key: known[0] for key, known in partitions.items() if known is not None},
            log_starts={key: known[2] for key, known in partitions.items()
                        if known is not None},
            task_crashes=dict(runtime.background.counts.crashes),
            task_restarts=dict(runtime.background.counts.restarts),
            transaction_states=self._transaction_states(),
            share_counts=None if self._share_counts is None else replace(
                self._share_counts, acknowledged=Counter(self._share_counts.acknowledged)))

    def _transaction_states(self) -> dict[str, int] | None:
        if self._transactions is None:
            return None
        found, _ = self._transactions.list_transactions()
        return dict(Counter(txn.state.display_name for txn in found))

    def _partition(self, topic: str, partition: int) -> tuple[int, RecordTimes, int] | None:
        """The partition's log end, timestamp reader and log start; None if it has no log
        (deleted, or offline)."""
        try:
            log = self._logs.get(topic, partition)
        except OSError:
            return None
        if log is None:
            return None
        return log.log_end_offset, RecordTimes(log), log.log_start_offset


# (group, topic, partition, committed offset, log end, lag in seconds); None: not known (a
# committed offset None: an assigned partition the group never committed).
OffsetRow = tuple[str, str, int, int | None, int | None, float | None]


@dataclass(frozen=True, slots=True)
class Snapshot:
    summaries: list[GroupSummary]
    rebalance_counts: dict[str, dict[str, int]]
    offsets_expired: int
    load_seconds: dict[int, float]
    offsets: list[OffsetRow]
    log_ends: dict[tuple[str, int], int]
    log_starts: dict[tuple[str, int], int]
    task_crashes: dict[str, int]  # background task name -> crashes since start
    task_restarts: dict[str, int]  # background task name -> restarts after a crash
    transaction_states: dict[str, int] | None  # state -> transactional ids; None: not watched
    share_counts: ShareCounts | None  # the share partitions' totals (a copy); None: not watched


class SnapshotCollector(Collector):
    """The scrape-time figures of one snapshot, as Prometheus metric families."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot
        summaries = snapshot.summaries
        groups = GaugeMetricFamily(
            "kafka_group_coordinator_group_count",
            "Groups by protocol (classic, consumer) and state", labels=["protocol", "state"])
        for (kind, state), count in sorted(Counter(
                (s.group_type, s.state) for s in summaries).items()):
            groups.add_metric([kind, state], count)
        yield groups

        members = GaugeMetricFamily("kafka_consumergroup_members", "Members of each group",
                                    labels=["group", "protocol"])
        for summary in summaries:
            members.add_metric([summary.group_id, summary.group_type], summary.member_count)
        yield members

        rebalances = CounterMetricFamily(
            "kafka_group_coordinator_group_rebalance",
            "Rebalances the coordinator started, by group and cause", labels=["group", "cause"])
        for group_id, causes in sorted(snapshot.rebalance_counts.items()):
            for cause, count in sorted(causes.items()):
                rebalances.add_metric([group_id, cause], count)
        yield rebalances

        last = GaugeMetricFamily(
            "kafka_group_coordinator_last_rebalance_timestamp_seconds",
            "When the group's last rebalance started, labelled with its cause",
            labels=["group", "cause"])
        for summary in summaries:
            note = summary.last_rebalance
            if note is not None:
                last.add_metric([summary.group_id, note.cause.value], note.started_ms / 1000)
        yield last

        expired = CounterMetricFamily("kafka_group_coordinator_offset_expiration",
                                      "Committed offsets dropped by retention since start")
        expired.add_metric([], snapshot.offsets_expired)
        yield expired

        load = GaugeMetricFamily(
            "kafka_group_coordinator_partition_load_time_seconds",
            "Time to load each __consumer_offsets partition at start", labels=["partition"])
        for partition, seconds in sorted(snapshot.load_seconds.items()):
            load.add_metric([str(partition)], seconds)
        yield load
        yield from self._tasks()
        yield from self._offsets()
        if snapshot.transaction_states is not None:
            states = GaugeMetricFamily(
                "kafka_transaction_coordinator_transactions",
                "Transactional ids by the state of their last transaction (Kafka's state "
                "names)", labels=["state"])
            for state, count in sorted(snapshot.transaction_states.items()):
                states.add_metric([state], count)
            yield states
        if snapshot.share_counts is not None:
            yield from _share_metrics(snapshot.share_counts)

    def _tasks(self) -> Iterator[Metric]:
        """A crashed background task is started again (kgroups.broker.background): an alert
        on these counters' rate finds a loop that keeps crashing, which no log scan would."""
        crashes = CounterMetricFamily(
            "kgroups_background_task_crashes",
            "Crashes of the broker's background tasks (log cleaner, log flusher, offsets "
            "loader and cleaner, network processes) since start", labels=["task"])
        for task, count in sorted(self._snapshot.task_crashes.items()):
            crashes.add_metric([task], count)
        restarts = CounterMetricFamily(
            "kgroups_background_task_restarts",
            "Background tasks started again after a crash, since start", labels=["task"])
        for task, count in sorted(self._snapshot.task_restarts.items()):
            restarts.add_metric([task], count)
        yield from (crashes, restarts)

    def _offsets(self) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        offset = GaugeMetricFamily(
            "kafka_consumergroup_group_offset",
            "Committed offset of each group's partition (NaN: assigned, never committed)",
            labels=labels)
        lag = GaugeMetricFamily(
            "kafka_consumergroup_group_lag",
            "Records between the committed offset and the log end (NaN: assigned, never "
            "committed)", labels=labels)
        lag_time = GaugeMetricFamily(
            "kafka_consumergroup_group_lag_seconds",
            "Age of the first unconsumed record (an estimate when it is gone: see docs; NaN: "
            "assigned, never committed)", labels=labels)
        for group_id, topic, partition, committed, log_end, seconds in self._snapshot.offsets:
            names = [group_id, topic, str(partition)]
            if committed is None:
                # Where such a group starts reading is its consumers' auto.offset.reset, which
                # the broker never sees: the lag is unknown, and said to be so.
                for family in (offset, lag, lag_time):
                    family.add_metric(names, math.nan)
                continue
            offset.add_metric(names, committed)
            if log_end is not None:
                lag.add_metric(names, max(log_end - committed, 0))
            if seconds is not None:
                lag_time.add_metric(names, seconds)
        yield from (offset, lag, lag_time)
        for name, description, offsets in (
                ("kafka_partition_latest_offset", "Log end offset", self._snapshot.log_ends),
                ("kafka_partition_earliest_offset", "Log start offset",
                 self._snapshot.log_starts)):
            gauge = GaugeMetricFamily(
                name, f"{description} of each partition a group committed on or is assigned",
                labels=["topic", "partition"])
            for (topic, partition), value in sorted(offsets.items()):
                gauge.add_metric([topic, str(partition)], value)
            yield gauge


def _share_metrics(counts: ShareCounts) -> Iterator[Metric]:
    """Share groups' records since start: deliveries (redeliveries among them),
    acknowledgements by type, records archived at the delivery count limit, lock timeouts."""
    delivered = CounterMetricFamily(
        "kafka_share_group_records_delivered",
        "Records acquired by share consumers since start (redelivered: delivered before)",
        labels=["delivery"])
    delivered.add_metric(["first"], counts.delivered - counts.redelivered)
    delivered.add_metric(["redelivery"], counts.redelivered)
    yield delivered
    acknowledged = CounterMetricFamily(
        "kafka_share_group_records_acknowledged",
        "Records acknowledged by share consumers since start, by acknowledgement type",
        labels=["type"])
    for kind in ("accept", "release", "reject", "renew", "gap"):
        acknowledged.add_metric([kind], counts.acknowledged[kind])
    yield acknowledged
    archived = CounterMetricFamily(
        "kafka_share_group_records_archived_at_delivery_limit",
        "Records archived because they were delivered share.delivery.count.limit times")
    archived.add_metric([], counts.archived_at_limit)
    yield archived
    timeouts = CounterMetricFamily(
        "kafka_share_group_lock_timeouts",
        "Acquired records released because their acquisition lock ran out")
    timeouts.add_metric([], counts.lock_timeouts)
    yield timeouts


class TransactionMetrics:
    """What the transaction runtime records as transactions end: aborts by cause and the time
    from a transaction's first partition to its commit's markers (when read_committed readers
    see it), and from EndTxn's Prepare record to them (the broker's share of a commit)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.aborts = PrometheusCounter(
            "kafka_transaction_coordinator_aborts",
            "Transactions aborted since start, by cause (client: EndTxn; timeout: older than "
            "its transaction.timeout.ms; fenced: a new producer of its transactional id)",
            ["cause"], registry=registry)
        for cause in ABORT_CAUSES:  # each series exists from the start, at 0
            self.aborts.labels(cause)
        self.commit_time = Histogram(
            "kafka_transaction_coordinator_commit_time_seconds",
            "Time from a transaction's first partition to its COMMIT markers being written",
            registry=registry, buckets=_TRANSACTION_BUCKETS)
        self.markers_time = Histogram(
            "kafka_transaction_coordinator_markers_time_seconds",
            "Time from a commit's or abort's Prepare record to its markers being written",
            ["result"], registry=registry, buckets=_TRANSACTION_BUCKETS)

    def aborted(self, cause: str) -> None:
        self.aborts.labels(cause).inc()

    def completed(self, commits: bool, start_ms: int, prepared_ms: int, done_ms: int) -> None:
        if commits:
            self.commit_time.observe(max(done_ms - start_ms, 0) / 1000)
        self.markers_time.labels("commit" if commits else "abort").observe(
            max(done_ms - prepared_ms, 0) / 1000)


class MetricsServer:
    """A minimal HTTP/1.0 endpoint: GET /metrics (or /) answers the exposition, anything else
    404. Served on the event loop (see the module); one request per connection."""

    def __init__(self, metrics: CoordinatorMetrics) -> None:
        self._metrics = metrics
        self._server: asyncio.Server | None = None
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.host, self.port = self._server.sockets[0].getsockname()[:2]
        log_event(logger, logging.INFO, "metrics_listening", host=host, port=self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            parts = head[:_MAX_REQUEST_HEAD].split(b"\r\n", 1)[0].split()
            path = parts[1].split(b"?", 1)[0] if len(parts) >= 2 else b""
            if parts[:1] == [b"GET"] and path in (b"/", b"/metrics"):
                status, content_type, body = "200 OK", CONTENT_TYPE_LATEST, \
                    await self._metrics.exposition()
            else:
                status, content_type, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                         + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            pass
        finally:
            writer.close()
