"""The tables of `kgroups analyze`: their schemas, the two steps that need every partition's
results (lag statuses judged against the run's "now", the summary's lag columns), and writing.

Record times are epoch milliseconds while decoding and UTC timestamps in the written tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs

from kgroups.pipeline import history
from kgroups.pipeline.decode import PARTITION_TYPE
from kgroups.pipeline.discovery import open_filesystem
from kgroups.pipeline.topic_logs import TopicLogs

TIMESTAMP = pa.timestamp("ms", tz="UTC")

GENERATION_MEMBER_TYPE = pa.struct(
    [
        ("member_id", pa.string()),
        ("instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("partitions", pa.list_(PARTITION_TYPE)),
        ("topics", pa.list_(pa.string())),
        # Consumer groups (KIP-848): the member's epoch when the target was set (null before
        # its first current assignment, and for classic groups).
        ("member_epoch", pa.int32()),
    ]
)

OFFSET_COMMITS = pa.schema(
    [
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_ts", TIMESTAMP),
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("expire_ts", TIMESTAMP),
    ]
)

# Its columns that mostly grow along the log (see write_part).
OFFSET_COMMITS_DELTA_COLUMNS = ("offset", "commit_ts", "log_offset", "expire_ts")

# The same columns less expire_ts (a served offset's expiry is the coordinator's business).
COMMITTED_OFFSETS = pa.schema([f for f in OFFSET_COMMITS if f.name != "expire_ts"])

GROUP_GENERATIONS = pa.schema(
    [
        ("group", pa.string()),
        ("generation", pa.int32()),
        ("protocol_type", pa.string()),
        ("protocol", pa.string()),
        ("leader", pa.string()),
        ("state_ts", TIMESTAMP),
        ("member_count", pa.int32()),
        ("members", pa.list_(GENERATION_MEMBER_TYPE)),
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("ts", TIMESTAMP),
        # "classic" (one row per generation) or "consumer" (KIP-848: one row per target
        # assignment epoch, `generation` being that epoch; see consumer_history.py).
        ("group_type", pa.string()),
        ("group_epoch", pa.int32()),  # consumer groups: the group epoch the target is for
    ]
)

REBALANCES = pa.schema(
    [
        ("group", pa.string()),
        ("from_generation", pa.int32()),
        ("to_generation", pa.int32()),
        ("ts", TIMESTAMP),
        ("members_joined", pa.int32()),
        ("members_left", pa.int32()),
        ("partitions_moved", pa.int32()),
        ("partitions_kept", pa.int32()),
        ("seconds_since_previous", pa.float64()),
        ("group_type", pa.string()),
        # Consumer groups: from the new target until every member held it at its epoch, Stable
        # (null while that never happened before the next target, and for classic groups).
        ("seconds_to_reconcile", pa.float64()),
    ]
)

# What the partition tasks hand back besides the tables above (small: per group and minute,
# per committed partition).
COMMIT_MINUTES = pa.schema(
    [("group", pa.string()), ("minute", TIMESTAMP), ("commits", pa.int64()),
     ("last_commit_ts", TIMESTAMP)]
)
CURRENT_LAG = pa.schema(
    [("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
     ("committed_offset", pa.int64()), ("log_end_offset", pa.int64()), ("lag", pa.int64())]
)
# The last history.BURROW_WINDOW commits of each committed partition, oldest first.
LAG_WINDOWS = pa.schema(
    [("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
     ("offset", pa.int64()), ("ts_ms", pa.int64()), ("lag", pa.int64())]
)
LAG_MINUTES = pa.schema([("group", pa.string()), ("minute", TIMESTAMP), ("lag", pa.int64()),
                         ("max_lag_seconds", pa.float64())])
# Each committed partition's lag at the end of every minute (lag_history.py); written by the
# tasks, as offset_commits is.
PARTITION_LAG_MINUTES = pa.schema(
    [("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
     ("minute", TIMESTAMP), ("committed_offset", pa.int64()), ("log_end_offset", pa.int64()),
     ("lag", pa.int64()), ("lag_seconds", pa.float64())]
)
# What of it the report charts: each group's most lagging partitions, thinned.
REPORT_PARTITION_LAG = pa.schema(
    [("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
     ("minute", TIMESTAMP), ("lag", pa.int64())]
)
ERRORS = pa.schema([("file", pa.string()), ("error_position", pa.int64()),
                    ("error", pa.string())])

LAG = pa.schema(
    [*CURRENT_LAG, ("status", pa.string()), ("group_status", pa.string())]
)

# The summary as a partition knows it; the run adds the lag columns (SUMMARY).
PARTIAL_SUMMARY = pa.schema(
    [
        ("group", pa.string()),
        ("state", pa.string()),
        ("group_type", pa.string()),  # classic, or consumer (KIP-848)
        ("protocol_type", pa.string()),
        ("protocol", pa.string()),
        ("generation", pa.int32()),  # consumer groups: the target assignment epoch
        ("group_epoch", pa.int32()),  # consumer groups only
        ("leader", pa.string()),
        ("member_count", pa.int32()),
        ("generations", pa.int64()),
        ("rebalances", pa.int64()),
        ("partitions_moved", pa.int64()),
        ("last_rebalance_ts", TIMESTAMP),
        ("commits", pa.int64()),
        ("committed_partitions", pa.int64()),
        ("last_commit_ts", TIMESTAMP),
    ]
)
SUMMARY = pa.schema([*PARTIAL_SUMMARY, ("total_lag", pa.int64()),
                     # The worst partition's lag_seconds (kafka-lag-exporter's max time lag).
                     ("max_lag_seconds", pa.float64()), ("status", pa.string())])


def lag_table(current: pa.Table, windows: pa.Table, now_ms: int,
              topic_logs: TopicLogs | None = None) -> pa.Table:
    """Current lag per committed partition of a present topic, its Burrow status over its last
    commits (history.partition_status, judged at `now_ms`; `topic_logs` tells whether the
    consumer was caught up lately), and its group's Burrow status (history.GroupStatus)."""
    points: dict[tuple[str, str, int], list[history.CommitPoint]] = {}
    for row in windows.to_pylist():
        key = (row["group"], row["topic"], row["partition"])
        points.setdefault(key, []).append(
            history.CommitPoint(offset=row["offset"], ts=row["ts_ms"], lag=row["lag"])
        )
    rows = current.to_pylist()
    by_group: dict[str, list[history.PartitionStatus]] = {}
    recent_at = np.array([now_ms - history.RECENT_LAG_ZERO_MS], dtype=np.int64)
    for row in rows:
        topic_partition = (row["topic"], row["partition"])
        recent_end = None
        growth = None if topic_logs is None else topic_logs.growth.get(topic_partition)
        # Before the oldest batch still in the log its end is unknown, as it is to a Burrow
        # that was not running then.
        if topic_logs is not None and growth is not None and recent_at[0] >= growth.times[0]:
            recent_end = int(topic_logs.ends_at(topic_partition, recent_at)[0])
        status = history.partition_status(
            points.get((row["group"], *topic_partition), []), row["lag"], now_ms, recent_end
        )
        row["status"] = status.name
        by_group.setdefault(row["group"], []).append(status)
    for row in rows:
        row["group_status"] = history.GroupStatus.of(by_group[row["group"]]).name
    return pa.Table.from_pylist(rows, schema=LAG)


def summary_table(partial: pa.Table, lag: pa.Table | None) -> pa.Table:
    """The partitions' summaries with the lag columns: total lag, the most any partition is
    behind in seconds (where some partition's is known) and the group's status (null when no
    topic log was found)."""
    totals: dict[str, int] = {}
    seconds: dict[str, float] = {}
    statuses: dict[str, str] = {}
    if lag is not None:
        for row in lag.select(["group", "lag", "lag_seconds", "group_status"]).to_pylist():
            group = row["group"]
            totals[group] = totals.get(group, 0) + row["lag"]
            statuses[group] = row["group_status"]
            if row["lag_seconds"] is not None:
                seconds[group] = max(seconds.get(group, 0.0), row["lag_seconds"])
    groups = partial["group"].to_pylist()
    return pa.Table.from_arrays(
        [*partial.columns,
         pa.array([totals.get(g) for g in groups], pa.int64()),
         pa.array([seconds.get(g) for g in groups], pa.float64()),
         pa.array([statuses.get(g) for g in groups], pa.string())],
        schema=SUMMARY,
    )


def concat(parts: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """One table of `schema` from the partitions' parts (an empty one when there are none)."""
    return pa.concat_tables(parts) if parts else schema.empty_table()


def sorted_by(table: pa.Table, *columns: str) -> pa.Table:
    return table.sort_by([(column, "ascending") for column in columns])


def table_dir(out: str, name: str) -> str:
    return f"{out.rstrip('/')}/{name}"


def clear_table(out: str, name: str) -> None:
    """Empty (or create) a table's directory, as overwriting a Spark table does."""
    filesystem, path = open_filesystem(table_dir(out, name))
    if filesystem.get_file_info(path).type == fs.FileType.NotFound:
        filesystem.create_dir(path, recursive=True)
    else:
        filesystem.delete_dir_contents(path)


def remove_table(out: str, name: str) -> None:
    """Delete a table's directory, if any: a table this run does not produce is not left
    behind from an earlier run into the same directory."""
    filesystem, path = open_filesystem(table_dir(out, name))
    if filesystem.get_file_info(path).type != fs.FileType.NotFound:
        filesystem.delete_dir(path)


def write_part(table: pa.Table, out: str, name: str, part: str,
               delta_columns: tuple[str, ...] = ()) -> None:
    """One Parquet file of a table's directory (readable as a dataset by Spark, pyarrow and
    pandas alike). `delta_columns` are integer columns that mostly grow (offsets, times): they
    are stored as differences (DELTA_BINARY_PACKED), which writes faster and far smaller than
    dictionary pages for values that rarely repeat; the others keep dictionary encoding.

    Arrow dictionary columns are written without Arrow's own schema note, so every reader gets
    back plain strings, as the table's documented schema says."""
    filesystem, path = open_filesystem(f"{table_dir(out, name)}/part-{part}.parquet")
    pq.write_table(
        table, path, filesystem=filesystem,
        use_dictionary=[n for n in table.column_names if n not in delta_columns],
        column_encoding=dict.fromkeys(delta_columns, "DELTA_BINARY_PACKED") or None,
        store_schema=not any(pa.types.is_dictionary(f.type) for f in table.schema),
    )


def write_table(table: pa.Table, out: str, name: str) -> None:
    """A whole table as one file (tables written this way are small)."""
    clear_table(out, name)
    write_part(table, out, name, "00000")


def minute_of(ms: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Epoch ms truncated to the minute, as timestamps."""
    return pc.cast(pc.multiply(pc.divide(ms, 60_000), 60_000), TIMESTAMP)
