"""KIP-1071's streams-group APIs on the wire: StreamsGroupHeartbeat (88) and StreamsGroupDescribe
(89), version 0, mapped to and from the coordinator's messages.

As Kafka 4.3.1's broker does, the heartbeat first refuses topologies naming Kafka's internal
topics or invalid topic names (STREAMS_INVALID_TOPOLOGY), and once the coordinator answered it
creates the internal topics (repartition and changelog) the group's topology still lacks, those
the principal may create; the member learns of them through the MISSING_INTERNAL_TOPICS status
and finds them at a later heartbeat.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Iterable
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext
from kgroups.broker.events import log_event
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import (
    Operation,
    described_group_operations,
)
from kgroups.broker.topic_configs import TopicConfigError
from kgroups.broker.topics import INTERNAL_TOPICS, topic_name_error
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.coordinator.streams_messages import (
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
    StreamsStatus,
    TaskIdList,
)
from kgroups.errors import ErrorCode
from kgroups.records.streams_group import (
    CopartitionGroup,
    StreamsGroupTopologyValue,
    Subtopology,
    TopicInfo,
)

logger = logging.getLogger("kgroups.topics")
# Kafka's Topic.isInternal: its own topics, which no Streams topology may name.
KAFKA_INTERNAL_TOPICS = INTERNAL_TOPICS | {"__share_group_state"}


def _topology(wire: Any) -> StreamsGroupTopologyValue | None:
    if wire is None:
        return None

    def info(topic: Any) -> TopicInfo:
        return TopicInfo(topic.name, int(topic.partitions), int(topic.replication_factor),
                         tuple((c.key, c.value) for c in topic.topic_configs))

    return StreamsGroupTopologyValue(int(wire.epoch), tuple(
        Subtopology(
            s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex),
            tuple(info(t) for t in s.state_changelog_topics), tuple(s.repartition_sink_topics),
            tuple(info(t) for t in s.repartition_source_topics),
            tuple(CopartitionGroup(tuple(int(i) for i in g.source_topics),
                                   tuple(int(i) for i in g.source_topic_regex),
                                   tuple(int(i) for i in g.repartition_source_topics))
                  for g in s.copartition_groups))
        for s in wire.subtopologies))


def _tasks(wire: Any) -> TaskIdList | None:
    if wire is None:
        return None
    return tuple((t.subtopology_id, tuple(int(p) for p in t.partitions)) for t in wire)


def topology_topics(topology: Any) -> list[str]:
    """The topics a heartbeat's topology names, once each (Kafka's order: each subtopology's
    source, repartition sink, repartition source and changelog topics)."""
    names: dict[str, None] = {}
    for sub in topology.subtopologies:
        for name in (*sub.source_topics, *sub.repartition_sink_topics,
                     *(t.name for t in sub.repartition_source_topics),
                     *(t.name for t in sub.state_changelog_topics)):
            names.setdefault(name)
    return list(names)


def topology_error(request: Any) -> str | None:
    """Kafka's broker-side refusal of a topology (STREAMS_INVALID_TOPOLOGY), or None."""
    if request.topology is None:
        return None
    names = topology_topics(request.topology)
    internal = [name for name in names if name in KAFKA_INTERNAL_TOPICS]
    if internal:
        return (f"Use of Kafka internal topics {','.join(internal)} in a Kafka Streams "
                "topology is prohibited.")
    invalid = [name for name in names if topic_name_error(name) is not None]
    if invalid:
        return f"Topic names {','.join(invalid)} are not valid topic names."
    return None


class StreamsGroupHeartbeatHandler:
    api_key, min_version, max_version = ApiKey.STREAMS_GROUP_HEARTBEAT, 0, 0

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        response = response_type(ApiKey.STREAMS_GROUP_HEARTBEAT, ctx.api_version)
        refused = topology_error(request)
        if refused is not None:
            return _heartbeat_response(response, StreamsGroupHeartbeatResponse(
                ErrorCode.STREAMS_INVALID_TOPOLOGY, refused))
        endpoint = request.user_endpoint
        tags = request.client_tags
        answer: StreamsGroupHeartbeatResponse = await ctx.broker.coordinator.call(
            lambda request_id: StreamsGroupHeartbeatRequest(
                request_id=request_id,
                group_id=request.group_id,
                member_id=request.member_id,
                member_epoch=int(request.member_epoch),
                endpoint_information_epoch=int(request.endpoint_information_epoch),
                instance_id=request.instance_id,
                rack_id=request.rack_id,
                rebalance_timeout_ms=int(request.rebalance_timeout.total_seconds() * 1000),
                topology=_topology(request.topology),
                active_tasks=_tasks(request.active_tasks),
                standby_tasks=_tasks(request.standby_tasks),
                warmup_tasks=_tasks(request.warmup_tasks),
                process_id=request.process_id,
                user_endpoint=None if endpoint is None else (endpoint.host, int(endpoint.port)),
                client_tags=None if tags is None else tuple((t.key, t.value) for t in tags),
                task_offsets_sent=request.task_offsets is not None,
                task_end_offsets_sent=request.task_end_offsets is not None,
                shutdown_application=bool(request.shutdown_application),
                client_id=ctx.client_id or "",
                client_host="/" + ctx.client_host,
            ))
        if answer.creatable_topics:
            answer = _create_internal_topics(ctx, answer)
        return _heartbeat_response(response, answer)


def _create_internal_topics(ctx: RequestContext,
                            answer: StreamsGroupHeartbeatResponse) -> StreamsGroupHeartbeatResponse:
    """Create the internal topics the coordinator asked for that the principal may create;
    those it may not are named in the MISSING_INTERNAL_TOPICS status, as Kafka names them."""
    names = [t.name for t in answer.creatable_topics]
    allowed = set(names) if ctx.creatable_topics is None else ctx.creatable_topics(names)
    for topic in answer.creatable_topics:
        if topic.name not in allowed or ctx.broker.topics.partition_count(topic.name) is not None:
            continue
        try:
            error = ctx.broker.topics.create(topic.name, topic.partitions,
                                             dict(topic.topic_configs))
        except (TopicConfigError, OSError) as exc:
            log_event(logger, logging.WARNING, "internal_topic_not_created", topic=topic.name,
                      reason=str(exc))
            continue
        if error == ErrorCode.NONE:
            log_event(logger, logging.INFO, "topic_created", topic=topic.name,
                      partitions=topic.partitions, internal_for_streams=True)
    denied = [name for name in names if name not in allowed]
    if not denied:
        return answer
    note = f"Unauthorized to CREATE on topics {','.join(denied)}."
    statuses = list(answer.status or ())
    for index, (code, detail) in enumerate(statuses):
        if code == StreamsStatus.MISSING_INTERNAL_TOPICS:
            statuses[index] = (code, f"{detail}; {note}")
            break
    else:
        statuses.append((StreamsStatus.MISSING_INTERNAL_TOPICS, note))
    return dataclasses.replace(answer, status=tuple(statuses))


def _heartbeat_response(response: type[Any], answer: StreamsGroupHeartbeatResponse) -> Any:
    task_cls = sibling(response, "TaskIds")
    endpoint_cls = sibling(response, "Endpoint")
    partition_cls = sibling(response, "TopicPartition")

    def tasks(listed: TaskIdList | None) -> Any:
        return None if listed is None else tuple(
            build(task_cls, subtopology_id=sub, partitions=parts) for sub, parts in listed)

    def partitions(listed: tuple[tuple[str, tuple[int, ...]], ...]) -> Any:
        return tuple(build(partition_cls, topic=t, partitions=p) for t, p in listed)

    endpoints = None
    if answer.partitions_by_user_endpoint is not None:
        endpoints = tuple(
            build(sibling(response, "EndpointToPartitions"),
                  user_endpoint=build(endpoint_cls, host=e.endpoint[0], port=e.endpoint[1]),
                  active_partitions=partitions(e.active), standby_partitions=partitions(e.standby))
            for e in answer.partitions_by_user_endpoint)
    return build(
        response, throttle_time=NO_THROTTLE, error_code=kio_error(answer.error),
        error_message=answer.error_message, member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
        acceptable_recovery_lag=answer.acceptable_recovery_lag,
        task_offset_interval=datetime.timedelta(milliseconds=answer.task_offset_interval_ms),
        status=None if answer.status is None else tuple(
            build(sibling(response, "Status"), status_code=code, status_detail=detail)
            for code, detail in answer.status),
        active_tasks=tasks(answer.active_tasks), standby_tasks=tasks(answer.standby_tasks),
        warmup_tasks=tasks(answer.warmup_tasks),
        endpoint_information_epoch=answer.endpoint_information_epoch,
        partitions_by_user_endpoint=endpoints)


class StreamsGroupDescribeHandler:
    api_key, min_version, max_version = ApiKey.STREAMS_GROUP_DESCRIBE, 0, 0

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        group_ids = tuple(request.group_ids)
        answer: StreamsGroupDescribeResponse = await ctx.broker.coordinator.call(
            lambda request_id: StreamsGroupDescribeRequest(request_id, group_ids))
        response = response_type(ApiKey.STREAMS_GROUP_DESCRIBE, ctx.api_version)
        asked = request.include_authorized_operations

        def cls(name: str) -> type[Any]:
            return sibling(response, name)

        def info(topic: TopicInfo) -> Any:
            return build(cls("TopicInfo"), name=topic.name, partitions=topic.partitions,
                         replication_factor=topic.replication_factor,
                         topic_configs=tuple(build(cls("KeyValue"), key=k, value=v)
                                             for k, v in topic.topic_configs))

        def tasks(listed: TaskIdList) -> Any:
            return tuple(build(cls("TaskIds"), subtopology_id=s, partitions=p) for s, p in listed)

        def assignment(three: tuple[TaskIdList, TaskIdList, TaskIdList]) -> Any:
            return build(cls("Assignment"), active_tasks=tasks(three[0]),
                         standby_tasks=tasks(three[1]), warmup_tasks=tasks(three[2]))

        groups = []
        for g in answer.groups:
            topology = None
            if g.topology_epoch is not None:
                topology = build(cls("Topology"), epoch=g.topology_epoch, subtopologies=None
                                 if g.subtopologies is None else tuple(
                    build(cls("Subtopology"), subtopology_id=s.subtopology_id,
                          source_topics=s.source_topics,
                          repartition_sink_topics=s.repartition_sink_topics,
                          state_changelog_topics=tuple(info(t) for t in s.state_changelog_topics),
                          repartition_source_topics=tuple(
                              info(t) for t in s.repartition_source_topics))
                    for s in g.subtopologies))
            groups.append(build(
                cls("DescribedGroup"), error_code=kio_error(g.error),
                error_message=g.error_message, group_id=g.group_id, group_state=g.state,
                group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
                topology=topology,
                members=tuple(
                    build(cls("Member"), member_id=m.member_id, member_epoch=m.member_epoch,
                          instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
                          client_host=m.client_host, topology_epoch=m.topology_epoch,
                          process_id=m.process_id,
                          user_endpoint=None if m.user_endpoint is None else build(
                              cls("Endpoint"), host=m.user_endpoint[0], port=m.user_endpoint[1]),
                          client_tags=tuple(build(cls("KeyValue"), key=k, value=v)
                                            for k, v in m.client_tags),
                          task_offsets=(), task_end_offsets=(),
                          assignment=assignment(m.assignment),
                          target_assignment=assignment(m.target_assignment), is_classic=False)
                    for m in g.members),
                authorized_operations=described_group_operations(asked, g.error)))
        return build(response, throttle_time=NO_THROTTLE, groups=tuple(groups))


def install(registry: HandlerRegistry) -> None:
    registry.register(StreamsGroupHeartbeatHandler())
    registry.register(StreamsGroupDescribeHandler())


# --- who may call these APIs (run when an authorizer is configured) -------------------------------


@authz.rule(ApiKey.STREAMS_GROUP_HEARTBEAT)
async def _authorize_streams_group_heartbeat(ctx: RequestContext, request: Any,
                                             inner: authz.Inner, check: authz.Check) -> Any:
    """Kafka's order: READ on the group, the topology's names, DESCRIBE on every topic the
    topology names (no message); CREATE on the cluster or on each internal topic decides which
    the broker creates."""
    def error(code: ErrorCode, message: str | None) -> Any:
        return authz.response(ctx, error_code=kio_error(code), error_message=message,
                              member_id="", member_epoch=0, heartbeat_interval=NO_THROTTLE,
                              acceptable_recovery_lag=0, task_offset_interval=NO_THROTTLE,
                              status=None, active_tasks=None, standby_tasks=None,
                              warmup_tasks=None, endpoint_information_epoch=0,
                              partitions_by_user_endpoint=None)

    if not check.group(Operation.READ, request.group_id):  # no message, as Kafka answers
        return error(authz.GROUP_DENIED, None)
    if request.topology is not None and topology_error(request) is None:
        names = topology_topics(request.topology)
        if not all(check.topic(Operation.DESCRIBE, name) for name in names):
            return error(authz.TOPIC_DENIED, None)

    def creatable(names: Iterable[str]) -> frozenset[str]:
        if check.cluster(Operation.CREATE):
            return frozenset(names)
        return frozenset(name for name in names if check.topic(Operation.CREATE, name))

    return await inner(dataclasses.replace(ctx, creatable_topics=creatable), request)


@authz.rule(ApiKey.STREAMS_GROUP_DESCRIBE)
async def _authorize_streams_group_describe(ctx: RequestContext, request: Any,
                                            inner: authz.Inner, check: authz.Check) -> Any:
    """DESCRIBE on each group; a group whose topology names a topic the principal may not
    DESCRIBE is not shown (TOPIC_AUTHORIZATION_FAILED), as Kafka answers."""
    def shown(group: Any) -> Any:
        topology = group.topology
        topics = set() if topology is None or topology.subtopologies is None else {
            name for sub in topology.subtopologies
            for name in (*sub.source_topics, *sub.repartition_sink_topics,
                         *(t.name for t in sub.state_changelog_topics),
                         *(t.name for t in sub.repartition_source_topics))}
        if all(check.topic(Operation.DESCRIBE, topic) for topic in topics):
            return check.with_group_operations(group)
        return authz.nested(ctx, "DescribedGroup", group_id=group.group_id, **authz.hidden_group(
            "The described group uses topics that the client is not authorized to describe.",
            topology=None))

    return await authz.described_groups(ctx, request, inner, check,
                                        authz.denied_group(topology=None), shown)
