"""The report's charts as an operator reads them: the rebalance timeline at a large cluster's
scale (hundreds of groups must still give a readable picture, not a page-long strip), commits
per minute that fall to 0 when consumers stop, and no empty chart where nothing moved."""

from __future__ import annotations

import base64
import re
import struct

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pyarrow as pa

from kgroups.pipeline.job import commits_per_minute
from kgroups.pipeline.report import MAX_TIMELINE_GROUPS, _steps, moved_chart, rebalance_timeline
from kgroups.pipeline.tables import COMMIT_MINUTES

MINUTE = 60_000
T = 1_700_000_040_000  # a whole minute


def rebalances(count: int, groups: int) -> pd.DataFrame:
    return pd.DataFrame({
        "group": [f"g{i % groups}" for i in range(count)],
        "from_generation": np.arange(count),
        "to_generation": np.arange(count) + 1,
        "ts": pd.date_range("2024-01-01", periods=count, freq="min"),
        "partitions_moved": np.arange(count) % 5,
        "partitions_kept": np.arange(count) % 7,
    })


def png_size(page: str) -> tuple[int, int]:
    [encoded] = re.findall(r"base64,([A-Za-z0-9+/=]+)", page)
    width, height = struct.unpack(">II", base64.b64decode(encoded)[16:24])  # IHDR
    return width, height


def test_timeline_of_many_groups_keeps_the_busiest_and_a_bounded_height():
    few = png_size(rebalance_timeline(rebalances(60, MAX_TIMELINE_GROUPS)))
    many = png_size(rebalance_timeline(rebalances(3000, 500)))
    assert many[1] <= few[1] * 1.1  # 500 groups draw no taller than the 30 shown



def test_minutes_without_commits_count_zero_up_to_now():
    # Two groups commit in minutes 0 and 1, then stop; one comes back in minute 4.
    rows = [("a", 0, 5), ("b", 0, 2), ("a", 1, 3), ("a", 4, 1)]
    minutes = pa.Table.from_pylist(
        [{"group": g, "minute": T + m * MINUTE, "commits": n, "last_commit_ts": T + m * MINUTE}
         for g, m, n in rows], schema=COMMIT_MINUTES)
    frame = commits_per_minute(minutes)
    assert list(frame["commits"]) == [7, 3, 0, 0, 1]
    assert list(frame["minute"].astype("int64") // 10**6 // MINUTE - T // MINUTE) == [
        0, 1, 2, 3, 4]
    # Up to the run's "now": the consumers that stopped read 0, not their last rate.
    assert list(commits_per_minute(minutes, T + 6 * MINUTE + 5)["commits"]) == [
        7, 3, 0, 0, 1, 0, 0]


def test_rebalances_that_moved_nothing_say_so_instead_of_an_empty_chart():
    frame = rebalances(3, 1).assign(partitions_moved=0, partitions_kept=[4, 4, 0])
    page = moved_chart(frame)
    assert "<img" not in page
    assert "No partitions moved in 3 rebalance(s); 8" in page
    assert "<img" in moved_chart(rebalances(3, 1))  # something moved: the chart


def test_the_last_value_of_a_step_line_spans_its_bucket():
    """steps-post draws a value up to the next point: the last one (a stopped consumer's lag
    now, a group with one sample) gets its bucket's width, or it would not show."""
    figure, axes = plt.subplots()
    minutes = pd.date_range("2024-01-01", periods=3, freq="5min")
    _steps(axes, minutes, pd.Series([1, 2, 40]))
    _steps(axes, minutes[:1], pd.Series([7]))
    many, one = axes.lines
    assert list(many.get_ydata()) == [1, 2, 40, 40]
    assert pd.Timestamp(many.get_xdata()[-1]) == minutes[-1] + pd.Timedelta(minutes=5)
    assert pd.Timestamp(one.get_xdata()[-1]) == minutes[0] + pd.Timedelta(minutes=1)
    plt.close(figure)
