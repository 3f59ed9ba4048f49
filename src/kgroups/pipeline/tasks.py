"""What Spark's Python workers run for `kgroups analyze`: the mapInArrow body analysing a
task's __consumer_offsets partitions, the plan spreading partitions over tasks, and the wire
format of the results (each small table as Arrow IPC bytes).

Kept apart from `job.py` on purpose: a worker unpickling the task imports this module, and the
driver-side one pulls in Spark SQL, pandas and matplotlib, a second of imports per worker."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from kgroups.pipeline import (
    ownership,
    rebalance_causes,
    streams_history,
    tables,
    transaction_tables,
)
from kgroups.pipeline.decode import DecodedSegment, decode_offsets_log, decode_topic_segment
from kgroups.pipeline.discovery import OFFSETS_TOPIC, SegmentFile
from kgroups.pipeline.partition import PartitionResult, analyze_decoded, analyze_partition
from kgroups.pipeline.topic_logs import TopicLogs
from kgroups.pipeline.window import TimeWindow

if TYPE_CHECKING:
    from pyspark import Broadcast

# What a partition task sends back: one row per small table, its rows as an Arrow IPC stream.
RESULT_SCHEMA = pa.schema([("name", pa.string()), ("log_partition", pa.int32()),
                           ("data", pa.binary())])
# The columns of a store's batches a partition task reads (store_source.py).
STORE_BATCH_SCHEMA = pa.schema([("base_offset", pa.int64()), ("data", pa.binary())])
# How many bytes of a store's batches are decoded at once: like a segment, but smaller, as the
# batches arrive as separate values and are joined for the decoder.
STORE_CHUNK_BYTES = 64 << 20
STATS = pa.schema([("records", pa.int64()), ("max_record_ts", pa.int64())])
# Every table a task may send, by name.
PARTS = {
    "committed_offsets": tables.COMMITTED_OFFSETS,
    "group_generations": tables.GROUP_GENERATIONS,
    "rebalances": tables.REBALANCES,
    "commit_minutes": tables.COMMIT_MINUTES,
    "summary": tables.PARTIAL_SUMMARY,
    "errors": tables.ERRORS,
    "current_lag": tables.CURRENT_LAG,
    "lag_windows": tables.LAG_WINDOWS,
    "lag_minutes": tables.LAG_MINUTES,
    "rebalance_causes": rebalance_causes.REBALANCE_CAUSES,
    "report_partition_lag": tables.REPORT_PARTITION_LAG,
    "partition_owners": ownership.PARTITION_OWNERS,
    "transactional_commits": transaction_tables.TRANSACTIONAL_COMMITS,
    "streams_group_epochs": streams_history.STREAMS_GROUP_EPOCHS,
    "stats": STATS,
}


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


Plan = list[list[tuple[int, list[str]]]]


def partition_task(
    plan: Plan, window: TimeWindow, topic_logs: Broadcast[TopicLogs | None], out: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow body: input rows (id) index `plan`, whose entries list the (log partition,
    segment URIs) each task analyses; output RESULT_SCHEMA."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        logs = topic_logs.value
        for batch in batches:
            for task_id in batch.column("id").to_pylist():
                for log_partition, uris in plan[task_id]:
                    yield _result_rows(
                        log_partition, analyze_partition(log_partition, uris, window, logs, out))

    return run


def _result_rows(log_partition: int, result: PartitionResult) -> pa.RecordBatch:
    """A partition's result as RESULT_SCHEMA rows: its small tables and its STATS."""
    named = result.tables()
    named["stats"] = pa.Table.from_pylist(
        [{"records": result.records, "max_record_ts": result.max_record_ts}], schema=STATS)
    return pa.RecordBatch.from_pylist(
        [{"name": name, "log_partition": log_partition, "data": _ipc(table)}
         for name, table in named.items()],
        schema=RESULT_SCHEMA,
    )


def store_partition_task(
    partitions: list[int], topic_names: dict[uuid.UUID, str], window: TimeWindow,
    topic_logs: Broadcast[TopicLogs | None], out: str,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow body over a JDBC read of a store's __consumer_offsets batches (columns
    base_offset and data), one Spark partition per offsets partition: the task's partition
    index is its place in `partitions`, so an offsets partition with no batch still answers.
    The batches are put in offset order and decoded as a segment's bytes would be."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise RuntimeError("store_partition_task runs inside a Spark task")
        log_partition = partitions[context.partitionId()]
        read = [batch.select(["base_offset", "data"]) for batch in batches]
        rows = pa.Table.from_batches(read, STORE_BATCH_SCHEMA).sort_by("base_offset")
        pairs = zip(rows["base_offset"].to_pylist(), rows["data"].to_pylist(), strict=True)
        result = analyze_decoded(log_partition, store_chunks(pairs, log_partition),
                                 lambda: topic_names, window, topic_logs.value, out)
        yield _result_rows(log_partition, result)

    return run


def store_chunks(batches: Iterable[tuple[int, bytes]], log_partition: int
                 ) -> Iterator[DecodedSegment]:
    """A store's batches, (base offset, bytes) in offset order, decoded STORE_CHUNK_BYTES at a
    time, as segments would be."""
    chunk: list[bytes] = []
    size = first = 0
    for base_offset, data in batches:
        if chunk and size + len(data) > STORE_CHUNK_BYTES:
            yield _decode_chunk(chunk, first, log_partition)
            chunk, size = [], 0
        if not chunk:
            first = base_offset
        chunk.append(data)
        size += len(data)
    if chunk:
        yield _decode_chunk(chunk, first, log_partition)


def _decode_chunk(chunk: list[bytes], first: int, log_partition: int) -> DecodedSegment:
    # Errors name the store's partition and the chunk's first offset (never the store's URL,
    # which may hold a password).
    source = f"{OFFSETS_TOPIC}-{log_partition} (PostgreSQL) from offset {first}"
    return decode_offsets_log(b"".join(chunk), source, log_partition)


def _pack(sizes: list[int], tasks: int) -> list[list[int]]:
    """Indexes of `sizes` spread over at most `tasks` bins of about equal total: biggest first,
    each to the lightest bin so far."""
    bins: list[list[int]] = [[] for _ in range(max(1, min(tasks, len(sizes))))]
    loads = [0] * len(bins)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        lightest = loads.index(min(loads))
        bins[lightest].append(index)
        loads[lightest] += sizes[index]
    return bins


def plan_tasks(segments: tuple[SegmentFile, ...], tasks: int) -> Plan:
    """The __consumer_offsets partitions (each with its segment URIs in base-offset order)
    spread over at most `tasks` tasks of about equal bytes. A partition is never split: its
    records are applied in order."""
    grouped: dict[int, list[SegmentFile]] = {}
    for segment in segments:
        grouped.setdefault(segment.partition, []).append(segment)
    partitions = [
        (partition, sorted(own, key=lambda s: s.base_offset))
        for partition, own in sorted(grouped.items())
    ]
    bins = _pack([sum(s.size for s in own) for _, own in partitions], tasks)
    return [[(partitions[i][0], [s.uri for s in partitions[i][1]]) for i in indexes]
            for indexes in bins]


TopicPlan = list[list[tuple[str, str, int]]]


def plan_topic_tasks(segments: tuple[SegmentFile, ...], tasks: int) -> TopicPlan:
    """The data topic segments as (uri, topic, partition), spread over at most `tasks` tasks of
    about equal bytes."""
    bins = _pack([s.size for s in segments], tasks)
    return [[(segments[i].uri, segments[i].topic, segments[i].partition) for i in indexes]
            for indexes in bins]


def topic_task(plan: TopicPlan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow body reading topic segments: input rows (id) index `plan`, output
    decode.TOPIC_ROW_SCHEMA (one row per batch)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task_id in batch.column("id").to_pylist():
                for uri, topic, partition in plan[task_id]:
                    yield from decode_topic_segment(uri, topic, partition).to_batches()

    return run


def collect_parts(results: pa.Table) -> dict[str, pa.Table]:
    """The tasks' RESULT_SCHEMA rows back into tables, concatenated by name in log-partition
    order (an empty table of the right schema for a name no task sent)."""
    parts: dict[str, list[pa.Table]] = {name: [] for name in PARTS}
    ordered = results.sort_by("log_partition")
    for name, data in zip(ordered["name"].to_pylist(), ordered["data"].to_pylist(), strict=True):
        parts[name].append(pa.ipc.open_stream(data).read_all())
    return {name: tables.concat(found, PARTS[name]) for name, found in parts.items()}
