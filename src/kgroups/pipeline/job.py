"""`kgroups analyze` end to end: discover, analyse every __consumer_offsets partition in Spark,
finish the tables that need all of them, render the report.

Spark runs two kinds of tasks: one per topic segment (one row per batch: offsets and times, for
lag) and one per __consumer_offsets partition (`partition.analyze_partition`). A partition task
writes its own `offset_commits` part, the only table as large as the log, and sends back its
small tables as Arrow IPC bytes; the driver concatenates them, judges lag statuses against the
run's "now" (which needs every partition) and writes the rest.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Broadcast
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from kgroups.pipeline import (
    decode,
    lag_seconds,
    share_tables,
    tables,
    tasks,
    transaction_tables,
)
from kgroups.pipeline.discovery import LogInputs, find_inputs, open_filesystem
from kgroups.pipeline.progress import StepProgress
from kgroups.pipeline.report import ReportData, render
from kgroups.pipeline.store_source import StoreInputs, StoreSource, list_store
from kgroups.pipeline.topic_logs import TopicLogs
from kgroups.pipeline.window import TimeWindow
from kgroups.storage.postgresql import is_store_url

log = logging.getLogger("kgroups.analyze")

# A few tasks per core: enough for the big partitions to balance, few enough that the per-task
# cost (a Python worker round trip) stays small next to the decoding.
TASKS_PER_CORE = 4


@dataclass(frozen=True, slots=True)
class AnalysisResult:
    """What a run produced: where, how much, and what it had to skip."""

    out: str
    tables: tuple[str, ...]
    segments: int  # or, read from a store, its partitions (`units` says which)
    records: int
    errors: int
    seconds: float
    units: str = "segments"


class LogSource(Protocol):
    """Where a run's logs are kept: segment files (`SegmentSource`) or a PostgreSQL store
    (store_source.StoreSource). Each reads the same things its own way; the rest of the run is
    the same."""

    described: list[str]  # the inputs as the report names them
    count: int  # how many `units` were read
    units: str

    def read_topic_batches(self, spark: SparkSession) -> pa.Table | None:
        """decode.TOPIC_ROW_SCHEMA rows of every data topic batch; None without topic logs."""
        ...

    def topic_logs(self, batches: pa.Table) -> TopicLogs: ...

    def analyse_partitions(self, spark: SparkSession, window: TimeWindow,
                           topic_logs: Broadcast[TopicLogs | None], out: str) -> pa.Table:
        """tasks.RESULT_SCHEMA rows of every __consumer_offsets partition."""
        ...

    def add_lag_seconds(self, lag: pa.Table, windows: pa.Table, batches: pa.Table,
                        now_ms: int) -> pa.Table: ...

    def read_transactions(self) -> pa.Table | None:
        """transaction_tables.TRANSACTIONS from __transaction_state; None: not read here."""
        ...

    def read_share_partitions(self) -> pa.Table | None:
        """share_tables.SHARE_PARTITIONS from __share_group_state; None: none found."""
        ...


class SegmentSource:
    """Segment files found by discovery.find_inputs, decoded by Spark tasks."""

    units = "segments"

    def __init__(self, paths: list[str], inputs: LogInputs) -> None:
        self.inputs = inputs
        self.described = list(paths)
        self.count = len(inputs.offsets_segments) + len(inputs.topic_segments)

    def read_topic_batches(self, spark: SparkSession) -> pa.Table | None:
        """One TOPIC_ROW_SCHEMA row per batch of every topic segment, decoded by Spark tasks."""
        segments = self.inputs.topic_segments
        if not segments:
            return None
        plan = tasks.plan_topic_tasks(segments,
                                      TASKS_PER_CORE * spark.sparkContext.defaultParallelism)
        return spark.range(0, len(plan), 1, len(plan)).mapInArrow(
            tasks.topic_task(plan), from_arrow_schema(decode.TOPIC_ROW_SCHEMA)
        ).toArrow()

    def topic_logs(self, batches: pa.Table) -> TopicLogs:
        return TopicLogs.from_batches(batches, self.inputs.topic_segments)

    def analyse_partitions(self, spark: SparkSession, window: TimeWindow,
                           topic_logs: Broadcast[TopicLogs | None], out: str) -> pa.Table:
        plan = tasks.plan_tasks(self.inputs.offsets_segments,
                                TASKS_PER_CORE * spark.sparkContext.defaultParallelism)
        task = tasks.partition_task(plan, window, topic_logs, out)
        return spark.range(0, len(plan), 1, len(plan)).mapInArrow(
            task, from_arrow_schema(tasks.RESULT_SCHEMA)).toArrow()

    def add_lag_seconds(self, lag: pa.Table, windows: pa.Table, batches: pa.Table,
                        now_ms: int) -> pa.Table:
        return lag_seconds.add_lag_seconds(lag, windows, batches, self.inputs.topic_segments,
                                           now_ms)

    def read_transactions(self) -> pa.Table | None:
        return transaction_tables.read_transaction_state(self.inputs.topic_segments)

    def read_share_partitions(self) -> pa.Table | None:
        return share_tables.read_share_state(self.inputs.topic_segments)


def _write_if_read(table: pa.Table | None, out: str, name: str, written: list[str]) -> bool:
    """Write a table read from an internal topic and list it in `written`; when it was not
    read (None), remove what an earlier run into `out` left of it."""
    if table is None:
        tables.remove_table(out, name)
        return False
    tables.write_table(table, out, name)
    written.append(name)
    return True


def _write_text(out: str, name: str, text: str) -> None:
    filesystem, path = open_filesystem(f"{out.rstrip('/')}/{name}")
    with filesystem.open_output_stream(path) as stream:
        stream.write(text.encode("utf-8"))


def run_analysis(
    spark: SparkSession,
    paths: list[str],
    out: str,
    window: TimeWindow | None = None,
    progress: StepProgress | None = None,
    inputs: LogInputs | StoreInputs | None = None,
) -> AnalysisResult:
    """Analyse the __consumer_offsets segments under `paths` into `out`.

    `paths` may instead be one PostgreSQL URL (store_source): the history in a kgroups store.
    `inputs` saves a second listing when the caller already ran `find_inputs(paths)` (or
    `store_source.list_store`). Raises discovery.InputNotFoundError when there is nothing to
    analyse; damaged segments do not raise, they are counted, logged and listed in the report.
    """
    window = window or TimeWindow()
    steps = progress or StepProgress(spark, enabled=False)
    started = time.monotonic()
    source: LogSource
    if isinstance(inputs, StoreInputs):
        source = StoreSource(inputs)
    elif inputs is None and len(paths) == 1 and is_store_url(paths[0]):
        with steps.step("listing the store"):
            source = StoreSource(list_store(paths[0]))
    else:
        if inputs is None:
            with steps.step("finding segment files"):
                inputs = find_inputs(paths)
        log.info("%d __consumer_offsets segments, %d topic segments",
                 len(inputs.offsets_segments), len(inputs.topic_segments))
        source = SegmentSource(paths, inputs)

    topic_logs = None
    topic_errors = tables.ERRORS.empty_table()
    with steps.step("reading topic partition logs"):
        batches = source.read_topic_batches(spark)
    if batches is not None:
        topic_logs = source.topic_logs(batches)
        topic_errors = batches.filter(pc.is_valid(batches["error"])).select(
            ["file", "error_position", "error"]).cast(tables.ERRORS)
    shared_logs = spark.sparkContext.broadcast(topic_logs)

    # The tables the tasks write themselves, one part each.
    tables.clear_table(out, "offset_commits")
    if topic_logs is not None:
        tables.clear_table(out, "partition_lag_minutes")
    else:
        tables.remove_table(out, "partition_lag_minutes")
    with steps.step("analysing __consumer_offsets partitions"):
        results = source.analyse_partitions(spark, window, shared_logs, out)
    shared_logs.unpersist()
    parts = tasks.collect_parts(results)

    with steps.step("writing tables"):
        written = ["offset_commits"]
        for name in ("committed_offsets", "group_generations", "rebalances"):
            tables.write_table(tables.sorted_by(parts[name], "group"), out, name)
            written.append(name)
        causes = tables.sorted_by(parts["rebalance_causes"], "group", "ts", "cause", "member_id")
        tables.write_table(causes, out, "rebalance_causes")
        owners = tables.sorted_by(parts["partition_owners"], "group", "topic", "partition",
                                  "from_ts")
        tables.write_table(owners, out, "partition_owners")
        written.extend(["rebalance_causes", "partition_owners"])
        lag = None
        notes: list[str] = []
        # The run's "now": --until, else the newest record of any partition.
        now_ms = window.until_ms if window.until_ms is not None else (
            pc.max(parts["stats"]["max_record_ts"]).as_py() or 0)
        if topic_logs is not None and batches is not None:
            lag = tables.lag_table(parts["current_lag"], parts["lag_windows"], now_ms,
                                   topic_logs)
            lag = source.add_lag_seconds(lag, parts["lag_windows"], batches, now_ms)
            tables.write_table(tables.sorted_by(lag, "group", "topic", "partition"), out, "lag")
            written.extend(["lag", "partition_lag_minutes"])
        else:
            notes.append("No topic partition logs were found next to __consumer_offsets, so "
                         "the lag table and lag statuses are not produced.")
        summary = tables.sorted_by(tables.summary_table(parts["summary"], lag), "group")
        tables.write_table(summary, out, "group_summary")
        written.append("group_summary")
        transactional = tables.sorted_by(parts["transactional_commits"], "group", "outcome")
        tables.write_table(transactional, out, "transactional_commits")
        written.append("transactional_commits")
        transactions = source.read_transactions()
        if not _write_if_read(transactions, out, "transactions", written):
            notes.append("__transaction_state is not read from a store, so the transactions "
                         "table is not produced.")
        streams_epochs = tables.sorted_by(parts["streams_group_epochs"], "group", "epoch")
        _write_if_read(streams_epochs if streams_epochs.num_rows else None, out,
                       "streams_group_epochs", written)
        share_partitions = source.read_share_partitions()
        _write_if_read(share_partitions, out, "share_partitions", written)

    records = int(pc.sum(parts["stats"]["records"]).as_py() or 0)
    with steps.step("report"):
        errors = tables.sorted_by(pa.concat_tables([parts["errors"], topic_errors]),
                                  "file", "error_position")
        error_rows = errors.to_pandas()
        for row in error_rows.itertuples(index=False):
            log.warning("skipped %s at byte %d: %s", row.file, row.error_position, row.error)
        report = ReportData(
            inputs=source.described,
            segments=source.count,
            units=source.units,
            records=records,
            seconds=time.monotonic() - started,
            commits_per_minute=commits_per_minute(parts["commit_minutes"], now_ms),
            lag_over_time=None if topic_logs is None else tables.sorted_by(
                parts["lag_minutes"], "group", "minute").to_pandas(),
            partition_lag_over_time=None if topic_logs is None else tables.sorted_by(
                parts["report_partition_lag"], "group", "topic", "partition", "minute"
            ).to_pandas(),
            rebalances=tables.sorted_by(parts["rebalances"], "ts").to_pandas(),
            rebalance_causes=causes.to_pandas(),
            partition_owners=owners.to_pandas(),
            summary=summary.to_pandas(),
            errors=error_rows,
            notes=notes,
            partition_lag=None if lag is None else tables.sorted_by(
                lag, "group", "topic", "partition").to_pandas(),
            transactional_commits=transactional.to_pandas(),
            transactions=None if transactions is None else transactions.to_pandas(),
            share_partitions=None if share_partitions is None else share_partitions.to_pandas(),
            streams_group_epochs=streams_epochs.to_pandas(),
            now=pd.Timestamp(now_ms, unit="ms", tz="UTC") if now_ms else None,
        )
        _write_text(out, "report.html", render(report))
    return AnalysisResult(
        out=out,
        tables=tuple(written),
        segments=report.segments,
        units=report.units,
        records=records,
        errors=len(error_rows),
        seconds=time.monotonic() - started,
    )


def commits_per_minute(commit_minutes: pa.Table, until_ms: int | None = None) -> pd.DataFrame:
    """Commits summed over groups per minute, every minute from the first commit's to the last
    one's (or to `until_ms`, the run's "now") included: a minute without a commit is a 0, so a
    plot never carries the last rate on across consumers that stopped."""
    summed = commit_minutes.group_by("minute").aggregate([("commits", "sum")])
    per_minute = summed.select(["minute", "commits_sum"]).rename_columns(["minute", "commits"])
    frame = tables.sorted_by(per_minute, "minute").to_pandas()
    if frame.empty:
        return frame
    last = frame["minute"].iloc[-1]
    if until_ms is not None:
        last = max(last, pd.Timestamp(until_ms // 60_000 * 60_000, unit="ms", tz="UTC"))
    every = pd.date_range(frame["minute"].iloc[0], last, freq="min", name="minute")
    return frame.set_index("minute").reindex(every, fill_value=0).reset_index()
