"""The lag table's `lag_seconds`: how old the first record a group has not consumed is.

From the topic log (`lag_seconds_source` = "record"): the record at the committed offset (or,
where compaction or a transaction marker left a hole, the first one after it) is read again -
only its batch, found by the position the topic scan noted - and its timestamp (CreateTime as
the producer set it, or the broker's LogAppendTime) is subtracted from the run's "now" (the
newest record of __consumer_offsets, or --until).

When that record is not at hand (retention deleted it, the segments holding it were not copied,
or its batch is damaged), an estimate from the commit rate ("commit_rate"): the group's
consumption rate on the partition over its last commits (offsets per second between the first
and the last of them) divides the lag in records. Under steady production that is the time the
consumer is behind; with neither record nor a measurable rate (fewer than two commits, or no
progress between them) lag_seconds is null. A partition with no lag has 0 and no source.

Without any topic log there is no lag table at all: the log end offset, and so the lag in
records, is unknown.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kgroups.log.batch import LOG_OVERHEAD, BatchCorruptError, decode_batch
from kgroups.pipeline.discovery import SegmentFile, open_filesystem

RECORD = "record"
COMMIT_RATE = "commit_rate"
FIELDS = [pa.field("lag_seconds", pa.float64()), pa.field("lag_seconds_source", pa.string())]
# Remote stores answer one ranged read per lagging partition; a few at a time hide their latency.
READ_THREADS = 16
_LENGTH = struct.Struct(">i")

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class _Batches:
    """One topic partition's batches in offset order, and the segments they live in."""

    base_offsets: npt.NDArray[np.int64]
    last_offsets: npt.NDArray[np.int64]
    positions: npt.NDArray[np.int64]
    segment_bases: npt.NDArray[np.int64]
    segment_uris: list[str]

    def locate(self, offset: int) -> tuple[str, int] | None:
        """(segment URI, byte position) of the batch holding the first record at or after
        `offset`, or None when the log does not reach back that far or ends before it."""
        if not len(self.base_offsets) or offset < self.base_offsets[0]:
            return None
        index = int(np.searchsorted(self.last_offsets, offset, side="left"))
        if index >= len(self.last_offsets):
            return None
        segment = int(np.searchsorted(self.segment_bases, self.base_offsets[index],
                                      side="right")) - 1
        return self.segment_uris[segment], int(self.positions[index])


def _index(batches: pa.Table, segments: Sequence[SegmentFile]) -> dict[TopicPartition, _Batches]:
    good = batches.filter(pc.is_null(batches["error"]))
    by_partition: dict[TopicPartition, list[SegmentFile]] = {}
    for segment in segments:
        by_partition.setdefault((segment.topic, segment.partition), []).append(segment)
    found: dict[TopicPartition, _Batches] = {}
    if not good.num_rows:
        return found
    frame = good.select(["topic", "partition", "base_offset", "last_offset", "position"]) \
        .to_pandas()
    for (topic, partition), rows in frame.groupby(["topic", "partition"], sort=False):
        key = (str(topic), int(partition))
        rows = rows.sort_values("base_offset", kind="stable")
        own = sorted(by_partition.get(key, []), key=lambda s: s.base_offset)
        found[key] = _Batches(
            rows["base_offset"].to_numpy(np.int64), rows["last_offset"].to_numpy(np.int64),
            rows["position"].to_numpy(np.int64),
            np.array([s.base_offset for s in own], dtype=np.int64), [s.uri for s in own])
    return found


def record_timestamp(uri: str, position: int, offset: int) -> int | None:
    """The timestamp of the first record at or after `offset` in the batch at `position` of
    segment `uri` (two ranged reads: its length, then the batch); None if unreadable."""
    try:
        filesystem, path = open_filesystem(uri)
        with filesystem.open_input_file(path) as source:
            head = source.read_at(LOG_OVERHEAD, position)
            size = LOG_OVERHEAD + _LENGTH.unpack_from(head, 8)[0]
            return timestamp_in_batch(source.read_at(size, position), offset)
    except (OSError, ValueError, struct.error):
        return None


def timestamp_in_batch(data: bytes, offset: int) -> int | None:
    """The timestamp of the first record at or after `offset` in the batch `data`; None if it
    holds none or does not decode."""
    try:
        batch, _ = decode_batch(data)
    except (ValueError, struct.error, BatchCorruptError):
        return None
    return next((r.timestamp for r in batch.records if r.offset >= offset), None)


def _commit_rate_seconds(points: list[dict[str, Any]], lag: int) -> float | None:
    """lag / (records consumed per second over the commits in `points`)."""
    if len(points) < 2:
        return None
    first, last = points[0], points[-1]
    consumed, elapsed_ms = last["offset"] - first["offset"], last["ts_ms"] - first["ts_ms"]
    if consumed <= 0 or elapsed_ms <= 0:
        return None
    return lag / (consumed / (elapsed_ms / 1000.0))


def _key(row: dict[str, Any]) -> tuple[str, str, int]:
    return row["group"], row["topic"], row["partition"]


def add_lag_seconds(lag: pa.Table, windows: pa.Table, batches: pa.Table,
                    segments: Sequence[SegmentFile], now_ms: int,
                    read_at: Callable[[str, int, int], int | None] = record_timestamp
                    ) -> pa.Table:
    """`lag` (tables.LAG rows) with lag_seconds and lag_seconds_source appended; `windows` are
    the partitions' last commits (tables.LAG_WINDOWS), `batches` the topic scan's rows
    (decode.TOPIC_ROW_SCHEMA) over `segments`. `read_at(uri, position, offset)` reads a
    record's timestamp back (`record_timestamp` for segment files)."""
    rows = lag.to_pylist()
    index = _index(batches, segments)
    lagging = [row for row in rows if row["lag"] > 0]
    located = [
        found.locate(row["committed_offset"])
        if (found := index.get((row["topic"], row["partition"]))) else None
        for row in lagging
    ]

    def timestamp_at(where: tuple[str, int] | None, offset: int) -> int | None:
        return None if where is None else read_at(*where, offset)

    with ThreadPoolExecutor(READ_THREADS) as pool:
        stamps = list(pool.map(timestamp_at, located,
                               [row["committed_offset"] for row in lagging]))
    points: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for point in windows.sort_by("ts_ms").to_pylist():
        points.setdefault(_key(point), []).append(point)
    by_record = dict(zip(map(_key, lagging), stamps, strict=True))
    values: list[tuple[float | None, str | None]] = []
    for row in rows:
        if row["lag"] <= 0:
            values.append((0.0, None))
            continue
        stamp = by_record[_key(row)]
        if stamp is not None and stamp >= 0:
            values.append((max(0, now_ms - stamp) / 1000.0, RECORD))
            continue
        estimate = _commit_rate_seconds(points.get(_key(row), []), row["lag"])
        values.append((estimate, None if estimate is None else COMMIT_RATE))
    return pa.Table.from_arrays(
        [*lag.columns, pa.array([v[0] for v in values], pa.float64()),
         pa.array([v[1] for v in values], pa.string())],
        schema=pa.schema([*lag.schema, *FIELDS]),
    )
