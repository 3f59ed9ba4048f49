"""Segment files to Arrow batches, run inside Spark's Python workers through `mapInArrow`.

Two outputs, each with its own narrow schema, because nearly every record of a
__consumer_offsets log is an offset commit and a wide row with the other kinds' columns null
would make Spark carry (and convert) those columns ten million times:

* COMMIT_ROW_SCHEMA, one row per OffsetCommit record. Plain batches are decoded by
  `kgroups.records.columnar` (numpy gathers straight into Arrow, no Python per record);
  whatever it leaves goes through the record-by-record path below, with the same result.
* OTHER_ROW_SCHEMA: group metadata records, transaction markers and skipped regions, decoded
  record by record with `kgroups.log.batch` (`check_batch`, `records_of`) and
  `kgroups.records` (codec, consumer protocol): the same decoder as the broker and `kgroups
  offsets dump`, so the pipeline cannot disagree with them about a byte.

Damage never stops a run: a batch that fails its checks ends the reading of that file (Kafka's
own recovery truncates a segment at the first bad batch, so the records before it are the ones a
coordinator would load) and a record that does not decode is skipped; both become `error` rows
carrying the file and byte position so the run can count and report them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from kgroups.log.batch import (
    CONTROL,
    HEADER,
    TRANSACTIONAL,
    BatchCorruptError,
    check_batch,
    peek_batch_header,
    records_of,
)
from kgroups.pipeline.discovery import open_filesystem
from kgroups.records.codec import (
    RecordDecodeError,
    decode_key,
    decode_offset_commit_fields,
    decode_value,
)
from kgroups.records.columnar import decode_offset_commits
from kgroups.records.consumer_protocol import decode_assignment, decode_subscription
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
)

# Row kinds of the non-commit rows.
GROUP = "group"
MARKER = "marker"
ERROR = "error"

# A control record's key is (version int16, type int16); type 1 commits a transaction, 0 aborts.
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_COMMIT = 1
# Indexes into kgroups.log.batch.HEADER's fields (baseOffset, length, partitionLeaderEpoch,
# magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, ...).
_ATTRIBUTES_FIELD = 5
_MAX_TIMESTAMP_FIELD = 8
_PRODUCER_ID_FIELD = 9

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
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("tombstone", pa.bool_()),
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_ts", pa.int64()),
        ("expire_ts", pa.int64()),
    ]
)

OTHER_ROW_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("file", pa.string()),
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
        ("marker_commits", pa.bool_()),
        ("error_position", pa.int64()),
        ("error", pa.string()),
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
        ("error_position", pa.int64()),
        ("error", pa.string()),
    ]
)

_COMMIT_COLUMNS = (
    "log_partition", "log_offset", "record_ts", "transactional", "producer_id",
    "group", "topic", "partition", "tombstone", "offset", "leader_epoch", "metadata",
    "commit_ts", "expire_ts",
)
_GROUP_COLUMNS = (
    "log_partition", "log_offset", "record_ts", "transactional", "producer_id",
    "group", "tombstone", "generation", "protocol_type", "protocol", "leader", "state_ts",
    "members",
)
_MARKER_COLUMNS = ("log_partition", "log_offset", "record_ts", "producer_id",
                   "marker_commits")
_ERROR_COLUMNS = ("file", "log_partition", "error_position", "error")
# The columns of kgroups.records.columnar's output that the commit rows keep.
_COLUMNAR_KEPT = ("log_offset", "record_ts", "group", "topic", "partition", "tombstone",
                  "offset", "leader_epoch", "metadata", "commit_ts", "expire_ts")


def read_file(uri: str) -> bytes:
    """The whole file: segments are bounded by log.segment.bytes (1 GiB by default)."""
    filesystem, path = open_filesystem(uri)
    with filesystem.open_input_stream(path) as stream:
        return bytes(stream.read())


def _columns_batch(schema: pa.Schema, kind: str | None, names: tuple[str, ...],
                   rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """A batch of `schema` from row tuples holding `names`; every other column is null."""
    count = len(rows)
    by_name = dict(zip(names, zip(*rows, strict=True), strict=True)) if rows else {}
    arrays = []
    for field in schema:
        if field.name == "kind" and kind is not None:
            arrays.append(pa.array([kind] * count, pa.string()))
        elif field.name in by_name:
            arrays.append(pa.array(by_name[field.name], field.type))
        else:
            arrays.append(pa.nulls(count, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


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


class _OffsetsSegmentDecoder:
    """The record-by-record decode of a segment, or of some of its batches: every batch the
    columnar decoder leaves (group metadata, transactions, markers, compression, anything
    unusual), and whole files that turn out damaged."""

    def __init__(self, uri: str, log_partition: int) -> None:
        self.uri = uri
        self.log_partition = log_partition
        self.commits: list[tuple[Any, ...]] = []
        self.groups: list[tuple[Any, ...]] = []
        self.markers: list[tuple[Any, ...]] = []
        self.errors: list[tuple[Any, ...]] = []

    def error(self, position: int, message: str) -> None:
        self.errors.append((self.uri, self.log_partition, position, message))

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
            attributes = header[_ATTRIBUTES_FIELD]
            transactional = bool(attributes & TRANSACTIONAL)
            producer_id = header[_PRODUCER_ID_FIELD] if transactional else None
            if attributes & CONTROL:
                self._add_markers(records, header[_PRODUCER_ID_FIELD])
            else:
                self._add_records(records, pos, transactional, producer_id)
            pos = end if starts is None else next(starts, size)

    def _add_markers(self, records: list[tuple[Any, ...]], producer_id: int) -> None:
        for offset, timestamp, key, _value in records:
            if key is None or len(key) < _CONTROL_KEY.size:
                continue
            _version, control_type = _CONTROL_KEY.unpack_from(key)
            self.markers.append(
                (self.log_partition, offset, timestamp, producer_id,
                 control_type == _CONTROL_COMMIT)
            )

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

    def other_batches(self) -> Iterator[pa.RecordBatch]:
        parts = (
            (GROUP, _GROUP_COLUMNS, self.groups),
            (MARKER, _MARKER_COLUMNS, self.markers),
            (ERROR, _ERROR_COLUMNS, self.errors),
        )
        for kind, names, rows in parts:
            if rows:
                yield _columns_batch(OTHER_ROW_SCHEMA, kind, names, rows)


def _commit_rows(columns: pa.RecordBatch, log_partition: int) -> pa.RecordBatch:
    """Columnar-decoded commits as COMMIT_ROW_SCHEMA (their batches are never transactional)."""
    count = columns.num_rows
    arrays = {name: columns.column(name) for name in _COLUMNAR_KEPT}
    arrays["log_partition"] = pa.array(np.full(count, log_partition, dtype=np.int32))
    arrays["transactional"] = pa.array(np.zeros(count, dtype=bool))
    arrays["producer_id"] = pa.nulls(count, pa.int64())
    return pa.RecordBatch.from_arrays([arrays[f.name] for f in COMMIT_ROW_SCHEMA],
                                      schema=COMMIT_ROW_SCHEMA)


def _decode_segment(
    uri: str, log_partition: int
) -> tuple[pa.RecordBatch | None, _OffsetsSegmentDecoder]:
    """The columnar commits of a segment (None when the file must be read record by record)
    and the record-by-record decode of the rest."""
    decoder = _OffsetsSegmentDecoder(uri, log_partition)
    try:
        data = read_file(uri)
    except OSError as exc:
        decoder.error(0, f"unreadable segment skipped: {exc}")
        return None, decoder
    try:
        columnar = decode_offset_commits(data)
    except BatchCorruptError:
        # Damage: the ordinary reader keeps what precedes it and reports where it is.
        decoder.decode(data)
        return None, decoder
    decoder.decode(data, [start for start, _end in columnar.other_batches])
    return _commit_rows(columnar.commits, log_partition), decoder


def decode_commits_segment(uri: str, log_partition: int) -> Iterator[pa.RecordBatch]:
    """Every OffsetCommit record (commits and offset tombstones) of one __consumer_offsets
    segment as COMMIT_ROW_SCHEMA batches. Damage is reported by decode_other_records_segment."""
    columnar, decoder = _decode_segment(uri, log_partition)
    if columnar is not None and columnar.num_rows:
        yield columnar
    if decoder.commits:
        yield _columns_batch(COMMIT_ROW_SCHEMA, None, _COMMIT_COLUMNS, decoder.commits)


def decode_other_records_segment(uri: str, log_partition: int) -> Iterator[pa.RecordBatch]:
    """Group records, transaction markers and skipped regions of one __consumer_offsets
    segment as OTHER_ROW_SCHEMA batches. Its commits are decoded again (columnar, cheap) only
    to find the batches holding something else."""
    _columnar, decoder = _decode_segment(uri, log_partition)
    yield from decoder.other_batches()


def decode_topic_segment(uri: str, topic: str, partition: int) -> pa.RecordBatch:
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
        max_timestamp = HEADER.unpack_from(data, pos)[_MAX_TIMESTAMP_FIELD]
        rows.append((topic, partition, base_offset, last_offset, max_timestamp))
        pos += size
    names = ("topic", "partition", "base_offset", "last_offset", "max_timestamp")
    error_names = ("file", "topic", "partition", "error_position", "error")
    return pa.concat_batches(
        [_columns_batch(TOPIC_ROW_SCHEMA, None, names, rows),
         _columns_batch(TOPIC_ROW_SCHEMA, None, error_names, errors)]
    )


def offsets_segments_to_commits(
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: input rows (uri, log_partition), output COMMIT_ROW_SCHEMA."""
    for batch in batches:
        for uri, log_partition in zip(
            batch.column("uri").to_pylist(), batch.column("partition").to_pylist(), strict=True
        ):
            yield from decode_commits_segment(uri, log_partition)


def offsets_segments_to_other_records(
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: input rows (uri, log_partition), output OTHER_ROW_SCHEMA."""
    for batch in batches:
        for uri, log_partition in zip(
            batch.column("uri").to_pylist(), batch.column("partition").to_pylist(), strict=True
        ):
            yield from decode_other_records_segment(uri, log_partition)


def topic_segments_to_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: input rows (uri, topic, partition), output TOPIC_ROW_SCHEMA."""
    for batch in batches:
        for uri, topic, partition in zip(
            batch.column("uri").to_pylist(),
            batch.column("topic").to_pylist(),
            batch.column("partition").to_pylist(),
            strict=True,
        ):
            yield decode_topic_segment(uri, topic, partition)
