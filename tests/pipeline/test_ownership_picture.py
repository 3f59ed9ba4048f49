"""The picture of who held which partition when, as the analyze report shows it: a group whose
members all left holds nothing until the next generation, and that stretch is dark in the
picture; the report pictures the groups that rebalance most and says which it left out."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import matplotlib.colors
import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tests.pipeline.logdata import OffsetsLogBuilder, coordinator_partition

from kgroups.pipeline.ownership_picture import (
    UNOWNED_ALPHA,
    OwnershipPanel,
    Stretch,
    member_colours,
    ownership_figure,
    unowned_gaps,
)
from kgroups.pipeline.ownership_report import MAX_PICTURED_GROUPS, group_panel
from kgroups.pipeline.partition import PartitionResult, analyze_partition
from kgroups.pipeline.report import ReportData, render
from kgroups.pipeline.tables import clear_table
from kgroups.pipeline.window import TimeWindow

T = 1_700_000_000_000
S = T / 1000
NOW = pd.Timestamp(T + 60_000, unit="ms", tz="UTC")
# What an unowned stretch looks like on the white background: black at UNOWNED_ALPHA.
SHADE = round(255 * (1 - UNOWNED_ALPHA))


def _history(tmp_path: Path, group: str = "g", rebalances: int = 3) -> PartitionResult:
    """a holds t-0 and t-1, b holds t-2 and t-3; at 10 s both leave (the group is empty) and
    at 30 s a takes everything; after `rebalances` >= 3, at 40 s c takes t-2 and t-3 is left
    unassigned. Further rebalances (50 s on) move nothing."""
    log = OffsetsLogBuilder()
    log.generation(group, 1, {"a": [("t", 0), ("t", 1)], "b": [("t", 2), ("t", 3)]}, T)
    log.generation(group, 2, {}, T + 10_000)
    log.generation(group, 3, {"a": [("t", p) for p in range(4)]}, T + 30_000)
    for generation in range(4, rebalances + 2):
        log.generation(group, generation, {"a": [("t", 0), ("t", 1)], "c": [("t", 2)]},
                       T + 40_000 + (generation - 4) * 1000)
    segments = sorted(str(p) for p in log.write(tmp_path / group / "data"))
    out = str(tmp_path / group / "out")
    clear_table(out, "offset_commits")
    return analyze_partition(coordinator_partition(group), segments, TimeWindow(), None, out)


def _report(owners: pd.DataFrame, rebalances: pd.DataFrame) -> ReportData:
    return ReportData(inputs=["data"], segments=1, records=1, seconds=0.1,
                      commits_per_minute=pd.DataFrame({"minute": [], "commits": []}),
                      lag_over_time=None, rebalances=rebalances, summary=pd.DataFrame(),
                      errors=pd.DataFrame(), partition_owners=owners, now=NOW)


def _pictures(page: str) -> dict[str, np.ndarray]:
    """Each group's ownership picture in the page, decoded to RGB."""
    found = re.findall(r"<figure class=owners><figcaption><b>([^<]+)</b>.*?"
                       r'src="data:image/png;base64,([^"]+)"', page)
    return {group: matplotlib.image.imread(io.BytesIO(base64.b64decode(png)))[..., :3]
            for group, png in found}


def _shaded(image: np.ndarray) -> int:
    """Pixels of the unowned shade inside a solid 2x2 block of it (the antialiased edges of
    text have single pixels of every grey)."""
    shade = np.all(np.abs(image * 255 - SHADE) <= 2, axis=-1)
    return int((shade[:-1, :-1] & shade[1:, :-1] & shade[:-1, 1:] & shade[1:, 1:]).sum())


def test_the_gaps_are_where_the_history_has_no_owner(tmp_path: Path) -> None:
    owners = _history(tmp_path).partition_owners.to_pandas()
    panel = group_panel("g", owners, NOW)
    assert panel.partitions == ["0", "1", "2", "3"]
    assert (panel.start, panel.end) == (S, S + 60)
    gaps = {p: [(start - S, end - S) for start, end in found]
            for p, found in unowned_gaps(panel).items()}
    # Nobody between the empty generation and the next; t-3 unassigned from 40 s to the end.
    assert gaps == {"0": [(10, 30)], "1": [(10, 30)], "2": [(10, 30)],
                    "3": [(10, 30), (40, 60)]}
    # Who held what is named as the table names members.
    assert {s.member for s in panel.stretches} == {"a", "b", "c"}


def test_overlapping_holders_leave_no_gap() -> None:
    panel = OwnershipPanel("x", ["p"], [Stretch("p", "a", 0, 10), Stretch("p", "b", 5, 20),
                                        Stretch("p", "a", 25, 30)], start=0, end=40)
    assert unowned_gaps(panel) == {"p": [(20, 25), (30, 40)]}


def test_the_rendered_picture_is_dark_where_nobody_held_the_partition() -> None:
    """A real render: pixels inside the unowned stretch are the shade, pixels inside a held
    stretch are the member's colour."""
    panel = OwnershipPanel("g", ["0", "1"], [Stretch("0", "a", 0, 30), Stretch("1", "b", 0, 10),
                                             Stretch("1", "a", 20, 30)], start=0, end=30)
    figure = ownership_figure([panel], x_label="seconds", width=6)
    figure.canvas.draw()
    image = np.asarray(figure.canvas.buffer_rgba())[..., :3].astype(int)
    [axis] = figure.axes

    def pixel(x: float, row: float) -> tuple[int, ...]:
        column, y = axis.transData.transform((x, row))
        return tuple(image[image.shape[0] - round(y), round(column)])

    colour = {m: tuple(round(255 * c) for c in rgba[:3])
              for m, rgba in member_colours(["a", "b"]).items()}
    plt.close(figure)
    assert max(abs(v - SHADE) for v in pixel(15, 1)) <= 2  # partition 1 from 10 s to 20 s
    assert max(abs(v - c) for v, c in zip(pixel(5, 1), colour["b"], strict=True)) <= 2
    assert max(abs(v - c) for v, c in zip(pixel(25, 1), colour["a"], strict=True)) <= 2
    assert max(abs(v - c) for v, c in zip(pixel(15, 0), colour["a"], strict=True)) <= 2


def test_the_report_pictures_the_group_that_rebalanced(tmp_path: Path) -> None:
    result = _history(tmp_path)
    page = render(_report(result.partition_owners.to_pandas(),
                          result.rebalances.to_pandas()))
    section = page.split("<h2>Who held which partition</h2>")[1].split("<h2>")[0]
    pictures = _pictures(section)
    assert list(pictures) == ["g"]
    assert _shaded(pictures["g"]) > 500  # the empty group's 20 s across four rows
    assert "left out" not in section
    # Every member's colour is said under the picture.
    key = section.split("<p class=key>")[1].split("</p>")[0]
    for member, rgba in member_colours(["a", "b", "c"]).items():
        assert f'background:{matplotlib.colors.to_hex(rgba)}"></span>{member}' in key


def test_a_group_always_held_has_no_shade(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    log.generation("steady", 1, {"a": [("t", 0)], "b": [("t", 1)]}, T)
    log.generation("steady", 2, {"a": [("t", 1)], "b": [("t", 0)]}, T + 20_000)
    segments = sorted(str(p) for p in log.write(tmp_path / "data"))
    clear_table(str(tmp_path / "out"), "offset_commits")
    result = analyze_partition(coordinator_partition("steady"), segments, TimeWindow(), None,
                               str(tmp_path / "out"))
    pictures = _pictures(render(_report(result.partition_owners.to_pandas(),
                                        result.rebalances.to_pandas())))
    assert _shaded(pictures["steady"]) == 0


def test_groups_past_the_cap_are_left_out_and_said_so(tmp_path: Path) -> None:
    # Group gK rebalances K + 3 times: g0 rebalances least and is the one past the cap.
    results = [_history(tmp_path, f"g{k}", k + 3) for k in range(MAX_PICTURED_GROUPS + 1)]
    owners = pd.concat([r.partition_owners.to_pandas() for r in results], ignore_index=True)
    rebalances = pd.concat([r.rebalances.to_pandas() for r in results], ignore_index=True)
    page = render(_report(owners, rebalances))
    pictured = _pictures(page)
    assert sorted(pictured) == sorted(f"g{k}" for k in range(1, MAX_PICTURED_GROUPS + 1))
    assert (f"The {MAX_PICTURED_GROUPS} of {MAX_PICTURED_GROUPS + 1} groups with the most "
            "rebalances are pictured; 1 group(s) left out") in page
    # The one left out still has its stretches listed.
    assert "<details><summary><b>g0</b>" in page
