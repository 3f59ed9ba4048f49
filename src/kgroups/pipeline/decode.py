"""__consumer_offsets segment files decoded into Arrow tables, inside Spark's Python workers.

A segment yields:

* its OffsetCommit records as one Arrow table (COMMIT_ROW_SCHEMA). Plain batches are decoded by
  `kgroups.records.columnar` (numpy gathers straight into Arrow, no Python per record); whatever
  it leaves goes through the record-by-record path below, with the same result;
* its GroupMetadata records (GROUP_ROW_SCHEMA), transaction markers and skipped regions, decoded
  record by record with `kgroups.log.batch` (`check_batch`, `records_of`) and `kgroups.records`
  (codec, consumer protocol): the same decoder as the broker and `kgroups offsets dump`, so the
  pipeline cannot disagree with them about a byte.

Damage never stops a run: a batch that fails its checks ends the reading of that file (Kafka's
own recovery truncates a segment at the first bad batch, so the records before it are the ones a
coordinator would load) and a record that does not decode is skipped; both become SegmentError
entries carrying the file and byte position so the run can count and report them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kgroups.log.batch import (
    CONTROL,
    TRANSACTIONAL,
    BatchCorruptError,
    Record,
    check_batch,
    iter_batches,
    peek_batch_header,
    read_header,
    records_of,
)
from kgroups.log.transactions import TransactionMarker, marker_commits
from kgroups.pipeline.consumer_history import CONSUMER_GROUP_KEYS, ConsumerRecord
from kgroups.pipeline.discovery import SegmentFile, open_filesystem
from kgroups.records.codec import (
    RecordDecodeError,
    decode_key,
    decode_offset_commit_fields,
    decode_value,
)
from kgroups.records.columnar import NAME, decode_offset_commits
from kgroups.records.consumer_protocol import decode_assignment, decode_subscription
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
)
from kgroups.records.streams_group import (
    StreamsGroupMemberMetadataKey,
    StreamsGroupMetadataKey,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMetadataKey,
)

log = logging.getLogger("kgroups.analyze")
# The streams group records streams_history replays (the current assignments and the topology
# change no target).
STREAMS_EPOCH_KEYS = (
    StreamsGroupMetadataKey, StreamsGroupMemberMetadataKey,
    StreamsGroupTargetAssignmentMetadataKey, StreamsGroupTargetAssignmentMemberKey,
)

PARTITION_TYPE = pa.struct([("topic", pa.string()), ("partition", pa.int32())])
MEMBER_TYPE = pa.struct(
    [
        ("member_id", pa.string()),
        ("instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("session_timeout", pa.int32()),
        ("rebalance_timeout", pa.int32()),
        ("topics", pa.list_(pa.string())),
        ("partitions", pa.list_(PARTITION_TYPE)),
    ]
)

COMMIT_ROW_SCHEMA = pa.schema(
    [
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("record_ts", pa.int64()),
        ("transactional", pa.bool_()),
        ("producer_id", pa.int64()),  # only set for transactional records
        ("group", NAME),
        ("topic", NAME),
        ("partition", pa.int32()),
        ("tombstone", pa.bool_()),
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_ts", pa.int64()),
        ("expire_ts", pa.int64()),
    ]
)

GROUP_ROW_SCHEMA = pa.schema(
    [
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("record_ts", pa.int64()),
        ("transactional", pa.bool_()),
        ("producer_id", pa.int64()),
        ("group", pa.string()),
        ("tombstone", pa.bool_()),
        ("generation", pa.int32()),
        ("protocol_type", pa.string()),
        ("protocol", pa.string()),
        ("leader", pa.string()),
        ("state_ts", pa.int64()),
        ("members", pa.list_(MEMBER_TYPE)),
    ]
)

TOPIC_ROW_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("base_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("max_timestamp", pa.int64()),
        # Where the batch starts in its segment: lag_seconds reads that one batch again.
        ("position", pa.int64()),
        ("error_position", pa.int64()),
        ("error", pa.string()),
    ]
)

# The columns of kgroups.records.columnar's output that the commit rows keep.
_COLUMNAR_KEPT = ("log_offset", "record_ts", "group", "topic", "partition", "tombstone",
                  "offset", "leader_epoch", "metadata", "commit_ts", "expire_ts")


@dataclass(frozen=True, slots=True)
class SegmentError:
    """A skipped region: the batch (or the record in the batch) at `position` of `file`."""

    file: str
    position: int
    message: str


@dataclass(slots=True)
class DecodedSegment:
    """Everything one segment holds, commits in log order."""

    commits: pa.Table
    groups: pa.Table
    markers: list[TransactionMarker] = field(default_factory=list)
    errors: list[SegmentError] = field(default_factory=list)
    consumer: list[ConsumerRecord] = field(default_factory=list)  # KIP-848 groups' records
    streams: list[ConsumerRecord] = field(default_factory=list)  # KIP-1071 groups' records


def read_file(uri: str) -> bytes:
    """The whole file: segments are bounded by log.segment.bytes (1 GiB by default). Read as
    a random-access file, in one read: a stream reads in chunks and copies them again."""
    filesystem, path = open_filesystem(uri)
    with filesystem.open_input_file(path) as file:
        return bytes(file.read())


def internal_topic_records(segments: Iterable[SegmentFile], topic: str
                           ) -> Iterator[tuple[bytes, Record]]:
    """The keyed data records (with their keys) of an internal topic (__transaction_state,
    __share_group_state) from the segments found beside the offsets topic, each partition's in
    offset order; such a topic is small, so it is read on the driver. A damaged segment is
    logged and left out."""
    chosen = sorted((s for s in segments if s.topic == topic),
                    key=lambda s: (s.partition, s.base_offset))
    for segment in chosen:
        try:
            records = [record for batch in iter_batches(read_file(segment.uri))
                       if not batch.is_control for record in batch.records]
        except ValueError as exc:
            log.warning("skipped %s: %s", segment.uri, exc)
            continue
        yield from ((record.key, record) for record in records if record.key is not None)


def rows_table(schema: pa.Schema, names: tuple[str, ...],
               rows: list[tuple[Any, ...]]) -> pa.Table:
    """A table of `schema` from row tuples holding `names`; every other column is null."""
    count = len(rows)
    by_name = dict(zip(names, zip(*rows, strict=True), strict=True)) if rows else {}
    arrays = [
        pa.array(by_name[f.name], f.type) if f.name in by_name else pa.nulls(count, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _members(value: GroupMetadataValue) -> list[dict[str, Any]]:
    """Members as Arrow structs; consumer groups also get their subscribed topics and the
    partitions SyncGroup handed them (other protocol types keep opaque payloads: null)."""
    consumer = value.protocol_type == "consumer"
    rows = []
    for member in value.members:
        topics: list[str] | None = None
        partitions: list[dict[str, Any]] | None = None
        if consumer:
            topics = list(decode_subscription(member.subscription).topics)
            partitions = []
            if member.assignment:
                for assigned in decode_assignment(member.assignment).assigned_partitions:
                    partitions.extend(
                        {"topic": assigned.topic, "partition": p} for p in assigned.partitions
                    )
        rows.append(
            {
                "member_id": member.member_id,
                "instance_id": member.group_instance_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "session_timeout": member.session_timeout,
                "rebalance_timeout": member.rebalance_timeout,
                "topics": topics,
                "partitions": partitions,
            }
        )
    return rows


class _RecordDecoder:
    """The record-by-record decode of a segment, or of some of its batches: every batch the
    columnar decoder leaves (group metadata, transactions, markers, compression, anything
    unusual), and whole files that turn out damaged."""

    def __init__(self, uri: str, log_partition: int) -> None:
        self.uri = uri
        self.log_partition = log_partition
        self.commits: list[tuple[Any, ...]] = []
        self.groups: list[tuple[Any, ...]] = []
        self.markers: list[TransactionMarker] = []
        self.errors: list[SegmentError] = []
        self.consumer: list[ConsumerRecord] = []
        self.streams: list[ConsumerRecord] = []

    def error(self, position: int, message: str) -> None:
        self.errors.append(SegmentError(self.uri, position, message))

    def decode(self, data: bytes, batch_starts: list[int] | None = None) -> None:
        """Every batch of `data` in order, or only those starting at `batch_starts`. A batch
        failing its checks ends the reading (only possible when reading every batch: the
        columnar scan has checked the others)."""
        starts = iter(batch_starts) if batch_starts is not None else None
        pos = 0 if starts is None else next(starts, len(data))
        size = len(data)
        while pos < size:
            try:
                header, end = check_batch(data, pos)
                records = records_of(data, pos, end, header, False)
            except BatchCorruptError as exc:
                self.error(exc.position, f"corrupt batch, rest of file skipped: {exc}")
                return
            attributes = header.attributes
            transactional = bool(attributes & TRANSACTIONAL)
            producer_id = header.producer_id if transactional else None
            if attributes & CONTROL:
                self._add_markers(records, header.producer_id)
            else:
                self._add_records(records, pos, transactional, producer_id)
            pos = end if starts is None else next(starts, size)

    def _add_markers(self, records: list[tuple[Any, ...]], producer_id: int) -> None:
        for offset, _timestamp, key, _value in records:
            commits = marker_commits(key)
            if commits is not None:
                self.markers.append(TransactionMarker(offset, producer_id, commits))

    def _add_records(self, records: list[tuple[Any, ...]], batch_position: int,
                     transactional: bool, producer_id: int | None) -> None:
        commits = self.commits
        log_partition = self.log_partition
        for offset, timestamp, raw_key, raw_value in records:
            try:
                if raw_key is None:
                    raise RecordDecodeError("record has no key", 0)
                key = decode_key(raw_key)
                if isinstance(key, OffsetCommitKey):
                    if raw_value is None:
                        commits.append(
                            (log_partition, offset, timestamp, transactional, producer_id,
                             key.group, key.topic, key.partition, True, None, None, None, None,
                             None)
                        )
                    else:
                        committed, epoch, metadata, commit_ts, expire_ts = (
                            decode_offset_commit_fields(raw_value)
                        )
                        commits.append(
                            (log_partition, offset, timestamp, transactional, producer_id,
                             key.group, key.topic, key.partition, False, committed, epoch,
                             metadata, commit_ts, expire_ts)
                        )
                elif isinstance(key, GroupMetadataKey):
                    self._add_group(offset, timestamp, transactional, producer_id, key,
                                    decode_value(key, raw_value))
                elif isinstance(key, CONSUMER_GROUP_KEYS) and not transactional:
                    self.consumer.append(ConsumerRecord(
                        log_partition, offset, timestamp, key,
                        None if raw_value is None else decode_value(key, raw_value)))
                elif isinstance(key, STREAMS_EPOCH_KEYS) and not transactional:
                    self.streams.append(ConsumerRecord(
                        log_partition, offset, timestamp, key,
                        None if raw_value is None else decode_value(key, raw_value)))
            except ValueError as exc:
                self.error(
                    batch_position,
                    f"record at offset {offset} of the batch at this position skipped: {exc}",
                )

    def _add_group(self, log_offset: int, record_ts: int, transactional: bool,
                   producer_id: int | None, key: GroupMetadataKey, value: Any) -> None:
        if isinstance(value, GroupMetadataValue):
            self.groups.append(
                (self.log_partition, log_offset, record_ts, transactional,
                 producer_id, key.group, False, value.generation, value.protocol_type,
                 value.protocol, value.leader, value.current_state_timestamp,
                 _members(value))
            )
        else:
            self.groups.append(
                (self.log_partition, log_offset, record_ts, transactional,
                 producer_id, key.group, True, None, None, None, None, None, None)
            )


def _columnar_commits(columns: pa.RecordBatch, log_partition: int) -> pa.Table:
    """Columnar-decoded commits as COMMIT_ROW_SCHEMA (their batches are never transactional)."""
    count = columns.num_rows
    arrays = {name: columns.column(name) for name in _COLUMNAR_KEPT}
    arrays["log_partition"] = pa.array(np.full(count, log_partition, dtype=np.int32))
    arrays["transactional"] = pa.array(np.zeros(count, dtype=bool))
    arrays["producer_id"] = pa.nulls(count, pa.int64())
    return pa.Table.from_arrays([arrays[f.name] for f in COMMIT_ROW_SCHEMA],
                                schema=COMMIT_ROW_SCHEMA)


def _finish(decoder: _RecordDecoder, columnar: pa.Table | None) -> DecodedSegment:
    scalar = rows_table(COMMIT_ROW_SCHEMA, tuple(COMMIT_ROW_SCHEMA.names), decoder.commits)
    if columnar is None:
        commits = scalar
    elif scalar.num_rows == 0:
        commits = columnar
    else:
        # The two paths cover different batches: interleave them back into log order.
        commits = pa.concat_tables([columnar, scalar]).sort_by("log_offset")
    groups = rows_table(GROUP_ROW_SCHEMA, tuple(GROUP_ROW_SCHEMA.names), decoder.groups)
    return DecodedSegment(commits, groups, decoder.markers, decoder.errors, decoder.consumer,
                          decoder.streams)


def decode_offsets_segment(uri: str, log_partition: int) -> DecodedSegment:
    """Every record of one __consumer_offsets segment; damage becomes SegmentError entries."""
    try:
        data = read_file(uri)
    except OSError as exc:
        decoder = _RecordDecoder(uri, log_partition)
        decoder.error(0, f"unreadable segment skipped: {exc}")
        return _finish(decoder, None)
    return decode_offsets_log(data, uri, log_partition)


def decode_offsets_log(data: bytes, source: str, log_partition: int) -> DecodedSegment:
    """Every record of consecutive __consumer_offsets batches (a segment's bytes, or batches
    read from a PostgreSQL store); errors name `source` and the byte position in `data`."""
    decoder = _RecordDecoder(source, log_partition)
    try:
        columnar = decode_offset_commits(data)
    except BatchCorruptError:
        # Damage: the ordinary reader keeps what precedes it and reports where it is.
        decoder.decode(data)
        return _finish(decoder, None)
    decoder.decode(data, [start for start, _end in columnar.other_batches])
    return _finish(decoder, _columnar_commits(columnar.commits, log_partition))


def decode_topic_segment(uri: str, topic: str, partition: int) -> pa.Table:
    """One row per batch of a data topic's segment: enough to know its log end offset at any
    time (the lag a group had when it committed). Only batch headers are read: the records
    (and so the CRC over them) do not matter to offsets and times, and data topics are large."""
    rows: list[tuple[Any, ...]] = []
    errors: list[tuple[Any, ...]] = []
    try:
        data = read_file(uri)
    except OSError as exc:
        errors.append((uri, topic, partition, 0, f"unreadable segment skipped: {exc}"))
        data = b""
    pos = 0
    while pos < len(data):
        try:
            base_offset, last_offset, size = peek_batch_header(data, pos)
            if pos + size > len(data):
                raise BatchCorruptError(f"batch at byte {pos} is cut short", pos)
        except BatchCorruptError as exc:
            errors.append((uri, topic, partition, exc.position,
                           f"corrupt batch, rest of file skipped: {exc}"))
            break
        max_timestamp = read_header(data, pos).max_timestamp
        rows.append((topic, partition, base_offset, last_offset, max_timestamp, pos))
        pos += size
    names = ("topic", "partition", "base_offset", "last_offset", "max_timestamp", "position")
    error_names = ("file", "topic", "partition", "error_position", "error")
    return pa.concat_tables(
        [rows_table(TOPIC_ROW_SCHEMA, names, rows),
         rows_table(TOPIC_ROW_SCHEMA, error_names, errors)]
    )
