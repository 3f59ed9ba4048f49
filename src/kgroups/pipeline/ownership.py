"""Who held which partition when: the `partition_owners` table, from the assignments in the
group metadata records (classic groups: the ConsumerProtocol assignments of each generation;
consumer groups: each target assignment).

One row per stretch of time a member held a partition: it starts with the generation that gave
the partition to the member and ends with the first later one that gave it to another member or
to none, or with the group's deletion (until_ts null: still held when the log ends). A member is
who history.member_identity says (a static member keeps its stretch across restarts under new
member ids). Only generations inside the window are read, so a partition held since before
--since starts at the window's first generation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from kgroups.pipeline import history
from kgroups.pipeline.tables import TIMESTAMP

PARTITION_OWNERS = pa.schema(
    [
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("member_id", pa.string()),
        ("instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("from_generation", pa.int32()),
        ("from_ts", TIMESTAMP),
        ("until_ts", TIMESTAMP),
        ("group_type", pa.string()),
    ]
)


def owner_stretches(generations: Iterable[Mapping[str, Any]],
                    deletions: Mapping[str, list[tuple[int, int, int]]]) -> pa.Table:
    """From group_generations rows (epoch-ms `ts`) and each group's deletions as (log
    partition, log offset, ts), the partition_owners rows, ordered by group, topic, partition
    and time."""
    by_group: dict[str, list[tuple[int, int, int, Mapping[str, Any] | None]]] = {}
    for generation in generations:
        by_group.setdefault(generation["group"], []).append(
            (generation["log_partition"], generation["log_offset"], generation["ts"], generation))
    for group, deleted in deletions.items():
        if group in by_group:
            by_group[group].extend((part, offset, ts, None) for part, offset, ts in deleted)
    rows: list[dict[str, Any]] = []
    for group, events in sorted(by_group.items()):
        held: dict[tuple[str, int], dict[str, Any]] = {}
        for _part, _offset, ts, row in sorted(events, key=lambda e: (e[0], e[1])):
            members = [] if row is None else row["members"] or []
            owners = {}
            for member in members:
                for assigned in member.get("partitions") or ():
                    owners[(str(assigned["topic"]), int(assigned["partition"]))] = member
            for key in list(held):
                member = owners.get(key)
                if member is None or history.member_identity(member) != held[key]["identity"]:
                    held.pop(key)["row"]["until_ts"] = ts
            if row is None:  # the group's deletion: nothing is held after it
                continue
            for key, member in owners.items():
                if key in held:
                    continue
                stretch = {
                    "group": group, "topic": key[0], "partition": key[1],
                    "member_id": member["member_id"], "instance_id": member.get("instance_id"),
                    "client_id": member.get("client_id"),
                    "client_host": member.get("client_host"),
                    "from_generation": row["generation"], "from_ts": ts, "until_ts": None,
                    "group_type": row["group_type"],
                }
                held[key] = {"identity": history.member_identity(member), "row": stretch}
                rows.append(stretch)
    rows.sort(key=lambda r: (r["group"], r["topic"], r["partition"], r["from_ts"]))
    return pa.Table.from_pylist(rows, schema=PARTITION_OWNERS)
