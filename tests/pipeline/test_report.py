"""The report's rebalance timeline at a large cluster's scale: hundreds of groups must still
give a readable picture, not a page-long strip."""

from __future__ import annotations

import base64
import re
import struct

import numpy as np
import pandas as pd

from kgroups.pipeline.report import MAX_TIMELINE_GROUPS, rebalance_timeline


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

