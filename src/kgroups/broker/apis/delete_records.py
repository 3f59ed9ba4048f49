"""DeleteRecords (API 21): move partitions' log start offsets forward, as Kafka's leader does.

Kafka Streams trims its repartition topics (retention.ms=-1) this way after every commit, and
kafka-delete-records is built on it. Per partition, in Kafka 4.3.1's order: a topic or
partition that does not exist answers UNKNOWN_TOPIC_OR_PARTITION; an internal topic
INVALID_TOPIC_EXCEPTION; a topic whose cleanup.policy lacks `delete` POLICY_VIOLATION; offset -1
means the high watermark (the log end: a single node's every record is replicated); an offset
below -1 or beyond the high watermark answers OFFSET_OUT_OF_RANGE. Otherwise the start moves up
to the offset (never back: a lower offset changes nothing) and the answer is the partition's
low watermark, its log start offset. Kafka waits for followers' starts to catch up within the
request's timeout; a single node has none, so the answer is immediate.

The new starts are written to the log-start-offset checkpoint before the answer (LogManager),
so they survive a restart; a failed write answers KAFKA_STORAGE_ERROR and moves nothing. In a
cluster each start moves in one fenced transaction of the store (the batches wholly below it
deleted with it); a partition another broker leads, or whose lease this broker lost meanwhile,
answers NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import logging
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.events import log_event
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.topics import INTERNAL_TOPICS
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

logger = logging.getLogger("kgroups.delete_records")

HIGH_WATERMARK = -1
NO_LOW_WATERMARK = -1  # what Kafka answers beside an error


def _check(ctx: RequestContext, topic: str, partition: int,
           offset: int) -> tuple[ErrorCode, int]:
    """(error, the offset to move the start to) for one partition; nothing moves here."""
    topics = ctx.broker.topics
    try:
        log = topics.log(topic, partition)
    except OSError:  # the partition's log could not be opened (logged once, there)
        return ErrorCode.KAFKA_STORAGE_ERROR, NO_LOW_WATERMARK
    if log is None:
        return topics.unserved_error(topic, partition), NO_LOW_WATERMARK
    if topic in INTERNAL_TOPICS:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, NO_LOW_WATERMARK
    if not log.config.deletes:
        return ErrorCode.POLICY_VIOLATION, NO_LOW_WATERMARK
    target = log.log_end_offset if offset == HIGH_WATERMARK else offset
    if target < 0 or target > log.log_end_offset:
        return ErrorCode.OFFSET_OUT_OF_RANGE, NO_LOW_WATERMARK
    return ErrorCode.NONE, target


@handles(api_key=ApiKey.DELETE_RECORDS, min_version=0, max_version=2)
async def delete_records(ctx: RequestContext, request: Any) -> Any:
    # One answer per partition, the last offset asked for it counting, as Kafka's map keeps it.
    asked: dict[tuple[str, int], int] = {}
    for topic in request.topics:
        for entry in topic.partitions:
            asked[(topic.name, int(entry.partition_index))] = int(entry.offset)
    checked = {key: _check(ctx, *key, offset) for key, offset in asked.items()}
    targets = {key: target for key, (error, target) in checked.items() if error == ErrorCode.NONE}
    errors = {key: error for key, (error, _) in checked.items()}
    if targets:
        try:
            fenced = ctx.broker.topics.advance_log_starts(targets)
            errors.update(dict.fromkeys(fenced, ErrorCode.NOT_LEADER_OR_FOLLOWER))
        except OSError as exc:
            log_event(logger, logging.ERROR, "log_start_checkpoint_failed", error=exc)
            errors.update(dict.fromkeys(targets, ErrorCode.KAFKA_STORAGE_ERROR))

    def low_watermark(key: tuple[str, int]) -> int:
        if errors[key] != ErrorCode.NONE:
            return NO_LOW_WATERMARK
        log = ctx.broker.topics.log(*key)
        assert log is not None  # checked above, on this same loop turn
        return log.log_start_offset

    response_cls = response_type(ApiKey.DELETE_RECORDS, ctx.api_version)
    topic_cls = sibling(response_cls, "DeleteRecordsTopicResult")
    partition_cls = sibling(response_cls, "DeleteRecordsPartitionResult")
    by_topic: dict[str, list[int]] = {}
    for name, partition in asked:
        by_topic.setdefault(name, []).append(partition)
    return build(response_cls, throttle_time=NO_THROTTLE, topics=tuple(
        build(topic_cls, name=name, partitions=tuple(
            build(partition_cls, partition_index=partition,
                  low_watermark=low_watermark((name, partition)),
                  error_code=kio_error(errors[(name, partition)]))
            for partition in partitions))
        for name, partitions in by_topic.items()))


def install(registry: HandlerRegistry) -> None:
    registry.register(delete_records)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.DELETE_RECORDS)
async def _authorize_delete_records(ctx: RequestContext, request: Any, inner: authz.Inner,
                                    check: authz.Check) -> Any:
    """Delete on each topic; a denied one answers TOPIC_AUTHORIZATION_FAILED per partition
    whether or not it exists."""
    topics, denied = await authz.answer_allowed_topics(
        ctx, request, inner, lambda t: check.topic(Operation.DELETE, t.name),
        lambda response: response.topics)
    return authz.response(ctx, topics=topics + tuple(authz.nested(
        ctx, "DeleteRecordsTopicResult", name=t.name, partitions=authz.partition_entries(
            ctx, "DeleteRecordsPartitionResult", t, authz.TOPIC_DENIED, low_watermark=-1))
        for t in denied))
