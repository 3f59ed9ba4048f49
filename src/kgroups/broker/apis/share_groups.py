"""KIP-932's share-group APIs on the wire: ShareGroupHeartbeat (76) and ShareGroupDescribe (77),
version 1, mapped to and from the coordinator's messages; and the broker's part of a share
group's life that the coordinator cannot do itself (it does no IO):

- share-partition initialization: a heartbeat that recorded partitions as initializing names
  them in its answer; the broker initializes each in the share coordinator
  (`ShareStatePersister.initialize`, `broker.share_state`) as Kafka 4.3.1 does: at the group
  epoch as state epoch and start offset -1 (none yet: the share partition resolves it from
  `share.auto.offset.reset` when it first loads, as seen in Kafka's __share_group_state), then
  reports to the coordinator, which records them initialized. Without a share coordinator on
  the broker they are reported initialized at once.

A member that leaves, or is removed, keeps its share session and the records it acquired, as
on Kafka 4.3.1: they go back when its session or connection closes, or their locks time out.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.consumer_groups import heartbeat_refusal, named_assignment
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import (
    described_group_operations,
)
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.coordinator.share_messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareGroupInitializedRequest,
    ShareTopics,
)
from kgroups.errors import ErrorCode
from kgroups.share.persisted import SharePartitionKey

# The start offset Kafka initializes a new share-partition with: not known yet.
NO_START_OFFSET = -1
# Initializations in flight, kept referenced until done (asyncio holds tasks weakly).
_INITIALIZING: set[asyncio.Task[None]] = set()


class ShareGroupHeartbeatHandler:
    api_key, min_version, max_version = ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        names = request.subscribed_topic_names
        answer: ShareGroupHeartbeatResponse = await ctx.broker.coordinator.call(
            lambda request_id: ShareGroupHeartbeatRequest(
                request_id=request_id, group_id=request.group_id, member_id=request.member_id,
                member_epoch=int(request.member_epoch), rack_id=request.rack_id,
                subscribed_topic_names=None if names is None else tuple(names),
                client_id=ctx.client_id or "", client_host="/" + ctx.client_host))
        if answer.initialize:
            task = asyncio.get_running_loop().create_task(initialize_partitions(
                ctx.broker, request.group_id, answer.group_epoch, answer.initialize))
            _INITIALIZING.add(task)
            task.add_done_callback(_INITIALIZING.discard)
        response = response_type(ApiKey.SHARE_GROUP_HEARTBEAT, ctx.api_version)
        assignment = None
        if answer.assignment is not None:
            topic_cls = sibling(response, "TopicPartitions")
            assignment = build(sibling(response, "Assignment"), topic_partitions=tuple(
                build(topic_cls, topic_id=t, partitions=p) for t, p in answer.assignment))
        return build(
            response, throttle_time=NO_THROTTLE, error_code=kio_error(answer.error),
            error_message=answer.error_message, member_id=answer.member_id,
            member_epoch=answer.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
            assignment=assignment)


async def initialize_partitions(broker: Any, group_id: str, group_epoch: int,
                                topics: ShareTopics) -> None:
    """Initialize the share-partitions in the share coordinator, then tell the group
    coordinator (module docstring)."""
    persister = getattr(broker, "share_persister", None)
    error = ErrorCode.NONE
    if persister is not None:
        for topic_id, _, partitions in topics:
            for partition in partitions:
                result = await persister.initialize(
                    SharePartitionKey(group_id, topic_id.bytes, partition), group_epoch,
                    NO_START_OFFSET)
                if result != ErrorCode.NONE:
                    error = result
    await broker.coordinator.call(lambda request_id: ShareGroupInitializedRequest(
        request_id, group_id, topics, error))


class ShareGroupDescribeHandler:
    api_key, min_version, max_version = ApiKey.SHARE_GROUP_DESCRIBE, 1, 1

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        group_ids = tuple(request.group_ids)
        answer: ShareGroupDescribeResponse = await ctx.broker.coordinator.call(
            lambda request_id: ShareGroupDescribeRequest(request_id, group_ids))
        shard = ctx.broker.coordinator.shard
        response = response_type(ApiKey.SHARE_GROUP_DESCRIBE, ctx.api_version)
        group_cls = sibling(response, "DescribedGroup")
        member_cls = sibling(response, "Member")
        assignment_cls = sibling(response, "Assignment")
        topic_cls = sibling(response, "TopicPartitions")
        asked = request.include_authorized_operations

        def named(topics: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]) -> Any:
            return named_assignment(assignment_cls, topic_cls, shard, topics)

        return build(response, throttle_time=NO_THROTTLE, groups=tuple(
            build(group_cls, error_code=kio_error(g.error), error_message=g.error_message,
                  group_id=g.group_id, group_state=g.state, group_epoch=g.group_epoch,
                  assignment_epoch=g.assignment_epoch, assignor_name=g.assignor_name,
                  authorized_operations=described_group_operations(asked, g.error),
                  members=tuple(
                      build(member_cls, member_id=m.member_id, rack_id=m.rack_id,
                            member_epoch=m.member_epoch, client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=m.subscribed_topic_names,
                            assignment=named(m.assignment))
                      for m in g.members))
            for g in answer.groups))


def install(registry: HandlerRegistry) -> None:
    registry.register(ShareGroupHeartbeatHandler())
    registry.register(ShareGroupDescribeHandler())


# --- who may call these APIs (run when an authorizer is configured) -------------------------------


@authz.rule(ApiKey.SHARE_GROUP_DESCRIBE)
async def _authorize_share_group_describe(ctx: RequestContext, request: Any, inner: authz.Inner,
                                          check: authz.Check) -> Any:
    """DESCRIBE on each group, as for ConsumerGroupDescribe."""
    return await authz.described_groups(ctx, request, inner, check,
                                        authz.denied_group(assignor_name=""))


@authz.rule(ApiKey.SHARE_GROUP_HEARTBEAT)
async def _authorize_share_group_heartbeat(ctx: RequestContext, request: Any, inner: authz.Inner,
                                           check: authz.Check) -> Any:
    """READ on the group, then DESCRIBE on every subscribed topic (the consumer protocol's
    rule)."""
    refusal = heartbeat_refusal(ctx, request, check)
    return refusal if refusal is not None else await inner(ctx, request)
