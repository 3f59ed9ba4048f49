"""The share-group offsets admin APIs on the wire: DescribeShareGroupOffsets (90, v0-1),
AlterShareGroupOffsets (91, v0) and DeleteShareGroupOffsets (92, v0).

The group coordinator checks the request and records the group's share-partitions
(`coordinator/share_offsets.py`); the share coordinator's state is read and written here,
through the `ShareStatePersister` (`broker.share_state`): a describe reads each partition's
state summary (its start offset, leader epoch and, in v1, the lag: the records from the start
offset to the high watermark not yet delivered for good), an alter initializes each partition
at its new start offset, a delete deletes each partition's state, and the coordinator is told
when that is done. A partition with no state describes as Kafka's does: start offset and lag -1.
"""

from __future__ import annotations

import uuid
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.coordinator.share_messages import (
    AlterShareOffsetsRequest,
    AlterShareOffsetsResponse,
    DeleteShareOffsetsRequest,
    DeleteShareOffsetsResponse,
    DescribeShareOffsetsRequest,
    DescribeShareOffsetsResponse,
    ShareGroupInitializedRequest,
    ShareStateDeletedRequest,
)
from kgroups.errors import ErrorCode
from kgroups.share.persisted import SharePartitionKey


class DescribeShareGroupOffsetsHandler:
    api_key, min_version, max_version = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        response = response_type(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ctx.api_version)
        groups = [await self._group(ctx, response, g) for g in request.groups]
        return build(response, throttle_time=NO_THROTTLE, groups=tuple(groups))

    @staticmethod
    async def _group(ctx: RequestContext, response: type[Any], wanted: Any) -> Any:
        group_id = wanted.group_id
        topics = None if wanted.topics is None else tuple(
            (t.topic_name, tuple(int(p) for p in t.partitions)) for t in wanted.topics)
        answer: DescribeShareOffsetsResponse = await ctx.broker.coordinator.call(
            lambda request_id: DescribeShareOffsetsRequest(request_id, group_id, topics))
        group_cls = sibling(response, "DescribeShareGroupOffsetsResponseGroup")
        topic_cls = sibling(response, "DescribeShareGroupOffsetsResponseTopic")
        partition_cls = sibling(response, "DescribeShareGroupOffsetsResponsePartition")
        described = []
        for topic in answer.topics:
            partitions = []
            for partition, error, message in topic.partitions:
                start, epoch, lag = -1, 0, -1
                if error == ErrorCode.NONE and topic.topic_id is not None:
                    start, epoch, lag = await _summary(ctx, group_id, topic.topic_id,
                                                       topic.topic_name, partition)
                fields = {"partition_index": partition, "start_offset": start,
                          "leader_epoch": epoch, "error_code": kio_error(error),
                          "error_message": message}
                if ctx.api_version >= 1:
                    fields["lag"] = lag
                partitions.append(build(partition_cls, **fields))
            described.append(build(topic_cls, topic_name=topic.topic_name,
                                   topic_id=topic.topic_id or uuid.UUID(int=0),
                                   partitions=tuple(partitions)))
        return build(group_cls, group_id=group_id, topics=tuple(described),
                     error_code=kio_error(answer.error), error_message=None)


async def _summary(ctx: RequestContext, group_id: str, topic_id: uuid.UUID, name: str,
                   partition: int) -> tuple[int, int, int]:
    """(start offset, leader epoch, lag) of a share-partition from the share coordinator."""
    persister = getattr(ctx.broker, "share_persister", None)
    if persister is None:
        return -1, 0, -1
    result = await persister.read_summary(SharePartitionKey(group_id, topic_id.bytes, partition),
                                          0)
    state = result.state
    if result.error != ErrorCode.NONE or state is None or state.start_offset < 0:
        return -1, 0 if state is None else state.leader_epoch, -1
    log = ctx.broker.topics.log(name, partition)
    end = state.start_offset if log is None else log.log_end_offset
    done = max(state.delivery_complete_count, 0)
    return state.start_offset, state.leader_epoch, end - state.start_offset - done


class AlterShareGroupOffsetsHandler:
    api_key, min_version, max_version = ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        group_id = request.group_id
        topics = tuple((t.topic_name, tuple((int(p.partition_index), int(p.start_offset))
                                            for p in t.partitions)) for t in request.topics)
        answer: AlterShareOffsetsResponse = await ctx.broker.coordinator.call(
            lambda request_id: AlterShareOffsetsRequest(request_id, group_id, topics))
        failed: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        if answer.initialize:
            persister = getattr(ctx.broker, "share_persister", None)
            for topic_id, _, partition, offset in answer.initialize:
                if persister is not None:
                    error = await persister.initialize(
                        SharePartitionKey(group_id, topic_id.bytes, partition),
                        answer.state_epoch, offset)
                    if error != ErrorCode.NONE:
                        failed[(topic_id, partition)] = error
            done: dict[tuple[uuid.UUID, str], list[int]] = {}
            for topic_id, name, partition, _ in answer.initialize:
                if (topic_id, partition) not in failed:
                    done.setdefault((topic_id, name), []).append(partition)
            await ctx.broker.coordinator.call(lambda request_id: ShareGroupInitializedRequest(
                request_id, group_id, tuple((t, n, tuple(ps)) for (t, n), ps in done.items())))
        response = response_type(ApiKey.ALTER_SHARE_GROUP_OFFSETS, ctx.api_version)
        topic_cls = sibling(response, "AlterShareGroupOffsetsResponseTopic")
        partition_cls = sibling(response, "AlterShareGroupOffsetsResponsePartition")
        return build(response, throttle_time=NO_THROTTLE, error_code=kio_error(answer.error),
                     error_message=answer.error_message, responses=tuple(
                         build(topic_cls, topic_name=t.topic_name, topic_id=t.topic_id,
                               partitions=tuple(
                                   build(partition_cls, partition_index=p,
                                         error_code=kio_error(failed.get((t.topic_id, p), e)
                                                              if t.topic_id else e),
                                         error_message=m)
                                   for p, e, m in t.partitions))
                         for t in answer.topics))


class DeleteShareGroupOffsetsHandler:
    api_key, min_version, max_version = ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        answer = await delete_state(ctx.broker, request.group_id,
                                    tuple(t.topic_name for t in request.topics))
        response = response_type(ApiKey.DELETE_SHARE_GROUP_OFFSETS, ctx.api_version)
        topic_cls = sibling(response, "DeleteShareGroupOffsetsResponseTopic")
        return build(response, throttle_time=NO_THROTTLE, error_code=kio_error(answer.error),
                     error_message=answer.error_message, responses=tuple(
                         build(topic_cls, topic_name=t.topic_name, topic_id=t.topic_id,
                               error_code=kio_error(t.partitions[0][1]),
                               error_message=t.partitions[0][2])
                         for t in answer.topics))


async def delete_state(broker: Any, group_id: str,
                       names: tuple[str, ...]) -> DeleteShareOffsetsResponse:
    """Delete the share state of the group's share-partitions of these topics (the
    coordinator checks and records, the share coordinator forgets, the coordinator records
    it done)."""
    answer: DeleteShareOffsetsResponse = await broker.coordinator.call(
        lambda request_id: DeleteShareOffsetsRequest(request_id, group_id, names))
    if answer.delete:
        persister = getattr(broker, "share_persister", None)
        if persister is not None:
            for topic_id, _, partitions in answer.delete:
                for partition in partitions:
                    await persister.delete(SharePartitionKey(group_id, topic_id.bytes, partition))
        await broker.coordinator.call(lambda request_id: ShareStateDeletedRequest(
            request_id, group_id, tuple(t for t, _, _ in answer.delete)))
    return answer


async def delete_group_state(broker: Any, group_ids: tuple[str, ...]) -> None:
    """Before DeleteGroups: an empty share group's share state is deleted, as Kafka deletes
    it with the group (a group with members, or not a share group, has none deleted)."""
    for group_id in group_ids:
        held: DescribeShareOffsetsResponse = await broker.coordinator.call(
            lambda request_id, g=group_id: DescribeShareOffsetsRequest(request_id, g, None))
        names = tuple(t.topic_name for t in held.topics)
        if names:
            await delete_state(broker, group_id, names)


def install(registry: HandlerRegistry) -> None:
    registry.register(DescribeShareGroupOffsetsHandler())
    registry.register(AlterShareGroupOffsetsHandler())
    registry.register(DeleteShareGroupOffsetsHandler())


# --- who may call these APIs (run when an authorizer is configured) -------------------------------


def _group_denied(ctx: RequestContext) -> Any:
    return authz.response(ctx, error_code=kio_error(authz.GROUP_DENIED),
                          error_message=authz.MESSAGES[authz.GROUP_DENIED], responses=())


async def _group_then_topics(ctx: RequestContext, request: Any, inner: authz.Inner,
                             check: authz.Check, on_group: Operation) -> Any:
    """`on_group` on the group, then READ on every topic named."""
    if not check.group(on_group, request.group_id):
        return _group_denied(ctx)
    if not all(check.topic(Operation.READ, t.topic_name) for t in request.topics):
        return authz.response(ctx, error_code=kio_error(authz.TOPIC_DENIED),
                              error_message=authz.MESSAGES[authz.TOPIC_DENIED], responses=())
    return await inner(ctx, request)


@authz.rule(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
async def _authorize_alter(ctx: RequestContext, request: Any, inner: authz.Inner,
                           check: authz.Check) -> Any:
    """READ on the group, then READ on every topic."""
    return await _group_then_topics(ctx, request, inner, check, Operation.READ)


@authz.rule(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
async def _authorize_delete(ctx: RequestContext, request: Any, inner: authz.Inner,
                            check: authz.Check) -> Any:
    """DELETE on the group, then READ on every topic."""
    return await _group_then_topics(ctx, request, inner, check, Operation.DELETE)


@authz.rule(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
async def _authorize_describe(ctx: RequestContext, request: Any, inner: authz.Inner,
                              check: authz.Check) -> Any:
    """DESCRIBE on each group; a group refused is answered GROUP_AUTHORIZATION_FAILED."""
    denied = [g for g in request.groups if not check.group(Operation.DESCRIBE, g.group_id)]
    if not denied:
        return await inner(ctx, request)
    allowed = tuple(g for g in request.groups if g not in denied)
    answered = (await inner(ctx, type(request)(groups=allowed))).groups if allowed else ()
    by_id = {g.group_id: g for g in answered}
    return authz.response(ctx, groups=tuple(
        by_id[g.group_id] if g.group_id in by_id else authz.nested(
            ctx, "DescribeShareGroupOffsetsResponseGroup", group_id=g.group_id, topics=(),
            error_code=kio_error(authz.GROUP_DENIED),
            error_message=authz.MESSAGES[authz.GROUP_DENIED])
        for g in request.groups))
