"""The group APIs on the wire: kio requests in every version <-> the coordinator's messages.

The sans-IO coordinator (`kgroups.coordinator`) knows nothing of API versions' field layouts;
each handler here reads what its version carries (`request_fields` for the fields only some
versions have), asks the coordinator runtime, and builds the response class of the same
version (fields a version lacks are dropped by `wire.build`, as Kafka drops them).
Version-dependent *behaviour* stays in the coordinator, which gets `version`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from kgroups.broker import rebalance_field
from kgroups.broker.apis import consumer_groups, share_groups, share_offsets
from kgroups.broker.apis import request_fields as fields
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import ApiHandler, HandlerRegistry, RequestContext
from kgroups.broker.kept_answers import KEPT_PARTITIONS, KeptAnswers
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import (
    OPERATIONS_NOT_REQUESTED,
    Operation,
    ResourceType,
    all_operations,
)
from kgroups.broker.wire import NO_THROTTLE, build, has_field, kio_error, response_type, sibling
from kgroups.coordinator import messages
from kgroups.errors import ErrorCode


def _client_host(ctx: RequestContext) -> str:
    """Kafka reports a member's host as InetAddress.toString(), i.e. with a leading slash."""
    return "/" + ctx.client_host


def _response(ctx: RequestContext) -> type[Any]:
    return response_type(ctx.api_key, ctx.api_version)


def _ask(ctx: RequestContext, make: Callable[[messages.RequestId], Any]) -> Awaitable[Any]:
    """The coordinator runtime's answer to the request `make` builds (awaited by the handler:
    no coroutine of its own, one frame less to resume on every group request)."""
    return ctx.broker.coordinator.call(make)


class JoinGroupHandler:
    api_key, min_version, max_version = ApiKey.JOIN_GROUP, 0, 9

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        version = ctx.api_version
        answer: messages.JoinGroupResponse = await _ask(
            ctx, lambda request_id: messages.JoinGroupRequest(
            request_id=request_id,
            group_id=request.group_id,
            member_id=request.member_id,
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
            session_timeout_ms=fields.milliseconds(request.session_timeout),
            rebalance_timeout_ms=fields.join_rebalance_timeout_ms(request),
            group_instance_id=fields.join_group_instance_id(request),
            client_id=ctx.client_id or "",
            client_host=_client_host(ctx),
            version=version,
            reason=fields.join_reason(request),
        ))
        response = _response(ctx)
        member_type = sibling(response, "JoinGroupResponseMember")
        # ProtocolName is nullable only from v7; older versions carry "" instead of null.
        protocol_name = answer.protocol_name
        if protocol_name is None and version < 7:
            protocol_name = ""
        return build(
            response,
            throttle_time=NO_THROTTLE,
            error_code=kio_error(answer.error),
            generation_id=answer.generation_id,
            protocol_type=answer.protocol_type,
            protocol_name=protocol_name,
            leader=answer.leader,
            skip_assignment=answer.skip_assignment,
            member_id=answer.member_id,
            members=tuple(
                build(member_type, member_id=m.member_id, group_instance_id=m.group_instance_id,
                      metadata=m.metadata)
                for m in answer.members
            ),
        )


class SyncGroupHandler:
    api_key, min_version, max_version = ApiKey.SYNC_GROUP, 0, 5

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        if ctx.api_version >= 5 and (request.protocol_type is None
                                     or request.protocol_name is None):
            # From v5 both are mandatory: Kafka refuses the request before the coordinator
            # sees it, whatever the group's state.
            return build(_response(ctx), throttle_time=NO_THROTTLE,
                         error_code=kio_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
                         protocol_type=None, protocol_name=None, assignment=b"")
        protocol_type, protocol_name = fields.sync_protocol(request)
        answer: messages.SyncGroupResponse = await _ask(
            ctx, lambda request_id: messages.SyncGroupRequest(
            request_id=request_id,
            group_id=request.group_id,
            generation_id=int(request.generation_id),
            member_id=request.member_id,
            assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
            group_instance_id=fields.sync_group_instance_id(request),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            version=ctx.api_version,
        ))
        return build(
            _response(ctx),
            throttle_time=NO_THROTTLE,
            error_code=kio_error(answer.error),
            protocol_type=answer.protocol_type,
            protocol_name=answer.protocol_name,
            assignment=answer.assignment,
        )


class HeartbeatHandler:
    api_key, min_version, max_version = ApiKey.HEARTBEAT, 0, 4

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        answer: messages.HeartbeatResponse = await _ask(
            ctx, lambda request_id: messages.HeartbeatRequest(
            request_id=request_id,
            group_id=request.group_id,
            generation_id=int(request.generation_id),
            member_id=request.member_id,
            group_instance_id=fields.heartbeat_group_instance_id(request),
        ))
        return _HEARTBEAT_ANSWERS.answer((ctx.api_version, answer.error), lambda: build(
            _response(ctx), throttle_time=NO_THROTTLE, error_code=kio_error(answer.error)))


# A Heartbeat's answer is fixed by its version and error: members send one every few seconds,
# and building and encoding it was ~3 µs of the broker process's ~25 per heartbeat
# (bench/request_path.py). Kept under an authorizer too: its rule never reads the answer.
_HEARTBEAT_ANSWERS = KeptAnswers()


class LeaveGroupHandler:
    api_key, min_version, max_version = ApiKey.LEAVE_GROUP, 0, 5

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        if ctx.api_version < 3:
            members: tuple[messages.MemberIdentity, ...] = (
                messages.MemberIdentity(request.member_id),)
        else:
            members = tuple(
                messages.MemberIdentity(m.member_id, m.group_instance_id, fields.leave_reason(m))
                for m in request.members
            )
        answer: messages.LeaveGroupResponse = await _ask(
            ctx, lambda request_id: messages.LeaveGroupRequest(
            request_id=request_id, group_id=request.group_id, members=members,
            version=ctx.api_version,
        ))
        response = _response(ctx)
        results: tuple[Any, ...] = ()
        if has_field(response, "members"):
            member_type = sibling(response, "MemberResponse")
            results = tuple(
                build(member_type, member_id=r.member_id, group_instance_id=r.group_instance_id,
                      error_code=kio_error(r.error))
                for r in answer.members
            )
        return build(response, throttle_time=NO_THROTTLE, error_code=kio_error(answer.error),
                     members=results)


def _partition_errors_response(
    response: type[Any], topic_class: str, partition_class: str,
    topics: tuple[messages.TopicPartitionErrors, ...],
) -> tuple[Any, ...]:
    topic_type = sibling(response, topic_class)
    partition_type = sibling(response, partition_class)
    return tuple(
        build(topic_type, name=topic.name, partitions=tuple(
            build(partition_type, partition_index=p.partition, error_code=kio_error(p.error))
            for p in topic.partitions
        ))
        for topic in topics
    )


def known_partitions(
    ctx: RequestContext, topics: Any, leader_epoch: Callable[[Any], int],
) -> tuple[dict[tuple[str, int], ErrorCode], list[messages.OffsetCommitTopic]]:
    """An offset commit's partitions the cluster's metadata has, as the coordinator takes them,
    and UNKNOWN_TOPIC_OR_PARTITION for the others (as Kafka's request handler refuses them
    before the coordinator; a partition whose log is offline is still known):
    OffsetCommit's and TxnOffsetCommit's rule."""
    errors: dict[tuple[str, int], ErrorCode] = {}
    known: list[messages.OffsetCommitTopic] = []
    for topic in topics:
        count = ctx.broker.topics.partition_count(topic.name)
        partitions = []
        for p in topic.partitions:
            index = int(p.partition_index)
            if count is None or not 0 <= index < count:
                errors[(topic.name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            partitions.append(messages.OffsetCommitPartition(
                partition=index, offset=int(p.committed_offset),
                metadata=p.committed_metadata, leader_epoch=leader_epoch(p)))
        if partitions:
            known.append(messages.OffsetCommitTopic(topic.name, tuple(partitions)))
    return errors, known


class OffsetCommitHandler:
    # kio 0.6.5 ships OffsetCommit from v2 (Kafka 4 dropped v0/v1); v10 names topics by id,
    # which a broker without topic ids cannot honour.
    api_key, min_version, max_version = ApiKey.OFFSET_COMMIT, 2, 9

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        # Only the known partitions go to the coordinator (not at all if none are left).
        errors, known = known_partitions(ctx, request.topics, fields.commit_leader_epoch)
        if known:
            answer: messages.OffsetCommitResponse = await _ask(
                ctx,
                lambda request_id: messages.OffsetCommitRequest(
                    request_id=request_id,
                    group_id=request.group_id,
                    topics=tuple(known),
                    generation_id=int(request.generation_id_or_member_epoch),
                    member_id=request.member_id,
                    group_instance_id=fields.commit_group_instance_id(request),
                    retention_time_ms=fields.commit_retention_ms(request),
                    version=ctx.api_version,
                ),
            )
            for answered in answer.topics:
                for result in answered.partitions:
                    errors[(answered.name, result.partition)] = result.error
        # Loops, not generator expressions: four generators per commit were measurable.
        said_topics = []
        partition_count = 0
        for topic in request.topics:
            name = topic.name
            said_partitions = []
            for p in topic.partitions:
                index = int(p.partition_index)
                said_partitions.append((index, errors[(name, index)]))
            partition_count += len(said_partitions)
            said_topics.append((name, tuple(said_partitions)))
        said = tuple(said_topics)
        kept = ctx.broker.commit_answers
        if kept is None or partition_count > KEPT_PARTITIONS:
            return _commit_response(ctx, said)
        return kept.answer((ctx.api_version, said), lambda: _commit_response(ctx, said))


def _commit_response(ctx: RequestContext,
                     said: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...]) -> Any:
    """OffsetCommit's answer: each topic's partitions with their errors, in request order."""
    response = _response(ctx)
    return build(response, throttle_time=NO_THROTTLE, topics=_partition_errors_response(
        response, "OffsetCommitResponseTopic", "OffsetCommitResponsePartition",
        tuple(messages.TopicPartitionErrors(name, tuple(
            messages.PartitionError(index, error) for index, error in partitions))
            for name, partitions in said)))


def _fetch_group(group_id: str, topics: Any, member_id: str | None = None,
                 member_epoch: int = -1) -> messages.OffsetFetchGroup:
    wanted = None if topics is None else tuple(
        (t.name, tuple(int(p) for p in t.partition_indexes)) for t in topics)
    return messages.OffsetFetchGroup(group_id, wanted, member_id, member_epoch)


class OffsetFetchHandler:
    # kio 0.6.5 ships OffsetFetch from v1; v10 names topics by id (see OffsetCommit).
    api_key, min_version, max_version = ApiKey.OFFSET_FETCH, 1, 9

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        batched = ctx.api_version >= 8
        if batched:
            groups = tuple(_fetch_group(g.group_id, g.topics, *fields.fetch_member(g))
                           for g in request.groups)
        else:
            groups = (_fetch_group(request.group_id, request.topics),)
        answer: messages.OffsetFetchResponse = await _ask(
            ctx, lambda request_id: messages.OffsetFetchRequest(
                request_id=request_id, groups=groups,
                require_stable=ctx.api_version >= 7 and bool(request.require_stable))
        )
        response = _response(ctx)
        if batched:
            group_type = sibling(response, "OffsetFetchResponseGroup")
            return build(response, throttle_time=NO_THROTTLE, groups=tuple(
                build(group_type, group_id=g.group_id, error_code=kio_error(g.error),
                      topics=self._topics(response, "OffsetFetchResponseTopics",
                                          "OffsetFetchResponsePartitions", g))
                for g in answer.groups
            ))
        (fetched,) = answer.groups
        if ctx.api_version < 2 and fetched.error != ErrorCode.NONE:
            # v1 has no group-level error field, so a group error goes on every partition.
            topics = self._error_topics(response, groups[0], fetched.error)
        else:
            topics = self._topics(response, "OffsetFetchResponseTopic",
                                  "OffsetFetchResponsePartition", fetched)
        return build(response, throttle_time=NO_THROTTLE, topics=topics,
                     error_code=kio_error(fetched.error))

    @staticmethod
    def _topics(response: type[Any], topic_class: str, partition_class: str,
                fetched: messages.FetchedGroup) -> tuple[Any, ...]:
        topic_type = sibling(response, topic_class)
        partition_type = sibling(response, partition_class)
        return tuple(
            build(topic_type, name=topic.name, partitions=tuple(
                build(partition_type, partition_index=p.partition, committed_offset=p.offset,
                      committed_leader_epoch=p.leader_epoch, metadata=p.metadata,
                      error_code=kio_error(p.error))
                for p in topic.partitions
            ))
            for topic in fetched.topics
        )

    @staticmethod
    def _error_topics(response: type[Any], group: messages.OffsetFetchGroup,
                      error: ErrorCode) -> tuple[Any, ...]:
        topic_type = sibling(response, "OffsetFetchResponseTopic")
        partition_type = sibling(response, "OffsetFetchResponsePartition")
        return tuple(
            build(topic_type, name=name, partitions=tuple(
                build(partition_type, partition_index=p, committed_offset=-1, metadata="",
                      error_code=kio_error(error))
                for p in partitions
            ))
            for name, partitions in group.topics or ()
        )


class DescribeGroupsHandler:
    api_key, min_version, max_version = ApiKey.DESCRIBE_GROUPS, 0, 6

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        group_ids = tuple(request.groups)
        # v3+: asked for, every group answered without error (a dead one too, before v6 tells
        # it is missing) carries the operations allowed on it: all of them here; with an
        # authorizer, acl_enforcement narrows them to the principal's. One in error carries
        # Integer.MIN_VALUE, as in Kafka 4.3.1.
        operations = (all_operations(ResourceType.GROUP)
                      if fields.describe_include_operations(request)
                      else OPERATIONS_NOT_REQUESTED)
        answer: messages.DescribeGroupsResponse = await _ask(
            ctx, lambda request_id: messages.DescribeGroupsRequest(
                request_id=request_id, group_ids=group_ids, version=ctx.api_version)
        )
        response = _response(ctx)
        group_type = sibling(response, "DescribedGroup")
        member_type = sibling(response, "DescribedGroupMember")
        described = tuple(
            build(
                group_type,
                error_code=kio_error(g.error),
                # v6+: Kafka explains a missing group in words; other errors carry no text.
                error_message=g.error_message,
                group_id=g.group_id,
                group_state=g.state,
                protocol_type=g.protocol_type,
                protocol_data=g.protocol_data,
                authorized_operations=(operations if g.error == ErrorCode.NONE
                                       else OPERATIONS_NOT_REQUESTED),
                members=tuple(
                    build(member_type, member_id=m.member_id,
                          group_instance_id=m.group_instance_id, client_id=m.client_id,
                          client_host=m.client_host, member_metadata=m.metadata,
                          member_assignment=m.assignment)
                    for m in g.members
                ),
            )
            for g in answer.groups
        )
        if rebalance_field.wants_rebalance_field(ctx.client_id, ctx.api_version):
            response, _ = rebalance_field.extended_response(ctx.api_version)
            described = tuple(
                rebalance_field.with_rebalance(d, g.last_rebalance, ctx.api_version)
                for d, g in zip(described, answer.groups, strict=True))
        return build(response, throttle_time=NO_THROTTLE, groups=described)


class ListGroupsHandler:
    api_key, min_version, max_version = ApiKey.LIST_GROUPS, 0, 5

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        states = fields.list_states_filter(request)
        types = fields.list_types_filter(request)
        answer: messages.ListGroupsResponse = await _ask(
            ctx, lambda request_id: messages.ListGroupsRequest(request_id, states_filter=states)
        )
        listed = answer.groups
        if types:
            wanted = {t.lower() for t in types}
            listed = tuple(g for g in listed if g.group_type in wanted)
        response = _response(ctx)
        listed_type = sibling(response, "ListedGroup")
        return build(response, throttle_time=NO_THROTTLE, error_code=kio_error(answer.error),
                     groups=tuple(
                         build(listed_type, group_id=g.group_id, protocol_type=g.protocol_type,
                               group_state=g.state, group_type=g.group_type)
                         for g in listed
                     ))


class DeleteGroupsHandler:
    api_key, min_version, max_version = ApiKey.DELETE_GROUPS, 0, 2

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        group_ids = tuple(request.groups_names)
        await share_offsets.delete_group_state(ctx.broker, group_ids)
        answer: messages.DeleteGroupsResponse = await _ask(
            ctx, lambda request_id: messages.DeleteGroupsRequest(request_id, group_ids)
        )
        response = _response(ctx)
        result_type = sibling(response, "DeletableGroupResult")
        return build(response, throttle_time=NO_THROTTLE, results=tuple(
            build(result_type, group_id=group_id, error_code=kio_error(error))
            for group_id, error in answer.results
        ))


class OffsetDeleteHandler:
    api_key, min_version, max_version = ApiKey.OFFSET_DELETE, 0, 0

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        topics = tuple(
            (t.name, tuple(int(p.partition_index) for p in t.partitions)) for t in request.topics
        )
        answer: messages.OffsetDeleteResponse = await _ask(
            ctx,
            lambda request_id: messages.OffsetDeleteRequest(request_id, request.group_id, topics)
        )
        response = _response(ctx)
        return build(response, throttle_time=NO_THROTTLE, error_code=kio_error(answer.error),
                     topics=_partition_errors_response(
                         response, "OffsetDeleteResponseTopic", "OffsetDeleteResponsePartition",
                         answer.topics))


GROUP_HANDLERS: tuple[ApiHandler, ...] = (
    JoinGroupHandler(),
    SyncGroupHandler(),
    HeartbeatHandler(),
    LeaveGroupHandler(),
    OffsetCommitHandler(),
    OffsetFetchHandler(),
    DescribeGroupsHandler(),
    ListGroupsHandler(),
    DeleteGroupsHandler(),
    OffsetDeleteHandler(),
)


def install(registry: HandlerRegistry) -> None:
    """Register every group API (kgroups.broker.broker.install_handlers calls it),
    KIP-848's consumer-group APIs included."""
    for handler in GROUP_HANDLERS:
        registry.register(handler)
    consumer_groups.install(registry)
    share_groups.install(registry)
    share_offsets.install(registry)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

_GROUP_DENIED_FIELDS: dict[int, dict[str, Any]] = {
    ApiKey.JOIN_GROUP: {"generation_id": -1, "protocol_type": None, "leader": "",
                        "skip_assignment": False, "member_id": "", "members": ()},
    ApiKey.HEARTBEAT: {},
    ApiKey.SYNC_GROUP: {"protocol_type": None, "protocol_name": None, "assignment": b""},
}


@authz.rule(ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP)
async def _authorize_group_read(ctx: RequestContext, request: Any, inner: authz.Inner,
                                check: authz.Check) -> Any:
    if check.group(Operation.READ, request.group_id):
        return await inner(ctx, request)
    fields = dict(_GROUP_DENIED_FIELDS[ctx.api_key])
    if ctx.api_key == ApiKey.JOIN_GROUP:  # nullable from v7; before, the empty string
        fields["protocol_name"] = None if ctx.api_version >= 7 else ""
    return authz.response(ctx, error_code=kio_error(authz.GROUP_DENIED), **fields)


@authz.rule(ApiKey.LEAVE_GROUP)
async def _authorize_leave_group(ctx: RequestContext, request: Any, inner: authz.Inner,
                                 check: authz.Check) -> Any:
    if check.group(Operation.READ, request.group_id):
        return await inner(ctx, request)
    return authz.response(ctx, error_code=kio_error(authz.GROUP_DENIED), members=())


@authz.rule(ApiKey.OFFSET_COMMIT)
async def _authorize_offset_commit(ctx: RequestContext, request: Any, inner: authz.Inner,
                                   check: authz.Check) -> Any:
    refused = None if check.group(Operation.READ, request.group_id) else authz.GROUP_DENIED
    return await authorize_commit_topics(ctx, request, inner, check, "OffsetCommitResponse",
                                         refused)


async def authorize_commit_topics(ctx: RequestContext, request: Any, inner: authz.Inner,
                                  check: authz.Check, response_prefix: str,
                                  refused: ErrorCode | None) -> Any:
    """An offset commit's answer under ACLs, once its request-level checks gave `refused`
    (every partition carries it) or passed: Read on each topic, the refused topics' partitions
    answering TOPIC_AUTHORIZATION_FAILED and only the rest going on (OffsetCommit's and
    TxnOffsetCommit's rule; `response_prefix` names the response's classes)."""
    def denied_topic(topic: Any, error: ErrorCode) -> Any:
        return authz.nested(ctx, f"{response_prefix}Topic", name=topic.name, partitions=(
            authz.partition_entries(ctx, f"{response_prefix}Partition", topic, error)))

    if refused is not None:
        return authz.response(ctx, topics=tuple(denied_topic(t, refused)
                                                for t in request.topics))
    topics, denied = await authz.answer_allowed_topics(
        ctx, request, inner, lambda t: check.topic(Operation.READ, t.name),
        lambda response: response.topics)
    return authz.response(ctx, topics=topics + tuple(denied_topic(t, authz.TOPIC_DENIED)
                                                     for t in denied))


_NO_OFFSET = {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""}


def _fetch_topics(ctx: RequestContext, check: authz.Check, topics: Any, answered: Any,
                  topic_cls: str, partition_cls: str) -> tuple[Any, ...]:
    """OffsetFetch's topics: asked-for unauthorized ones answer TOPIC_AUTHORIZATION_FAILED per
    partition; when all were asked for (null), unauthorized ones are left out."""
    if topics is None:
        return tuple(t for t in answered if check.topic(Operation.DESCRIBE, t.name))
    denied = tuple(
        authz.nested(ctx, topic_cls, name=t.name, partitions=authz.partition_entries(
            ctx, partition_cls, t, authz.TOPIC_DENIED, **_NO_OFFSET))
        for t in topics if not check.topic(Operation.DESCRIBE, t.name))
    return tuple(answered) + denied


@authz.rule(ApiKey.OFFSET_FETCH)
async def _authorize_offset_fetch(ctx: RequestContext, request: Any, inner: authz.Inner,
                                  check: authz.Check) -> Any:
    if ctx.api_version < 8:
        asked = request.topics
        if not check.group(Operation.DESCRIBE, request.group_id):
            if ctx.api_version < 2:  # no group-level error yet: each partition carries it
                return authz.response(ctx, topics=tuple(authz.nested(
                    ctx, "OffsetFetchResponseTopic", name=t.name,
                    partitions=authz.partition_entries(
                        ctx, "OffsetFetchResponsePartition", t, authz.GROUP_DENIED, **_NO_OFFSET))
                    for t in asked))
            return authz.response(ctx, error_code=kio_error(authz.GROUP_DENIED), topics=())
        allowed = None if asked is None else tuple(
            t for t in asked if check.topic(Operation.DESCRIBE, t.name))
        answered: tuple[Any, ...] = ()
        if allowed is None or allowed:
            response = await inner(ctx, dataclasses.replace(request, topics=allowed))
            if int(getattr(response, "error_code", ErrorCode.NONE)) != 0:
                return response
            answered = tuple(response.topics)
        return dataclasses.replace(
            authz.response(ctx, error_code=kio_error(ErrorCode.NONE), topics=()),
            topics=_fetch_topics(ctx, check, asked, answered, "OffsetFetchResponseTopic",
                                 "OffsetFetchResponsePartition"))
    groups = tuple(request.groups)
    allowed_groups = []
    for group in groups:
        if check.group(Operation.DESCRIBE, group.group_id):
            topics = None if group.topics is None else tuple(
                t for t in group.topics if check.topic(Operation.DESCRIBE, t.name))
            allowed_groups.append(dataclasses.replace(group, topics=topics))
    answered_groups = {}
    if allowed_groups:
        response = await inner(ctx, dataclasses.replace(request, groups=tuple(allowed_groups)))
        answered_groups = {g.group_id: g for g in response.groups}
    results = []
    for group in groups:
        if group.group_id not in answered_groups:
            results.append(authz.nested(ctx, "OffsetFetchResponseGroup", group_id=group.group_id,
                                        error_code=kio_error(authz.GROUP_DENIED), topics=()))
            continue
        answer = answered_groups[group.group_id]
        results.append(dataclasses.replace(answer, topics=_fetch_topics(
            ctx, check, group.topics, answer.topics, "OffsetFetchResponseTopics",
            "OffsetFetchResponsePartitions")))
    return authz.response(ctx, groups=tuple(results))


@authz.rule(ApiKey.OFFSET_DELETE)
async def _authorize_offset_delete(ctx: RequestContext, request: Any, inner: authz.Inner,
                                   check: authz.Check) -> Any:
    if not check.group(Operation.DELETE, request.group_id):
        return authz.response(ctx, error_code=kio_error(authz.GROUP_DENIED), topics=())
    allowed, denied = authz.split(request.topics, lambda t: check.topic(Operation.READ, t.name))
    response = await inner(ctx, dataclasses.replace(request, topics=allowed))
    if int(response.error_code) != 0:  # a group-level error answers without topics
        return response
    denied_topics = tuple(authz.nested(ctx, "OffsetDeleteResponseTopic", name=t.name, partitions=(
        authz.partition_entries(ctx, "OffsetDeleteResponsePartition", t, authz.TOPIC_DENIED)))
        for t in denied)
    return dataclasses.replace(response, topics=tuple(response.topics) + denied_topics)


@authz.rule(ApiKey.DESCRIBE_GROUPS)
async def _authorize_describe_groups(ctx: RequestContext, request: Any, inner: authz.Inner,
                                     check: authz.Check) -> Any:
    names = tuple(request.groups)
    allowed, _ = authz.split(names, lambda name: check.group(Operation.DESCRIBE, name))
    answered = await authz.answers_by_group(
        ctx, inner, allowed, lambda ids: dataclasses.replace(request, groups=ids),
        lambda response: response.groups)
    denied = {"error_code": kio_error(authz.GROUP_DENIED),
              "error_message": authz.MESSAGES[authz.GROUP_DENIED],
              "group_state": "", "protocol_type": "", "protocol_data": "", "members": (),
              "authorized_operations": OPERATIONS_NOT_REQUESTED}
    return authz.response(ctx, groups=tuple(
        check.with_group_operations(answered[name]) if name in answered
        else authz.nested(ctx, "DescribedGroup", group_id=name, **denied) for name in names))


@authz.rule(ApiKey.DELETE_GROUPS)
async def _authorize_delete_groups(ctx: RequestContext, request: Any, inner: authz.Inner,
                                   check: authz.Check) -> Any:
    names = tuple(request.groups_names)
    allowed, _ = authz.split(names, lambda name: check.group(Operation.DELETE, name))
    answered = await authz.answers_by_group(
        ctx, inner, allowed, lambda ids: dataclasses.replace(request, groups_names=ids),
        lambda response: response.results)
    return authz.response(ctx, results=tuple(
        answered[name] if name in answered else authz.nested(
            ctx, "DeletableGroupResult", group_id=name, error_code=kio_error(authz.GROUP_DENIED))
        for name in names))


@authz.rule(ApiKey.LIST_GROUPS)
async def _authorize_list_groups(ctx: RequestContext, request: Any, inner: authz.Inner,
                                 check: authz.Check) -> Any:
    response = await inner(ctx, request)
    if check.cluster(Operation.DESCRIBE):
        return response
    return dataclasses.replace(response, groups=tuple(
        g for g in response.groups if check.group(Operation.DESCRIBE, g.group_id)))
