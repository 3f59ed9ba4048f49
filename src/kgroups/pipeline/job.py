"""`kgroups analyze` end to end: discover, decode in Spark, write the tables, render the report.

The decoded rows are persisted once (commits and the other records as two narrow caches) and every
table is derived from them, whatever the number of tables.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kgroups.pipeline import decode, tables
from kgroups.pipeline.discovery import LogInputs, find_inputs, open_filesystem
from kgroups.pipeline.progress import StepProgress
from kgroups.pipeline.report import ReportData, render

log = logging.getLogger("kgroups.analyze")

@dataclass(frozen=True, slots=True)
class AnalysisResult:
    """What a run produced: where, how much, and what it had to skip."""

    out: str
    tables: tuple[str, ...]
    segments: int
    records: int
    errors: int
    seconds: float


def _write(frame: DataFrame, out: str, name: str) -> None:
    frame.write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}")


def _read_back(spark: SparkSession, out: str, name: str) -> DataFrame:
    """A table just written: reading its Parquet beats recomputing the joins behind it."""
    return spark.read.parquet(f"{out.rstrip('/')}/{name}")


def _write_text(out: str, name: str, text: str) -> None:
    filesystem, path = open_filesystem(f"{out.rstrip('/')}/{name}")
    with filesystem.open_output_stream(path) as stream:
        stream.write(text.encode("utf-8"))


def run_analysis(
    spark: SparkSession,
    paths: list[str],
    out: str,
    window: tables.TimeWindow | None = None,
    progress: StepProgress | None = None,
    inputs: LogInputs | None = None,
) -> AnalysisResult:
    """Analyse the __consumer_offsets segments under `paths` into `out`.

    `inputs` saves a second listing when the caller already ran `find_inputs(paths)`. Raises
    discovery.InputNotFoundError when there is nothing to analyse; damaged segments do not
    raise, they are counted, logged and listed in the report.
    """
    window = window or tables.TimeWindow()
    steps = progress or StepProgress(spark, enabled=False)
    started = time.monotonic()
    if inputs is None:
        with steps.step("finding segment files"):
            inputs = find_inputs(paths)
    log.info("%d __consumer_offsets segments, %d topic segments",
             len(inputs.offsets_segments), len(inputs.topic_segments))

    # Commits are nearly every record: decoded once into a narrow cache that every table
    # reads. The other records are few, decoded in a second pass over the files.
    decoded_commits = tables.decode_commits(spark, inputs.offsets_segments).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    others = tables.decode_other_records(spark, inputs.offsets_segments).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    with steps.step("decoding __consumer_offsets"):
        kinds = {row["kind"]: row["count"] for row in others.groupBy("kind").count().collect()}
        records = decoded_commits.count() + kinds.get(decode.GROUP, 0)

    topic_batches = None
    if inputs.topic_segments:
        topic_batches = tables.decode_topics(spark, inputs.topic_segments).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        with steps.step("reading topic partition logs"):
            topic_batches.count()

    # Not persisted: a filter and a broadcast lookup over the cached rows, cheaper than a
    # second copy of them; the lookup itself is small and computed once.
    transactions = tables.committed_transactions(decoded_commits, others).persist()
    applied_commits = tables.applied_records(decoded_commits, transactions)
    applied_groups = tables.applied_records(tables.group_records(others), transactions)
    commits = tables.offset_commits(applied_commits, window)
    with steps.step("offset_commits"):
        _write(commits.drop("record_ts"), out, "offset_commits")
    committed = tables.committed_offsets(applied_commits, applied_groups, window).persist()
    with steps.step("committed_offsets"):
        _write(committed, out, "committed_offsets")
    events = tables.group_events(applied_groups, window).persist()
    with steps.step("group_generations"):
        _write(tables.group_generations(events, window), out, "group_generations")
    found_rebalances = tables.rebalances(events, window).persist()
    with steps.step("rebalances"):
        _write(found_rebalances, out, "rebalances")

    written = ["offset_commits", "committed_offsets", "group_generations", "rebalances"]
    current_lag = None
    lag_over_time = None
    notes: list[str] = []
    if topic_batches is not None:
        now_ms = window.until_ms
        if now_ms is None:
            latest = (applied_commits.select("record_ts")
                      .unionByName(applied_groups.select("record_ts"))
                      .agg(F.max("record_ts")).first())
            now_ms = int(latest[0]) if latest and latest[0] is not None else 0
        ends = tables.log_end_offsets(topic_batches, spark, inputs.topic_segments)
        history_rows = tables.lag_history(commits, topic_batches).persist()
        current_lag = tables.lag(committed, ends, history_rows, now_ms).persist()
        with steps.step("lag"):
            _write(current_lag, out, "lag")
        written.append("lag")
        with steps.step("lag over time"):
            lag_over_time = _lag_per_minute(history_rows)
    else:
        notes.append("No topic partition logs were found next to __consumer_offsets, so the "
                     "lag table and lag statuses are not produced.")

    commit_minutes = tables.commits_per_group_minute(commits).persist()
    summary = tables.group_summary(events, committed, commit_minutes, found_rebalances,
                                   current_lag)
    with steps.step("group_summary"):
        _write(summary, out, "group_summary")
    written.append("group_summary")

    with steps.step("report"):
        found_errors = tables.errors(others, topic_batches).orderBy("file", "error_position")
        error_rows = found_errors.toPandas()
        for row in error_rows.itertuples(index=False):
            log.warning("skipped %s at byte %d: %s", row.file, row.error_position, row.error)
        report = ReportData(
            inputs=list(paths),
            segments=len(inputs.offsets_segments) + len(inputs.topic_segments),
            records=records,
            seconds=time.monotonic() - started,
            commits_per_minute=_commits_per_minute(commit_minutes),
            lag_over_time=lag_over_time,
            rebalances=_read_back(spark, out, "rebalances").orderBy("ts").toPandas(),
            summary=_read_back(spark, out, "group_summary").orderBy("group").toPandas(),
            errors=error_rows,
            notes=notes,
        )
        _write_text(out, "report.html", render(report))
    cached = (decoded_commits, others, transactions, committed, events, found_rebalances,
              topic_batches, current_lag, commit_minutes)
    for frame in cached:
        if frame is not None:
            frame.unpersist()
    return AnalysisResult(
        out=out,
        tables=tuple(written),
        segments=report.segments,
        records=records,
        errors=len(error_rows),
        seconds=time.monotonic() - started,
    )


def _commits_per_minute(commit_minutes: DataFrame) -> pd.DataFrame:
    return (
        commit_minutes.groupBy("minute")
        .agg(F.sum("commits").alias("commits"))
        .orderBy("minute")
        .toPandas()
    )


def _lag_per_minute(history_rows: DataFrame) -> pd.DataFrame:
    """A group's lag in a minute: the sum over its partitions of each one's last lag then."""
    minute = F.date_trunc("minute", F.timestamp_millis("record_ts")).alias("minute")
    per_partition = history_rows.groupBy("group", "topic", "partition", minute).agg(
        F.max_by("lag", F.struct("log_partition", "log_offset")).alias("lag")
    )
    return (
        per_partition.groupBy("group", "minute")
        .agg(F.sum("lag").alias("lag"))
        .orderBy("group", "minute")
        .toPandas()
    )
