"""The data topics' logs as lag needs them: each partition's log end offset now, and how it grew
over time (so the lag a group had when it committed can be known).

Built once on the driver from one row per topic batch (`decode.decode_topic_segment`, run by
Spark over the topic segments) and shipped to every partition task as a broadcast: a few numbers
per batch, not the data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kgroups.pipeline.discovery import SegmentFile

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Growth:
    """A partition's batches by time: `times[i]` is a batch's max timestamp (ascending) and
    `ends[i]` the log end offset once every batch up to that time was written."""

    times: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TopicLogs:
    """Log end offsets and growth of every topic partition found next to __consumer_offsets."""

    log_end_offsets: dict[TopicPartition, int]
    growth: dict[TopicPartition, Growth]

    @classmethod
    def from_batches(cls, batches: pa.Table, segments: tuple[SegmentFile, ...]) -> TopicLogs:
        """From decode.TOPIC_ROW_SCHEMA rows (error rows are ignored) and the segments listed.

        A partition whose segments hold no batch (all deleted by retention, or new) ends at the
        base offset of its newest segment, which Kafka names after the next offset it will
        assign."""
        ends: dict[TopicPartition, int] = {}
        for segment in segments:
            key = (segment.topic, segment.partition)
            ends[key] = max(ends.get(key, 0), segment.base_offset)
        return cls.from_rows(batches, ends)

    @classmethod
    def from_rows(cls, batches: pa.Table, log_ends: Mapping[TopicPartition, int]) -> TopicLogs:
        """From decode.TOPIC_ROW_SCHEMA rows and where each partition's log ends as far as its
        container says (the newest segment's base offset, a store's next offset): the end is
        the larger of that and the last batch's next offset."""
        ends = dict(log_ends)
        good = batches.filter(pc.is_null(batches["error"]))
        growth: dict[TopicPartition, Growth] = {}
        if good.num_rows:
            frame = good.select(["topic", "partition", "last_offset", "max_timestamp"]).to_pandas()
            for (topic, partition), rows in frame.groupby(["topic", "partition"], sort=False):
                rows = rows.sort_values("max_timestamp", kind="stable")
                times = rows["max_timestamp"].to_numpy(dtype=np.int64)
                cumulative = np.maximum.accumulate(rows["last_offset"].to_numpy(np.int64) + 1)
                key = (str(topic), int(partition))
                growth[key] = Growth(times, cumulative)
                ends[key] = max(ends.get(key, 0), int(cumulative[-1]))
        return cls(ends, growth)

    def ends_at(self, key: TopicPartition, times: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The log end offset of `key` at each of `times`: the end after the last batch written
        at or before that time (0 before the first)."""
        growth = self.growth[key]
        index = np.searchsorted(growth.times, times, side="right") - 1
        return np.where(index >= 0, growth.ends[np.maximum(index, 0)], 0)
