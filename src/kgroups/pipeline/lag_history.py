"""Lag over time, per committed partition and per group: the `partition_lag_minutes` table and
the report's lag charts.

A partition's lag at a moment is the topic's log end then (from the topic's batches,
`TopicLogs.ends_at`) minus the offset the group had committed by then: the last commit stays
in force until the next one. So a consumer that stops committing keeps its lag, which grows
while producers write, instead of dropping out of the figures as it would if lag were only
known at commits. Each group is sampled on one grid, at the end of every minute from its first
commit (or --since) to the end of the data (--until, else the newest record the task saw of
__consumer_offsets or the newest batch of any topic); a span longer than MAX_POINTS minutes
takes wider buckets (a whole number of minutes), so a partition has at most MAX_POINTS rows.
The group's lag at a bucket is the sum over its partitions that had committed by then.

Lag in seconds at a bucket is how long before its end the first record the group had not
consumed was written: the time of the first batch that took the log past the committed offset
(its max timestamp; a batch's records were all written by then, so this reads at most a
batch's span short). The topic scan reads batch headers only, so the exact record's time, which
the `lag` table's lag_seconds reads back for "now", is not at hand here. A group's figure is its
worst partition's (kafka-lag-exporter's max time lag).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kgroups.pipeline import tables
from kgroups.pipeline.topic_logs import TopicLogs
from kgroups.pipeline.window import TimeWindow

MINUTE_MS = 60_000
MAX_POINTS = 1440  # a day of minutes
# The report charts each group's most lagging partitions, each with at most this many points
# (the largest lag of each stretch): readable lines, and little to send back to the driver.
REPORT_PARTITIONS = 8
REPORT_POINTS = 240


@dataclass(frozen=True, slots=True)
class LagHistory:
    """partition_lag_minutes rows, each group's sum per bucket (tables.LAG_MINUTES) and the
    report's share of the first (tables.REPORT_PARTITION_LAG)."""

    partitions: pa.Table
    groups: pa.Table
    report: pa.Table


def _grid(start_ms: int, end_ms: int) -> tuple[np.ndarray, int]:
    """Bucket starts from the minute of `start_ms` to that of `end_ms`, and the bucket width."""
    first = start_ms // MINUTE_MS * MINUTE_MS
    minutes = (max(end_ms, first) - first) // MINUTE_MS + 1
    step = max(1, math.ceil(minutes / MAX_POINTS)) * MINUTE_MS
    return np.arange(first, end_ms + 1, step, dtype=np.int64), step


def lag_history(commits: pd.DataFrame, topic_logs: TopicLogs, window: TimeWindow,
                data_end_ms: int | None) -> LagHistory:
    """From `commits` (group, topic, partition, record_ts, offset: the live commits up to
    --until of topic partitions whose logs are present, in log order)."""
    rows: list[pd.DataFrame] = []
    # The newest batch of any topic: every group's lag is followed up to it, so that groups
    # of different tasks end together (and a stopped consumer's lag as long as producers write).
    newest = max((int(growth.times[-1]) for growth in topic_logs.growth.values()), default=0)
    for group, own in commits.groupby("group", sort=True):
        end = window.until_ms
        if end is None:
            end = max(data_end_ms or 0, int(own["record_ts"].max()), newest)
        start = int(own["record_ts"].min())
        if window.since_ms is not None:
            start = max(start, window.since_ms)
        buckets, step = _grid(start, end)
        at = np.minimum(buckets + step - 1, end)
        for (topic, partition), mine in own.groupby(["topic", "partition"], sort=False):
            key = (str(topic), int(partition))
            order = np.argsort(mine["record_ts"].to_numpy(np.int64), kind="stable")
            times = mine["record_ts"].to_numpy(np.int64)[order]
            offsets = mine["offset"].to_numpy(np.int64)[order]
            index = np.searchsorted(times, at, side="right") - 1
            held = index >= 0
            committed = offsets[index[held]]
            ends = topic_logs.ends_at(key, at[held])
            rows.append(pd.DataFrame({
                "group": str(group), "topic": key[0], "partition": key[1],
                "minute": buckets[held], "committed_offset": committed,
                "log_end_offset": ends, "lag": np.maximum(ends - committed, 0),
                "lag_seconds": _seconds_behind(topic_logs, key, committed, ends, at[held])}))
    if not rows:
        return LagHistory(tables.PARTITION_LAG_MINUTES.empty_table(),
                          tables.LAG_MINUTES.empty_table(),
                          tables.REPORT_PARTITION_LAG.empty_table())
    frame = pd.concat(rows, ignore_index=True)
    partitions = _arrow(frame, tables.PARTITION_LAG_MINUTES)
    groups = frame.groupby(["group", "minute"], sort=True).agg(
        lag=("lag", "sum"), max_lag_seconds=("lag_seconds", "max")).reset_index()
    return LagHistory(partitions, _arrow(groups, tables.LAG_MINUTES),
                      _arrow(_for_report(frame), tables.REPORT_PARTITION_LAG))


def _seconds_behind(topic_logs: TopicLogs, key: tuple[str, int], committed: np.ndarray,
                    ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Seconds from the first batch past each committed offset to its bucket's end (0 where
    the group was caught up)."""
    growth = topic_logs.growth[key]
    behind = ends > committed
    first = np.searchsorted(growth.ends, committed, side="right")
    written = growth.times[np.minimum(first, len(growth.times) - 1)]
    return np.where(behind, np.maximum(at - written, 0) / 1000.0, 0.0)


def _for_report(frame: pd.DataFrame) -> pd.DataFrame:
    """Each group's REPORT_PARTITIONS most lagging partitions (by their largest lag), each
    thinned to at most REPORT_POINTS points, the largest lag of each stretch."""
    kept = []
    for _group, own in frame.groupby("group", sort=False):
        worst = own.groupby(["topic", "partition"], sort=False)["lag"].max()
        top = set(worst.sort_values(ascending=False, kind="stable").index[:REPORT_PARTITIONS])
        for key, series in own.groupby(["topic", "partition"], sort=False):
            if key not in top:
                continue
            stretch = math.ceil(len(series) / REPORT_POINTS)
            if stretch > 1:
                series = series.groupby(np.arange(len(series)) // stretch).agg(
                    {"group": "first", "topic": "first", "partition": "first",
                     "minute": "first", "lag": "max"})
            kept.append(series[["group", "topic", "partition", "minute", "lag"]])
    return pd.concat(kept, ignore_index=True)


def _arrow(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    columns = []
    for field in schema:
        values = frame[field.name].to_numpy()
        if pa.types.is_timestamp(field.type):
            columns.append(pc.cast(pa.array(values.astype(np.int64)), field.type))
        else:
            columns.append(pa.array(values, field.type))
    return pa.Table.from_arrays(columns, schema=schema)
