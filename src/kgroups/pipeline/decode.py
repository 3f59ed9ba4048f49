"""Segment files to Arrow rows, run inside Spark's Python workers through `mapInArrow`.

Each task receives file URIs, reads each file once, checks and walks its batches with
`kgroups.log.batch` (`check_batch`, `records_of`: plain tuples, no per-record objects) and
decodes keys and values with `kgroups.records`: the same decoder as the broker and `kgroups
offsets dump`, so the pipeline cannot disagree with them about a byte. The rows are flat (one
row per record, columns of the kind that applies, nulls elsewhere) because flat columns are
what Spark's Arrow path moves cheapest; only a group's member list is nested.

Damage never stops a run: a batch that fails its checks ends the reading of that file (Kafka's
own recovery truncates a segment at the first bad batch, so the records before it are the ones a
coordinator would load) and a record that does not decode is skipped; both become `error` rows
carrying the file and byte position so the run can count and report them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

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
from kgroups.records.consumer_protocol import decode_assignment, decode_subscription
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
)

# Row kinds of the offsets-topic decode.
COMMIT = "commit"
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

OFFSETS_ROW_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("file", pa.string()),
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("record_ts", pa.int64()),
        ("transactional", pa.bool_()),
        ("producer_id", pa.int64()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("tombstone", pa.bool_()),
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_ts", pa.int64()),
        ("expire_ts", pa.int64()),
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
    """Accumulates the rows of one __consumer_offsets segment file."""

    def __init__(self, uri: str, log_partition: int) -> None:
        self.uri = uri
        self.log_partition = log_partition
        self.commits: list[tuple[Any, ...]] = []
        self.groups: list[tuple[Any, ...]] = []
        self.markers: list[tuple[Any, ...]] = []
        self.errors: list[tuple[Any, ...]] = []
        # Keys repeat across commits (same group, topic and partition), values never do.
        self._keys: dict[bytes, Any] = {}

    def error(self, position: int, message: str) -> None:
        self.errors.append((self.uri, self.log_partition, position, message))

    def decode(self, data: bytes) -> None:
        pos = 0
        size = len(data)
        while pos < size:
            try:
                header, end = check_batch(data, pos)
                records = records_of(data, pos, end, header, False)
            except BatchCorruptError as exc:
                self.error(exc.position, f"corrupt batch, rest of file skipped: {exc}")
                return
            attributes = header[_ATTRIBUTES_FIELD]
            if attributes & CONTROL:
                self._add_markers(records, header[_PRODUCER_ID_FIELD])
            else:
                self._add_records(records, pos, bool(attributes & TRANSACTIONAL),
                                  header[_PRODUCER_ID_FIELD])
            pos = end

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
                     transactional: bool, producer_id: int) -> None:
        """The hot loop: offset commits are most of any __consumer_offsets log, so their keys
        are decoded once per distinct key and their values straight into a row tuple."""
        keys = self._keys
        commits = self.commits
        log_partition = self.log_partition
        for offset, timestamp, raw_key, raw_value in records:
            try:
                if raw_key is None:
                    raise RecordDecodeError("record has no key", 0)
                key = keys.get(raw_key)
                if key is None:
                    key = keys[raw_key] = decode_key(raw_key)
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
                   producer_id: int, key: GroupMetadataKey, value: Any) -> None:
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

    def batches(self) -> Iterator[pa.RecordBatch]:
        parts = (
            (COMMIT, _COMMIT_COLUMNS, self.commits),
            (GROUP, _GROUP_COLUMNS, self.groups),
            (MARKER, _MARKER_COLUMNS, self.markers),
            (ERROR, _ERROR_COLUMNS, self.errors),
        )
        for kind, names, rows in parts:
            if rows:
                yield _columns_batch(OFFSETS_ROW_SCHEMA, kind, names, rows)


def decode_offsets_segment(uri: str, log_partition: int) -> Iterator[pa.RecordBatch]:
    """Every record of one __consumer_offsets segment as OFFSETS_ROW_SCHEMA batches."""
    decoder = _OffsetsSegmentDecoder(uri, log_partition)
    try:
        data = read_file(uri)
    except OSError as exc:
        decoder.error(0, f"unreadable segment skipped: {exc}")
    else:
        decoder.decode(data)
    yield from decoder.batches()


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


def offsets_segments_to_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: input rows (uri, log_partition), output OFFSETS_ROW_SCHEMA."""
    for batch in batches:
        for uri, log_partition in zip(
            batch.column("uri").to_pylist(), batch.column("partition").to_pylist(), strict=True
        ):
            yield from decode_offsets_segment(uri, log_partition)


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
