"""Partition ownership over time as a picture: a row per partition, coloured by the member
holding it, dark where nobody held it. One drawing for both places that show it: the analyze
report (from the partition_owners table) and `kgroups simulate --timeline` (from the
simulator's ledger), so the two read the same way.

It takes plain stretches (partition, member, from, until in seconds) and needs only
matplotlib, not pandas or Spark: the simulator's extra installs matplotlib alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

import matplotlib
import numpy as np

matplotlib.use("Agg")  # no display on servers or Spark drivers

import matplotlib.dates as mdates  # the backend must be chosen before pyplot loads
import matplotlib.pyplot as plt
from matplotlib.collections import PolyCollection

# The colours members get; past this many members they repeat.
PALETTE = "tab20"
PALETTE_SIZE = 20
# The shade of a stretch nobody held: black at this opacity over the row's full height.
UNOWNED_ALPHA = 0.55
# A panel's height in inches: this much per partition row, at least MIN_PANEL_HEIGHT, plus room
# for its title and axis.
ROW_HEIGHT = 0.12
MIN_PANEL_HEIGHT = 2.0
PANEL_MARGIN = 0.6


@dataclass(frozen=True, slots=True)
class Stretch:
    """`member` held `partition` from `start` to `until` (seconds: virtual, or since the Unix
    epoch for a real history)."""

    partition: str
    member: str
    start: float
    until: float


@dataclass(frozen=True, slots=True)
class OwnershipPanel:
    """One group's (or one variant's) ownership from `start` to `end`: a row per partition,
    the first at the bottom. Time before `unmeasured_until` is lightly shaded (the simulator's
    warm-up, which its costs leave out)."""

    title: str
    partitions: Sequence[str]
    stretches: Sequence[Stretch]
    start: float
    end: float
    unmeasured_until: float | None = None


def unowned_gaps(panel: OwnershipPanel) -> dict[str, list[tuple[float, float]]]:
    """Per partition, the stretches of the panel's time range no member held it, in time
    order (overlapping holders count once: a partition is unowned only when nobody has it)."""
    held: dict[str, list[tuple[float, float]]] = {p: [] for p in panel.partitions}
    for stretch in panel.stretches:
        held[stretch.partition].append((stretch.start, stretch.until))
    gaps: dict[str, list[tuple[float, float]]] = {}
    for partition, stretches in held.items():
        cursor = panel.start
        found = []
        for start, until in sorted(stretches):
            if start > cursor:
                found.append((cursor, start))
            cursor = max(cursor, until)
        if cursor < panel.end:
            found.append((cursor, panel.end))
        gaps[partition] = found
    return gaps


def member_colours(members: Iterable[str]) -> dict[str, tuple[float, float, float, float]]:
    """Each member's colour (RGBA), in the order m2 before m10: the same member gets the same
    colour in every panel drawn from the same members."""
    names = sorted(set(members), key=lambda n: (len(n), n))
    palette = plt.get_cmap(PALETTE)
    return {name: palette(i % PALETTE_SIZE) for i, name in enumerate(names)}


def ownership_figure(panels: Sequence[OwnershipPanel], *, x_label: str, utc: bool = False,
                     width: float = 12, max_panel_height: float | None = None,
                     label_rows: bool = False) -> plt.Figure:
    """The panels stacked on one time axis. With `utc`, times are seconds since the epoch and
    the axis reads as UTC dates; `label_rows` names each row (a few partitions) instead of
    numbering them; `max_panel_height` keeps a panel of thousands of partitions on a page
    (its rows get thinner). The caller saves and closes the figure."""
    rows = max(len(panel.partitions) for panel in panels)
    height = max(MIN_PANEL_HEIGHT, ROW_HEIGHT * rows) + PANEL_MARGIN
    if max_panel_height is not None:
        height = min(height, max_panel_height)
    figure, axes = plt.subplots(len(panels), 1, figsize=(width, height * len(panels)),
                                squeeze=False, sharex=True)
    colour = member_colours(s.member for panel in panels for s in panel.stretches)
    for axis, panel in zip(axes[:, 0], panels, strict=True):
        _draw(axis, panel, colour, utc)
        if label_rows:
            axis.set_yticks(range(len(panel.partitions)), panel.partitions, fontsize="x-small")
    if utc:
        locator = mdates.AutoDateLocator()
        axes[-1, 0].xaxis.set_major_locator(locator)
        axes[-1, 0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    axes[-1, 0].set_xlabel(x_label)
    return figure


def _draw(axis: plt.Axes, panel: OwnershipPanel,
          colour: dict[str, tuple[float, float, float, float]], utc: bool) -> None:
    # Matplotlib's dates are days since its epoch: seconds since the Unix epoch map linearly.
    unix_epoch = float(mdates.date2num(datetime.fromtimestamp(0, UTC))) if utc else 0.0
    scale = 1 / 86400 if utc else 1.0

    def x(seconds: float) -> float:
        return unix_epoch + seconds * scale

    row = {partition: i for i, partition in enumerate(panel.partitions)}
    if panel.unmeasured_until is not None:
        axis.axvspan(x(panel.start), x(panel.unmeasured_until), color="0.95")
    held = [(s.start, s.until, row[s.partition]) for s in panel.stretches]
    axis.add_collection(PolyCollection(_boxes(held, unix_epoch, scale, 0.8),
                                       facecolors=[colour[s.member] for s in panel.stretches]))
    gaps = [(start, end, row[partition])
            for partition, found in unowned_gaps(panel).items() for start, end in found]
    axis.add_collection(PolyCollection(_boxes(gaps, unix_epoch, scale, 1.0), facecolors="black",
                                       alpha=UNOWNED_ALPHA))
    axis.set_title(panel.title, fontsize=9)
    axis.set_ylabel("partition")
    axis.set_xlim(x(panel.start), x(panel.end))
    axis.set_ylim(-0.5, len(panel.partitions) - 0.5)


def _boxes(spans: list[tuple[float, float, int]], offset: float, scale: float,
           height: float) -> Sequence[np.ndarray]:
    """A rectangle per (from, until, row), `height` high and centred on its row, as one
    (n, 4, 2) array of corners: matplotlib takes an array of thousands of them at once where a
    list of lists costs a conversion each (its stubs only say Sequence, hence the cast)."""
    if not spans:
        return []
    table = np.array(spans, dtype=float)
    left = offset + table[:, 0] * scale
    right = offset + table[:, 1] * scale
    bottom = table[:, 2] - height / 2
    top = bottom + height
    corners = np.stack([np.stack([left, bottom], 1), np.stack([left, top], 1),
                        np.stack([right, top], 1), np.stack([right, bottom], 1)], 1)
    return cast("Sequence[np.ndarray]", corners)
