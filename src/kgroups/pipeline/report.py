"""DIR/report.html: one self-contained page (plots embedded as base64 PNGs, no external assets),
so it can be mailed or attached to a ticket and still open anywhere."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers or Spark drivers

import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads
import pandas as pd

from kgroups.pipeline.ownership_report import ownership_pictures
from kgroups.pipeline.rebalance_report import causes_section, png_img

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
    partition_lag: pd.DataFrame | None = None  # the lag table (None: no topic logs found)
    rebalance_causes: pd.DataFrame | None = None  # the rebalance_causes table
    # group, topic, partition, minute, lag: each group's most lagging partitions over time
    partition_lag_over_time: pd.DataFrame | None = None
    partition_owners: pd.DataFrame | None = None  # the partition_owners table
    # What `segments` counts: segment files ("segments"), or a store's partitions.
    units: str = "segments"
    # transaction_tables.TRANSACTIONAL_COMMITS and TRANSACTIONS (None: not read)
    transactional_commits: pd.DataFrame | None = None
    transactions: pd.DataFrame | None = None
    # share_tables.SHARE_PARTITIONS (None: no __share_group_state found)
    share_partitions: pd.DataFrame | None = None
    streams_group_epochs: pd.DataFrame | None = None  # streams_history.STREAMS_GROUP_EPOCHS
    # The run's "now" (--until, or the newest record): a partition still held is drawn held
    # up to it in the ownership pictures (None: up to the group's last change).
    now: pd.Timestamp | None = None


def _steps(axes: plt.Axes, x: pd.Series, y: pd.Series, **style: Any) -> None:
    """A step line whose every value, the last included, spans its bucket: steps-post draws a
    value from its time to the next, so the last one (and a series of one point) would
    otherwise have no width at all."""
    times = pd.Series(x).reset_index(drop=True)
    values = pd.Series(y).reset_index(drop=True)
    width = times.diff().min() if len(times) > 1 else pd.NaT
    if pd.isna(width) or width <= pd.Timedelta(0):
        width = pd.Timedelta(minutes=1)
    times = pd.concat([times, pd.Series([times.iloc[-1] + width])], ignore_index=True)
    values = pd.concat([values, values.iloc[-1:]], ignore_index=True)
    axes.plot(times, values, drawstyle="steps-post", **style)


def _empty(message: str) -> str:
    return f"<p class=empty>{html.escape(message)}</p>"


def commits_chart(frame: pd.DataFrame) -> str:
    if frame.empty:
        return _empty("No offset commits in the analysed window.")
    figure, axes = plt.subplots(figsize=(10, 3))
    _steps(axes, frame["minute"], frame["commits"])
    axes.set_ylabel("commits / minute")
    axes.set_ylim(bottom=0)
    return png_img(figure)


def lag_chart(frame: pd.DataFrame | None, column: str = "lag",
              label: str = "lag (records)") -> str:
    """The MAX_LAG_LINES groups with the most of `column` (lag in records, or the worst
    partition's lag in seconds) over time, a line each."""
    if frame is None:
        return _empty("No topic partition logs next to __consumer_offsets: lag is unknown.")
    if frame.empty:
        return _empty("No commits of topics whose logs are present.")
    figure, axes = plt.subplots(figsize=(10, 3.5))
    heaviest = frame.groupby("group")[column].max().nlargest(MAX_LAG_LINES).index
    for group in sorted(heaviest):
        rows = frame[frame["group"] == group]
        _steps(axes, rows["minute"], rows[column], label=group)
    axes.set_ylabel(label)
    axes.set_ylim(bottom=0)
    axes.legend(fontsize="small", loc="upper left")
    return png_img(figure)


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
    return png_img(figure)


def moved_chart(frame: pd.DataFrame) -> str:
    if frame.empty:
        return _empty("No rebalances in the analysed window.")
    if not frame["partitions_moved"].fillna(0).any():
        # A chart of zeros is an empty frame on a meaningless axis: say it instead.
        kept = int(frame["partitions_kept"].fillna(0).sum())
        return _empty(f"No partitions moved in {len(frame)} rebalance(s); {kept} partition "
                      "assignment(s) stayed with their member.")
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
    return png_img(figure)


# The summary's columns an operator reads first, in this order; every other column follows in
# the table's own order.
_LEADING_COLUMNS = ("group", "status", "state", "total_lag", "max_lag_seconds")
_STATUS_CLASSES = {"OK": "ok", "WARN": "warn", "ERR": "err", "STOP": "err", "STALL": "err",
                   "REWIND": "err"}


def _is_missing(value: Any) -> bool:
    """None, NaN and NaT: what pandas makes of a null in a column."""
    if value is None or value is pd.NaT or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def _cell(value: Any) -> str:
    """One value as the page shows it: a missing value blank, a whole number without a
    decimal point (pandas holds an integer column with nulls as floats), a time to the second
    in UTC, anything else as text."""
    if _is_missing(value):
        return ""
    if isinstance(value, datetime):
        # May wrap between the date and the clock, nowhere else.
        return value.strftime("<span class=nw>%Y-%m-%d</span> <span class=nw>%H:%M:%S</span>")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return html.escape(str(value))


def _heading(column: str) -> str:
    """A column name that may wrap after each underscore, so that headings do not set the
    width of a column whose values are short."""
    return "_<wbr>".join(html.escape(part) for part in column.split("_"))


# A text column whose every value is a single word this short (a state, a status, a protocol,
# a cause) is never broken inside a word, only after a hyphen or underscore and between the
# parts of a CamelCase word: names long enough to widen the table may wrap anywhere.
MAX_WORD = 24
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


def _words(frame: pd.DataFrame, column: str) -> bool:
    values = [str(v) for v in frame[column] if not _is_missing(v)]
    return bool(values) and all(len(v) <= MAX_WORD and not any(c.isspace() for c in v)
                                for v in values)


def _numeric(frame: pd.DataFrame, column: str) -> bool:
    return pd.api.types.is_numeric_dtype(frame[column]) and not pd.api.types.is_bool_dtype(
        frame[column])


def _row(columns: list[str], numeric: set[str], words: set[str], values: tuple[Any, ...],
         links: dict[str, str]) -> str:
    cells = []
    for column, value in zip(columns, values, strict=True):
        text = _cell(value)
        classes = []
        if column in numeric:
            classes.append("num")
        elif column in words:
            classes.append("word")
            text = _CAMEL.sub("<wbr>", text)
        if column == "group":
            classes.append("name")
        if column in ("status", "group_status") and text in _STATUS_CLASSES:
            classes.append(_STATUS_CLASSES[text])
        if column in links and text:
            text = f'<a href="#{links[column]}">{text}</a>'
        attribute = f' class="{" ".join(classes)}"' if classes else ""
        cells.append(f"<td{attribute}>{text}</td>")
    return "<tr>" + "".join(cells) + "</tr>"


def _table(frame: pd.DataFrame, link_lag: set[str] | None = None) -> str:
    """An HTML table that fits the page: cells wrap (long names anywhere), numbers align right.
    With `link_lag`, the total_lag of those groups links to their per-partition lag."""
    if frame.empty:
        return _empty("None.")
    columns = [str(c) for c in frame.columns]
    numeric = {c for c in columns if _numeric(frame, c)}
    words = {c for c in columns if c not in numeric and c != "group" and _words(frame, c)}
    head = "".join(f'<th{" class=num" if c in numeric else ""}>{_heading(c)}</th>'
                   for c in columns)
    group_at = columns.index("group") if "group" in columns else None
    rows = []
    for values in frame.itertuples(index=False, name=None):
        links = {}
        if link_lag is not None and group_at is not None and values[group_at] in link_lag:
            links["total_lag"] = _lag_anchor(str(values[group_at]))
        rows.append(_row(columns, numeric, words, values, links))
    return (f"<table class=table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _lag_anchor(group: str) -> str:
    """A fragment id for a group's lag details (ids cannot hold every character a name can)."""
    return "lag-" + re.sub(r"[^A-Za-z0-9_-]", lambda m: f".{ord(m.group()):x}.", group)


def _summary_columns(summary: pd.DataFrame) -> pd.DataFrame:
    leading = [c for c in _LEADING_COLUMNS if c in summary.columns]
    return summary[leading + [c for c in summary.columns if c not in leading]]


def _duration(seconds: float) -> str:
    """Seconds as an operator says them: 45 s, 12 min, 3.2 h, 2.1 days."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def partition_lag_chart(rows: pd.DataFrame) -> str:
    """One group's partitions' lag over time, a line each."""
    figure, axes = plt.subplots(figsize=(9, 2.6))
    for (topic, partition), series in rows.groupby(["topic", "partition"], sort=True):
        _steps(axes, series["minute"], series["lag"], label=f"{topic}-{partition}")
    axes.set_ylabel("lag (records)")
    axes.set_ylim(bottom=0)
    axes.legend(fontsize="x-small", loc="upper left", ncols=2)
    return png_img(figure)


def partition_lag(frame: pd.DataFrame | None, over_time: pd.DataFrame | None = None) -> str:
    """Every committed partition's lag, lag in seconds and Burrow status, one closed <details>
    per group: the summary line says the group's status, total lag, how far behind in time its
    worst partition is and which partition is most behind; a click opens its partitions, and
    for the MAX_LAG_LINES groups with the most lag a chart of their most lagging partitions'
    lag over time."""
    if frame is None:
        return _empty("No topic partition logs next to __consumer_offsets: lag is unknown.")
    if frame.empty:
        return _empty("No commits of topics whose logs are present.")
    totals = frame.groupby("group")["lag"].sum()
    charted = set(totals[totals > 0].nlargest(MAX_LAG_LINES).index)
    blocks = []
    for group, rows in frame.groupby("group", sort=True):
        rows = rows.sort_values(["topic", "partition"])
        worst = rows.loc[rows["lag"].idxmax()]
        status = str(rows["group_status"].iloc[0])
        shown = rows.drop(columns=["group", "group_status"])
        behind: Any = rows["lag_seconds"].max() if "lag_seconds" in rows else None
        in_time = "" if _is_missing(behind) else f", up to {_duration(float(behind))} behind"
        chart = ""
        if over_time is not None and group in charted:
            own = over_time[over_time["group"] == group]
            if not own.empty:
                chart = partition_lag_chart(own)
        blocks.append(
            f'<details id="{_lag_anchor(str(group))}"><summary><b>{html.escape(str(group))}'
            f'</b> <span class="{_STATUS_CLASSES.get(status, "")}">{html.escape(status)}</span>'
            f", total lag {int(rows['lag'].sum())} over {len(rows)} partition(s){in_time}; "
            f"most behind: {html.escape(str(worst['topic']))}-{int(worst['partition'])} "
            f"({int(worst['lag'])})</summary>{chart}{_table(shown)}</details>"
        )
    note = ("<p>Lag over time is charted for the groups with the most lag (their most lagging "
            "partitions); the partition_lag_minutes table has every partition.</p>"
            if over_time is not None else "")
    return note + "".join(blocks)


# A group's ownership table stops at this many stretches (its newest); the table has all.
MAX_OWNER_ROWS = 200


def owners_section(owners: pd.DataFrame | None, rebalances: pd.DataFrame,
                   now: pd.Timestamp | None) -> str:
    """Who held which partition when (the partition_owners table): a timeline picture for the
    groups that rebalance most, then one closed <details> per group."""
    if owners is None or owners.empty:
        return _empty("No assignments recorded in the analysed window (groups that only "
                      "commit, or protocols other than consumer).")
    blocks = []
    for group, rows in owners.groupby("group", sort=True):
        changes = len(rows) - rows[["topic", "partition"]].drop_duplicates().shape[0]
        members = rows["member_id"].nunique()
        shown = rows.sort_values("from_ts").tail(MAX_OWNER_ROWS)
        cut = (f"<p>The newest {MAX_OWNER_ROWS} of {len(rows)}.</p>"
               if len(rows) > MAX_OWNER_ROWS else "")
        shown = shown.sort_values(["topic", "partition", "from_ts"]).drop(columns=["group"])
        blocks.append(
            f"<details><summary><b>{html.escape(str(group))}</b>: "
            f"{rows[['topic', 'partition']].drop_duplicates().shape[0]} partition(s), "
            f"{members} member(s), {changes} change(s) of owner</summary>{cut}"
            f"{_table(shown)}</details>")
    return (ownership_pictures(owners, rebalances, now) + "<h3>Stretches per group</h3>"
            "<p>One row per stretch of time a member held a partition (until_ts blank: "
            "still held when the log ends).</p>" + "".join(blocks))


# Tables take the page's width and no more: at 1400 px every column must stay on screen, so
# cells wrap (names anywhere, a time between date and clock) instead of widening the table.
_STYLE = """
body{font-family:system-ui,sans-serif;margin:1em;max-width:1400px}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em}
.table{border-collapse:collapse;font-size:.76em;width:100%;table-layout:auto}
.table td,.table th{padding:2px 3px;border-bottom:1px solid #ddd;text-align:left;
vertical-align:top;overflow-wrap:anywhere}
.table th{background:#f4f4f4;overflow-wrap:normal}
.table .num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.table td.word{overflow-wrap:normal} .nw{white-space:nowrap} .empty{color:#666} .bad{color:#a00}
.ok{color:#060} .warn{color:#a60;font-weight:bold} .err{color:#a00;font-weight:bold}
.table td.ok,.table td.warn,.table td.err{white-space:nowrap} .table td.name{min-width:7em}
details{margin:.3em 0} details>summary{cursor:pointer} details .table{margin:.3em 0 .8em 1.2em;
width:auto;max-width:calc(100% - 1.2em)}
img{max-width:100%} figure.owners{margin:.8em 0} figure.owners figcaption{font-size:.9em}
.key{font-size:.76em;overflow-wrap:anywhere} .swatch{display:inline-block;width:.8em;
height:.8em;margin:0 .25em 0 .8em;vertical-align:middle}
"""

# A link to a group's lag opens its <details> (a closed one would hide what the link points to).
_OPEN_LINKED_DETAILS = """
<script>
function openTarget(){var t=location.hash&&document.getElementById(location.hash.slice(1));
if(t&&t.tagName==="DETAILS"){t.open=true;}}
window.addEventListener("hashchange",openTarget);openTarget();
</script>
"""


# The transactions listed in the report, newest first; the table holds them all.
REPORT_TRANSACTIONS = 50


def transactions_section(commits: pd.DataFrame | None, transactions: pd.DataFrame | None
                         ) -> str:
    """Each group's transactional offset commits by outcome, and the newest transactions of
    __transaction_state."""
    parts = ["<h3>Transactional offset commits per group</h3>",
             "<p>Offsets committed inside transactions (TxnOffsetCommit): committed and aborted "
             "by their transaction's marker; pending ones have no marker yet, and consumers "
             "with require_stable wait for them.</p>"]
    if commits is None or commits.empty:
        parts.append(_empty("No transactional offset commits."))
    else:
        wide = commits.pivot_table(index="group", columns="outcome",
                                   values=["transactions", "offsets"], aggfunc="sum",
                                   fill_value=0)
        columns = {f"{outcome}_{kind}": wide[(kind, outcome)]
                   for outcome in ("committed", "aborted", "pending")
                   for kind in ("transactions", "offsets") if (kind, outcome) in wide}
        parts.append(_table(pd.DataFrame(columns).reset_index()))
    parts.append("<h3>Transactions in __transaction_state</h3>")
    if transactions is None:
        parts.append(_empty("__transaction_state was not read."))
    elif transactions.empty:
        parts.append(_empty("No transactions recorded."))
    else:
        newest = transactions.sort_values("start_ts", ascending=False).head(
            REPORT_TRANSACTIONS).assign(partitions=lambda f: f["partitions"].map(", ".join))
        parts.append(f"<p>The {len(newest)} newest of {len(transactions)}.</p>")
        parts.append(_table(newest[["transactional_id", "producer_id", "producer_epoch",
                                    "state", "partitions", "start_ts", "duration_ms"]]))
    return "".join(parts)


# The streams group epochs listed in the report, newest first; the table holds them all.
REPORT_STREAMS_EPOCHS = 50


def streams_section(epochs: pd.DataFrame | None) -> str:
    """The newest target assignment epochs of the streams groups and the tasks each moved (an
    empty string when no streams group wrote a target: no section)."""
    if epochs is None or epochs.empty:
        return ""
    newest = epochs.sort_values("ts", ascending=False).head(REPORT_STREAMS_EPOCHS)
    return "".join([
        "<h2>Streams groups</h2>",
        "<p>Each target assignment epoch of the streams groups (Kafka Streams with "
        "group.protocol=streams): its members, the active and standby tasks the broker's "
        "assignor placed, and how many moved to another member than in the previous target "
        "(a moved active task restores its state stores on its new instance).</p>",
        f"<p>The {len(newest)} newest of {len(epochs)}.</p>",
        _table(newest)])


def share_section(share_partitions: pd.DataFrame | None) -> str:
    """Each share-partition's records in flight by delivery state (an empty string without
    __share_group_state: no share groups, no section)."""
    if share_partitions is None:
        return ""
    parts = ["<h2>Share groups</h2>",
             "<p>Each share-partition's records past its start offset, as the share coordinator "
             "keeps them in __share_group_state: available (waiting for delivery or acquired), "
             "acknowledged, archived (rejected or at the delivery count limit); redeliveries "
             "are records delivered more than once.</p>"]
    if share_partitions.empty:
        parts.append(_empty("No share-partition state recorded."))
    else:
        parts.append(_table(share_partitions))
    return "".join(parts)


def render(data: ReportData) -> str:
    """The whole page as one HTML string."""
    error_note = (
        f"<p class=bad>{len(data.errors)} damaged region(s) skipped; listed below.</p>"
        if not data.errors.empty
        else "<p>No damaged segments.</p>"
    )
    notes = "".join(f"<p>{html.escape(note)}</p>" for note in data.notes)
    lagging = set() if data.partition_lag is None else set(data.partition_lag["group"])
    parts = [
        "<!doctype html><html><head><meta charset=utf-8><title>kgroups analyze</title>",
        "<meta name=viewport content=\"width=device-width\">",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>kgroups analyze: consumer groups from __consumer_offsets</h1>",
        f"<p>Inputs: {html.escape(', '.join(data.inputs))}<br>",
        f"{data.segments} {html.escape(data.units)}, {data.records:,} records analysed by Spark in "
        f"{data.seconds:.1f} s. Times are UTC.</p>",
        notes,
        error_note,
        "<h2>Commits per minute</h2>", commits_chart(data.commits_per_minute),
        "<h2>Lag over time per group</h2>", lag_chart(data.lag_over_time),
        "<h2>Lag in seconds over time per group</h2>",
        "<p>How long before each minute's end the oldest record a group had not consumed was "
        "written (its worst partition; from the topic's batch times).</p>",
        lag_chart(data.lag_over_time, "max_lag_seconds", "lag (seconds)"),
        "<h2>Rebalance timeline</h2>", rebalance_timeline(data.rebalances),
        "<h2>Partitions moved per rebalance</h2>", moved_chart(data.rebalances),
        "<h2>Why groups rebalance</h2>",
        causes_section(data.rebalance_causes, _table) if data.rebalance_causes is not None
        else _empty("No rebalance causes were inferred."),
        "<h2>Groups</h2>",
        "<p>status: Burrow's verdict over each partition's last 10 commits (OK, WARN, ERR; "
        "a group is ERR when a partition is STOP, STALL or REWIND); total_lag links to the "
        "group's partitions.</p>",
        _table(_summary_columns(data.summary), lagging),
        "<h2>Lag per partition</h2>",
        partition_lag(data.partition_lag, data.partition_lag_over_time),
        "<h2>Who held which partition</h2>", owners_section(data.partition_owners, data.rebalances,
                                                          data.now),
        "<h2>Transactions</h2>", transactions_section(data.transactional_commits,
                                                      data.transactions),
        streams_section(data.streams_group_epochs),
        share_section(data.share_partitions),
        "<h2>Damaged segments</h2>", _table(data.errors),
        _OPEN_LINKED_DETAILS,
        "</body></html>",
    ]
    return "".join(parts)
