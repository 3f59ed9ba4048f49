"""The report as an operator reads it: whole numbers without a decimal point, blanks for what is
not known, every column of every table on screen at 1400 px (checked in headless Chromium), and
each group's partitions one click away."""

from __future__ import annotations

import re
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from tests.pipeline.chromium import layout, screenshot

from kgroups.pipeline import lag_seconds, tables
from kgroups.pipeline.ownership import PARTITION_OWNERS
from kgroups.pipeline.report import ReportData, render

WIDTH = 1400
# Names as long as production ones get: an environment, a team, a service, an instance.
LONG = "payments-reconciliation-settlement-eu-west-1-primary-consumer-{}"
WHEN = datetime(2024, 5, 1, 12, 30, 45, tzinfo=UTC)
# Columns whose values are words, not names; every other text column holds long names.
SHORT_TEXT = {"status": "ERR", "group_status": "ERR", "state": "PreparingRebalance",
              "protocol_type": "consumer", "protocol": "cooperative-sticky",
              "group_type": "classic", "lag_seconds_source": "commit_rate"}


def _value(field: pa.Field, row: int) -> Any:
    """A value of the field's type as wide as real ones get; every third row leaves nullable
    values out, as a group without a generation or a lag does."""
    if row % 3 == 2 and field.name not in ("group", "topic", "partition"):
        return None
    kind = field.type
    if pa.types.is_string(kind):
        return SHORT_TEXT.get(field.name, LONG.format(row))
    if pa.types.is_integer(kind):
        return 1_234_567 + row
    if pa.types.is_floating(kind):
        return 12345.5
    if pa.types.is_timestamp(kind):
        return WHEN
    if pa.types.is_boolean(kind):
        return True
    return None


def _frame(schema: pa.Schema, rows: int) -> pd.DataFrame:
    """A table of `schema` through the same pyarrow -> pandas step the pipeline takes (where an
    integer column with nulls becomes floats)."""
    data = [{f.name: _value(f, row) for f in schema} for row in range(rows)]
    return pa.Table.from_pylist(data, schema=schema).to_pandas()


def wide_report() -> ReportData:
    """Every column the summary and lag tables have (any added later included), filled with
    long names and ten-digit numbers."""
    lag = _frame(pa.schema([*tables.LAG, *lag_seconds.FIELDS]), 6)
    lag["group"] = [LONG.format(row % 2) for row in range(6)]
    lag["lag"] = lag["lag"].fillna(0).astype("int64")
    lag["group_status"] = "ERR"
    owners = _frame(PARTITION_OWNERS, 6)
    owners["group"] = [LONG.format(row % 2) for row in range(6)]
    over_time = pd.DataFrame({
        "group": LONG.format(0), "topic": LONG.format(9), "partition": [0, 0, 0],
        "minute": pd.date_range(WHEN, periods=3, freq="min"), "lag": [5, 50, 500]})
    return ReportData(
        inputs=["/var/lib/kafka/data"],
        segments=3,
        records=12,
        seconds=1.5,
        commits_per_minute=pd.DataFrame({"minute": [], "commits": []}),
        lag_over_time=None,
        rebalances=pd.DataFrame(),
        summary=_frame(tables.SUMMARY, 6),
        errors=pd.DataFrame({"file": ["/var/lib/kafka/data/__consumer_offsets-7/"
                                      "00000000000000001234.log" * 3],
                             "error_position": [4096], "error": ["CRC-32C mismatch " * 8]}),
        partition_lag=lag,
        partition_lag_over_time=over_time,
        partition_owners=owners,
    )


def test_numbers_are_whole_and_nulls_blank() -> None:
    page = render(wide_report())
    assert re.search(r">\s*(None|nan|NaN|NaT|<NA>)\s*<", page) is None
    assert ">1234567<" in page
    assert re.search(r">1234567\.0<", page) is None
    assert "<td class=\"num\"></td>" in page  # a null generation is an empty cell
    assert "2024-05-01</span> <span class=nw>12:30:45<" in page


def test_lag_in_time_over_time_and_who_held_each_partition() -> None:
    page = render(wide_report())
    first = page.split(f"<b>{LONG.format(0)}</b>")[1].split("</details>")[0]
    # 12345.5 s behind at worst, said in the group's line; its partitions charted over time.
    assert "up to 3.4 h behind" in first.split("</summary>")[0]
    assert "<img" in first
    assert ">max_<wbr>lag_<wbr>seconds</th>" in page
    owners = page.split("<h2>Who held which partition</h2>")[1].split("<h2>")[0]
    assert owners.count("<details>") == 2 and ">until_<wbr>ts</th>" in owners


def test_each_groups_partitions_are_one_click_away() -> None:
    page = render(wide_report())
    group = LONG.format(0)
    details = re.findall(r'<details id="([^"]+)"><summary><b>([^<]+)</b>', page)
    assert [name for _, name in details] == sorted({LONG.format(0), LONG.format(1)})
    anchor = details[0][0]
    # The summary's total_lag links to the details, which the page's script opens.
    assert f'<a href="#{anchor}">' in page
    assert group in page.split(f'<details id="{anchor}">')[1].split("</summary>")[0]


@pytest.mark.browser
def test_every_column_is_on_screen_at_1400_px(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(wide_report()))
    found = layout(page, WIDTH)
    assert found.width == WIDTH
    assert found.off == []
    assert found.scroll_width <= WIDTH  # nothing to scroll sideways to
    # States, statuses and protocols stay whole words ("Empt y" read as two).
    assert found.broken == []
    # Every heading of the summary, the lag details, the owners and the damage list was
    # measured.
    for column in [*tables.SUMMARY.names, "committed_offset", "log_end_offset", "lag_seconds",
                   "until_ts", "error"]:
        assert column in found.headers
    png = screenshot(page, tmp_path / "report.png", WIDTH)
    assert struct.unpack(">II", png[16:24])[0] == WIDTH  # PNG IHDR: the window's width
