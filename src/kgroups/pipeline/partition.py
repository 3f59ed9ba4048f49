"""One __consumer_offsets partition analysed the way a coordinator loads it: every segment in
order, transactions resolved by their markers, the latest record per key kept. Runs as one
Spark task per partition (`job.py`).

A group lives on exactly one partition (abs(hash(group)) % partitions), so every table about a
group can be computed here with no shuffle: the partition's ten million commits never leave
the worker. The task writes its `offset_commits` rows to Parquet itself and hands back only
small tables (latest offsets, generations, rebalances, per-minute counts, lag windows)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kgroups.log.transactions import TransactionMarker, committed_items
from kgroups.pipeline import (
    consumer_history,
    history,
    lag_history,
    ownership,
    rebalance_causes,
    streams_history,
    tables,
    transaction_tables,
)
from kgroups.pipeline.decode import (
    COMMIT_ROW_SCHEMA,
    GROUP_ROW_SCHEMA,
    DecodedSegment,
    decode_offsets_segment,
)
from kgroups.pipeline.topic_logs import TopicLogs
from kgroups.pipeline.window import TimeWindow

_LAST = pc.ScalarAggregateOptions(skip_nulls=False)
_KEY = ["group", "topic", "partition"]
_LATEST_FIELDS = ("tombstone", "offset", "leader_epoch", "metadata", "commit_ts", "log_offset")
PARTITION_LAG_DELTA_COLUMNS = ("minute", "committed_offset", "log_end_offset")


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """What one partition contributes to the run; `offset_commits` is already written."""

    records: int  # OffsetCommit and GroupMetadata records decoded (markers not counted)
    max_record_ts: int | None  # of the applied records: the run's "now" when --until is open
    committed_offsets: pa.Table
    group_generations: pa.Table
    rebalances: pa.Table
    commit_minutes: pa.Table
    summary: pa.Table  # tables.PARTIAL_SUMMARY
    errors: pa.Table
    current_lag: pa.Table | None  # None when no topic log was found
    lag_windows: pa.Table | None
    lag_minutes: pa.Table | None
    rebalance_causes: pa.Table  # rebalance_causes.REBALANCE_CAUSES
    partition_owners: pa.Table  # ownership.PARTITION_OWNERS
    transactional_commits: pa.Table  # transaction_tables.TRANSACTIONAL_COMMITS
    streams_group_epochs: pa.Table  # streams_history.STREAMS_GROUP_EPOCHS
    report_partition_lag: pa.Table | None = None  # tables.REPORT_PARTITION_LAG

    def tables(self) -> dict[str, pa.Table]:
        """The small tables by name (what travels back to the driver)."""
        named = {
            "committed_offsets": self.committed_offsets,
            "group_generations": self.group_generations,
            "rebalances": self.rebalances,
            "commit_minutes": self.commit_minutes,
            "summary": self.summary,
            "errors": self.errors,
            "current_lag": self.current_lag,
            "lag_windows": self.lag_windows,
            "lag_minutes": self.lag_minutes,
            "rebalance_causes": self.rebalance_causes,
            "partition_owners": self.partition_owners,
            "report_partition_lag": self.report_partition_lag,
            "transactional_commits": self.transactional_commits,
            "streams_group_epochs": self.streams_group_epochs,
        }
        return {name: table for name, table in named.items() if table is not None}


def analyze_partition(
    log_partition: int,
    uris: Iterable[str],
    window: TimeWindow,
    topic_logs: TopicLogs | None,
    out: str,
) -> PartitionResult:
    """Decode the partition's segments (`uris`, in base-offset order), write its offset_commits
    part under `out` and return the rest. KIP-848 records name topics by id: the names are
    read from the partition.metadata files beside the segments."""
    uris = list(uris)
    return analyze_decoded(
        log_partition, (decode_offsets_segment(uri, log_partition) for uri in uris),
        lambda: consumer_history.topic_names_near(uris[0]), window, topic_logs, out)


def analyze_decoded(
    log_partition: int,
    segments: Iterable[DecodedSegment],
    topic_names: Callable[[], Mapping[uuid.UUID, str]],
    window: TimeWindow,
    topic_logs: TopicLogs | None,
    out: str | None,
) -> PartitionResult:
    """`analyze_partition` over the partition's records already decoded, in log order, from
    wherever they were kept (segment files, a PostgreSQL store); `topic_names` is asked for the
    topic names only when the partition holds KIP-848 records. With `out` None nothing is
    written (a caller that reads one group's history in its own process)."""
    commit_parts, group_parts, markers, errors = [], [], [], []
    consumer_records: list[consumer_history.ConsumerRecord] = []
    streams_records: list[consumer_history.ConsumerRecord] = []
    for segment in segments:
        commit_parts.append(segment.commits)
        group_parts.append(segment.groups)
        markers.extend(segment.markers)
        errors.extend(segment.errors)
        consumer_records.extend(segment.consumer)
        streams_records.extend(segment.streams)
    # Each segment brings its own dictionaries of names: one set for the whole partition, so
    # grouping by name compares dictionary indices.
    all_commits = tables.concat(commit_parts, COMMIT_ROW_SCHEMA).unify_dictionaries()
    all_groups = tables.concat(group_parts, GROUP_ROW_SCHEMA)
    records = all_commits.num_rows + all_groups.num_rows
    commits = _applied(all_commits, markers)
    events = [row for row in _applied(all_groups, markers).to_pylist()
              if window.reached(row["record_ts"])]

    live = commits
    if pc.any(commits["tombstone"]).as_py():
        live = commits.filter(pc.invert(commits["tombstone"]))
    history_rows = window.inside(live, "record_ts")
    if history_rows.num_rows and out is not None:
        tables.write_part(_offset_commits(history_rows), out, "offset_commits",
                          f"{log_partition:05d}", tables.OFFSET_COMMITS_DELTA_COLUMNS)
    committed = _committed_offsets(window.up_to_until(commits, "record_ts"), events)
    events_by_group = _by_group(events)
    consumer = _consumer_history(consumer_records, topic_names, window)
    found_rebalances = tables.concat(
        [_rebalances(events_by_group, window),
         pa.Table.from_pylist(consumer.rebalances, schema=tables.REBALANCES)],
        tables.REBALANCES)
    commit_minutes = _commit_minutes(history_rows)
    generation_rows = _generations(events, window) + consumer.generations
    max_record_ts = _max_record_ts(commits, events)
    lag_parts = None if topic_logs is None else _lag(
        committed, window.up_to_until(live, "record_ts"), topic_logs, window, max_record_ts)
    if lag_parts is not None and lag_parts[2].partitions.num_rows and out is not None:
        tables.write_part(lag_parts[2].partitions, out, "partition_lag_minutes",
                          f"{log_partition:05d}", PARTITION_LAG_DELTA_COLUMNS)
    return PartitionResult(
        records=records,
        max_record_ts=max_record_ts,
        committed_offsets=committed,
        group_generations=pa.Table.from_pylist(generation_rows,
                                               schema=tables.GROUP_GENERATIONS),
        partition_owners=ownership.owner_stretches(generation_rows, {
            group: [(r["log_partition"], r["log_offset"], r["record_ts"]) for r in own
                    if r["tombstone"] and window.contains(r["record_ts"])]
            for group, own in events_by_group.items()}),
        rebalances=found_rebalances,
        commit_minutes=commit_minutes,
        summary=_summary(events_by_group, consumer.ends, committed, commit_minutes,
                         found_rebalances),
        errors=pa.Table.from_pylist(
            [{"file": e.file, "error_position": e.position, "error": e.message}
             for e in errors],
            schema=tables.ERRORS,
        ),
        current_lag=None if lag_parts is None else lag_parts[0],
        lag_windows=None if lag_parts is None else lag_parts[1],
        lag_minutes=None if lag_parts is None else lag_parts[2].groups,
        report_partition_lag=None if lag_parts is None else lag_parts[2].report,
        rebalance_causes=_causes(events_by_group, consumer, window.up_to_until(live, "record_ts"),
                                 window),
        transactional_commits=transaction_tables.transactional_commits(all_commits, markers,
                                                                       window),
        streams_group_epochs=pa.Table.from_pylist(
            streams_history.epoch_rows(streams_records, window),
            schema=streams_history.STREAMS_GROUP_EPOCHS),
    )


def _causes(events_by_group: dict[str, list[dict[str, Any]]],
            consumer: consumer_history.ConsumerHistory, live: pa.Table,
            window: TimeWindow) -> pa.Table:
    """rebalance_causes rows of the classic groups' generations and of the consumer groups'
    target epochs, both read by `rebalance_causes.compare`."""
    times = rebalance_causes.commit_times(
        live, set(events_by_group) | {t.group for t in consumer.transitions})
    classic = rebalance_causes.infer(events_by_group, times, window)
    if not consumer.transitions:
        return classic
    rows = [row for t in consumer.transitions
            for row in rebalance_causes.compare(t.group, t.previous, t.current,
                                                times.get(t.group, {}))]
    return pa.concat_tables(
        [classic, pa.Table.from_pylist(rows, schema=rebalance_causes.REBALANCE_CAUSES)])


def _applied(records: pa.Table, markers: list[TransactionMarker]) -> pa.Table:
    """The records a coordinator applies: every non-transactional one, and a transactional one
    when its transaction committed (kgroups.log.transactions; aborted and still-open
    transactions are left out, as a coordinator drops or keeps them pending)."""
    if not pc.any(records["transactional"]).as_py():
        return records
    keep = np.ones(records.num_rows, dtype=bool)
    transactional = np.flatnonzero(records["transactional"].to_numpy(zero_copy_only=False))
    keep[transactional] = False
    producers = records["producer_id"].to_pylist()
    log_offsets = records["log_offset"].to_pylist()
    held = [(log_offsets[index], producers[index], int(index)) for index in transactional]
    keep[committed_items(held, markers)] = True
    return records.filter(pa.array(keep))


def _max_record_ts(commits: pa.Table, events: list[dict[str, Any]]) -> int | None:
    times = [row["record_ts"] for row in events]
    if commits.num_rows:
        times.append(pc.max(commits["record_ts"]).as_py())
    return max(times) if times else None


def _offset_commits(rows: pa.Table) -> pa.Table:
    """tables.OFFSET_COMMITS, except that group and topic stay dictionary columns (Parquet
    stores them as dictionary pages either way, and the file's schema says string)."""
    return pa.Table.from_arrays(
        [rows["group"], rows["topic"], rows["partition"], rows["offset"], rows["leader_epoch"],
         rows["metadata"], pc.cast(rows["commit_ts"], tables.TIMESTAMP), rows["log_partition"],
         rows["log_offset"], pc.cast(rows["expire_ts"], tables.TIMESTAMP)],
        names=tables.OFFSET_COMMITS.names,
    )


def _committed_offsets(commits: pa.Table, events: list[dict[str, Any]]) -> pa.Table:
    """What OffsetFetch serves after loading the partition: per (group, topic, partition) the
    last record in log order wins, a tombstone removes the offset, and a group tombstone
    removes the offsets of that group written before it."""
    latest = commits.group_by(_KEY, use_threads=False).aggregate(
        [(name, "last", _LAST) for name in _LATEST_FIELDS]
    )
    latest = latest.filter(pc.invert(latest["tombstone_last"]))
    deleted_at: dict[str, int] = {}
    for row in events:
        if row["tombstone"]:
            deleted_at[row["group"]] = row["log_offset"]
    if deleted_at:
        survives = [
            deleted_at.get(group, -1) < log_offset
            for group, log_offset in zip(latest["group"].to_pylist(),
                                         latest["log_offset_last"].to_pylist(), strict=True)
        ]
        latest = latest.filter(pa.array(survives, pa.bool_()))
    log_partition = commits["log_partition"][0].as_py() if commits.num_rows else 0
    found = pa.Table.from_arrays(
        [_text(latest["group"]), _text(latest["topic"]), latest["partition"],
         latest["offset_last"],
         latest["leader_epoch_last"], latest["metadata_last"],
         pc.cast(latest["commit_ts_last"], tables.TIMESTAMP),
         pa.array(np.full(latest.num_rows, log_partition, dtype=np.int32)),
         latest["log_offset_last"]],
        schema=tables.COMMITTED_OFFSETS,
    )
    return tables.sorted_by(found, *_KEY)


def _generations(events: list[dict[str, Any]], window: TimeWindow) -> list[dict[str, Any]]:
    """One group_generations row per GroupMetadataValue record inside the window."""
    rows = []
    for row in events:
        if row["tombstone"] or not window.contains(row["record_ts"]):
            continue
        members = row["members"] or []
        rows.append({
            "group": row["group"],
            "generation": row["generation"],
            "protocol_type": row["protocol_type"],
            "protocol": row["protocol"],
            "leader": row["leader"],
            "state_ts": row["state_ts"] if row["state_ts"] >= 0 else None,
            "member_count": len(members),
            "members": [
                {name: member.get(name) for name in tables.GENERATION_MEMBER_TYPE.names}
                for member in members
            ],
            "log_partition": row["log_partition"],
            "log_offset": row["log_offset"],
            "ts": row["record_ts"],
            "group_type": "classic",
        })
    return rows


def _consumer_history(records: list[consumer_history.ConsumerRecord],
                      topic_names: Callable[[], Mapping[uuid.UUID, str]],
                      window: TimeWindow) -> consumer_history.ConsumerHistory:
    """The history of the partition's KIP-848 consumer groups (consumer_history.py)."""
    if not records:
        return consumer_history.ConsumerHistory([], [], [], {})
    return consumer_history.history_rows(records, window, topic_names())


def _by_group(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in events:
        grouped.setdefault(row["group"], []).append(row)
    return grouped


def _rebalances(events_by_group: dict[str, list[dict[str, Any]]],
                window: TimeWindow) -> pa.Table:
    """Consecutive generations of each group (see history.rebalances), inside the window. The
    events before --since still count, to know the generation a rebalance left."""
    rows: list[dict[str, Any]] = []
    for group, own in events_by_group.items():
        found = history.rebalances(
            history.GroupEvent(
                log_partition=row["log_partition"], log_offset=row["log_offset"],
                ts=row["record_ts"],
                generation=None if row["tombstone"] else row["generation"],
                members=None if row["tombstone"] else row["members"] or [],
            )
            for row in own
        )
        rows.extend(
            {"group": group, "from_generation": r.from_generation,
             "to_generation": r.to_generation, "ts": r.ts, "members_joined": r.members_joined,
             "members_left": r.members_left, "partitions_moved": r.partitions_moved,
             "partitions_kept": r.partitions_kept,
             "seconds_since_previous": r.seconds_since_previous, "group_type": "classic"}
            for r in found if window.contains(r.ts)
        )
    return pa.Table.from_pylist(rows, schema=tables.REBALANCES)


def _commit_minutes(history_rows: pa.Table) -> pa.Table:
    """Commits per (group, minute of their commit timestamp) and the last commit time: small,
    and enough for the summary's totals and the commits-per-minute plot."""
    keyed = pa.table({"group": history_rows["group"],
                      "minute": tables.minute_of(history_rows["commit_ts"]),
                      "commit_ts": history_rows["commit_ts"]})
    counted = keyed.group_by(["group", "minute"], use_threads=False).aggregate(
        [("commit_ts", "count"), ("commit_ts", "max")]
    )
    return pa.Table.from_arrays(
        [_text(counted["group"]), counted["minute"], counted["commit_ts_count"],
         pc.cast(counted["commit_ts_max"], tables.TIMESTAMP)],
        schema=tables.COMMIT_MINUTES,
    )


def _lag(committed: pa.Table, state_rows: pa.Table, topic_logs: TopicLogs,
         window: TimeWindow, data_end_ms: int | None
         ) -> tuple[pa.Table, pa.Table, lag_history.LagHistory]:
    """Lag now per committed partition of a present topic; the last BURROW_WINDOW commits of
    each (with the lag each had when committed: the log end when it was appended minus the
    committed offset); and lag over time per partition and per group (lag_history.py).

    `state_rows` are the live commits up to --until. The Burrow windows are taken from all of
    them, as Burrow (which reads the log from its start) holds a partition's last commits even
    when they are older than --since; only the lag over time is history, kept inside the
    window."""
    ends = topic_logs.log_end_offsets
    current = [
        {"group": row["group"], "topic": row["topic"], "partition": row["partition"],
         "committed_offset": row["offset"], "log_end_offset": ends[key],
         "lag": max(ends[key] - row["offset"], 0)}
        for row in committed.select(["group", "topic", "partition", "offset"]).to_pylist()
        if (key := (row["topic"], row["partition"])) in ends
    ]
    frame = pa.table({
        "group": _text(state_rows["group"]), "topic": _text(state_rows["topic"]),
        **{name: state_rows[name] for name in ("partition", "log_offset", "record_ts", "offset")},
    }).to_pandas()
    frame["lag"] = np.zeros(len(frame), dtype=np.int64)
    frame["present"] = np.zeros(len(frame), dtype=bool)
    for (topic, partition), rows in frame.groupby(["topic", "partition"], sort=False):
        key = (str(topic), int(partition))
        if key not in topic_logs.growth:
            continue
        at_commit = topic_logs.ends_at(key, rows["record_ts"].to_numpy(np.int64))
        frame.loc[rows.index, "lag"] = np.maximum(at_commit - rows["offset"].to_numpy(), 0)
        frame.loc[rows.index, "present"] = True
    frame = frame[frame["present"]]
    committed_keys = {(r["group"], r["topic"], r["partition"]) for r in current}
    recent = frame.groupby(_KEY, sort=False).tail(history.BURROW_WINDOW)
    wanted = np.array([key in committed_keys for key in zip(
        recent["group"], recent["topic"], recent["partition"], strict=True)], dtype=bool)
    recent = recent[wanted]
    windows = pa.Table.from_pandas(
        recent.rename(columns={"record_ts": "ts_ms"})[list(tables.LAG_WINDOWS.names)],
        schema=tables.LAG_WINDOWS, preserve_index=False,
    )
    # Partitions whose offset is served now (a deleted offset stops counting).
    served = np.array([key in committed_keys for key in zip(
        frame["group"], frame["topic"], frame["partition"], strict=True)], dtype=bool)
    over_time = lag_history.lag_history(
        frame[served][["group", "topic", "partition", "record_ts", "offset"]], topic_logs,
        window, data_end_ms)
    return pa.Table.from_pylist(current, schema=tables.CURRENT_LAG), windows, over_time


def _summary(per_group: dict[str, list[dict[str, Any]]],
             consumer_ends: dict[str, consumer_history.GroupEnd], committed: pa.Table,
             commit_minutes: pa.Table, found_rebalances: pa.Table) -> pa.Table:
    """One row per group seen in the partition: latest state and totals.

    Classic groups: "Dead" when the last group record is a tombstone and no offsets survive
    it, "Stable" when the last generation has members, "Empty" otherwise (including groups that
    only ever committed offsets, which a coordinator loads as Empty groups). Consumer groups
    (KIP-848): the state their records tell (consumer_history.GroupEnd), their target epoch as
    the generation and their group epoch; "Dead" likewise once deleted.
    """
    commit_totals = commit_minutes.group_by("group", use_threads=False).aggregate(
        [("commits", "sum"), ("last_commit_ts", "max")]
    )
    groups_committing = commit_totals["group"].to_pylist()
    commits = dict(zip(groups_committing, commit_totals["commits_sum"].to_pylist(), strict=True))
    last_commit = dict(zip(groups_committing, commit_totals["last_commit_ts_max"].to_pylist(),
                           strict=True))
    committed_partitions: dict[str, int] = {}
    for group in committed["group"].to_pylist():
        committed_partitions[group] = committed_partitions.get(group, 0) + 1
    rebalance_totals: dict[str, list[Any]] = {}
    for row in found_rebalances.select(["group", "partitions_moved", "ts"]).to_pylist():
        totals = rebalance_totals.setdefault(row["group"], [0, 0, row["ts"]])
        totals[0] += 1
        totals[1] += row["partitions_moved"]
        totals[2] = max(totals[2], row["ts"])
    rows = []
    every = set(per_group) | set(consumer_ends) | set(commits) | set(committed_partitions)
    for group in sorted(every):
        survived = committed_partitions.get(group, 0) > 0
        end = consumer_ends.get(group)
        row = (_consumer_state(end, survived) if end is not None
               else _classic_state(per_group.get(group, []), survived))
        moved = rebalance_totals.get(group, [0, 0, None])
        rows.append({
            "group": group,
            **row,
            "rebalances": moved[0],
            "partitions_moved": moved[1],
            "last_rebalance_ts": moved[2],
            "commits": commits.get(group, 0),
            "committed_partitions": committed_partitions.get(group, 0),
            "last_commit_ts": last_commit.get(group),
        })
    return pa.Table.from_pylist(rows, schema=tables.PARTIAL_SUMMARY)


def _classic_state(own: list[dict[str, Any]], survived: bool) -> dict[str, Any]:
    last = own[-1] if own else None
    live = last is not None and not last["tombstone"]
    members = len(last["members"] or []) if live and last is not None else 0
    if last is not None and last["tombstone"] and not survived:
        state = "Dead"
    elif live and members > 0:
        state = "Stable"
    else:
        state = "Empty"
    return {
        "state": state,
        "group_type": "classic",
        "protocol_type": last["protocol_type"] if live and last else None,
        "protocol": last["protocol"] if live and last else None,
        "generation": last["generation"] if live and last else None,
        "group_epoch": None,
        "leader": last["leader"] if live and last else None,
        "member_count": members,
        "generations": sum(1 for row in own if not row["tombstone"]),
    }


def _consumer_state(end: consumer_history.GroupEnd, survived: bool) -> dict[str, Any]:
    return {
        "state": "Dead" if end.deleted and not survived else end.state,
        "group_type": consumer_history.GROUP_TYPE,
        "protocol_type": consumer_history.GROUP_TYPE,
        "protocol": end.protocol,
        "generation": end.generation,
        "group_epoch": end.group_epoch,
        "leader": None,
        "member_count": end.member_count,
        "generations": end.generations,
    }


def _text(names: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column of names as plain strings (what the small tables hold)."""
    return pc.cast(names, pa.string())
