"""Every served API checked as Kafka's KafkaApis checks it, in its order, with its error codes.

With an authorizer configured, the broker's handlers are wrapped (`authorized_registry`): each
rule decides from the request and the connection's principal, answers what is denied itself,
hands the handler only what is allowed, and merges the two answers, so the handlers stay
unaware of ACLs and an unauthorized client learns nothing a Kafka broker would not tell it
(an unauthorized topic is TOPIC_AUTHORIZATION_FAILED whether or not it exists). An API
without a rule here is served to super users only: a handler added later is closed by
default rather than open.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kgroups.broker.apis.contract import (
    ApiHandler,
    CloseConnection,
    HandlerRegistry,
    RequestContext,
)
from kgroups.broker.events import log_event
from kgroups.broker.security.authorizer import (
    CLUSTER_NAME,
    OPERATIONS_NOT_REQUESTED,
    Authorizer,
    Operation,
    ResourceType,
)
from kgroups.broker.wire import build, has_field, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

logger = logging.getLogger("kgroups.authorizer")

NO_THROTTLE = datetime.timedelta(0)
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
# Kafka's Errors.message() texts.
MESSAGES = {GROUP_DENIED: "Group authorization failed.",
            TOPIC_DENIED: "Topic authorization failed.",
            CLUSTER_DENIED: "Cluster authorization failed.",
            TXN_DENIED: "Transactional Id authorization failed."}
# Needed by nobody: the connection's own set-up.
UNCHECKED = frozenset({17, 18, 36})

Inner = Callable[[RequestContext, Any], Awaitable[Any]]


class Check:
    """One request's principal and host against the authorizer."""

    def __init__(self, ctx: RequestContext, authorizer: Authorizer) -> None:
        session = ctx.session
        assert session is not None
        self.principal = session.principal
        self.host = ctx.client_host
        self.authorizer = authorizer

    def __call__(self, operation: Operation, kind: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.principal, self.host, operation, kind, name)

    def group(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.GROUP, name)

    def topic(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.TOPIC, name)

    def cluster(self, operation: Operation) -> bool:
        return self(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def operations(self, answered: int, kind: ResourceType, name: str | None) -> int:
        """An authorized_operations field narrowed to this principal: a handler answers every
        supported operation when the client asked, and Integer.MIN_VALUE (kept) when it did
        not or the resource is in error."""
        if answered == OPERATIONS_NOT_REQUESTED or name is None:
            return answered
        return self.authorizer.allowed_operations(self.principal, self.host, kind, name)

    def with_group_operations(self, group: Any) -> Any:
        """The group with its operations narrowed (unchanged in a version without them:
        DescribeGroups v0-v2)."""
        if not has_field(type(group), "authorized_operations"):
            return group
        return dataclasses.replace(group, authorized_operations=self.operations(
            int(group.authorized_operations), ResourceType.GROUP, group.group_id))

    def with_topic_operations(self, topic: Any) -> Any:
        """The topic with its operations narrowed (unchanged before Metadata v8), the entry
        itself when they stay (not asked for, the common case): an all-topics Metadata answer
        keeps its cached entries without a copy each."""
        if not has_field(type(topic), "topic_authorized_operations"):
            return topic
        answered = int(topic.topic_authorized_operations)
        narrowed = self.operations(answered, ResourceType.TOPIC, topic.name)
        if narrowed == answered:
            return topic
        return dataclasses.replace(topic, topic_authorized_operations=narrowed)


Rule = Callable[[RequestContext, Any, Inner, Check], Awaitable[Any]]
RULES: dict[int, Rule] = {}


def rule(*api_keys: int) -> Callable[[Rule], Rule]:
    def register(function: Rule) -> Rule:
        for key in api_keys:
            RULES[key] = function
        return function
    return register


def _response(ctx: RequestContext, **fields: Any) -> Any:
    return build(response_type(ctx.api_key, ctx.api_version), throttle_time=NO_THROTTLE,
                 **fields)


def _nested(ctx: RequestContext, class_name: str, /, **fields: Any) -> Any:
    return build(sibling(response_type(ctx.api_key, ctx.api_version), class_name), **fields)


def _split(items: Any, allowed: Callable[[Any], bool]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    yes: list[Any] = []
    no: list[Any] = []
    for item in items:
        (yes if allowed(item) else no).append(item)
    return tuple(yes), tuple(no)


# --- classic group APIs: one group, Read (Kafka checks before anything else) ---------------

_GROUP_DENIED_FIELDS: dict[int, dict[str, Any]] = {
    11: {"generation_id": -1, "protocol_type": None, "leader": "", "skip_assignment": False,
         "member_id": "", "members": ()},
    12: {},
    14: {"protocol_type": None, "protocol_name": None, "assignment": b""},
}


@rule(11, 12, 14)
async def _group_read(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if check.group(Operation.READ, request.group_id):
        return await inner(ctx, request)
    fields = dict(_GROUP_DENIED_FIELDS[ctx.api_key])
    if ctx.api_key == 11:  # nullable from v7; before, the empty string
        fields["protocol_name"] = None if ctx.api_version >= 7 else ""
    return _response(ctx, error_code=kio_error(GROUP_DENIED), **fields)


@rule(13)
async def _leave_group(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if check.group(Operation.READ, request.group_id):
        return await inner(ctx, request)
    return _response(ctx, error_code=kio_error(GROUP_DENIED), members=())


@rule(10)
async def _find_coordinator(ctx: RequestContext, request: Any, inner: Inner,
                            check: Check) -> Any:
    transactional = int(getattr(request, "key_type", 0)) == 1
    kind = ResourceType.TRANSACTIONAL_ID if transactional else ResourceType.GROUP
    denied_error = TXN_DENIED if transactional else GROUP_DENIED
    denied = {"node_id": -1, "host": "", "port": -1, "error_code": kio_error(denied_error),
              "error_message": MESSAGES[denied_error]}
    if ctx.api_version < 4:
        if check(Operation.DESCRIBE, kind, request.key):
            return await inner(ctx, request)
        return _response(ctx, **denied)
    keys = tuple(request.coordinator_keys)
    allowed, _ = _split(keys, lambda key: check(Operation.DESCRIBE, kind, key))
    answered = {}
    if allowed:
        inner_response = await inner(ctx, dataclasses.replace(request, coordinator_keys=allowed))
        answered = {c.key: c for c in inner_response.coordinators}
    coordinators = tuple(answered[key] if key in answered
                         else _nested(ctx, "Coordinator", key=key, **denied) for key in keys)
    return _response(ctx, coordinators=coordinators)


# --- offsets: the group first, then each topic ----------------------------------------------

def _partition_entries(ctx: RequestContext, cls: str, topic: Any, error: ErrorCode,
                       /, **extra: Any) -> tuple[Any, ...]:
    indexes = getattr(topic, "partition_indexes", None)
    if indexes is None:
        indexes = [getattr(p, "partition_index", getattr(p, "index", None))
                   for p in topic.partitions]
    return tuple(_nested(ctx, cls, partition_index=index, error_code=kio_error(error),
                         **extra) for index in indexes)


@rule(8)
async def _offset_commit(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    def denied_topic(topic: Any, error: ErrorCode) -> Any:
        return _nested(ctx, "OffsetCommitResponseTopic", name=topic.name, partitions=(
            _partition_entries(ctx, "OffsetCommitResponsePartition", topic, error)))

    if not check.group(Operation.READ, request.group_id):
        return _response(ctx, topics=tuple(denied_topic(t, GROUP_DENIED)
                                           for t in request.topics))
    allowed, denied = _split(request.topics, lambda t: check.topic(Operation.READ, t.name))
    topics: tuple[Any, ...] = ()
    if allowed:
        topics = tuple((await inner(ctx, dataclasses.replace(request, topics=allowed))).topics)
    return _response(ctx, topics=topics + tuple(denied_topic(t, TOPIC_DENIED) for t in denied))


_NO_OFFSET = {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""}


def _fetch_topics(ctx: RequestContext, check: Check, topics: Any, answered: Any,
                  topic_cls: str, partition_cls: str) -> tuple[Any, ...]:
    """OffsetFetch's topics: asked-for unauthorized ones answer TOPIC_AUTHORIZATION_FAILED per
    partition; when all were asked for (null), unauthorized ones are left out."""
    if topics is None:
        return tuple(t for t in answered if check.topic(Operation.DESCRIBE, t.name))
    denied = tuple(
        _nested(ctx, topic_cls, name=t.name, partitions=_partition_entries(
            ctx, partition_cls, t, TOPIC_DENIED, **_NO_OFFSET))
        for t in topics if not check.topic(Operation.DESCRIBE, t.name))
    return tuple(answered) + denied


@rule(9)
async def _offset_fetch(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if ctx.api_version < 8:
        asked = request.topics
        if not check.group(Operation.DESCRIBE, request.group_id):
            if ctx.api_version < 2:  # no group-level error yet: each partition carries it
                return _response(ctx, topics=tuple(_nested(
                    ctx, "OffsetFetchResponseTopic", name=t.name, partitions=_partition_entries(
                        ctx, "OffsetFetchResponsePartition", t, GROUP_DENIED, **_NO_OFFSET))
                    for t in asked))
            return _response(ctx, error_code=kio_error(GROUP_DENIED), topics=())
        allowed = None if asked is None else tuple(
            t for t in asked if check.topic(Operation.DESCRIBE, t.name))
        answered: tuple[Any, ...] = ()
        if allowed is None or allowed:
            response = await inner(ctx, dataclasses.replace(request, topics=allowed))
            if int(getattr(response, "error_code", ErrorCode.NONE)) != 0:
                return response
            answered = tuple(response.topics)
        return dataclasses.replace(
            _response(ctx, error_code=kio_error(ErrorCode.NONE), topics=()),
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
            results.append(_nested(ctx, "OffsetFetchResponseGroup", group_id=group.group_id,
                                   error_code=kio_error(GROUP_DENIED), topics=()))
            continue
        answer = answered_groups[group.group_id]
        results.append(dataclasses.replace(answer, topics=_fetch_topics(
            ctx, check, group.topics, answer.topics, "OffsetFetchResponseTopics",
            "OffsetFetchResponsePartitions")))
    return _response(ctx, groups=tuple(results))


@rule(47)
async def _offset_delete(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if not check.group(Operation.DELETE, request.group_id):
        return _response(ctx, error_code=kio_error(GROUP_DENIED), topics=())
    allowed, denied = _split(request.topics, lambda t: check.topic(Operation.READ, t.name))
    response = await inner(ctx, dataclasses.replace(request, topics=allowed))
    if int(response.error_code) != 0:  # a group-level error answers without topics
        return response
    denied_topics = tuple(_nested(ctx, "OffsetDeleteResponseTopic", name=t.name, partitions=(
        _partition_entries(ctx, "OffsetDeleteResponsePartition", t, TOPIC_DENIED)))
        for t in denied)
    return dataclasses.replace(response, topics=tuple(response.topics) + denied_topics)


# --- several groups per request ------------------------------------------------------------

@rule(15)
async def _describe_groups(ctx: RequestContext, request: Any, inner: Inner,
                           check: Check) -> Any:
    names = tuple(request.groups)
    allowed, _ = _split(names, lambda name: check.group(Operation.DESCRIBE, name))
    answered = {}
    if allowed:
        answered = {g.group_id: g for g in
                    (await inner(ctx, dataclasses.replace(request, groups=allowed))).groups}
    denied = {"error_code": kio_error(GROUP_DENIED), "error_message": MESSAGES[GROUP_DENIED],
              "group_state": "", "protocol_type": "", "protocol_data": "", "members": (),
              "authorized_operations": OPERATIONS_NOT_REQUESTED}
    return _response(ctx, groups=tuple(
        check.with_group_operations(answered[name]) if name in answered
        else _nested(ctx, "DescribedGroup", group_id=name, **denied) for name in names))


HIDDEN_TOPICS_MESSAGE = ("The group has described topic(s) that the client is not authorized "
                         "to describe.")


@rule(69)
async def _consumer_group_describe(ctx: RequestContext, request: Any, inner: Inner,
                                   check: Check) -> Any:
    names = tuple(request.group_ids)
    allowed, _ = _split(names, lambda name: check.group(Operation.DESCRIBE, name))
    answered = {}
    if allowed:
        answered = {g.group_id: g for g in
                    (await inner(ctx, dataclasses.replace(request, group_ids=allowed))).groups}
    denied = {"error_code": kio_error(GROUP_DENIED), "error_message": MESSAGES[GROUP_DENIED],
              "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
              "assignor_name": "", "members": (),
              "authorized_operations": OPERATIONS_NOT_REQUESTED}
    # A group whose members hold or are to get a topic the principal may not Describe is not
    # shown at all, as Kafka answers it (the topic's name would tell what it may not know).
    hidden = {"error_code": kio_error(TOPIC_DENIED), "error_message": HIDDEN_TOPICS_MESSAGE,
              "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
              "members": (), "authorized_operations": OPERATIONS_NOT_REQUESTED}

    def shown(group: Any) -> Any:
        topics = {topic.topic_name for member in group.members
                  for assignment in (member.assignment, member.target_assignment)
                  for topic in assignment.topic_partitions}
        if all(check.topic(Operation.DESCRIBE, topic) for topic in topics):
            return check.with_group_operations(group)
        return _nested(ctx, "DescribedGroup", group_id=group.group_id, **hidden)

    return _response(ctx, groups=tuple(
        shown(answered[name]) if name in answered
        else _nested(ctx, "DescribedGroup", group_id=name, **denied) for name in names))


@rule(42)
async def _delete_groups(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    names = tuple(request.groups_names)
    allowed, _ = _split(names, lambda name: check.group(Operation.DELETE, name))
    answered = {}
    if allowed:
        answered = {r.group_id: r for r in (await inner(
            ctx, dataclasses.replace(request, groups_names=allowed))).results}
    return _response(ctx, results=tuple(
        answered[name] if name in answered else _nested(
            ctx, "DeletableGroupResult", group_id=name, error_code=kio_error(GROUP_DENIED))
        for name in names))


@rule(16)
async def _list_groups(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    response = await inner(ctx, request)
    if check.cluster(Operation.DESCRIBE):
        return response
    return dataclasses.replace(response, groups=tuple(
        g for g in response.groups if check.group(Operation.DESCRIBE, g.group_id)))


@rule(68)
async def _consumer_group_heartbeat(ctx: RequestContext, request: Any, inner: Inner,
                                    check: Check) -> Any:
    def error(code: ErrorCode, message: str) -> Any:
        return _response(ctx, error_code=kio_error(code), error_message=message,
                         member_id=None, member_epoch=-1, heartbeat_interval=NO_THROTTLE,
                         assignment=None)

    if not check.group(Operation.READ, request.group_id):
        return error(GROUP_DENIED, MESSAGES[GROUP_DENIED])
    unauthorized = sorted(name for name in request.subscribed_topic_names or ()
                          if not check.topic(Operation.DESCRIBE, name))
    if unauthorized:
        return error(TOPIC_DENIED, f"Not authorized to access topics: [{', '.join(unauthorized)}]")
    # A regex resolved on this heartbeat keeps only the topics its principal may Describe.
    def describable(names: Iterable[str]) -> frozenset[str]:
        return frozenset(name for name in names if check.topic(Operation.DESCRIBE, name))

    return await inner(dataclasses.replace(ctx, describable_topics=describable), request)


# --- data APIs -------------------------------------------------------------------------------

@rule(0)
async def _produce(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if request.transactional_id is not None and not check(
            Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        if int(request.acks) == 0:
            raise CloseConnection("produce_transactional_id_unauthorized")
        return _response(ctx, responses=tuple(_produce_topic(ctx, t, TXN_DENIED)
                                              for t in request.topic_data))
    allowed, denied = _split(request.topic_data, lambda t: check.topic(Operation.WRITE, t.name))
    if denied and int(request.acks) == 0:
        raise CloseConnection("produce_topic_unauthorized")  # acks=0 learns of errors so
    responses: tuple[Any, ...] = ()
    if allowed:
        response = await inner(ctx, dataclasses.replace(request, topic_data=allowed))
        if response is None:
            return None
        responses = tuple(response.responses)
    return _response(ctx, responses=responses + tuple(_produce_topic(ctx, t, TOPIC_DENIED)
                                                      for t in denied))


def _produce_topic(ctx: RequestContext, topic: Any, error: ErrorCode) -> Any:
    return _nested(ctx, "TopicProduceResponse", name=topic.name, partition_responses=tuple(
        _nested(ctx, "PartitionProduceResponse", index=p.index, error_code=kio_error(error),
                base_offset=-1, log_append_time=None, log_start_offset=-1, record_errors=(),
                error_message=None) for p in topic.partition_data))


@rule(1)
async def _fetch(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    allowed, denied = _split(request.topics, lambda t: check.topic(Operation.READ, t.topic))
    responses: tuple[Any, ...] = ()
    if allowed:
        responses = tuple((await inner(ctx, dataclasses.replace(request, topics=allowed)))
                          .responses)
    denied_topics = tuple(_nested(ctx, "FetchableTopicResponse", topic=t.topic, partitions=tuple(
        _nested(ctx, "PartitionData", partition_index=p.partition,
                error_code=kio_error(TOPIC_DENIED), high_watermark=-1, last_stable_offset=-1,
                log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
                records=None) for p in t.partitions)) for t in denied)
    return _response(ctx, error_code=kio_error(ErrorCode.NONE), session_id=0,
                     responses=responses + denied_topics)


@rule(2)
async def _list_offsets(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    allowed, denied = _split(request.topics, lambda t: check.topic(Operation.DESCRIBE, t.name))
    topics: tuple[Any, ...] = ()
    if allowed:
        topics = tuple((await inner(ctx, dataclasses.replace(request, topics=allowed))).topics)
    # v0 answers a list of offsets; later versions one offset and its timestamp.
    unknown: dict[str, Any] = ({"old_style_offsets": ()} if ctx.api_version == 0 else
                               {"timestamp": -1, "offset": -1, "leader_epoch": -1})
    denied_topics = tuple(_nested(ctx, "ListOffsetsTopicResponse", name=t.name, partitions=(
        _partition_entries(ctx, "ListOffsetsPartitionResponse", t, TOPIC_DENIED, **unknown)))
        for t in denied)
    return _response(ctx, topics=topics + denied_topics)


@rule(21)
async def _delete_records(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    """Delete on each topic; a denied one answers TOPIC_AUTHORIZATION_FAILED per partition
    whether or not it exists."""
    allowed, denied = _split(request.topics, lambda t: check.topic(Operation.DELETE, t.name))
    topics: tuple[Any, ...] = ()
    if allowed:
        topics = tuple((await inner(ctx, dataclasses.replace(request, topics=allowed))).topics)
    return _response(ctx, topics=topics + tuple(_nested(
        ctx, "DeleteRecordsTopicResult", name=t.name, partitions=_partition_entries(
            ctx, "DeleteRecordsPartitionResult", t, TOPIC_DENIED, low_watermark=-1))
        for t in denied))


@rule(3)
async def _metadata(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    """Describe on each topic; a missing one is auto-created only with Create (on the
    cluster or the topic), else it answers TOPIC_AUTHORIZATION_FAILED. All topics (null):
    the unauthorized ones are left out."""
    asked = request.topics
    if asked is None or (ctx.api_version == 0 and not asked):
        response = await inner(ctx, request)
        return _metadata_operations(check, response, tuple(
            t for t in response.topics if check.topic(Operation.DESCRIBE, t.name)))
    existing = ctx.broker.topics.partition_counts()
    may_create = check.cluster(Operation.CREATE)

    def allowed(topic: Any) -> bool:
        if topic.name is None:  # asked by id: resolved and checked below
            return True
        if not check.topic(Operation.DESCRIBE, topic.name):
            return False
        return topic.name in existing or may_create or check.topic(Operation.CREATE, topic.name)

    passed, denied = _split(asked, allowed)
    response = await inner(ctx, dataclasses.replace(request, topics=passed))
    # v0 reads an empty list as every topic: when all named ones were denied, only the
    # brokers of that answer are wanted.
    kept = () if not passed and ctx.api_version == 0 else tuple(
        t for t in response.topics if t.name is None or check.topic(Operation.DESCRIBE, t.name))
    denied_topics = tuple(_nested(ctx, "MetadataResponseTopic", error_code=kio_error(TOPIC_DENIED),
                                  name=t.name, topic_id=None, is_internal=False, partitions=(),
                                  topic_authorized_operations=OPERATIONS_NOT_REQUESTED)
                          for t in denied)
    return _metadata_operations(check, response, kept + denied_topics)


def _metadata_operations(check: Check, response: Any, topics: tuple[Any, ...]) -> Any:
    """The Metadata answer with these topics and its operations narrowed to the principal."""
    cluster = getattr(response, "cluster_authorized_operations", None)
    if cluster is not None:
        response = dataclasses.replace(response, cluster_authorized_operations=check.operations(
            int(cluster), ResourceType.CLUSTER, CLUSTER_NAME))
    return dataclasses.replace(response, topics=tuple(
        check.with_topic_operations(t) for t in topics))


@rule(60)
async def _describe_cluster(ctx: RequestContext, request: Any, inner: Inner,
                            check: Check) -> Any:
    """The brokers are anyone's to see, as Metadata lists them; the cluster's operations,
    when asked for, are narrowed to the principal's."""
    response = await inner(ctx, request)
    return dataclasses.replace(response, cluster_authorized_operations=check.operations(
        int(response.cluster_authorized_operations), ResourceType.CLUSTER, CLUSTER_NAME))


# --- topic and cluster administration ------------------------------------------------------

@rule(19)
async def _create_topics(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    on_cluster = check.cluster(Operation.CREATE)
    allowed, denied = _split(request.topics, lambda t: on_cluster or check.topic(
        Operation.CREATE, t.name))
    topics: tuple[Any, ...] = ()
    if allowed:
        topics = tuple((await inner(ctx, dataclasses.replace(request, topics=allowed))).topics)
    return _response(ctx, topics=topics + tuple(_nested(
        ctx, "CreatableTopicResult", name=t.name, topic_id=None,
        error_code=kio_error(TOPIC_DENIED), error_message="Authorization failed.",
        topic_config_error_code=kio_error(ErrorCode.NONE), num_partitions=-1,
        replication_factor=-1, configs=None) for t in denied))


@rule(20)
async def _delete_topics(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    names = getattr(request, "topic_names", None)
    if names is not None:  # v0-v5: names only
        allowed, denied = _split(names, lambda n: check.topic(Operation.DELETE, n))
        forward = dataclasses.replace(request, topic_names=allowed)
        denied_names = denied
    else:
        topics = ctx.broker.topics
        by_id = {topics.topic_id(name): name for name in topics.partition_counts()}
        allowed, denied = _split(request.topics, lambda t: check.topic(
            Operation.DELETE, t.name if t.name is not None else by_id.get(t.topic_id, "")))
        forward = dataclasses.replace(request, topics=allowed)
        denied_names = tuple(t.name for t in denied)
    results: tuple[Any, ...] = ()
    if allowed:
        results = tuple((await inner(ctx, forward)).responses)
    return _response(ctx, responses=results + tuple(_nested(
        ctx, "DeletableTopicResult", name=name, topic_id=None,
        error_code=kio_error(TOPIC_DENIED), error_message=MESSAGES[TOPIC_DENIED])
        for name in denied_names))


@rule(37)
async def _create_partitions(ctx: RequestContext, request: Any, inner: Inner,
                             check: Check) -> Any:
    allowed, denied = _split(request.topics, lambda t: check.topic(Operation.ALTER, t.name))
    results: tuple[Any, ...] = ()
    if allowed:
        results = tuple((await inner(ctx, dataclasses.replace(request, topics=allowed))).results)
    return _response(ctx, results=results + tuple(_nested(
        ctx, "CreatePartitionsTopicResult", name=t.name, error_code=kio_error(TOPIC_DENIED),
        error_message="The topic authorization is failed.") for t in denied))


# ConfigResource types: topic, broker, broker logger, client metrics, group.
_CONFIG_TOPIC, _CONFIG_GROUP = 2, 32
_CONFIG_CLUSTER_WIDE = frozenset({4, 8, 16})


def _config_denial(check: Check, operation: Operation, resource: Any) -> ErrorCode | None:
    """Kafka's check of one config resource: the topic, the group, or the cluster."""
    kind, name = int(resource.resource_type), resource.resource_name
    if kind == _CONFIG_TOPIC:
        return None if check.topic(operation, name) else TOPIC_DENIED
    if kind == _CONFIG_GROUP:
        return None if check.group(operation, name) else GROUP_DENIED
    if kind in _CONFIG_CLUSTER_WIDE:
        return None if check.cluster(operation) else CLUSTER_DENIED
    return None  # the handler refuses a type it does not know


@rule(33, 44)
async def _incremental_alter_configs(ctx: RequestContext, request: Any, inner: Inner,
                                     check: Check) -> Any:
    resources = tuple(request.resources)
    allowed = tuple(r for r in resources
                    if _config_denial(check, Operation.ALTER_CONFIGS, r) is None)
    answered: dict[tuple[int, str], Any] = {}
    if allowed:
        answered = {(int(r.resource_type), r.resource_name): r for r in (await inner(
            ctx, dataclasses.replace(request, resources=allowed))).responses}
    responses = []
    for resource in resources:
        error = _config_denial(check, Operation.ALTER_CONFIGS, resource)
        key = (int(resource.resource_type), resource.resource_name)
        responses.append(answered[key] if error is None and key in answered else _nested(
            ctx, "AlterConfigsResourceResponse", error_code=kio_error(error or ErrorCode.NONE),
            error_message=MESSAGES.get(error) if error else None,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name))
    return _response(ctx, responses=tuple(responses))


@rule(32)
async def _describe_configs(ctx: RequestContext, request: Any, inner: Inner,
                            check: Check) -> Any:
    def denial(resource: Any) -> ErrorCode | None:
        return _config_denial(check, Operation.DESCRIBE_CONFIGS, resource)

    resources = tuple(request.resources)
    allowed = tuple(r for r in resources if denial(r) is None)
    answered: dict[tuple[int, str], Any] = {}
    if allowed:
        answered = {(int(r.resource_type), r.resource_name): r for r in (await inner(
            ctx, dataclasses.replace(request, resources=allowed))).results}
    results = []
    for resource in resources:
        key = (int(resource.resource_type), resource.resource_name)
        error = denial(resource)
        if error is None and key in answered:
            results.append(answered[key])
        else:
            results.append(_nested(ctx, "DescribeConfigsResult",
                                   error_code=kio_error(error or ErrorCode.NONE),
                                   error_message=MESSAGES.get(error) if error else None,
                                   resource_type=resource.resource_type,
                                   resource_name=resource.resource_name, configs=()))
    return _response(ctx, results=tuple(results))


@rule(48)
async def _describe_client_quotas(ctx: RequestContext, request: Any, inner: Inner,
                                  check: Check) -> Any:
    if check.cluster(Operation.DESCRIBE_CONFIGS):
        return await inner(ctx, request)
    return _response(ctx, error_code=kio_error(CLUSTER_DENIED),
                     error_message=MESSAGES[CLUSTER_DENIED], entries=None)


@rule(22)
async def _init_producer_id(ctx: RequestContext, request: Any, inner: Inner,
                            check: Check) -> Any:
    if request.transactional_id is not None:
        ok = check(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        error = TXN_DENIED
    else:
        ok = check.cluster(Operation.IDEMPOTENT_WRITE) or check.authorizer.allowed_on_any(
            check.principal, check.host, Operation.WRITE, ResourceType.TOPIC)
        error = CLUSTER_DENIED
    if ok:
        return await inner(ctx, request)
    return _response(ctx, error_code=kio_error(error), producer_id=-1, producer_epoch=-1)


@rule(29)
async def _describe_acls(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if check.cluster(Operation.DESCRIBE):
        return await inner(ctx, request)
    return _response(ctx, error_code=kio_error(CLUSTER_DENIED),
                     error_message=MESSAGES[CLUSTER_DENIED], resources=())


@rule(30)
async def _create_acls(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if check.cluster(Operation.ALTER):
        return await inner(ctx, request)
    return _response(ctx, results=tuple(
        _nested(ctx, "AclCreationResult", error_code=kio_error(CLUSTER_DENIED),
                error_message=MESSAGES[CLUSTER_DENIED]) for _ in request.creations))


@rule(31)
async def _delete_acls(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if check.cluster(Operation.ALTER):
        return await inner(ctx, request)
    return _response(ctx, filter_results=tuple(
        _nested(ctx, "DeleteAclsFilterResult", error_code=kio_error(CLUSTER_DENIED),
                error_message=MESSAGES[CLUSTER_DENIED], matching_acls=())
        for _ in request.filters))


@rule(50)
async def _describe_scram(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if check.cluster(Operation.DESCRIBE):
        return await inner(ctx, request)
    return _response(ctx, error_code=kio_error(CLUSTER_DENIED),
                     error_message=MESSAGES[CLUSTER_DENIED], results=())


@rule(51)
async def _alter_scram(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
    if check.cluster(Operation.ALTER):
        return await inner(ctx, request)
    users = dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))
    return _response(ctx, results=tuple(
        _nested(ctx, "AlterUserScramCredentialsResult", user=user,
                error_code=kio_error(CLUSTER_DENIED), error_message=MESSAGES[CLUSTER_DENIED])
        for user in users))


@dataclass(frozen=True, slots=True)
class AuthorizedHandler:
    """A handler behind its API's rule (or, without a rule, behind super.users)."""

    api_key: int
    min_version: int
    max_version: int
    inner: ApiHandler
    authorizer: Authorizer

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        check = Check(ctx, self.authorizer)
        api_rule = RULES.get(self.api_key)
        if api_rule is not None:
            return await api_rule(ctx, request, self.inner, check)
        if check.principal in self.authorizer.super_users:
            return await self.inner(ctx, request)
        log_event(logger, logging.WARNING, "unauthorized_api", api_key=self.api_key,
                  principal=check.principal, reason="no_authorization_rule")
        raise CloseConnection("api_without_authorization_rule")


def authorized_registry(registry: HandlerRegistry, authorizer: Authorizer) -> HandlerRegistry:
    """The same APIs, each behind its authorization rule."""
    guarded = HandlerRegistry()
    for handler in registry:
        if handler.api_key in UNCHECKED:
            guarded.register(handler)
        else:
            guarded.register(AuthorizedHandler(handler.api_key, handler.min_version,
                                               handler.max_version, handler, authorizer))
    return guarded
