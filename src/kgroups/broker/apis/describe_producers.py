"""DescribeProducers (API 61): per partition, the producers its log has seen (Kafka's active
producers: id, epoch, last sequence, last batch timestamp, the coordinator epoch of their last
marker and the first offset of their open transaction, -1 when none), as kafka-transactions.sh
describe-producers shows them. They come from the partition's transaction tracker
(kgroups.log.transaction_state), which every append feeds; after a restart it holds the
producers of the log's tail it was rebuilt from. A partition another broker leads answers
NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION; Topic Read is required.
"""

from __future__ import annotations

from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode


def _partition(ctx: RequestContext, topic: str, index: int, partition_cls: Any,
               producer_cls: Any) -> Any:
    topics = ctx.broker.topics
    error = ErrorCode.NONE
    producers: tuple[Any, ...] = ()
    try:
        log = topics.log(topic, index)
    except OSError:
        log, error = None, ErrorCode.KAFKA_STORAGE_ERROR
    if log is None and error == ErrorCode.NONE:
        error = topics.unserved_error(topic, index)
    if log is not None:
        producers = tuple(
            build(producer_cls, producer_id=producer_id, producer_epoch=p.epoch,
                  last_sequence=p.last_sequence, last_timestamp=p.last_timestamp,
                  coordinator_epoch=p.coordinator_epoch,
                  current_txn_start_offset=p.txn_start_offset)
            for producer_id, p in log.transactions.producers.items())
    return build(partition_cls, partition_index=index, error_code=kio_error(error),
                 error_message=None, active_producers=producers)


@handles(api_key=ApiKey.DESCRIBE_PRODUCERS, min_version=0, max_version=0)
async def describe_producers(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.DESCRIBE_PRODUCERS, ctx.api_version)
    topic_cls = sibling(response_cls, "TopicResponse")
    partition_cls = sibling(response_cls, "PartitionResponse")
    producer_cls = sibling(response_cls, "ProducerState")
    return build(response_cls, throttle_time=NO_THROTTLE, topics=tuple(
        build(topic_cls, name=topic.name, partitions=tuple(
            _partition(ctx, topic.name, int(index), partition_cls, producer_cls)
            for index in topic.partition_indexes))
        for topic in request.topics))


def install(registry: HandlerRegistry) -> None:
    registry.register(describe_producers)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.DESCRIBE_PRODUCERS)
async def _authorize_describe_producers(ctx: RequestContext, request: Any, inner: authz.Inner,
                                        check: authz.Check) -> Any:
    """Topic Read per topic; a denied topic's partitions answer TOPIC_AUTHORIZATION_FAILED."""
    topics, denied = await authz.answer_allowed_topics(
        ctx, request, inner, lambda t: check.topic(Operation.READ, t.name),
        lambda response: response.topics)
    denied_topics = tuple(authz.nested(ctx, "TopicResponse", name=t.name, partitions=(
        authz.partition_entries(ctx, "PartitionResponse", t, authz.TOPIC_DENIED,
                                error_message=None, active_producers=())))
        for t in denied)
    return authz.response(ctx, topics=topics + denied_topics)
