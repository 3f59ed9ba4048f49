"""The tables of `kgroups analyze`, as Spark DataFrames over the decoded commit rows and the
other rows (group records, markers, errors).

Everything here is Spark SQL over flat columns except the two per-group rules that are easier
to state as code (rebalances, Burrow status), which run through grouped pandas UDFs calling
`kgroups.pipeline.history`. Record times are epoch milliseconds in the decoded rows and become
Spark timestamps (UTC) in the written tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from kgroups.pipeline import decode, history
from kgroups.pipeline.discovery import SegmentFile


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """--since/--until in epoch ms (None = open). State tables are computed as of `until`;
    history tables keep only rows inside the window."""

    since_ms: int | None = None
    until_ms: int | None = None

    def up_to_until(self, ts: Column) -> Column:
        return F.lit(True) if self.until_ms is None else ts <= F.lit(self.until_ms)

    def inside(self, ts: Column) -> Column:
        condition = self.up_to_until(ts)
        return condition if self.since_ms is None else condition & (ts >= F.lit(self.since_ms))


def _paths_frame(spark: SparkSession, rows: list[tuple[object, ...]], schema: str) -> DataFrame:
    """One Spark partition per file, so every file is its own decoding task."""
    rdd = spark.sparkContext.parallelize(rows, numSlices=max(len(rows), 1))
    return spark.createDataFrame(rdd, schema)


def _offsets_paths(spark: SparkSession, segments: tuple[SegmentFile, ...]) -> DataFrame:
    # Biggest files first: they start first and the small ones fill in behind them.
    ordered = sorted(segments, key=lambda s: -s.size)
    return _paths_frame(spark, [(s.uri, s.partition) for s in ordered],
                        "uri string, partition int")


def decode_commits(spark: SparkSession, segments: tuple[SegmentFile, ...]) -> DataFrame:
    """Every OffsetCommit record of the __consumer_offsets segments (decode.COMMIT_ROW_SCHEMA)."""
    return _offsets_paths(spark, segments).mapInArrow(
        decode.offsets_segments_to_commits, from_arrow_schema(decode.COMMIT_ROW_SCHEMA)
    )


def decode_other_records(spark: SparkSession, segments: tuple[SegmentFile, ...]) -> DataFrame:
    """Group records, transaction markers and skipped regions (decode.OTHER_ROW_SCHEMA)."""
    return _offsets_paths(spark, segments).mapInArrow(
        decode.offsets_segments_to_other_records, from_arrow_schema(decode.OTHER_ROW_SCHEMA)
    )


def decode_topics(spark: SparkSession, segments: tuple[SegmentFile, ...]) -> DataFrame:
    """One row per batch of each data topic's segments (decode.TOPIC_ROW_SCHEMA)."""
    ordered = sorted(segments, key=lambda s: -s.size)
    paths = _paths_frame(spark, [(s.uri, s.topic, s.partition) for s in ordered],
                         "uri string, topic string, partition int")
    return paths.mapInArrow(
        decode.topic_segments_to_rows, from_arrow_schema(decode.TOPIC_ROW_SCHEMA)
    )


def committed_transactions(commits: DataFrame, others: DataFrame) -> DataFrame:
    """(log_partition, log_offset) of every transactional record whose transaction committed:
    the first control marker after it from the same producer is a COMMIT. Aborted and
    still-open transactions are absent, as a coordinator keeps them pending or drops them.
    Small (transactional offset commits are rare), so callers may persist and broadcast it."""
    markers = others.filter(F.col("kind") == decode.MARKER).select(
        "log_partition", "producer_id",
        F.col("log_offset").alias("marker_offset"), "marker_commits",
    )
    transactional = commits.filter(F.col("transactional")).select(
        "log_partition", "producer_id", "log_offset"
    ).unionByName(
        others.filter((F.col("kind") == decode.GROUP) & F.col("transactional")).select(
            "log_partition", "producer_id", "log_offset"
        )
    )
    return (
        transactional.join(markers, ["log_partition", "producer_id"])
        .filter(F.col("marker_offset") > F.col("log_offset"))
        .groupBy("log_partition", "log_offset")
        .agg(F.min_by("marker_commits", "marker_offset").alias("commits"))
        .filter(F.col("commits"))
        .select("log_partition", "log_offset", F.lit(True).alias("transaction_committed"))
    )


def applied_records(records: DataFrame, transactions: DataFrame) -> DataFrame:
    """The records (commits, or group rows of `others`) that a coordinator applies: every
    non-transactional one, and the transactional ones listed in `transactions` (see
    committed_transactions). One pass with a broadcast lookup, since every table starts here."""
    return (
        records.join(F.broadcast(transactions), ["log_partition", "log_offset"], "left")
        .filter(~F.col("transactional") | F.col("transaction_committed").isNotNull())
        .drop("transaction_committed")
    )


def group_records(others: DataFrame) -> DataFrame:
    """The GroupMetadata records (values and tombstones) among the non-commit rows."""
    return others.filter(F.col("kind") == decode.GROUP)


def _ts(column: str) -> Column:
    return F.timestamp_millis(F.col(column))


def offset_commits(commits: DataFrame, window: TimeWindow) -> DataFrame:
    """Every applied commit (tombstones are deletions, not commits) inside the window."""
    return commits.filter(~F.col("tombstone") & window.inside(F.col("record_ts"))).select(
        "group", "topic", "partition", "offset", "leader_epoch", "metadata",
        _ts("commit_ts").alias("commit_ts"), "log_partition", "log_offset",
        _ts("expire_ts").alias("expire_ts"), "record_ts",
    )


def committed_offsets(commits: DataFrame, groups: DataFrame, window: TimeWindow) -> DataFrame:
    """What a coordinator loading the log (up to --until) serves from OffsetFetch.

    Per (log partition, group, topic, partition) the last record in log order wins; a tombstone
    removes the offset; a group tombstone removes the offsets of that group written before it.
    """
    key = ["log_partition", "group", "topic", "partition"]
    fields = ["tombstone", "offset", "leader_epoch", "metadata", "commit_ts", "log_offset"]
    latest = (
        commits.filter(window.up_to_until(F.col("record_ts")))
        .groupBy(*key)
        .agg(F.max_by(F.struct(*fields), "log_offset").alias("last"))
        .select(*key, *[F.col(f"last.{name}").alias(name) for name in fields])
        .filter(~F.col("tombstone"))
    )
    deletions = (
        groups.filter(F.col("tombstone") & window.up_to_until(F.col("record_ts")))
        .groupBy("log_partition", "group")
        .agg(F.max("log_offset").alias("deleted_at"))
    )
    return (
        latest.join(deletions, ["log_partition", "group"], "left")
        .filter(F.col("deleted_at").isNull() | (F.col("log_offset") > F.col("deleted_at")))
        .select(
            "group", "topic", "partition", "offset", "leader_epoch", "metadata",
            _ts("commit_ts").alias("commit_ts"), "log_partition", "log_offset",
        )
    )


def group_events(groups: DataFrame, window: TimeWindow) -> DataFrame:
    """Applied GroupMetadata records and tombstones up to --until (rebalances need the ones
    before --since too, to know the generation a rebalance left)."""
    return groups.filter(window.up_to_until(F.col("record_ts"))).select(
        "group", "log_partition", "log_offset", "record_ts", "tombstone", "generation",
        "protocol_type", "protocol", "leader", "state_ts", "members",
    )


def group_generations(events: DataFrame, window: TimeWindow) -> DataFrame:
    """One row per GroupMetadataValue record inside the window."""
    return events.filter(~F.col("tombstone") & window.inside(F.col("record_ts"))).select(
        "group", "generation", "protocol_type", "protocol", "leader",
        F.when(F.col("state_ts") >= 0, _ts("state_ts")).alias("state_ts"),
        F.size("members").alias("member_count"),
        F.transform(
            "members",
            lambda m: F.struct(
                m["member_id"].alias("member_id"), m["instance_id"].alias("instance_id"),
                m["client_id"].alias("client_id"), m["client_host"].alias("client_host"),
                m["partitions"].alias("partitions"), m["topics"].alias("topics"),
            ),
        ).alias("members"),
        "log_partition", "log_offset", _ts("record_ts").alias("ts"),
    )


REBALANCE_SCHEMA = T.StructType(
    [
        T.StructField("group", T.StringType()),
        T.StructField("from_generation", T.IntegerType()),
        T.StructField("to_generation", T.IntegerType()),
        T.StructField("ts_ms", T.LongType()),
        T.StructField("members_joined", T.IntegerType()),
        T.StructField("members_left", T.IntegerType()),
        T.StructField("partitions_moved", T.IntegerType()),
        T.StructField("partitions_kept", T.IntegerType()),
        T.StructField("seconds_since_previous", T.DoubleType()),
    ]
)


def _group_rebalances(rows: pd.DataFrame) -> pd.DataFrame:
    events = [
        history.GroupEvent(
            log_partition=int(row.log_partition),
            log_offset=int(row.log_offset),
            ts=int(row.record_ts),
            generation=None if row.tombstone else int(row.generation),
            members=None if row.tombstone else list(row.members),
        )
        for row in rows.itertuples(index=False)
    ]
    found = history.rebalances(events)
    group = rows["group"].iloc[0]
    return pd.DataFrame(
        [
            (group, r.from_generation, r.to_generation, r.ts, r.members_joined, r.members_left,
             r.partitions_moved, r.partitions_kept, r.seconds_since_previous)
            for r in found
        ],
        columns=REBALANCE_SCHEMA.fieldNames(),
    )


def rebalances(events: DataFrame, window: TimeWindow) -> DataFrame:
    """Consecutive generations of each group (see history.rebalances), inside the window."""
    found = (
        events.select("group", "log_partition", "log_offset", "record_ts", "tombstone",
                      "generation", "members")
        .groupBy("group")
        .applyInPandas(_group_rebalances, REBALANCE_SCHEMA)
    )
    return found.filter(window.inside(F.col("ts_ms"))).select(
        "group", "from_generation", "to_generation", _ts("ts_ms").alias("ts"),
        "members_joined", "members_left", "partitions_moved", "partitions_kept",
        "seconds_since_previous",
    )


def log_end_offsets(topic_batches: DataFrame, spark: SparkSession,
                    segments: tuple[SegmentFile, ...]) -> DataFrame:
    """(topic, partition, log_end_offset): last batch's base offset + last offset delta + 1.

    A partition whose segments hold no batch (all deleted by retention, or new) ends at the
    base offset of its newest segment, which Kafka names after the next offset it will assign.
    """
    floors = spark.createDataFrame(
        [(s.topic, s.partition, s.base_offset) for s in segments],
        "topic string, partition int, end long",
    )
    ends = (
        topic_batches.filter(F.col("error").isNull())
        .select("topic", "partition", (F.col("last_offset") + 1).alias("end"))
    )
    return (
        ends.unionByName(floors)
        .groupBy("topic", "partition")
        .agg(F.max("end").alias("log_end_offset"))
    )


LAG_HISTORY_SCHEMA = T.StructType(
    [
        T.StructField("group", T.StringType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("log_partition", T.IntegerType()),
        T.StructField("log_offset", T.LongType()),
        T.StructField("record_ts", T.LongType()),
        T.StructField("offset", T.LongType()),
        T.StructField("log_end_offset", T.LongType()),
        T.StructField("lag", T.LongType()),
    ]
)


def _lag_at_commits(commits: pd.DataFrame, batches: pd.DataFrame) -> pd.DataFrame:
    """The lag of each commit: the partition's log end when the commit was appended (the end
    of the last batch written at or before that time) minus the committed offset."""
    if commits.empty:
        return pd.DataFrame(columns=LAG_HISTORY_SCHEMA.fieldNames())
    commits = commits.sort_values("record_ts")
    if batches.empty:
        ends = pd.DataFrame({"max_timestamp": pd.Series(dtype="int64"),
                             "log_end_offset": pd.Series(dtype="int64")})
    else:
        ends = batches.sort_values("max_timestamp")
        ends = pd.DataFrame(
            {
                "max_timestamp": ends["max_timestamp"].astype("int64"),
                "log_end_offset": (ends["last_offset"] + 1).cummax().astype("int64"),
            }
        )
    joined = pd.merge_asof(
        commits, ends, left_on="record_ts", right_on="max_timestamp", direction="backward"
    )
    joined["log_end_offset"] = joined["log_end_offset"].fillna(0).astype("int64")
    joined["lag"] = (joined["log_end_offset"] - joined["offset"]).clip(lower=0)
    return joined[LAG_HISTORY_SCHEMA.fieldNames()]


def lag_history(commits: DataFrame, topic_batches: DataFrame) -> DataFrame:
    """Every commit of a topic whose log is present, with the lag it had when committed."""
    batches = topic_batches.filter(F.col("error").isNull()).select(
        "topic", "partition", "last_offset", "max_timestamp"
    )
    present = batches.select("topic", "partition").distinct()
    selected = commits.join(present, ["topic", "partition"], "left_semi").select(
        "group", "topic", "partition", "log_partition", "log_offset", "record_ts", "offset"
    )
    return (
        selected.groupBy("topic", "partition")
        .cogroup(batches.groupBy("topic", "partition"))
        .applyInPandas(_lag_at_commits, LAG_HISTORY_SCHEMA)
    )


STATUS_SCHEMA = T.StructType(
    [
        T.StructField("group", T.StringType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("status", T.StringType()),
    ]
)


def _partition_status_udf(now_ms: int) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The grouped-UDF body judging one partition, with the run's notion of now bound in."""

    def evaluate(rows: pd.DataFrame) -> pd.DataFrame:
        rows = rows.sort_values(["log_partition", "log_offset"])
        window = [
            history.CommitPoint(offset=int(r.offset), ts=int(r.record_ts), lag=int(r.lag))
            for r in rows.itertuples(index=False)
        ]
        current_lag = int(rows["current_lag"].iloc[-1])
        status = history.partition_status(window, current_lag, now_ms)
        first = rows.iloc[0]
        return pd.DataFrame(
            [(first["group"], first["topic"], int(first["partition"]), status.name)],
            columns=STATUS_SCHEMA.fieldNames(),
        )

    return evaluate


def lag(committed: DataFrame, ends: DataFrame, history_rows: DataFrame, now_ms: int) -> DataFrame:
    """Current lag per committed partition of a present topic, its Burrow status over the last
    BURROW_WINDOW commits, and the group's status (its worst partition)."""
    current = committed.join(ends, ["topic", "partition"]).select(
        "group", "topic", "partition", F.col("offset").alias("committed_offset"),
        "log_end_offset",
        F.greatest(F.col("log_end_offset") - F.col("offset"), F.lit(0)).alias("lag"),
    )
    newest_first = Window.partitionBy("group", "topic", "partition").orderBy(
        F.col("log_partition").desc(), F.col("log_offset").desc()
    )
    recent = (
        history_rows.withColumn("rank", F.row_number().over(newest_first))
        .filter(F.col("rank") <= history.BURROW_WINDOW)
        .join(current.select("group", "topic", "partition", F.col("lag").alias("current_lag")),
              ["group", "topic", "partition"])
        .select("group", "topic", "partition", "log_partition", "log_offset", "record_ts",
                "offset", "lag", "current_lag")
    )
    statuses = recent.groupBy("group", "topic", "partition").applyInPandas(
        _partition_status_udf(now_ms), STATUS_SCHEMA
    )
    severity = F.array_position(
        F.array(*[F.lit(s.name) for s in history.PartitionStatus]), F.col("status")
    )
    with_status = current.join(statuses, ["group", "topic", "partition"], "left").withColumn(
        "status", F.coalesce(F.col("status"), F.lit(history.PartitionStatus.OK.name))
    )
    worst = with_status.groupBy("group").agg(
        F.max_by("status", severity.cast("int")).alias("group_status")
    )
    return with_status.join(worst, "group")


def commits_per_group_minute(commits: DataFrame) -> DataFrame:
    """(group, minute, commits, last_commit_ts) from offset_commits rows: small, and enough
    for both the summary's totals and the commits-per-minute plot, so the commits are read
    once for the two."""
    return commits.groupBy("group", F.date_trunc("minute", "commit_ts").alias("minute")).agg(
        F.count("*").alias("commits"), F.max("commit_ts").alias("last_commit_ts")
    )


def group_summary(events: DataFrame, committed: DataFrame, commit_minutes: DataFrame,
                  found_rebalances: DataFrame, current_lag: DataFrame | None) -> DataFrame:
    """One row per group seen: latest state and totals.

    State: "Dead" when the last group record is a tombstone and no offsets survive it,
    "Stable" when the last generation has members, "Empty" otherwise (including groups that
    only ever committed offsets, which a coordinator loads as Empty groups).
    """
    latest = events.groupBy("group").agg(
        F.max_by(
            F.struct("tombstone", "generation", "protocol_type", "protocol", "leader",
                     "members", "record_ts"),
            F.struct("log_partition", "log_offset"),
        ).alias("last"),
        F.count(F.when(~F.col("tombstone"), 1)).alias("generation_records"),
    )
    commit_totals = commit_minutes.groupBy("group").agg(
        F.sum("commits").alias("commits"), F.max("last_commit_ts").alias("last_commit_ts")
    )
    committed_totals = committed.groupBy("group").agg(
        F.count("*").alias("committed_partitions")
    )
    rebalance_totals = found_rebalances.groupBy("group").agg(
        F.count("*").alias("rebalances"), F.sum("partitions_moved").alias("partitions_moved"),
        F.max("ts").alias("last_rebalance_ts"),
    )
    names = (
        latest.select("group")
        .unionByName(commit_totals.select("group"))
        .unionByName(committed_totals.select("group"))
        .distinct()
    )
    summary = (
        names.join(latest, "group", "left")
        .join(commit_totals, "group", "left")
        .join(committed_totals, "group", "left")
        .join(rebalance_totals, "group", "left")
    )
    if current_lag is not None:
        lag_totals = current_lag.groupBy("group").agg(
            F.sum("lag").alias("total_lag"), F.first("group_status").alias("status")
        )
        summary = summary.join(lag_totals, "group", "left")
    else:
        summary = summary.withColumn("total_lag", F.lit(None).cast("long")).withColumn(
            "status", F.lit(None).cast("string")
        )
    survived = F.coalesce(F.col("committed_partitions"), F.lit(0)) > 0
    state = (
        F.when(F.col("last.tombstone") & ~survived, F.lit("Dead"))
        .when(~F.col("last.tombstone") & (F.size("last.members") > 0), F.lit("Stable"))
        .otherwise(F.lit("Empty"))
    )
    live = F.col("last").isNotNull() & ~F.col("last.tombstone")
    return summary.select(
        "group",
        state.alias("state"),
        F.when(live, F.col("last.protocol_type")).alias("protocol_type"),
        F.when(live, F.col("last.protocol")).alias("protocol"),
        F.when(live, F.col("last.generation")).alias("generation"),
        F.when(live, F.col("last.leader")).alias("leader"),
        F.when(live, F.size("last.members")).otherwise(0).alias("member_count"),
        F.coalesce("generation_records", F.lit(0)).alias("generations"),
        F.coalesce("rebalances", F.lit(0)).alias("rebalances"),
        F.coalesce("partitions_moved", F.lit(0)).alias("partitions_moved"),
        "last_rebalance_ts",
        F.coalesce("commits", F.lit(0)).alias("commits"),
        F.coalesce("committed_partitions", F.lit(0)).alias("committed_partitions"),
        "last_commit_ts",
        "total_lag",
        "status",
    )


def errors(others: DataFrame, topic_batches: DataFrame | None) -> DataFrame:
    """Every skipped file region or record, with file and byte position."""
    found = others.filter(F.col("kind") == decode.ERROR).select(
        "file", "error_position", "error"
    )
    if topic_batches is not None:
        found = found.unionByName(
            topic_batches.filter(F.col("error").isNotNull()).select(
                "file", "error_position", "error"
            )
        )
    return found
