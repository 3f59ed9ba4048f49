"""One __consumer_offsets partition analysed in this process, without Spark: for a command that
needs one group's history (`kgroups simulate --from-history`), not the whole log's.

The partition is read from segment files (`discovery.find_inputs`: a kgroups data dir or a
Kafka log dir) or from a kgroups PostgreSQL store (`storage.postgresql`), decoded by `decode`
and analysed by `partition.analyze_decoded`, the code every Spark task of `kgroups analyze`
runs: the group's generations, owners and rebalance causes are the ones analyze reports.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from kgroups.pipeline import consumer_history, tables
from kgroups.pipeline.decode import GROUP_ROW_SCHEMA, DecodedSegment, decode_offsets_segment
from kgroups.pipeline.discovery import OFFSETS_TOPIC, InputNotFoundError, find_inputs
from kgroups.pipeline.partition import PartitionResult, analyze_decoded
from kgroups.pipeline.tasks import store_chunks
from kgroups.pipeline.window import TimeWindow
from kgroups.storage.postgresql import PostgresStore, is_store_url, redacted


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """A partition's tables, with what they leave out of the records: the GroupMetadata rows
    as decoded (decode.GROUP_ROW_SCHEMA, whose members carry their session and rebalance
    timeouts) and the KIP-848 groups' records."""

    result: PartitionResult
    group_records: pa.Table
    consumer_records: list[consumer_history.ConsumerRecord]


class OffsetsLog:
    """A log directory or a store, listed once; `read` analyses one of its partitions."""

    def __init__(self, described: str, partitions: tuple[int, ...], partition_count: int | None,
                 topic_partitions: dict[str, int],
                 segments: Callable[[int], Iterator[DecodedSegment]],
                 topic_names: Callable[[int], Mapping[uuid.UUID, str]],
                 close: Callable[[], None] = lambda: None) -> None:
        self.described = described
        self.partitions = partitions  # the offsets partitions there are records of
        # How many offsets partitions the topic has, where that is known (every one from 0 on
        # has a directory, or the store says): Kafka's placement of a group needs it.
        self.partition_count = partition_count
        self.topic_partitions = topic_partitions  # the other topics' partition counts
        self._segments = segments
        self._topic_names = topic_names
        self.close = close

    @classmethod
    def open(cls, source: str) -> OffsetsLog:
        """InputNotFoundError when `source` holds no __consumer_offsets; the store's
        StorageUnavailableError (an OSError) when it cannot be reached."""
        return _open_store(source) if is_store_url(source) else _open_directory(source)

    def read(self, log_partition: int, window: TimeWindow | None = None) -> PartitionRead:
        decoded = list(self._segments(log_partition))
        result = analyze_decoded(log_partition, iter(decoded),
                                 lambda: self._topic_names(log_partition),
                                 window or TimeWindow(), None, None)
        return PartitionRead(
            result, tables.concat([s.groups for s in decoded], GROUP_ROW_SCHEMA),
            [record for segment in decoded for record in segment.consumer])


def _open_directory(path: str) -> OffsetsLog:
    inputs = find_inputs([path])
    by_partition: dict[int, list[str]] = {}
    for segment in inputs.offsets_segments:  # in base-offset order
        by_partition.setdefault(segment.partition, []).append(segment.uri)
    counts: dict[str, int] = {}
    for segment in inputs.topic_segments:
        counts[segment.topic] = max(counts.get(segment.topic, 0), segment.partition + 1)
    partitions = tuple(sorted(by_partition))
    whole = partitions == tuple(range(len(partitions)))
    return OffsetsLog(
        path, partitions, len(partitions) if whole else None, counts,
        lambda p: (decode_offsets_segment(uri, p) for uri in by_partition[p]),
        lambda p: consumer_history.topic_names_near(by_partition[p][0]))


def _open_store(url: str) -> OffsetsLog:
    store = PostgresStore.open(url)
    try:
        topics = store.topics()
    except BaseException:
        store.close()
        raise
    if OFFSETS_TOPIC not in topics:
        store.close()
        raise InputNotFoundError(f"no {OFFSETS_TOPIC} topic in the store at {redacted(url)}")
    count = topics[OFFSETS_TOPIC][1]
    names = {topic_id: name for name, (topic_id, _) in topics.items()}

    def segments(log_partition: int) -> Iterator[DecodedSegment]:
        batches = ((int.from_bytes(data[:8], "big", signed=True), data)
                   for data in store.batches(OFFSETS_TOPIC, log_partition))
        return store_chunks(batches, log_partition)

    return OffsetsLog(
        redacted(url), tuple(range(count)), count,
        {name: n for name, (_, n) in topics.items() if name != OFFSETS_TOPIC},
        segments, lambda _p: names, store.close)
