"""TxnOffsetCommit (API 28, v0-v5 as Kafka 4.3.1 serves): a transactional producer's offsets
for a group, handed to the group coordinator, which holds them pending until the producer's
marker (kgroups.coordinator.txn_offsets).

As for OffsetCommit (`groups.known_partitions`), partitions the cluster's metadata does not
have answer UNKNOWN_TOPIC_OR_PARTITION here and only the rest go to the coordinator. The group
coordinator does not ask the transaction coordinator whether the producer's transaction holds
the offsets partition (Kafka 4's KIP-890 verification, kgroups.broker.txn_verification)
before any group check: a producer whose transaction does not hold it is refused in every
partition (TxnOffsetCommit v5, transaction version 2, adds it instead).
"""

from __future__ import annotations

from typing import Any

from kio.schema.txn_offset_commit.v0 import request as v0
from kio.schema.txn_offset_commit.v1 import request as v1
from kio.schema.txn_offset_commit.v2 import request as v2

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext
from kgroups.broker.apis.groups import authorize_commit_topics, known_partitions
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation, ResourceType
from kgroups.broker.txn_verification import (
    RETRIABLE,
    TXN_OFFSET_COMMIT_KINDS_SINCE,
    kind_of,
    verify_write,
)
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.coordinator import messages
from kgroups.errors import ErrorCode

_NO_MEMBER_FIELDS = (v0.TxnOffsetCommitRequest | v1.TxnOffsetCommitRequest
                     | v2.TxnOffsetCommitRequest)
_NO_LEADER_EPOCH = v0.TxnOffsetCommitRequestPartition | v1.TxnOffsetCommitRequestPartition


def _group_fields(request: Any) -> tuple[int, str, str | None]:
    """(generation id, member id, group instance id): from v3 (KIP-447); none before."""
    if isinstance(request, _NO_MEMBER_FIELDS):
        return messages.NO_GENERATION, messages.UNKNOWN_MEMBER_ID, None
    return int(request.generation_id), request.member_id, request.group_instance_id


def _leader_epoch(partition: Any) -> int:
    """From v2; -1 (unknown) before."""
    if isinstance(partition, _NO_LEADER_EPOCH):
        return -1
    return int(partition.committed_leader_epoch)


def _response(ctx: RequestContext, errors: dict[tuple[str, int], ErrorCode],
              request: Any) -> Any:
    """One error per partition of the request, in its order."""
    response = response_type(ctx.api_key, ctx.api_version)
    topic_type = sibling(response, "TxnOffsetCommitResponseTopic")
    partition_type = sibling(response, "TxnOffsetCommitResponsePartition")
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(
        build(topic_type, name=topic.name, partitions=tuple(
            build(partition_type, partition_index=p.partition_index,
                  error_code=kio_error(errors[(topic.name, int(p.partition_index))]))
            for p in topic.partitions))
        for topic in request.topics))


class TxnOffsetCommitHandler:
    api_key, min_version, max_version = ApiKey.TXN_OFFSET_COMMIT, 0, 5

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        errors, known = known_partitions(ctx, request.topics, _leader_epoch)
        refused = await _verified(ctx, request) if known else ErrorCode.NONE
        if refused is not ErrorCode.NONE:
            errors.update({(t.name, p.partition): refused for t in known for p in t.partitions})
        elif known:
            generation_id, member_id, instance_id = _group_fields(request)
            answer: messages.TxnOffsetCommitResponse = await ctx.broker.coordinator.call(
                lambda request_id: messages.TxnOffsetCommitRequest(
                    request_id=request_id, group_id=request.group_id,
                    producer_id=int(request.producer_id),
                    producer_epoch=int(request.producer_epoch), topics=tuple(known),
                    generation_id=generation_id, member_id=member_id,
                    group_instance_id=instance_id))
            for answered in answer.topics:
                for result in answered.partitions:
                    errors[(answered.name, result.partition)] = result.error
        return _response(ctx, errors, request)


async def _verified(ctx: RequestContext, request: Any) -> ErrorCode:
    """Whether the producer's transaction holds the group's offsets partition; the
    coordinator's retriable answers come back as COORDINATOR_NOT_AVAILABLE, as from Kafka's
    group coordinator."""
    runtime = ctx.broker.transactions
    topic, partition = runtime.coordinator.offsets_partition_of(request.group_id)
    error = await verify_write(runtime, request.transactional_id, int(request.producer_id),
                               int(request.producer_epoch), topic, partition,
                               kind_of(ctx.api_version, TXN_OFFSET_COMMIT_KINDS_SINCE))
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if error in RETRIABLE else error


def install(registry: HandlerRegistry) -> None:
    registry.register(TxnOffsetCommitHandler())


@authz.rule(ApiKey.TXN_OFFSET_COMMIT)
async def _authorize_txn_offset_commit(ctx: RequestContext, request: Any, inner: authz.Inner,
                                       check: authz.Check) -> Any:
    """Kafka's order: Write on the transactional id, then Read on the group (either refused:
    every partition carries the error), then Read on each topic (a refused topic's partitions
    answer TOPIC_AUTHORIZATION_FAILED, the rest go on)."""
    refused = None
    if not check(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        refused = authz.TXN_DENIED
    elif not check.group(Operation.READ, request.group_id):
        refused = authz.GROUP_DENIED
    return await authorize_commit_topics(ctx, request, inner, check, "TxnOffsetCommitResponse",
                                         refused)
