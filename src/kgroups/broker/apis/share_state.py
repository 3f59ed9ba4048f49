"""The share coordinator's APIs (KIP-932), which brokers send one another: InitializeShareGroupState
(83), ReadShareGroupState (84), WriteShareGroupState (85, v1 with the delivered-offsets count),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87, v1 likewise), answered from the
broker's ShareStateRuntime with Kafka 4.3.1's versions, errors and texts. In a cluster each
share-partition is answered by the leader of its `__share_group_state` partition (the others
answer NOT_COORDINATOR; docs/share-groups.md, "In a cluster").

As Kafka's share coordinator service does, a request with no topics, a topic with no
partitions, or an empty group id is answered with no results at all; otherwise every
partition is answered on its own, its record made durable before its answer, and the results
come in the order of Kafka's hash maps (`_answer`). Only brokers may
call them: ClusterAction on the cluster (the rules at the end).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kgroups.assignors.java_hash import hash_set_order, uuid_hash
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.wire import build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.records.share_state import StateBatch
from kgroups.share_coordinator.shard import Answer, WriteRequest

NOT_AVAILABLE_TEXT = "Share coordinator is not available."
ZERO_UUID = uuid.UUID(int=0)
PartitionAnswer = Callable[[uuid.UUID, Any], Awaitable[Answer]]
PartitionResult = Callable[[Any, Answer], dict[str, Any]]
RESULT_CLASSES = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: "InitializeStateResult",
    ApiKey.READ_SHARE_GROUP_STATE: "ReadStateResult",
    ApiKey.WRITE_SHARE_GROUP_STATE: "WriteStateResult",
    ApiKey.DELETE_SHARE_GROUP_STATE: "DeleteStateResult",
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: "ReadStateSummaryResult",
}
# Kafka's words for what could not be done, in its NOT_COORDINATOR text.
REFUSED_VERBS = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: "initialize share group state",
    ApiKey.READ_SHARE_GROUP_STATE: "read share group state",
    ApiKey.WRITE_SHARE_GROUP_STATE: "write share group state",
    ApiKey.DELETE_SHARE_GROUP_STATE: "delete share group state",
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: "read share group state summary",
}
# What a refused partition carries beside its error, per API (Kafka's zeros).
REFUSED_FIELDS: dict[ApiKey, dict[str, Any]] = {
    ApiKey.READ_SHARE_GROUP_STATE: {"state_epoch": 0, "start_offset": 0, "state_batches": ()},
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: {"state_epoch": 0, "leader_epoch": 0,
                                            "start_offset": 0},
}


def _malformed(request: Any) -> bool:
    """What Kafka's service answers with an empty response (it logs and skips the request)."""
    return (not request.topics or any(not topic.partitions for topic in request.topics)
            or not request.group_id)


async def _answer(ctx: RequestContext, request: Any, answer: PartitionAnswer,
                  result: PartitionResult) -> Any:
    """Each partition answered in request order, the response laid out as Kafka 4.3.1 lays
    it out (seen on the wire, tests/differential/test_diff_share_state.py): a result per topic
    id (a topic named twice is one result) in the bucket order of a java.util.HashMap keyed by
    topic id, the topics of one bucket in the reverse of their first appearance; its
    partitions in the iteration order of a HashMap keyed by partition (one bucket: request
    order; a partition named twice, its last answer)."""
    response_cls = response_type(ctx.api_key, ctx.api_version)
    if _malformed(request):
        return build(response_cls, results=())
    topic_cls = sibling(response_cls, RESULT_CLASSES[ctx.api_key])
    partition_cls = sibling(response_cls, "PartitionResult")
    answered: dict[uuid.UUID, dict[int, Any]] = {}
    for topic in request.topics:
        topic_id = topic.topic_id if topic.topic_id is not None else ZERO_UUID
        partitions = answered.setdefault(topic_id, {})
        for data in topic.partitions:
            # In a cluster each share-partition is refused or served on its own.
            refused = ctx.broker.share_state.refusal(
                create_topic=False, key=(request.group_id, topic_id, int(data.partition)))
            outcome = (Answer(refused, _refused_text(ctx.api_key, refused))
                       if refused is not None else await answer(topic_id, data))
            partitions[int(data.partition)] = build(
                partition_cls, partition=data.partition, error_code=kio_error(outcome.error),
                error_message=outcome.message, **result(data, outcome))
    return build(response_cls, results=tuple(
        build(topic_cls, topic_id=topic_id, partitions=tuple(
            answered[topic_id][partition] for partition in hash_set_order(
                list(answered[topic_id]), _integer_hash)))
        for topic_id in hash_set_order(list(answered)[::-1], uuid_hash)))


def _refused_text(api_key: ApiKey, refused: ErrorCode) -> str:
    if refused is ErrorCode.NOT_COORDINATOR:
        return f"Unable to {REFUSED_VERBS[api_key]}: This is not the correct coordinator."
    if refused is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return f"Unable to {REFUSED_VERBS[api_key]}: The coordinator is loading."
    return NOT_AVAILABLE_TEXT


def _integer_hash(value: int) -> int:
    """java.lang.Integer.hashCode, as an unsigned 32-bit value."""
    return value & 0xFFFFFFFF


def _no_fields(data: Any, outcome: Answer) -> dict[str, Any]:
    return {}


@handles(api_key=ApiKey.INITIALIZE_SHARE_GROUP_STATE, min_version=0, max_version=0)
async def initialize_share_group_state(ctx: RequestContext, request: Any) -> Any:
    runtime = ctx.broker.share_state

    def answer(topic_id: uuid.UUID, data: Any) -> Awaitable[Answer]:
        return runtime.initialize_state(request.group_id, topic_id, int(data.partition),
                                        int(data.state_epoch), int(data.start_offset))

    return await _answer(ctx, request, answer, _no_fields)


@handles(api_key=ApiKey.READ_SHARE_GROUP_STATE, min_version=0, max_version=0)
async def read_share_group_state(ctx: RequestContext, request: Any) -> Any:
    runtime = ctx.broker.share_state
    batch_cls = sibling(response_type(ctx.api_key, ctx.api_version), "StateBatch")

    def answer(topic_id: uuid.UUID, data: Any) -> Awaitable[Answer]:
        return runtime.read_state(request.group_id, topic_id, int(data.partition),
                                  int(data.leader_epoch))

    def result(data: Any, outcome: Answer) -> dict[str, Any]:
        state = outcome.state
        if state is None:
            return REFUSED_FIELDS[ApiKey.READ_SHARE_GROUP_STATE]
        return {"state_epoch": state.state_epoch, "start_offset": state.start_offset,
                "state_batches": tuple(
                    build(batch_cls, first_offset=b.first_offset, last_offset=b.last_offset,
                          delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                    for b in state.batches)}

    return await _answer(ctx, request, answer, result)


@handles(api_key=ApiKey.WRITE_SHARE_GROUP_STATE, min_version=0, max_version=1)
async def write_share_group_state(ctx: RequestContext, request: Any) -> Any:
    runtime = ctx.broker.share_state

    def answer(topic_id: uuid.UUID, data: Any) -> Awaitable[Answer]:
        write = WriteRequest(
            int(data.state_epoch), int(data.leader_epoch), int(data.start_offset),
            tuple(StateBatch(int(b.first_offset), int(b.last_offset), int(b.delivery_state),
                             int(b.delivery_count)) for b in data.state_batches),
            int(getattr(data, "delivery_complete_count", -1)))
        return runtime.write_state(request.group_id, topic_id, int(data.partition), write)

    return await _answer(ctx, request, answer, _no_fields)


@handles(api_key=ApiKey.DELETE_SHARE_GROUP_STATE, min_version=0, max_version=0)
async def delete_share_group_state(ctx: RequestContext, request: Any) -> Any:
    runtime = ctx.broker.share_state

    def answer(topic_id: uuid.UUID, data: Any) -> Awaitable[Answer]:
        return runtime.delete_state(request.group_id, topic_id, int(data.partition))

    return await _answer(ctx, request, answer, _no_fields)


@handles(api_key=ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, min_version=0, max_version=1)
async def read_share_group_state_summary(ctx: RequestContext, request: Any) -> Any:
    runtime = ctx.broker.share_state

    def answer(topic_id: uuid.UUID, data: Any) -> Awaitable[Answer]:
        return runtime.read_state_summary(request.group_id, topic_id, int(data.partition))

    def result(data: Any, outcome: Answer) -> dict[str, Any]:
        state = outcome.state
        if state is None:
            return REFUSED_FIELDS[ApiKey.READ_SHARE_GROUP_STATE_SUMMARY]
        return {"state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
                "start_offset": state.start_offset,
                "delivery_complete_count": state.delivery_complete_count}

    return await _answer(ctx, request, answer, result)


def install(registry: HandlerRegistry) -> None:
    registry.register(initialize_share_group_state)
    registry.register(read_share_group_state)
    registry.register(write_share_group_state)
    registry.register(delete_share_group_state)
    registry.register(read_share_group_state_summary)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(*RESULT_CLASSES)
async def _authorize_share_state(ctx: RequestContext, request: Any, inner: authz.Inner,
                                 check: authz.Check) -> Any:
    """ClusterAction on the cluster (brokers only), else every partition answers
    CLUSTER_AUTHORIZATION_FAILED."""
    if check.cluster(Operation.CLUSTER_ACTION):
        return await inner(ctx, request)
    response_cls = response_type(ctx.api_key, ctx.api_version)
    topic_cls = sibling(response_cls, RESULT_CLASSES[ctx.api_key])
    return build(response_cls, results=tuple(
        build(topic_cls, topic_id=topic.topic_id, partitions=tuple(
            authz.cluster_denied(ctx, "PartitionResult", partition=data.partition,
                                 **REFUSED_FIELDS.get(ctx.api_key, {}))
            for data in topic.partitions))
        for topic in request.topics))
