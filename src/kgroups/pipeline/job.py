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

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from kgroups.pipeline import decode, lag_seconds, tables, tasks
from kgroups.pipeline.discovery import LogInputs, SegmentFile, find_inputs, open_filesystem
from kgroups.pipeline.progress import StepProgress
from kgroups.pipeline.report import ReportData, render
from kgroups.pipeline.topic_logs import TopicLogs
from kgroups.pipeline.window import TimeWindow

log = logging.getLogger("kgroups.analyze")

# A few tasks per core: enough for the big partitions to balance, few enough that the per-task
# cost (a Python worker round trip) stays small next to the decoding.
TASKS_PER_CORE = 4


@dataclass(frozen=True, slots=True)
class AnalysisResult:
    """What a run produced: where, how much, and what it had to skip."""

    out: str
    tables: tuple[str, ...]
    segments: int
    records: int
    errors: int
    seconds: float


def _read_topic_logs(spark: SparkSession, segments: tuple[SegmentFile, ...]) -> pa.Table:
    """One TOPIC_ROW_SCHEMA row per batch of every topic segment, decoded by Spark tasks."""
    plan = tasks.plan_topic_tasks(segments,
                                  TASKS_PER_CORE * spark.sparkContext.defaultParallelism)
    return spark.range(0, len(plan), 1, len(plan)).mapInArrow(
        tasks.topic_task(plan), from_arrow_schema(decode.TOPIC_ROW_SCHEMA)
    ).toArrow()


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
    inputs: LogInputs | None = None,
) -> AnalysisResult:
    """Analyse the __consumer_offsets segments under `paths` into `out`.

    `inputs` saves a second listing when the caller already ran `find_inputs(paths)`. Raises
    discovery.InputNotFoundError when there is nothing to analyse; damaged segments do not
    raise, they are counted, logged and listed in the report.
    """
    window = window or TimeWindow()
    steps = progress or StepProgress(spark, enabled=False)
    started = time.monotonic()
    if inputs is None:
        with steps.step("finding segment files"):
            inputs = find_inputs(paths)
    log.info("%d __consumer_offsets segments, %d topic segments",
             len(inputs.offsets_segments), len(inputs.topic_segments))

    topic_logs = None
    topic_errors = tables.ERRORS.empty_table()
    if inputs.topic_segments:
        with steps.step("reading topic partition logs"):
            batches = _read_topic_logs(spark, inputs.topic_segments)
        topic_logs = TopicLogs.from_batches(batches, inputs.topic_segments)
        topic_errors = batches.filter(pc.is_valid(batches["error"])).select(
            ["file", "error_position", "error"]).cast(tables.ERRORS)
    shared_logs = spark.sparkContext.broadcast(topic_logs)

    # The tables the tasks write themselves, one part each.
    tables.clear_table(out, "offset_commits")
    if topic_logs is not None:
        tables.clear_table(out, "partition_lag_minutes")
    else:
        tables.remove_table(out, "partition_lag_minutes")
    plan = tasks.plan_tasks(inputs.offsets_segments,
                            TASKS_PER_CORE * spark.sparkContext.defaultParallelism)
    task = tasks.partition_task(plan, window, shared_logs, out)
    with steps.step("analysing __consumer_offsets partitions"):
        results = spark.range(0, len(plan), 1, len(plan)).mapInArrow(
            task, from_arrow_schema(tasks.RESULT_SCHEMA)).toArrow()
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
        if topic_logs is not None:
            lag = tables.lag_table(parts["current_lag"], parts["lag_windows"], now_ms,
                                   topic_logs)
            lag = lag_seconds.add_lag_seconds(lag, parts["lag_windows"], batches,
                                              inputs.topic_segments, now_ms)
            tables.write_table(tables.sorted_by(lag, "group", "topic", "partition"), out, "lag")
            written.extend(["lag", "partition_lag_minutes"])
        else:
            notes.append("No topic partition logs were found next to __consumer_offsets, so "
                         "the lag table and lag statuses are not produced.")
        summary = tables.sorted_by(tables.summary_table(parts["summary"], lag), "group")
        tables.write_table(summary, out, "group_summary")
        written.append("group_summary")

    records = int(pc.sum(parts["stats"]["records"]).as_py() or 0)
    with steps.step("report"):
        errors = tables.sorted_by(pa.concat_tables([parts["errors"], topic_errors]),
                                  "file", "error_position")
        error_rows = errors.to_pandas()
        for row in error_rows.itertuples(index=False):
            log.warning("skipped %s at byte %d: %s", row.file, row.error_position, row.error)
        report = ReportData(
            inputs=list(paths),
            segments=len(inputs.offsets_segments) + len(inputs.topic_segments),
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
        )
        _write_text(out, "report.html", render(report))
    return AnalysisResult(
        out=out,
        tables=tuple(written),
        segments=report.segments,
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
