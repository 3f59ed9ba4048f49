"""ListOffsets: earliest, latest, the record with the largest timestamp, or the first offset at
or after a timestamp (with that record's own timestamp, as Kafka answers offsetsForTimes).

v7 added MAX_TIMESTAMP and v8-v11 the tiered-storage lookups (earliest local, latest tiered,
earliest pending upload); kgroups keeps every segment locally, so it answers those as a Kafka
broker without remote storage does: the earliest local offset is the log start, and nothing
is tiered or waiting for upload (offset -1)."""

from __future__ import annotations

from typing import Any

from kgroups.broker.api import HandlerRegistry, RequestContext, handles
from kgroups.broker.cluster_handlers import NO_THROTTLE
from kgroups.broker.wire import build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.batch import decode_batch
from kgroups.log.partition_log import PartitionLog

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
NOT_FOUND = -1
NO_TIMESTAMP = -1


def _record_timestamp(log: PartitionLog, offset: int) -> int:
    """The timestamp of the record at `offset` (the read starts at the batch holding it)."""
    batch, _ = decode_batch(log.read(offset, 1))
    return next((r.timestamp for r in batch.records if r.offset >= offset), NO_TIMESTAMP)


def _max_timestamp_offset(log: PartitionLog) -> tuple[int, int] | None:
    """(timestamp, offset) of the record with the largest timestamp, the first such record when
    several share it (as Kafka answers MAX_TIMESTAMP); None for an empty log. Segments and
    batches are skipped by their headers' max timestamps, so one batch is decoded."""
    segments = log.segments()
    largest = max((segment.max_timestamp() for segment in segments), default=-1)
    if largest < 0:
        return None
    segment = next(s for s in segments if s.max_timestamp() == largest)
    for position, _base, _last, size in segment.batch_positions():
        batch, _ = decode_batch(segment.pread(size, position))
        if batch.max_timestamp == largest:
            return largest, next((r.offset for r in batch.records if r.timestamp == largest),
                                 _base)
    return None


def _lookup(
    ctx: RequestContext, topic: str, partition: int, timestamp: int
) -> tuple[ErrorCode, int, int]:
    """(error, offset, timestamp) for one partition."""
    try:
        log = ctx.broker.topics.log(topic, partition)
    except OSError:  # the partition's log could not be opened (logged once, there)
        return ErrorCode.KAFKA_STORAGE_ERROR, NOT_FOUND, NO_TIMESTAMP
    if log is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NOT_FOUND, NO_TIMESTAMP
    if timestamp == LATEST_TIMESTAMP:
        return ErrorCode.NONE, log.log_end_offset, NO_TIMESTAMP
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return ErrorCode.NONE, log.log_start_offset, NO_TIMESTAMP
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return ErrorCode.NONE, NOT_FOUND, NO_TIMESTAMP
    if timestamp == MAX_TIMESTAMP:
        found = _max_timestamp_offset(log)
        if found is None:
            return ErrorCode.NONE, NOT_FOUND, NO_TIMESTAMP
        return ErrorCode.NONE, found[1], found[0]
    if timestamp < 0:
        return ErrorCode.INVALID_REQUEST, NOT_FOUND, NO_TIMESTAMP
    found = log.offset_for_timestamp(timestamp)
    if found is None:
        return ErrorCode.NONE, NOT_FOUND, NO_TIMESTAMP
    return ErrorCode.NONE, found, _record_timestamp(log, found)


@handles(api_key=2, min_version=1, max_version=11)
async def list_offsets(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(2, ctx.api_version)
    topic_cls = sibling(response_cls, "ListOffsetsTopicResponse")
    partition_cls = sibling(response_cls, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        partitions = []
        for entry in topic.partitions:
            error, offset, found_at = _lookup(ctx, topic.name, int(entry.partition_index),
                                              int(entry.timestamp))
            partitions.append(build(partition_cls, partition_index=entry.partition_index,
                                    error_code=kio_error(error), timestamp=found_at,
                                    offset=offset, leader_epoch=-1))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return build(response_cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def install(registry: HandlerRegistry) -> None:
    registry.register(list_offsets)
