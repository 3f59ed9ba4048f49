"""The report's "Why groups rebalance" section: the groups that rebalance most, how often each
cause (the rebalance_causes table) started their rebalances, and when, as one strip of stacked
bars per group over the run's time range."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")  # no display on servers or Spark drivers

import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads
import pandas as pd

# Strips beyond these many groups stop being readable; the table lists a few more.
MAX_CHART_GROUPS = 6
MAX_TABLE_GROUPS = 20
# About this many bars across the time range, each a round span of time.
TARGET_BARS = 40
_BUCKETS = ("1min", "5min", "15min", "1h", "6h", "1D", "7D")


def _bucket(span: pd.Timedelta) -> str:
    for bucket in _BUCKETS:
        if span / pd.Timedelta(bucket) <= TARGET_BARS:
            return bucket
    return _BUCKETS[-1]


def png_img(figure: plt.Figure) -> str:
    """The figure inlined as an <img>, so a report is one self-contained HTML file; the figure
    is closed, as pyplot keeps every open one alive."""
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="" src="data:image/png;base64,{encoded}">'


def cause_counts(causes: pd.DataFrame) -> pd.DataFrame:
    """Per group: its rebalances, how many of them each cause started (a rebalance with two
    causes counts under both), and its last rebalance; the groups that rebalance most first."""
    per_rebalance = causes.drop_duplicates(["group", "to_generation", "ts", "cause"])
    counts = per_rebalance.pivot_table(index="group", columns="cause", values="ts",
                                       aggfunc="count", fill_value=0)
    rebalances = causes.drop_duplicates(["group", "to_generation", "ts"]).groupby("group")
    counts.insert(0, "rebalances", rebalances.size())
    counts["last_rebalance"] = rebalances["ts"].max()
    counts.columns.name = None
    return counts.sort_values(["rebalances", "last_rebalance"], ascending=[False, False]) \
        .reset_index()


def causes_chart(causes: pd.DataFrame, groups: list[str]) -> str:
    """One strip per group: its rebalances per time bucket, stacked by cause."""
    per_rebalance = causes.drop_duplicates(["group", "to_generation", "ts", "cause"])
    bucket = _bucket(per_rebalance["ts"].max() - per_rebalance["ts"].min())
    every_cause = sorted(per_rebalance["cause"].unique())
    colours = dict(zip(every_cause, matplotlib.color_sequences["tab10"], strict=False))
    figure, axes = plt.subplots(len(groups), 1, sharex=True, squeeze=False,
                                figsize=(10, 1.2 + 1.3 * len(groups)))
    width = pd.Timedelta(bucket) * 0.9
    for row, group in zip(axes[:, 0], groups, strict=True):
        own = per_rebalance[per_rebalance["group"] == group]
        table = own.assign(bucket=own["ts"].dt.floor(bucket)).pivot_table(
            index="bucket", columns="cause", values="ts", aggfunc="count", fill_value=0)
        bottom = pd.Series(0, index=table.index)
        for cause in table.columns:
            row.bar(table.index, table[cause], width=width, bottom=bottom, align="edge",
                    color=colours[cause], label=cause)
            bottom = bottom + table[cause]
        row.set_title(group, fontsize="small", loc="left")
        row.set_ylabel("rebalances", fontsize="x-small")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[c]) for c in every_cause]
    axes[0, 0].legend(handles, every_cause, fontsize="x-small", loc="upper left",
                      ncols=min(4, len(every_cause)))
    axes[-1, 0].set_xlabel(f"time (UTC), bars of {bucket}")
    return png_img(figure)


def causes_section(causes: pd.DataFrame, table_html: Callable[[pd.DataFrame], str]) -> str:
    """The section's HTML. `table_html` renders a frame as the report renders its tables."""
    if causes.empty:
        return "<p class=empty>No rebalances in the analysed window.</p>"
    counts = cause_counts(causes)
    shown = [str(g) for g in counts["group"].head(MAX_CHART_GROUPS)]
    note = (f"<p>The {len(shown)} groups that rebalance most, of {len(counts)} that rebalanced. "
            "Causes are inferred from the log (see the rebalance_causes table): a member that "
            "joined, left (member_left), went silent for its session.timeout.ms "
            "(session_timeout) or rebalance.timeout.ms, a static member replaced, or changed "
            "subscriptions or topic metadata.</p>")
    return note + causes_chart(causes, shown) + table_html(counts.head(MAX_TABLE_GROUPS))
