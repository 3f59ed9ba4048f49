"""ApiVersions, Metadata, FindCoordinator and InitProducerId: what a client asks before anything.

A broker on its own is a one-node cluster: it is the controller, the leader of every partition
and the coordinator of every group, so these answers all point back at itself. In cluster mode
(`ctx.broker.leadership` set) they come from the leadership view instead: the live brokers,
each partition's leader and leader epoch, and for FindCoordinator the leader of the group's
`__consumer_offsets` partition (COORDINATOR_NOT_AVAILABLE while it has none).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any

from kio.static.primitive import i8

from kgroups.broker import descriptors
from kgroups.broker.apis import request_fields
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, HandlerServices, RequestContext, handles
from kgroups.broker.apis.transactions import init_transactional
from kgroups.broker.cluster.leadership import BrokerEndpoint, LeadershipView
from kgroups.broker.events import log_event
from kgroups.broker.metadata_answer import (
    ENCODED_TOPICS,
    AnswerKey,
    CachedTopic,
    EncodedTopicWithOperations,
    MetadataAnswer,
    encoded_topic,
)
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import (
    CLUSTER_NAME,
    OPERATIONS_NOT_REQUESTED,
    Operation,
    ResourceType,
    all_operations,
)
from kgroups.broker.topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
    topic_name_error,
)
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.share_coordinator.placement import parse_coordinator_key

logger = logging.getLogger("kgroups.topics")

GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, SHARE_KEY_TYPE = 0, 1, 2
# FindCoordinator serves share-partition keys ("group:topicId:partition") from v6 (KIP-932).
SHARE_KEY_SINCE_VERSION = 6
# Kafka's text for INVALID_REQUEST (Errors.INVALID_REQUEST), which it gives an unknown key type.
INVALID_REQUEST_TEXT = ("This most likely occurs because of a request being malformed by the "
                        "client library or the message was sent to an incompatible broker. "
                        "See the broker logs for more details.")


def _auto_create(broker: HandlerServices, name: str) -> ErrorCode:
    """Create a topic a Metadata request named. Kafka reports a freshly auto-created topic as
    LEADER_NOT_AVAILABLE once; the leader is known immediately here, so the partitions are
    returned right away. When its partitions would exhaust the file descriptors (descriptors),
    or cannot be created, nothing is created and the answer is LEADER_NOT_AVAILABLE, Kafka's
    (retriable) answer for a topic whose auto-creation has not completed."""
    partitions = broker.config.num_partitions
    refusal = descriptors.refusal(partitions)
    if refusal is None:
        try:
            created = broker.topics.create(name, partitions)
        except OSError as exc:
            refusal = str(exc)
        else:
            if created != ErrorCode.NONE:  # a name colliding with an existing topic's
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # Kafka's answer
    if refusal is not None:
        log_event(logger, logging.WARNING, "topic_not_created", topic=name,
                  reason="auto_create", error=refusal)
        return ErrorCode.LEADER_NOT_AVAILABLE
    log_event(logger, logging.INFO, "topic_created", topic=name, partitions=partitions,
              reason="auto_create")
    return ErrorCode.NONE


@handles(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=4)
async def api_versions(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.API_VERSIONS, ctx.api_version)
    api_version_cls = sibling(response_cls, "ApiVersion")
    keys = tuple(
        api_version_cls(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
        for h in ctx.broker.registry
    )
    return build(response_cls, error_code=kio_error(ErrorCode.NONE), api_keys=keys,
                 throttle_time=NO_THROTTLE)


def advertised(ctx: RequestContext) -> tuple[str, int]:
    """The address of the listener the request came in on, as advertised to its clients."""
    if ctx.session is not None:
        return ctx.session.advertised
    return ctx.broker.advertised_host, ctx.broker.advertised_port


def _requested_topics(ctx: RequestContext, request: Any) -> list[str | uuid.UUID] | None:
    """None = all topics. Metadata v0 used an empty list for "all"; v1+ uses null. From v10 a
    topic may be asked for by id alone (KIP-848 clients learn ids from their assignment)."""
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        return None
    return [topic.name if topic.name is not None or getattr(topic, "topic_id", None) is None
            else topic.topic_id for topic in request.topics]


def _name_of(broker: Any, topic_id: uuid.UUID) -> str | None:
    for name in broker.topics.partition_counts():
        if broker.topics.topic_id(name) == topic_id:
            return name
    return None


def _may_auto_create(ctx: RequestContext, request: Any) -> bool:
    allowed_by_client = getattr(request, "allow_auto_topic_creation", True)
    return bool(allowed_by_client) and ctx.broker.config.auto_create_topics


def _topic_encoder(ctx: RequestContext, response_cls: type[Any]) -> Callable[[str], CachedTopic]:
    """What encodes an existing topic's entry for this request's version (once per topic and
    version, metadata_answer): its partitions all led by this node, operations left out."""
    broker = ctx.broker
    topic_cls = sibling(response_cls, "MetadataResponseTopic")
    partition_cls = sibling(response_cls, "MetadataResponsePartition")
    node = broker.node_id
    none = kio_error(ErrorCode.NONE)

    view = broker.leadership

    def partition(name: str, index: int) -> Any:
        if view is None:
            return build(partition_cls, error_code=none, partition_index=index, leader_id=node,
                         leader_epoch=-1, replica_nodes=(node,), isr_nodes=(node,),
                         offline_replicas=())
        leader = view.leader(name, index)
        if leader is None:  # between leaders (its broker died, the next has not stepped yet)
            return build(partition_cls, error_code=kio_error(ErrorCode.LEADER_NOT_AVAILABLE),
                         partition_index=index, leader_id=-1, leader_epoch=-1, replica_nodes=(),
                         isr_nodes=(), offline_replicas=())
        return build(partition_cls, error_code=none, partition_index=index,
                     leader_id=leader.node_id, leader_epoch=leader.epoch,
                     replica_nodes=(leader.node_id,), isr_nodes=(leader.node_id,),
                     offline_replicas=())

    def encode(name: str) -> CachedTopic:
        partitions = tuple(partition(name, index)
                           for index in range(broker.topics.partition_count(name) or 0))
        return encoded_topic(build(
            topic_cls, error_code=none, name=name, topic_id=broker.topics.topic_id(name),
            is_internal=name in INTERNAL_TOPICS, partitions=partitions,
            topic_authorized_operations=OPERATIONS_NOT_REQUESTED), ctx.api_version)

    return encode


def _with_operations(entry: CachedTopic, operations: int) -> CachedTopic:
    if isinstance(entry, EncodedTopicWithOperations) and operations != OPERATIONS_NOT_REQUESTED:
        return EncodedTopicWithOperations(entry.name, operations, entry.head, entry.tail)
    return entry


def _asked_topic(ctx: RequestContext, request: Any, wanted: str | uuid.UUID,
                 encode: Callable[[str], CachedTopic], operations: int) -> Any:
    """The entry of a topic asked for by name or id: auto-created if missing and allowed."""
    broker = ctx.broker
    topic_cls = sibling(response_type(ApiKey.METADATA, ctx.api_version), "MetadataResponseTopic")
    if isinstance(wanted, uuid.UUID):
        name = _name_of(broker, wanted)
        if name is None:
            return build(topic_cls, error_code=kio_error(ErrorCode.UNKNOWN_TOPIC_ID), name=None,
                         topic_id=wanted, is_internal=False, partitions=())
    else:
        name = wanted
    error = ErrorCode.NONE
    if broker.topics.partition_count(name) is None:
        if topic_name_error(name) is not None:
            error = ErrorCode.INVALID_TOPIC_EXCEPTION
        elif _may_auto_create(ctx, request):
            error = _auto_create(broker, name)
        else:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if error == ErrorCode.NONE:
        entry = (encode(name) if broker.leadership is not None
                 else broker.metadata_entries.entry(ctx.api_version, name, encode))
        return _with_operations(entry, operations)
    return build(topic_cls, error_code=kio_error(error), name=name, topic_id=None,
                 is_internal=name in INTERNAL_TOPICS, partitions=(),
                 topic_authorized_operations=operations)


def _brokers(ctx: RequestContext) -> tuple[list[BrokerEndpoint], int]:
    """The brokers Metadata and DescribeCluster list, and the controller id they name: this
    one alone (at the address of the listener asked) or the cluster's live brokers. A cluster
    has no controller of its own: the lowest live node id stands for it (admin clients send
    controller requests there; every broker accepts them)."""
    broker = ctx.broker
    if broker.leadership is None:
        host, port = advertised(ctx)
        return [BrokerEndpoint(broker.node_id, host, port)], broker.node_id
    live = broker.leadership.brokers()
    return live, live[0].node_id if live else -1


def _answer_key(ctx: RequestContext, request: Any,
                requested: list[str | uuid.UUID] | None) -> AnswerKey | None:
    """What a whole encoded answer is kept under, or None when it must be built afresh: in
    a cluster (leaders and brokers move) and behind an authorizer (narrowed per principal by
    ACLs that change), see `TopicEntryCache.whole_answers`. Otherwise an answer depends only
    on the version, the topics asked (their entries change with the catalog, which empties
    the cache), the operations flags and the listener's advertised address."""
    if not ctx.broker.metadata_entries.whole_answers:
        return None
    return (ctx.api_version, None if requested is None else tuple(requested),
            bool(getattr(request, "include_topic_authorized_operations", False)),
            bool(getattr(request, "include_cluster_authorized_operations", False)),
            advertised(ctx))


@handles(api_key=ApiKey.METADATA, min_version=0, max_version=12)
async def metadata(ctx: RequestContext, request: Any) -> Any:
    """A single broker's answers are kept encoded whole (`_answer_key`) when every topic asked
    for exists: an error entry may change without the catalog changing (a topic that could
    not be auto-created), so it is built afresh each time."""
    requested = _requested_topics(ctx, request)
    key = _answer_key(ctx, request, requested)
    if key is not None and (cached := ctx.broker.metadata_entries.answer(key)) is not None:
        return cached
    answer = _metadata_answer(ctx, request, requested)
    if key is not None and all(type(topic) in ENCODED_TOPICS for topic in answer.topics):
        return ctx.broker.metadata_entries.keep(key, answer)
    return answer


def _metadata_answer(ctx: RequestContext, request: Any,
                     requested: list[str | uuid.UUID] | None) -> MetadataAnswer:
    broker = ctx.broker
    response_cls = response_type(ApiKey.METADATA, ctx.api_version)
    broker_cls = sibling(response_cls, "MetadataResponseBroker")

    # v8+ may ask for the operations allowed on each topic (a missing one too) and, until v10,
    # on the cluster: all of them here; with an authorizer, acl_enforcement narrows them.
    topic_operations = (all_operations(ResourceType.TOPIC)
                        if getattr(request, "include_topic_authorized_operations", False)
                        else OPERATIONS_NOT_REQUESTED)
    cluster_operations = (all_operations(ResourceType.CLUSTER)
                          if getattr(request, "include_cluster_authorized_operations", False)
                          else OPERATIONS_NOT_REQUESTED)
    cache = broker.metadata_entries
    encode = _topic_encoder(ctx, response_cls)
    topics: tuple[Any, ...]
    if requested is None:
        # In cluster mode leaders move, so entries are encoded afresh (the cache is for the
        # single broker, whose entries change only with the topics).
        topics = (cache.every_topic(ctx.api_version, encode) if broker.leadership is None
                  else tuple(encode(name) for name in broker.topics.partition_counts()))
        if topic_operations != OPERATIONS_NOT_REQUESTED:
            topics = tuple(_with_operations(topic, topic_operations) for topic in topics)
    else:
        topics = tuple(_asked_topic(ctx, request, wanted, encode, topic_operations)
                       for wanted in requested)
    live, controller = _brokers(ctx)
    brokers = tuple(build(broker_cls, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                    for b in live)
    frame = build(response_cls, throttle_time=NO_THROTTLE, brokers=brokers,
                  cluster_id=broker.config.cluster_id, controller_id=controller, topics=(),
                  cluster_authorized_operations=cluster_operations)
    return MetadataAnswer(frame, topics,
                          getattr(frame, "cluster_authorized_operations", None))


@handles(api_key=ApiKey.FIND_COORDINATOR, min_version=0, max_version=6)
async def find_coordinator(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    response_cls = response_type(ApiKey.FIND_COORDINATOR, ctx.api_version)
    key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))

    def answer(key: str) -> dict[str, Any]:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if key_type == GROUP_KEY_TYPE:
            # A group whose __consumer_offsets partition failed to load has no coordinator
            # (Kafka's answer for a partition that is offline); the message says why.
            failure = broker.coordinator.partition_failure(key)
        elif key_type == TRANSACTION_KEY_TYPE:
            # __transaction_state is created on this first use; Kafka's retriable answer with
            # the reason when it cannot be.
            failure = _transaction_coordinator_failure(broker)
        elif key_type == SHARE_KEY_TYPE and ctx.api_version >= SHARE_KEY_SINCE_VERSION:
            error, failure = _share_coordinator_failure(broker, key)
        else:
            # A share-partition key before v6, or a type Kafka does not know: INVALID_REQUEST,
            # with no text from v4 for the share type and INVALID_REQUEST's own text otherwise.
            error = ErrorCode.INVALID_REQUEST
            failure = ("" if key_type == SHARE_KEY_TYPE and ctx.api_version >= 4
                       else INVALID_REQUEST_TEXT)
        if failure is None and key_type == GROUP_KEY_TYPE and broker.leadership is not None:
            return _leased_coordinator(broker.leadership, OFFSETS_TOPIC,
                                       broker.coordinator.shard.partition_of(key),
                                       ctx.api_version)
        if failure is None and key_type == TRANSACTION_KEY_TYPE and broker.leadership is not None:
            return _leased_coordinator(broker.leadership, TRANSACTION_STATE_TOPIC,
                                       broker.transactions.coordinator.partition_of(key),
                                       ctx.api_version)
        if failure is None and key_type == SHARE_KEY_TYPE and broker.leadership is not None:
            group_id, topic_id, partition = parse_coordinator_key(key)
            return _leased_coordinator(broker.leadership, SHARE_STATE_TOPIC,
                                       broker.share_state.shard.partition_of(
                                           (group_id, topic_id, partition)),
                                       ctx.api_version)
        if failure is None:
            # Kafka's text for success: the error's name before batching (v1-v3), empty after.
            host, port = advertised(ctx)
            return {"node_id": broker.node_id, "host": host,
                    "port": port, "error_code": kio_error(ErrorCode.NONE),
                    "error_message": "NONE" if ctx.api_version < 4 else ""}
        return {"node_id": -1, "host": "", "port": -1, "error_code": kio_error(error),
                "error_message": failure}

    if ctx.api_version < 4:
        return build(response_cls, throttle_time=NO_THROTTLE, **answer(request.key))
    coordinator_cls = sibling(response_cls, "Coordinator")
    coordinators = tuple(build(coordinator_cls, key=key, **answer(key))
                         for key in request.coordinator_keys)
    return build(response_cls, throttle_time=NO_THROTTLE, coordinators=coordinators)


def _transaction_coordinator_failure(broker: HandlerServices) -> str | None:
    """Why no broker can coordinate transactional ids (__transaction_state could not be
    created), None when they can."""
    try:
        broker.transactions.ensure_topic()
    except OSError as exc:
        return f"__transaction_state could not be created: {exc}"
    return None


def _share_coordinator_failure(broker: HandlerServices, key: str
                               ) -> tuple[ErrorCode, str | None]:
    """Kafka's answer for a share-partition key: INVALID_REQUEST (no text) when it names no
    share-partition; else __share_group_state is created on this first use and this broker
    coordinates it (COORDINATOR_NOT_AVAILABLE when it cannot be created; in a cluster the
    leader of the key's partition does)."""
    try:
        parse_coordinator_key(key)
    except ValueError:
        return ErrorCode.INVALID_REQUEST, ""
    refused = broker.share_state.refusal(create_topic=True)
    if refused is not None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, ""
    return ErrorCode.NONE, None


def _leased_coordinator(view: LeadershipView, topic: str, partition: int, version: int
                        ) -> dict[str, Any]:
    """A group's, transactional id's or share-partition's coordinator in cluster mode: the
    leader of its `__consumer_offsets`, `__transaction_state` or `__share_group_state`
    partition, or COORDINATOR_NOT_AVAILABLE
    (retriable) while that partition has none."""
    leader = view.leader(topic, partition)
    endpoint = view.endpoint(leader.node_id) if leader is not None else None
    if endpoint is None:
        return {"node_id": -1, "host": "", "port": -1,
                "error_code": kio_error(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "error_message": f"{topic}-{partition} has no leader yet"}
    return {"node_id": endpoint.node_id, "host": endpoint.host, "port": endpoint.port,
            "error_code": kio_error(ErrorCode.NONE),
            "error_message": "NONE" if version < 4 else ""}


BROKERS_ENDPOINT_TYPE = 1  # DescribeCluster's endpoint_type for brokers (2: controllers)
UNSUPPORTED_ENDPOINT_TYPE = 119  # Kafka's error code; nothing else in kgroups answers it


@handles(api_key=ApiKey.DESCRIBE_CLUSTER, min_version=0, max_version=2)
async def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    """The brokers and the controller id as Metadata lists them; a request for controller
    endpoints (v1+) gets Kafka's UNSUPPORTED_ENDPOINT_TYPE, as a broker answers it."""
    response_cls = response_type(ApiKey.DESCRIBE_CLUSTER, ctx.api_version)
    broker_cls = sibling(response_cls, "DescribeClusterBroker")
    endpoint_type = int(getattr(request, "endpoint_type", BROKERS_ENDPOINT_TYPE))
    operations = (all_operations(ResourceType.CLUSTER)
                  if request.include_cluster_authorized_operations
                  else OPERATIONS_NOT_REQUESTED)
    common = {"throttle_time": NO_THROTTLE, "endpoint_type": i8(endpoint_type),
              "cluster_id": ctx.broker.config.cluster_id,
              "cluster_authorized_operations": operations}
    if endpoint_type != BROKERS_ENDPOINT_TYPE:
        return build(response_cls, error_code=kio_error(UNSUPPORTED_ENDPOINT_TYPE),
                     error_message="The request was sent to an endpoint of type BROKER, but "
                                   f"we wanted an endpoint of type {endpoint_type}",
                     controller_id=-1, brokers=(), **common)
    live, controller = _brokers(ctx)
    brokers = tuple(build(broker_cls, broker_id=b.node_id, host=b.host, port=b.port,
                          rack=b.rack, is_fenced=False) for b in live)
    return build(response_cls, error_code=kio_error(ErrorCode.NONE), error_message=None,
                 controller_id=controller, brokers=brokers, **common)


@handles(api_key=ApiKey.INIT_PRODUCER_ID, min_version=0, max_version=5)
async def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.INIT_PRODUCER_ID, ctx.api_version)
    if request.transactional_id is not None:
        return await init_transactional(ctx, request)
    try:
        producer_id = ctx.broker.producer_ids.next_id()
    except OSError as exc:  # a cluster's store could not hand out a block: a retriable error
        log_event(logger, logging.WARNING, "producer_id_block_unavailable", error=exc)
        return build(response_cls, throttle_time=NO_THROTTLE,
                     error_code=kio_error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                     producer_id=-1, producer_epoch=-1)
    return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(ErrorCode.NONE),
                 producer_id=producer_id, producer_epoch=0)


def install(registry: HandlerRegistry) -> None:
    for handler in (api_versions, metadata, find_coordinator, describe_cluster,
                    init_producer_id):
        registry.register(handler)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.METADATA)
async def _authorize_metadata(ctx: RequestContext, request: Any, inner: authz.Inner,
                              check: authz.Check) -> Any:
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

    passed, denied = authz.split(asked, allowed)
    response = await inner(ctx, dataclasses.replace(request, topics=passed))
    # v0 reads an empty list as every topic: when all named ones were denied, only the
    # brokers of that answer are wanted.
    kept = () if not passed and ctx.api_version == 0 else tuple(
        t for t in response.topics if t.name is None or check.topic(Operation.DESCRIBE, t.name))
    denied_topics = tuple(authz.nested(
        ctx, "MetadataResponseTopic", error_code=kio_error(authz.TOPIC_DENIED), name=t.name,
        topic_id=None, is_internal=False, partitions=(),
        topic_authorized_operations=OPERATIONS_NOT_REQUESTED) for t in denied)
    return _metadata_operations(check, response, kept + denied_topics)


def _metadata_operations(check: authz.Check, response: Any, topics: tuple[Any, ...]) -> Any:
    """The Metadata answer with these topics and its operations narrowed to the principal."""
    cluster = getattr(response, "cluster_authorized_operations", None)
    if cluster is not None:
        response = dataclasses.replace(response, cluster_authorized_operations=check.operations(
            int(cluster), ResourceType.CLUSTER, CLUSTER_NAME))
    return dataclasses.replace(response, topics=tuple(
        check.with_topic_operations(t) for t in topics))


@authz.rule(ApiKey.FIND_COORDINATOR)
async def _authorize_find_coordinator(ctx: RequestContext, request: Any, inner: authz.Inner,
                                      check: authz.Check) -> Any:
    transactional = request_fields.coordinator_key_type(request) == TRANSACTION_KEY_TYPE
    kind = ResourceType.TRANSACTIONAL_ID if transactional else ResourceType.GROUP
    denied_error = authz.TXN_DENIED if transactional else authz.GROUP_DENIED
    denied = {"node_id": -1, "host": "", "port": -1, "error_code": kio_error(denied_error),
              "error_message": authz.MESSAGES[denied_error]}
    if ctx.api_version < 4:
        if check(Operation.DESCRIBE, kind, request.key):
            return await inner(ctx, request)
        return authz.response(ctx, **denied)
    keys = tuple(request.coordinator_keys)
    allowed, _ = authz.split(keys, lambda key: check(Operation.DESCRIBE, kind, key))
    answered = {}
    if allowed:
        inner_response = await inner(ctx, dataclasses.replace(request, coordinator_keys=allowed))
        answered = {c.key: c for c in inner_response.coordinators}
    coordinators = tuple(answered[key] if key in answered
                         else authz.nested(ctx, "Coordinator", key=key, **denied) for key in keys)
    return authz.response(ctx, coordinators=coordinators)


@authz.rule(ApiKey.DESCRIBE_CLUSTER)
async def _authorize_describe_cluster(ctx: RequestContext, request: Any, inner: authz.Inner,
                                      check: authz.Check) -> Any:
    """The brokers are anyone's to see, as Metadata lists them; the cluster's operations,
    when asked for, are narrowed to the principal's."""
    response = await inner(ctx, request)
    return dataclasses.replace(response, cluster_authorized_operations=check.operations(
        int(response.cluster_authorized_operations), ResourceType.CLUSTER, CLUSTER_NAME))


@authz.rule(ApiKey.INIT_PRODUCER_ID)
async def _authorize_init_producer_id(ctx: RequestContext, request: Any, inner: authz.Inner,
                                      check: authz.Check) -> Any:
    if request.transactional_id is not None:
        ok = check(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        error = authz.TXN_DENIED
    else:
        ok = check.cluster(Operation.IDEMPOTENT_WRITE) or check.authorizer.allowed_on_any(
            check.principal, check.host, Operation.WRITE, ResourceType.TOPIC)
        error = authz.CLUSTER_DENIED
    if ok:
        return await inner(ctx, request)
    return authz.response(ctx, error_code=kio_error(error), producer_id=-1, producer_epoch=-1)
