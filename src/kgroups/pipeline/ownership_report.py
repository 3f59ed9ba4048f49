"""The report's pictures of who held which partition when: for the groups that rebalance most,
the partition_owners table as a timeline (a row per partition, coloured by its holder, dark
where nobody held it), drawn as `kgroups simulate --timeline` draws a simulated group."""

from __future__ import annotations

import html

import matplotlib.colors
import pandas as pd

from kgroups.pipeline import history
from kgroups.pipeline.ownership_picture import (
    PALETTE_SIZE,
    OwnershipPanel,
    Stretch,
    member_colours,
    ownership_figure,
)
from kgroups.pipeline.rebalance_report import png_img

# A picture per group; past these many the page is a scroll of pictures nobody compares, so
# the groups that rebalance most are kept, as the rebalance timeline keeps them.
MAX_PICTURED_GROUPS = 6
# Up to this many partitions a row is named; past it rows are numbered (names would not fit).
MAX_NAMED_ROWS = 40
# Inches: a group of thousands of partitions still fits a screen (its rows get thinner).
MAX_PICTURE_HEIGHT = 9.0


def pictured_groups(owners: pd.DataFrame, rebalances: pd.DataFrame) -> list[str]:
    """The groups with assignments to draw: the MAX_PICTURED_GROUPS with the most rebalances
    (ties by name)."""
    counts = (rebalances["group"].value_counts() if "group" in rebalances
              else pd.Series(dtype="int64"))
    groups = sorted({str(g) for g in owners["group"]},
                    key=lambda g: (-int(counts.get(g, 0)), g))
    return groups[:MAX_PICTURED_GROUPS]


def group_panel(group: str, rows: pd.DataFrame, now: pd.Timestamp | None) -> OwnershipPanel:
    """One group's partition_owners rows as a panel from its first stretch to `now` (the run's
    end, up to which a stretch still held is drawn) or its last change when later. A member is
    named as the table names it: its instance id if static, else its member id."""
    topics = sorted({str(t) for t in rows["topic"]})
    keys = sorted({(str(t), int(p)) for t, p in zip(rows["topic"], rows["partition"],
                                                    strict=True)})

    def label(topic: str, partition: int) -> str:
        return str(partition) if len(topics) == 1 else f"{topic}-{partition}"

    starts = _seconds(rows["from_ts"])
    untils = _seconds(rows["until_ts"])
    start = float(starts.min())
    # A group whose only change is its first assignment still gets a second of width.
    latest = float(pd.concat([starts, untils]).max())  # nulls skipped; every start is known
    end = max(latest, start + 1, *([] if now is None else [now.timestamp()]))
    members = [history.member_identity({"member_id": member,
                                        "instance_id": None if pd.isna(instance) else instance})
               for member, instance in zip(rows["member_id"], rows["instance_id"], strict=True)]
    stretches = [Stretch(label(str(topic), int(partition)), member, float(since),
                         end if pd.isna(until) else float(until))
                 for topic, partition, member, since, until in zip(
                     rows["topic"], rows["partition"], members, starts, untils, strict=True)]
    held = f" ({topics[0]})" if len(topics) == 1 else ""
    return OwnershipPanel(title=f"{group}{held}: colour = owning member, dark = no owner",
                          partitions=[label(t, p) for t, p in keys], stretches=stretches,
                          start=start, end=end)


def _seconds(times: pd.Series) -> pd.Series:
    """Timestamps as seconds since the Unix epoch (NaN for none)."""
    return (pd.to_datetime(times, utc=True) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)


def _key(panel: OwnershipPanel) -> str:
    """The members' colours as text under the picture (names too long for a legend)."""
    colours = member_colours(s.member for s in panel.stretches)
    if len(colours) > PALETTE_SIZE:
        return (f"<p class=key>{len(colours)} members: colours repeat after {PALETTE_SIZE}; "
                "the table below says who held each partition.</p>")
    swatches = "".join(
        f'<span class=swatch style="background:{matplotlib.colors.to_hex(colour)}"></span>'
        f"{html.escape(member)} " for member, colour in colours.items())
    return f"<p class=key>{swatches}</p>"


def ownership_pictures(owners: pd.DataFrame, rebalances: pd.DataFrame,
                       now: pd.Timestamp | None) -> str:
    """A picture per pictured group, and a line saying which groups were left out (rows
    without a start time cannot be placed and are not drawn)."""
    owners = owners.dropna(subset=["from_ts"])
    if owners.empty:
        return ""
    groups = pictured_groups(owners, rebalances)
    every = owners["group"].nunique()
    left_out = every - len(groups)
    parts = ["<h3>Ownership over time</h3>",
             "<p>A row per partition: the colour is the member holding it (its instance id "
             "if static, else its member id), dark is where no member held it. Ownership "
             "changes when a generation (or a consumer group's target assignment) is "
             "recorded; the moments inside a rebalance before it are not in the log.</p>"]
    if left_out:
        parts.append(f"<p>The {len(groups)} of {every} groups with the most rebalances are "
                     f"pictured; {left_out} group(s) left out (their stretches are in the "
                     "tables below).</p>")
    for group in groups:
        panel = group_panel(group, owners[owners["group"] == group], now)
        figure = ownership_figure([panel], x_label="time (UTC)", utc=True, width=10,
                                  max_panel_height=MAX_PICTURE_HEIGHT,
                                  label_rows=len(panel.partitions) <= MAX_NAMED_ROWS)
        parts.append(f"<figure class=owners><figcaption><b>{html.escape(group)}</b>: "
                     f"{len(panel.partitions)} partition(s)</figcaption>"
                     f"{png_img(figure)}{_key(panel)}</figure>")
    return "".join(parts)
