"""ListOffsets: earliest, latest, or the first offset at or after a timestamp."""

from __future__ import annotations

from typing import Any

from kgroups.broker.api import HandlerRegistry, RequestContext, handles
from kgroups.broker.cluster_handlers import NO_THROTTLE
from kgroups.broker.wire import build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
NOT_FOUND = -1


def _lookup(ctx: RequestContext, topic: str, partition: int, timestamp: int) -> tuple[ErrorCode,
                                                                                     int]:
    log = ctx.broker.logs.get(topic, partition)
    if log is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NOT_FOUND
    if timestamp == LATEST_TIMESTAMP:
        return ErrorCode.NONE, log.log_end_offset
    if timestamp == EARLIEST_TIMESTAMP:
        return ErrorCode.NONE, log.log_start_offset
    if timestamp < 0:
        return ErrorCode.INVALID_REQUEST, NOT_FOUND
    found = log.offset_for_timestamp(timestamp)
    return ErrorCode.NONE, NOT_FOUND if found is None else found


@handles(api_key=2, min_version=1, max_version=6)
async def list_offsets(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(2, ctx.api_version)
    topic_cls = sibling(response_cls, "ListOffsetsTopicResponse")
    partition_cls = sibling(response_cls, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        partitions = []
        for entry in topic.partitions:
            error, offset = _lookup(ctx, topic.name, int(entry.partition_index),
                                    int(entry.timestamp))
            # The matched record's own timestamp is not kept by the index, so it is reported
            # as unknown (-1), which clients treat as "no timestamp".
            partitions.append(build(partition_cls, partition_index=entry.partition_index,
                                    error_code=kio_error(error), timestamp=-1, offset=offset,
                                    leader_epoch=-1))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return build(response_cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def install(registry: HandlerRegistry) -> None:
    registry.register(list_offsets)
