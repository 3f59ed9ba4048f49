"""OffsetForLeaderEpoch (API 23): where a leader epoch ended, as the partition's leader knows it.

A consumer whose partition moved to a new leader (KIP-320) asks it for the end of the epoch of
the last record it fetched, and truncates its position if the log no longer reaches that far;
kafka-python and the Java client stop fetching a moved partition until they get an answer.
Versions 2-4, those Kafka 4.3.1 serves (v0-v1 went with KIP-896).

Per partition, in Kafka's order: no such topic or partition answers UNKNOWN_TOPIC_OR_PARTITION,
one another broker leads NOT_LEADER_OR_FOLLOWER, a `current_leader_epoch` older than the
leader's FENCED_LEADER_EPOCH and a newer one UNKNOWN_LEADER_EPOCH (leader_hints.epoch_error);
otherwise the requested epoch's end (log.leader_epochs.end_offset_for) from the log's epoch
history: on PostgreSQL the epochs the store stamped on the batches, ending with the lease's; on
a single node epoch 0, which a Kafka broker that was never moved leads at."""

from __future__ import annotations

from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.leader_hints import epoch_error
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.leader_epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET, end_offset_for


def _end_offset(ctx: RequestContext, topic: str, entry: Any) -> tuple[ErrorCode, int, int]:
    """(error, epoch, end offset) for one requested partition."""
    topics = ctx.broker.topics
    partition = int(entry.partition)
    try:
        log = topics.log(topic, partition)
    except OSError:  # the partition's log could not be opened (logged once, there)
        return ErrorCode.KAFKA_STORAGE_ERROR, UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if log is None:
        return topics.unserved_error(topic, partition), UNDEFINED_EPOCH, UNDEFINED_OFFSET
    fenced = epoch_error(topics.leader_epoch(topic, partition),
                         int(entry.current_leader_epoch))
    if fenced != ErrorCode.NONE:
        return fenced, UNDEFINED_EPOCH, UNDEFINED_OFFSET
    epoch, end = end_offset_for(log.leader_epoch_starts(), int(entry.leader_epoch),
                                log.log_end_offset)
    return ErrorCode.NONE, epoch, end


@handles(api_key=ApiKey.OFFSET_FOR_LEADER_EPOCH, min_version=2, max_version=4)
async def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
    topic_cls = sibling(response_cls, "OffsetForLeaderTopicResult")
    partition_cls = sibling(response_cls, "EpochEndOffset")
    results = []
    for topic in request.topics:
        partitions = []
        for entry in topic.partitions:
            error, epoch, end = _end_offset(ctx, topic.topic, entry)
            partitions.append(build(partition_cls, partition=entry.partition,
                                    error_code=kio_error(error), leader_epoch=epoch,
                                    end_offset=end))
        results.append(build(topic_cls, topic=topic.topic, partitions=tuple(partitions)))
    return build(response_cls, throttle_time=NO_THROTTLE, topics=tuple(results))


def install(registry: HandlerRegistry) -> None:
    registry.register(offset_for_leader_epoch)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.OFFSET_FOR_LEADER_EPOCH)
async def _authorize_offset_for_leader_epoch(ctx: RequestContext, request: Any,
                                             inner: authz.Inner, check: authz.Check) -> Any:
    """Kafka's rule: ClusterAction on the cluster (a follower's right) lets every topic
    through; otherwise Describe on each topic (a consumer's, since KIP-320), a denied one
    answering TOPIC_AUTHORIZATION_FAILED per partition whether or not it exists."""
    if check.cluster(Operation.CLUSTER_ACTION):
        return await inner(ctx, request)
    topics, denied = await authz.answer_allowed_topics(
        ctx, request, inner, lambda t: check.topic(Operation.DESCRIBE, t.topic),
        lambda response: response.topics)
    return authz.response(ctx, topics=topics + tuple(authz.nested(
        ctx, "OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(authz.nested(
            ctx, "EpochEndOffset", partition=p.partition,
            error_code=kio_error(authz.TOPIC_DENIED), leader_epoch=UNDEFINED_EPOCH,
            end_offset=UNDEFINED_OFFSET) for p in t.partitions))
        for t in denied))
