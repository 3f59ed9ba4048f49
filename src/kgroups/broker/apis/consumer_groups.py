"""KIP-848's consumer-group APIs on the wire: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), versions 0-1, mapped to and from the coordinator's messages.

The coordinator names topics by id, as the protocol does; it knows the broker's topics (name, stable
id, partition count) from the coordinator runtime, which the topic catalogue tells of every
topic created, deleted or grown, so the change reaches a group at its next heartbeat.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Iterable
from typing import Any

from kgroups.broker.apis import request_fields as fields
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import (
    Operation,
    described_group_operations,
)
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.errors import ErrorCode
from kgroups.records.consumer_group import TopicPartitionList

# ConsumerGroupDescribe v1 MemberType: 0 = classic protocol (online migration), 1 = consumer.
_CLASSIC_MEMBER_TYPE = 0
_CONSUMER_MEMBER_TYPE = 1


class ConsumerGroupHeartbeatHandler:
    api_key, min_version, max_version = ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1

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
                rebalance_timeout_ms=fields.milliseconds(request.rebalance_timeout),
                subscribed_topic_names=None if names is None else tuple(names),
                subscribed_topic_regex=fields.heartbeat_topic_regex(request),
                server_assignor=request.server_assignor,
                topic_partitions=None if owned is None else tuple(
                    (t.topic_id or uuid.UUID(int=0), tuple(int(p) for p in t.partitions))
                    for t in owned),
                client_id=ctx.client_id or "",
                client_host="/" + ctx.client_host,
                version=ctx.api_version,
                describable_topics=ctx.describable_topics,
            ))
        response = response_type(ApiKey.CONSUMER_GROUP_HEARTBEAT, ctx.api_version)
        assignment = None
        if answer.assignment is not None:
            assignment = build(sibling(response, "Assignment"), topic_partitions=_wire_topics(
                sibling(response, "TopicPartitions"), answer.assignment))
        return build(
            response, throttle_time=NO_THROTTLE, error_code=kio_error(answer.error),
            error_message=answer.error_message, member_id=answer.member_id,
            member_epoch=answer.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
            assignment=assignment,
        )


def _wire_topics(topic_cls: type[Any], topics: TopicPartitionList) -> tuple[Any, ...]:
    return tuple(build(topic_cls, topic_id=t, partitions=p) for t, p in topics)


def named_assignment(assignment_cls: type[Any], topic_cls: type[Any], shard: Any,
                     topics: TopicPartitionList) -> Any:
    """A described member's assignment, its topics named by the broker's catalogue ("" for a
    topic deleted since)."""
    return build(assignment_cls, topic_partitions=tuple(
        build(topic_cls, topic_id=t, topic_name=shard.topic_name(t) or "", partitions=p)
        for t, p in topics))


class ConsumerGroupDescribeHandler:
    api_key, min_version, max_version = ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        group_ids = tuple(request.group_ids)
        answer: ConsumerGroupDescribeResponse = await ctx.broker.coordinator.call(
            lambda request_id: ConsumerGroupDescribeRequest(request_id, group_ids))
        shard = ctx.broker.coordinator.shard
        response = response_type(ApiKey.CONSUMER_GROUP_DESCRIBE, ctx.api_version)
        group_cls = sibling(response, "DescribedGroup")
        member_cls = sibling(response, "Member")
        assignment_cls = sibling(response, "Assignment")
        topic_cls = sibling(response, "TopicPartitions")
        # Asked for, a described group carries the operations allowed on it (all of them here;
        # acl_enforcement narrows them to the principal's); a group in error does not.
        asked = request.include_authorized_operations

        def named(topics: TopicPartitionList) -> Any:
            return named_assignment(assignment_cls, topic_cls, shard, topics)

        return build(response, throttle_time=NO_THROTTLE, groups=tuple(
            build(
                group_cls, error_code=kio_error(g.error), error_message=g.error_message,
                group_id=g.group_id, group_state=g.state, group_epoch=g.group_epoch,
                assignment_epoch=g.assignment_epoch, assignor_name=g.assignor_name,
                authorized_operations=described_group_operations(asked, g.error),
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


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

HIDDEN_TOPICS_MESSAGE = ("The group has described topic(s) that the client is not authorized "
                         "to describe.")


@authz.rule(ApiKey.CONSUMER_GROUP_DESCRIBE)
async def _authorize_consumer_group_describe(ctx: RequestContext, request: Any, inner: authz.Inner,
                                             check: authz.Check) -> Any:
    """DESCRIBE on each group; a group whose members hold or are to get a topic the principal
    may not Describe is not shown at all, as Kafka answers it."""
    def shown(group: Any) -> Any:
        topics = {topic.topic_name for member in group.members
                  for assignment in (member.assignment, member.target_assignment)
                  for topic in assignment.topic_partitions}
        if all(check.topic(Operation.DESCRIBE, topic) for topic in topics):
            return check.with_group_operations(group)
        return authz.nested(ctx, "DescribedGroup", group_id=group.group_id,
                            **authz.hidden_group(HIDDEN_TOPICS_MESSAGE, assignor_name=""))

    return await authz.described_groups(ctx, request, inner, check,
                                        authz.denied_group(assignor_name=""), shown)


def heartbeat_refusal(ctx: RequestContext, request: Any, check: authz.Check) -> Any | None:
    """The answer to a consumer or share group heartbeat its principal may not send (READ on
    the group, DESCRIBE on every topic it names), else None; without a message, as Kafka
    4.3.1 answers both."""
    def error(code: ErrorCode) -> Any:
        return authz.response(ctx, error_code=kio_error(code), error_message=None,
                              member_id=None, member_epoch=-1, heartbeat_interval=NO_THROTTLE,
                              assignment=None)

    if not check.group(Operation.READ, request.group_id):
        return error(authz.GROUP_DENIED)
    if not all(check.topic(Operation.DESCRIBE, name)
               for name in request.subscribed_topic_names or ()):
        return error(authz.TOPIC_DENIED)
    return None


@authz.rule(ApiKey.CONSUMER_GROUP_HEARTBEAT)
async def _authorize_consumer_group_heartbeat(ctx: RequestContext, request: Any, inner: authz.Inner,
                                              check: authz.Check) -> Any:
    refusal = heartbeat_refusal(ctx, request, check)
    if refusal is not None:
        return refusal
    # A regex resolved on this heartbeat keeps only the topics its principal may Describe.
    def describable(names: Iterable[str]) -> frozenset[str]:
        return frozenset(name for name in names if check.topic(Operation.DESCRIBE, name))

    return await inner(dataclasses.replace(ctx, describable_topics=describable), request)
