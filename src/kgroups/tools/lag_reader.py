"""Lag in seconds for `kgroups groups describe`, read over the wire as a Kafka tool would.

For each partition behind its log end, one Fetch (READ_UNCOMMITTED, from the committed offset,
or from the log start where retention has deleted it) brings the first batch; the timestamp of
the first record at or after the committed offset, against now, is the lag in seconds. The
rules for records no longer at hand are kgroups.broker.lag_time's.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import replace

from kio.static.primitive import i8, i32, i64

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.lag_time import first_timestamp, lag_seconds
from kgroups.broker.wire import build, request_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.batch import BatchCorruptError, peek_batch_header
from kgroups.tools.admin import EARLIEST_TIMESTAMP, GroupDescription, list_offsets
from kgroups.tools.wire_client import KafkaWireClient

_FETCH_VERSION = 11
_PARTITION_BYTES = 64 * 1024  # a whole first batch comes back even if bigger


def with_lag_seconds(client: KafkaWireClient, description: GroupDescription,
                     now_ms: int | None = None) -> GroupDescription:
    """`description` with lag_seconds filled in wherever it can be told."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    behind = {(p.topic, p.partition): p.committed_offset for p in description.partitions
              if p.committed_offset is not None and p.log_end_offset is not None
              and p.committed_offset < p.log_end_offset}
    timestamps = first_timestamps(client, behind) if behind else {}
    return replace(description, partitions=tuple(
        p if p.committed_offset is None or p.log_end_offset is None else replace(
            p, lag_seconds=lag_seconds(p.committed_offset, p.log_end_offset,
                                       timestamps.get((p.topic, p.partition)), now))
        for p in description.partitions))


def first_timestamps(client: KafkaWireClient,
                     committed: dict[tuple[str, int], int]) -> dict[tuple[str, int], int | None]:
    """The timestamp of the first record at or after each committed offset (None: none).

    One Fetch asks for every partition; a partition that came back without a whole batch
    (its first batch is larger than the room the answer left it, which only the first partition
    with data may exceed, as on Kafka) is asked for again on its own."""
    client.require(1, _FETCH_VERSION, "Fetch")
    starts = list_offsets(client, sorted(committed), EARLIEST_TIMESTAMP)
    positions = {key: max(offset, starts.get(key) or 0) for key, offset in committed.items()}
    found: dict[tuple[str, int], int | None] = {}
    fetched = _fetch(client, positions)
    for key in sorted(positions):
        records = fetched.get(key)
        if records == b"" and len(positions) > 1:
            records = _fetch(client, {key: positions[key]}).get(key)
        if records is not None:
            found[key], _ = first_timestamp(records, positions[key])
    return found


def _fetch(client: KafkaWireClient,
           positions: dict[tuple[str, int], int]) -> dict[tuple[str, int], bytes]:
    """The bytes each partition's answer carried (those answered with an error left out)."""
    request = request_type(ApiKey.FETCH, _FETCH_VERSION)
    topic_type = sibling(request, "FetchTopic")
    partition_type = sibling(request, "FetchPartition")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in positions:
        by_topic.setdefault(topic, []).append(partition)
    response = client.call(build(
        request, replica_id=i32(-1), max_wait=datetime.timedelta(0), min_bytes=i32(0),
        max_bytes=i32(len(positions) * _PARTITION_BYTES), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
        topics=tuple(build(topic_type, topic=topic, partitions=tuple(
            build(partition_type, partition=i32(p), current_leader_epoch=i32(-1),
                  fetch_offset=i64(positions[(topic, p)]), log_start_offset=i64(-1),
                  partition_max_bytes=i32(_PARTITION_BYTES))
            for p in sorted(partitions)))
            for topic, partitions in by_topic.items())))
    answered: dict[tuple[str, int], bytes] = {}
    for topic in response.responses:
        for data in topic.partitions:
            key = (topic.topic, int(data.partition_index))
            if int(data.error_code) == ErrorCode.NONE and key in positions:
                answered[key] = _whole_batches(bytes(data.records or b""))
    return answered


def _whole_batches(records: bytes) -> bytes:
    """The whole batches at the front of `records` (Kafka may end a partition's answer with
    part of one)."""
    position = 0
    while position < len(records):
        try:
            _, _, size = peek_batch_header(records, position)
        except BatchCorruptError:
            break
        if position + size > len(records):
            break
        position += size
    return records[:position]
