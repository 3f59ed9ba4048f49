"""DIR/report.html: one self-contained page (plots embedded as base64 PNGs, no external assets),
so it can be mailed or attached to a ticket and still open anywhere."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # no display on servers or Spark drivers

import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads
import pandas as pd

# More lines than this on one lag chart are unreadable; the groups with the most lag are kept.
MAX_LAG_LINES = 12
# A timeline row per group and a bar per rebalance stop being readable (and take matplotlib
# seconds to draw) long before a large cluster's hundreds of groups and thousands of
# rebalances: past these, the timeline keeps the groups that rebalance most and the moved/kept
# chart becomes two stacked areas.
MAX_TIMELINE_GROUPS = 30
MAX_BARS = 200


@dataclass(slots=True)
class ReportData:
    """Small, already aggregated frames: the report never touches the full tables."""

    inputs: list[str]
    segments: int
    records: int
    seconds: float
    commits_per_minute: pd.DataFrame  # minute, commits
    lag_over_time: pd.DataFrame | None  # group, minute, lag (None: no topic logs found)
    rebalances: pd.DataFrame  # group, ts, from_generation, to_generation, partitions_moved, ...
    summary: pd.DataFrame
    errors: pd.DataFrame  # file, error_position, error
    notes: list[str] = field(default_factory=list)


def _png(figure: plt.Figure) -> str:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="" src="data:image/png;base64,{encoded}">'


def _empty(message: str) -> str:
    return f"<p class=empty>{html.escape(message)}</p>"


def commits_chart(frame: pd.DataFrame) -> str:
    if frame.empty:
        return _empty("No offset commits in the analysed window.")
    figure, axes = plt.subplots(figsize=(10, 3))
    axes.plot(frame["minute"], frame["commits"], drawstyle="steps-post")
    axes.set_ylabel("commits / minute")
    return _png(figure)


def lag_chart(frame: pd.DataFrame | None) -> str:
    if frame is None:
        return _empty("No topic partition logs next to __consumer_offsets: lag is unknown.")
    if frame.empty:
        return _empty("No commits of topics whose logs are present.")
    figure, axes = plt.subplots(figsize=(10, 3.5))
    heaviest = frame.groupby("group")["lag"].max().nlargest(MAX_LAG_LINES).index
    for group in sorted(heaviest):
        rows = frame[frame["group"] == group]
        axes.plot(rows["minute"], rows["lag"], drawstyle="steps-post", label=group)
    axes.set_ylabel("lag (records)")
    axes.legend(fontsize="small", loc="upper left")
    return _png(figure)


def rebalance_timeline(frame: pd.DataFrame) -> str:
    if frame.empty:
        return _empty("No rebalances in the analysed window.")
    counts = frame["group"].value_counts()
    groups = sorted(counts.nlargest(MAX_TIMELINE_GROUPS).index)
    shown = frame[frame["group"].isin(groups)]
    rows = {group: index for index, group in enumerate(groups)}
    figure, axes = plt.subplots(figsize=(10, max(1.5, 0.35 * len(groups) + 1)))
    axes.scatter(shown["ts"], shown["group"].map(rows), marker="|", s=200)
    axes.set_yticks(range(len(groups)), groups)
    axes.set_xlabel("time (UTC)")
    if len(groups) < len(counts):
        axes.set_title(f"the {len(groups)} of {len(counts)} groups with the most rebalances",
                       fontsize="small")
    return _png(figure)


def moved_chart(frame: pd.DataFrame) -> str:
    if frame.empty:
        return _empty("No rebalances in the analysed window.")
    ordered = frame.sort_values("ts")
    figure, axes = plt.subplots(figsize=(10, 3))
    positions = range(len(ordered))
    if len(ordered) > MAX_BARS:
        axes.stackplot(positions, ordered["partitions_moved"], ordered["partitions_kept"],
                       labels=["moved", "kept"], alpha=0.7)
        axes.set_xlabel("rebalances, oldest first")
    else:
        labels = [f"{g} {a}→{b}" for g, a, b in zip(
            ordered["group"], ordered["from_generation"], ordered["to_generation"], strict=True)]
        axes.bar(positions, ordered["partitions_moved"], label="moved")
        axes.bar(positions, ordered["partitions_kept"], bottom=ordered["partitions_moved"],
                 label="kept", alpha=0.4)
        if len(labels) <= 40:
            axes.set_xticks(positions, labels, rotation=60, ha="right", fontsize="x-small")
    axes.set_ylabel("partitions")
    axes.legend(fontsize="small")
    return _png(figure)


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return _empty("None.")
    return frame.to_html(index=False, na_rep="", border=0, classes="table")


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em}
.table{border-collapse:collapse;font-size:.85em} .table td,.table th{padding:2px 8px;
border-bottom:1px solid #ddd;text-align:left} .empty{color:#666} .bad{color:#a00}
img{max-width:100%}
"""


def render(data: ReportData) -> str:
    """The whole page as one HTML string."""
    error_note = (
        f"<p class=bad>{len(data.errors)} damaged region(s) skipped; listed below.</p>"
        if not data.errors.empty
        else "<p>No damaged segments.</p>"
    )
    notes = "".join(f"<p>{html.escape(note)}</p>" for note in data.notes)
    parts = [
        "<!doctype html><html><head><meta charset=utf-8><title>kgroups analyze</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>kgroups analyze: consumer groups from __consumer_offsets</h1>",
        f"<p>Inputs: {html.escape(', '.join(data.inputs))}<br>",
        f"{data.segments} segment files, {data.records:,} records decoded in "
        f"{data.seconds:.1f} s.</p>",
        notes,
        error_note,
        "<h2>Commits per minute</h2>", commits_chart(data.commits_per_minute),
        "<h2>Lag over time per group</h2>", lag_chart(data.lag_over_time),
        "<h2>Rebalance timeline</h2>", rebalance_timeline(data.rebalances),
        "<h2>Partitions moved per rebalance</h2>", moved_chart(data.rebalances),
        "<h2>Groups</h2>", _table(data.summary),
        "<h2>Damaged segments</h2>", _table(data.errors),
        "</body></html>",
    ]
    return "".join(parts)
