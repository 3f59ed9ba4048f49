"""KIP-848's consumer-group APIs on the wire: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), versions 0-1, mapped to and from the coordinator core's types.

The core names topics by id, as the protocol does; it knows the broker's topics (name, stable
id, partition count) from the coordinator runtime, which the topic catalogue tells of every
topic created, deleted or grown, so the change reaches a group at its next heartbeat.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kgroups.broker.apis.contract import HandlerRegistry, RequestContext
from kgroups.broker.security.authorizer import (
    OPERATIONS_NOT_REQUESTED,
    ResourceType,
    all_operations,
)
from kgroups.broker.wire import build, kio_error, response_type, sibling
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.errors import ErrorCode
from kgroups.records.consumer_group import TopicPartitionList

_NO_THROTTLE = datetime.timedelta(0)
# ConsumerGroupDescribe v1 MemberType: 0 = classic protocol (online migration), 1 = consumer.
_CLASSIC_MEMBER_TYPE = 0
_CONSUMER_MEMBER_TYPE = 1


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


class ConsumerGroupHeartbeatHandler:
    api_key, min_version, max_version = 68, 0, 1

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        owned = request.topic_partitions
        names = request.subscribed_topic_names
        answer: ConsumerGroupHeartbeatResponse = await ctx.broker.coordinator.call(
            lambda request_id: ConsumerGroupHeartbeatRequest(
                request_id=request_id,
                group_id=request.group_id,
                member_id=request.member_id,
                member_epoch=int(request.member_epoch),
                instance_id=request.instance_id,
                rack_id=request.rack_id,
                rebalance_timeout_ms=_ms(request.rebalance_timeout),
                subscribed_topic_names=None if names is None else tuple(names),
                subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
                server_assignor=request.server_assignor,
                topic_partitions=None if owned is None else tuple(
                    (t.topic_id or uuid.UUID(int=0), tuple(int(p) for p in t.partitions))
                    for t in owned),
                client_id=ctx.client_id or "",
                client_host="/" + ctx.client_host,
                version=ctx.api_version,
                describable_topics=ctx.describable_topics,
            ))
        response = response_type(68, ctx.api_version)
        assignment = None
        if answer.assignment is not None:
            assignment = build(sibling(response, "Assignment"), topic_partitions=_wire_topics(
                sibling(response, "TopicPartitions"), answer.assignment))
        return build(
            response, throttle_time=_NO_THROTTLE, error_code=kio_error(answer.error),
            error_message=answer.error_message, member_id=answer.member_id,
            member_epoch=answer.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
            assignment=assignment,
        )


def _wire_topics(topic_cls: type[Any], topics: TopicPartitionList) -> tuple[Any, ...]:
    return tuple(build(topic_cls, topic_id=t, partitions=p) for t, p in topics)


class ConsumerGroupDescribeHandler:
    api_key, min_version, max_version = 69, 0, 1

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        group_ids = tuple(request.group_ids)
        answer: ConsumerGroupDescribeResponse = await ctx.broker.coordinator.call(
            lambda request_id: ConsumerGroupDescribeRequest(request_id, group_ids))
        core = ctx.broker.coordinator.core
        response = response_type(69, ctx.api_version)
        group_cls = sibling(response, "DescribedGroup")
        member_cls = sibling(response, "Member")
        assignment_cls = sibling(response, "Assignment")
        topic_cls = sibling(response, "TopicPartitions")
        # Asked for, a described group carries the operations allowed on it (all of them here;
        # acl_enforcement narrows them to the principal's); a group in error does not.
        operations = (all_operations(ResourceType.GROUP) if request.include_authorized_operations
                      else OPERATIONS_NOT_REQUESTED)

        def named(topics: TopicPartitionList) -> Any:
            return build(assignment_cls, topic_partitions=tuple(
                build(topic_cls, topic_id=t, topic_name=core.topic_name(t) or "", partitions=p)
                for t, p in topics))

        return build(response, throttle_time=_NO_THROTTLE, groups=tuple(
            build(
                group_cls, error_code=kio_error(g.error), error_message=g.error_message,
                group_id=g.group_id, group_state=g.state, group_epoch=g.group_epoch,
                assignment_epoch=g.assignment_epoch, assignor_name=g.assignor_name,
                authorized_operations=operations if g.error == ErrorCode.NONE
                else OPERATIONS_NOT_REQUESTED,
                members=tuple(
                    build(member_cls, member_id=m.member_id, instance_id=m.instance_id,
                          rack_id=m.rack_id, member_epoch=m.member_epoch,
                          client_id=m.client_id, client_host=m.client_host,
                          subscribed_topic_names=m.subscribed_topic_names,
                          subscribed_topic_regex=m.subscribed_topic_regex,
                          assignment=named(m.assignment),
                          target_assignment=named(m.target_assignment),
                          member_type=_CLASSIC_MEMBER_TYPE if m.classic
                          else _CONSUMER_MEMBER_TYPE)
                    for m in g.members),
            )
            for g in answer.groups
        ))


def install(registry: HandlerRegistry) -> None:
    registry.register(ConsumerGroupHeartbeatHandler())
    registry.register(ConsumerGroupDescribeHandler())
