"""One __consumer_offsets partition analysed directly, outside Spark (what each Spark task runs),
and the plan that spreads partitions over tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tests.pipeline.logdata import OffsetsLogBuilder, coordinator_partition

from kgroups.pipeline.decode import TOPIC_ROW_SCHEMA
from kgroups.pipeline.discovery import SegmentFile
from kgroups.pipeline.partition import analyze_partition
from kgroups.pipeline.tables import OFFSET_COMMITS, clear_table
from kgroups.pipeline.tasks import plan_tasks
from kgroups.pipeline.topic_logs import TopicLogs
from kgroups.pipeline.window import TimeWindow

T = 1_700_000_000_000
OPEN = TimeWindow()


def analyze(builder: OffsetsLogBuilder, group: str, tmp_path: Path,
            window: TimeWindow = OPEN, topic_logs: TopicLogs | None = None):  # type: ignore[no-untyped-def]
    segments = sorted(str(p) for p in builder.write(tmp_path / "data"))
    out = str(tmp_path / "out")
    clear_table(out, "offset_commits")
    clear_table(out, "partition_lag_minutes")
    result = analyze_partition(coordinator_partition(group), segments, window, topic_logs, out)
    written = pq.read_table(tmp_path / "out" / "offset_commits")
    # Readers see the documented schema: plain strings, UTC timestamps.
    assert written.schema == OFFSET_COMMITS
    return result, written.to_pylist()


def test_a_transaction_is_applied_by_its_marker_in_the_next_segment(tmp_path):
    log = OffsetsLogBuilder()
    log.commit("g", {("t", 0): 5}, T)
    log.commit("g", {("t", 0): 9}, T + 1000, transactional=True, producer_id=3,
               producer_epoch=0)
    log.commit("g", {("t", 1): 4}, T + 1500, transactional=True, producer_id=4,
               producer_epoch=0)
    log.roll("g")
    log.transaction_marker("g", 4, commit=False, ts=T + 1800)
    log.transaction_marker("g", 3, commit=True, ts=T + 2000)
    result, written = analyze(log, "g", tmp_path)
    assert [(r["topic"], r["partition"], r["offset"])
            for r in result.committed_offsets.to_pylist()] == [("t", 0, 9)]
    assert sorted(r["offset"] for r in written) == [5, 9]  # the aborted commit is not history
    assert result.records == 3  # every OffsetCommit record decoded, applied or not
    assert result.max_record_ts == T + 1000


def test_offset_commits_part_holds_the_window_and_state_stops_at_until(tmp_path):
    log = OffsetsLogBuilder()
    for minute in range(5):
        log.commit("g", {("t", 0): 10 * minute, ("t", 1): 10 * minute + 1}, T + minute * 60_000)
    window = TimeWindow(since_ms=T + 60_000, until_ms=T + 3 * 60_000)
    result, written = analyze(log, "g", tmp_path, window)
    assert sorted(r["offset"] for r in written) == [10, 11, 20, 21, 30, 31]
    assert {r["partition"]: r["offset"] for r in result.committed_offsets.to_pylist()} == {
        0: 30, 1: 31}
    minutes = result.commit_minutes.to_pylist()
    assert [r["commits"] for r in minutes] == [2, 2, 2]
    [summary] = result.summary.to_pylist()
    assert (summary["state"], summary["commits"], summary["committed_partitions"]) == (
        "Empty", 6, 2)


def test_lag_windows_and_minutes_follow_the_topic_log(tmp_path):
    log = OffsetsLogBuilder()
    for step in range(12):
        log.commit("g", {("t", 0): step * 10}, T + step * 1000)
    # The topic grew by 10 records a second, always 5 ahead of the group's commits.
    batches = pa.Table.from_pylist(
        [{"file": "f", "topic": "t", "partition": 0, "base_offset": step * 10,
          "last_offset": step * 10 + 4, "max_timestamp": T + step * 1000}
         for step in range(12)],
        schema=TOPIC_ROW_SCHEMA,
    )
    segments = (SegmentFile("f", "t", 0, 0, 1),)
    logs = TopicLogs.from_batches(batches, segments)
    assert logs.log_end_offsets[("t", 0)] == 115
    assert logs.ends_at(("t", 0), np.array([T - 1, T, T + 1500])).tolist() == [0, 5, 15]
    result, _written = analyze(log, "g", tmp_path, topic_logs=logs)
    assert result.current_lag is not None and result.lag_windows is not None
    [current] = result.current_lag.to_pylist()
    assert (current["committed_offset"], current["log_end_offset"], current["lag"]) == (
        110, 115, 5)
    window = result.lag_windows.to_pylist()
    assert [r["offset"] for r in window] == [step * 10 for step in range(2, 12)]
    assert {r["lag"] for r in window} == {5}
    assert result.lag_minutes is not None
    assert result.lag_minutes["lag"].to_pylist() == [5]


def test_lag_over_time_keeps_a_stopped_consumers_lag_growing(tmp_path):
    minute = 60_000
    start = T // minute * minute + minute  # a whole minute
    log = OffsetsLogBuilder()
    # Partition 0 is consumed through minute 5; partition 1's consumer stops after minute 1.
    for m in range(6):
        log.commit("g", {("t", 0): 10 * (m + 1)}, start + m * minute + 1000)
    for m in range(2):
        log.commit("g", {("t", 1): 10 * (m + 1)}, start + m * minute + 2000)
    # Both partitions grow by 10 records a minute, written at the start of each minute; a
    # topic the group does not read is written to last, at minute 8.
    batches = pa.Table.from_pylist(
        [{"file": "f", "topic": "t", "partition": p, "base_offset": 10 * m,
          "last_offset": 10 * m + 9, "max_timestamp": start + m * minute}
         for p in (0, 1) for m in range(6)]
        + [{"file": "f", "topic": "u", "partition": 0, "base_offset": 0, "last_offset": 0,
            "max_timestamp": start + 8 * minute}], schema=TOPIC_ROW_SCHEMA)
    logs = TopicLogs.from_batches(batches, (SegmentFile("f", "t", 0, 0, 1),
                                            SegmentFile("f", "t", 1, 0, 1),
                                            SegmentFile("f", "u", 0, 0, 1)))
    result, _ = analyze(log, "g", tmp_path, topic_logs=logs)
    per_partition = pq.read_table(tmp_path / "out" / "partition_lag_minutes").to_pylist()
    lags = {p: [r["lag"] for r in per_partition if r["partition"] == p] for p in (0, 1)}
    # Followed up to the newest batch of any topic (minute 8), as every group is.
    assert lags[0] == [0] * 9
    # Committed 20 at minute 1, then nothing: 10 behind at minute 2, 40 from minute 5 on.
    assert lags[1] == [0, 0, 10, 20, 30, 40, 40, 40, 40]
    assert [r["committed_offset"] for r in per_partition if r["partition"] == 1] == [
        10, 20, 20, 20, 20, 20, 20, 20, 20]
    # Behind since the batch written at minute 2's start, at each minute's end; the last
    # minute ends with the data (minute 8).
    behind = [0.0, 0.0, 59.999, 119.999, 179.999, 239.999, 299.999, 359.999, 360.0]
    assert [r["lag_seconds"] for r in per_partition if r["partition"] == 1] == behind
    minutes = result.lag_minutes.to_pylist()
    assert [r["lag"] for r in minutes] == [0, 0, 10, 20, 30, 40, 40, 40, 40]
    assert [r["max_lag_seconds"] for r in minutes] == behind
    assert [r["minute"].timestamp() * 1000 for r in minutes] == [
        start + m * minute for m in range(9)]
    # The report's share: both partitions, the lagging one included.
    assert {r["partition"] for r in result.report_partition_lag.to_pylist()} == {0, 1}


def test_plan_keeps_partitions_whole_in_order_and_balances_bytes():
    segments = tuple(
        SegmentFile(f"p{p}-{base}", "__consumer_offsets", p, base, size)
        for p, base, size in [(0, 100, 50), (0, 0, 50), (1, 0, 60), (2, 0, 30), (3, 0, 20),
                              (4, 0, 10)]
    )
    plan = plan_tasks(segments, 3)
    assert len(plan) == 3
    entries = [entry for task in plan for entry in task]
    assert sorted(p for p, _ in entries) == [0, 1, 2, 3, 4]
    assert dict(entries)[0] == ["p0-0", "p0-100"]  # base-offset order
    sizes = {0: 100, 1: 60, 2: 30, 3: 20, 4: 10}
    loads = sorted(sum(sizes[p] for p, _ in task) for task in plan)
    assert loads == [60, 60, 100]
    assert len(plan_tasks(segments, 50)) == 5  # never more tasks than partitions
