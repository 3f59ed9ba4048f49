"""Why each rebalance happened, inferred from __consumer_offsets alone (the `rebalance_causes`
table). The coordinator writes a group's membership when a generation completes, not why the
rebalance began, so the cause is read from what changed between two generations and from how
long the members that left had been silent:

- a member of the new generation whose member id and instance id the old one lacked:
  `new_member_joined`;
- a static member (same group.instance.id) back under a new member id: `static_member_replaced`;
- a member that is gone: how long before the new generation it was last seen alive (the later
  of the old generation's completion, which it took part in, and the last offset commit of the
  partitions it owned) against its session.timeout.ms: at least that long, `session_timeout`;
  else at least its rebalance.timeout.ms (it did not rejoin in time), `rebalance_timeout`;
  else it left on its own (LeaveGroup), `member_left`. Commits name no member, so this is an
  estimate: a consumer that left after a long idle spell without commits reads as timed out;
- the same members with other subscriptions: `member_metadata_changed`; the same members and
  subscriptions: `metadata_change` (a subscribed topic's partitions changed, or the leader
  rejoined).

The labels are those of the coordinator's own records (kgroups.coordinator.rebalance_cause),
so the pipeline's table, `kgroups groups describe` and the metrics can be read side by side.
One row per (rebalance, cause, member); the last two causes have one row with no member.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kgroups.pipeline.tables import TIMESTAMP
from kgroups.pipeline.window import TimeWindow

NEW_MEMBER_JOINED = "new_member_joined"
STATIC_MEMBER_REPLACED = "static_member_replaced"
MEMBER_LEFT = "member_left"
SESSION_TIMEOUT = "session_timeout"
REBALANCE_TIMEOUT = "rebalance_timeout"
MEMBER_METADATA_CHANGED = "member_metadata_changed"
METADATA_CHANGE = "metadata_change"

REBALANCE_CAUSES = pa.schema(
    [
        ("group", pa.string()),
        ("from_generation", pa.int32()),
        ("to_generation", pa.int32()),
        ("ts", TIMESTAMP),
        ("cause", pa.string()),
        ("member_id", pa.string()),
        ("instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        # For a member gone: from when it was last seen alive to the new generation.
        ("silent_seconds", pa.float64()),
        ("session_timeout_ms", pa.int32()),
        ("rebalance_timeout_ms", pa.int32()),
    ]
)

CommitTimes = dict[tuple[str, int], npt.NDArray[np.int64]]


def commit_times(commits: pa.Table, groups: Iterable[str]) -> dict[str, CommitTimes]:
    """The commit times (ascending) per (topic, partition) of each of `groups`, from rows with
    group, topic, partition and record_ts (only groups with generations need them)."""
    commits = commits.filter(pc.is_in(commits["group"].cast(pa.string()),
                                      pa.array(list(groups), pa.string())))
    if commits.num_rows == 0:
        return {}
    frame = pa.table({
        "group": commits["group"].cast(pa.string()), "topic": commits["topic"].cast(pa.string()),
        "partition": commits["partition"], "record_ts": commits["record_ts"],
    }).to_pandas()
    found: dict[str, CommitTimes] = {}
    for (group, topic, partition), rows in frame.groupby(["group", "topic", "partition"],
                                                          sort=False):
        times = np.sort(rows["record_ts"].to_numpy(dtype=np.int64))
        found.setdefault(str(group), {})[(str(topic), int(partition))] = times
    return found


def _last_commit_before(times: CommitTimes, member: dict[str, Any], ts: int) -> int | None:
    """The last commit, before `ts`, of any partition `member` owned."""
    last = None
    for owned in member["partitions"] or []:
        committed = times.get((owned["topic"], owned["partition"]))
        if committed is None:
            continue
        index = int(np.searchsorted(committed, ts, side="left")) - 1
        if index >= 0:
            last = max(last or 0, int(committed[index]))
    return last


def _row(group: str, previous: dict[str, Any], current: dict[str, Any], cause: str,
         member: dict[str, Any] | None = None, silent_ms: int | None = None) -> dict[str, Any]:
    member = member or {}
    return {
        "group": group, "from_generation": previous["generation"],
        "to_generation": current["generation"], "ts": current["record_ts"], "cause": cause,
        "member_id": member.get("member_id"), "instance_id": member.get("instance_id"),
        "client_id": member.get("client_id"), "client_host": member.get("client_host"),
        "silent_seconds": None if silent_ms is None else silent_ms / 1000.0,
        "session_timeout_ms": member.get("session_timeout"),
        "rebalance_timeout_ms": member.get("rebalance_timeout"),
    }


def _departure(member: dict[str, Any], silent_ms: int) -> str:
    if silent_ms >= member["session_timeout"] > 0:
        return SESSION_TIMEOUT
    if silent_ms >= member["rebalance_timeout"] > 0:
        return REBALANCE_TIMEOUT
    return MEMBER_LEFT


def compare(group: str, previous: dict[str, Any], current: dict[str, Any],
            times: CommitTimes) -> list[dict[str, Any]]:
    """The causes of the rebalance from generation record `previous` to `current`."""
    old = {m["member_id"]: m for m in previous["members"] or []}
    new = {m["member_id"]: m for m in current["members"] or []}
    old_instances = {m["instance_id"]: m for m in old.values() if m["instance_id"]}
    rows = []
    replaced: set[str] = set()
    for member_id, member in new.items():
        if member_id in old:
            continue
        prior = old_instances.get(member["instance_id"]) if member["instance_id"] else None
        if prior is not None:
            replaced.add(prior["member_id"])
            rows.append(_row(group, previous, current, STATIC_MEMBER_REPLACED, member))
        else:
            rows.append(_row(group, previous, current, NEW_MEMBER_JOINED, member))
    for member_id, member in old.items():
        if member_id in new or member_id in replaced:
            continue
        seen = max(previous["record_ts"],
                   _last_commit_before(times, member, current["record_ts"]) or 0)
        silent = current["record_ts"] - seen
        rows.append(_row(group, previous, current, _departure(member, silent), member, silent))
    if not rows:
        changed = any(sorted(new[m]["topics"] or []) != sorted(old[m]["topics"] or [])
                      for m in new)
        rows.append(_row(group, previous, current,
                         MEMBER_METADATA_CHANGED if changed else METADATA_CHANGE))
    return rows


def infer(events_by_group: dict[str, list[dict[str, Any]]], commits: dict[str, CommitTimes],
          window: TimeWindow) -> pa.Table:
    """The causes of every rebalance inside `window` (generation records in log order, as
    history.rebalances takes them: a record repeating the generation updates its membership,
    a tombstone starts the group's history anew)."""
    rows: list[dict[str, Any]] = []
    for group, own in events_by_group.items():
        previous: dict[str, Any] | None = None
        for event in _log_order(own):
            if event["tombstone"]:
                previous = None
                continue
            if previous is not None and event["generation"] != previous["generation"] \
                    and window.contains(event["record_ts"]):
                rows.extend(compare(group, previous, event, commits.get(group, {})))
            previous = event
    return pa.Table.from_pylist(rows, schema=REBALANCE_CAUSES)


def _log_order(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(events, key=lambda e: (e["log_partition"], e["log_offset"]))
