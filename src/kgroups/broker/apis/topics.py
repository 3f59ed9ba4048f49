"""CreateTopics, CreatePartitions and DeleteTopics, with Kafka's per-topic errors (one broker:
replication 1)."""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Any

from kgroups.broker import descriptors
from kgroups.broker.apis import request_fields
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.configs import TOPIC_CONFIG_SOURCE, topic_config_entries
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.events import log_event
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.topic_configs import TopicConfigError, topic_log_config
from kgroups.broker.topics import INTERNAL_TOPICS, topic_name_error
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import KAFKA_MESSAGES, ErrorCode

logger = logging.getLogger("kgroups.topics")

USE_BROKER_DEFAULT = -1
# Kafka's controller refuses a request that would write more than this many metadata records
# (a topic, each of its partitions, each of its configs) or add more partitions at once:
# POLICY_VIOLATION, with these messages (Kafka 4.3.1 on the wire). It also bounds what one
# request can make this broker open: each partition holds open files. Below that, a creation
# whose partitions would leave too few file descriptors is refused the same way (descriptors).
MAX_RECORDS_PER_REQUEST = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."


def _create_one(
    ctx: RequestContext, topic: Any, validate_only: bool
) -> tuple[ErrorCode, str | None, int]:
    broker = ctx.broker
    name_problem = topic_name_error(topic.name)
    if name_problem is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, name_problem, -1
    if broker.topics.partition_count(topic.name) is not None:
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.", -1
    colliding = broker.topics.collision(topic.name)
    if colliding is not None:
        return (ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{topic.name}' collides with existing topic: {colliding}", -1)
    replication = int(topic.replication_factor)
    # A cluster's copies are PostgreSQL's, but Kafka's rule stands: no more replicas than
    # live brokers (a client asking for 3 on a three-broker cluster is right).
    available = 1 if broker.leadership is None else len(broker.leadership.brokers())
    if replication != USE_BROKER_DEFAULT and not 1 <= replication <= available:
        return (ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication} larger than available brokers: "
                f"{available}.", -1)
    if topic.assignments:
        partitions = len(topic.assignments)
    elif int(topic.num_partitions) == USE_BROKER_DEFAULT:
        partitions = broker.config.num_partitions
    else:
        partitions = int(topic.num_partitions)
    if partitions < 1:
        return ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.", -1
    if partitions > MAX_RECORDS_PER_REQUEST:
        return ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS, -1
    configs = {entry.name: entry.value for entry in topic.configs if entry.value is not None}
    if 1 + partitions + len(configs) > MAX_RECORDS_PER_REQUEST:
        return ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS, -1
    try:
        topic_log_config(broker.log_config, configs)
    except TopicConfigError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc), -1
    no_room = descriptors.refusal(partitions)
    if no_room is not None:
        return ErrorCode.POLICY_VIOLATION, no_room, -1
    if not validate_only:
        try:
            error = broker.topics.create(topic.name, partitions, configs)
        except OSError as exc:  # the disk, or descriptors gone since the check: none created
            return ErrorCode.KAFKA_STORAGE_ERROR, str(exc), -1
        if error != ErrorCode.NONE:
            return error, None, -1
        log_event(logger, logging.INFO, "topic_created", topic=topic.name, partitions=partitions,
                  **configs)
    return ErrorCode.NONE, None, partitions


def _created_configs(ctx: RequestContext, config_cls: type[Any], topic: Any,
                     validate_only: bool) -> tuple[Any, ...]:
    """The new topic's settings (v5+): Kafka's admin client reads them on every success (a
    null list made it fail the creation with a NullPointerException)."""
    requested = {entry.name: entry.value for entry in topic.configs if entry.value is not None}
    entries = []
    for name, value, source in topic_config_entries(ctx, topic.name):
        if validate_only and name in requested:
            value, source = requested[name], TOPIC_CONFIG_SOURCE
        entries.append(build(config_cls, name=name, value=value, read_only=False,
                             config_source=source, is_sensitive=False))
    return tuple(entries)


@handles(api_key=ApiKey.CREATE_TOPICS, min_version=2, max_version=7)
async def create_topics(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.CREATE_TOPICS, ctx.api_version)
    result_cls = sibling(response_cls, "CreatableTopicResult")
    config_cls = getattr(sys.modules[response_cls.__module__], "CreatableTopicConfigs", None)
    results = []
    seen: set[str] = set()
    for topic in request.topics:
        message: str | None
        if topic.name in seen:
            error, message, partitions = (ErrorCode.INVALID_REQUEST,
                                          "Duplicate topic name in the request.", -1)
        else:
            error, message, partitions = _create_one(ctx, topic, request.validate_only)
        seen.add(topic.name)
        configs = None
        if config_cls is not None and error == ErrorCode.NONE:
            configs = _created_configs(ctx, config_cls, topic, request.validate_only)
        results.append(build(
            result_cls, name=topic.name, topic_id=None, error_code=kio_error(error),
            error_message=message, topic_config_error_code=0, num_partitions=partitions,
            replication_factor=1 if error == ErrorCode.NONE else -1, configs=configs,
        ))
    return build(response_cls, throttle_time=NO_THROTTLE, topics=tuple(results))


def _delete_one(ctx: RequestContext, name: str | None) -> tuple[ErrorCode, str | None]:
    if name is None:
        return ErrorCode.UNKNOWN_TOPIC_ID, "Deleting topics by id is not supported."
    if name in INTERNAL_TOPICS:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Topic '{name}' is internal."
    error = ctx.broker.topics.delete(name)
    if error == ErrorCode.NONE:
        log_event(logger, logging.INFO, "topic_deleted", topic=name)
        return error, None
    return error, KAFKA_MESSAGES[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


@handles(api_key=ApiKey.DELETE_TOPICS, min_version=1, max_version=6)
async def delete_topics(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.DELETE_TOPICS, ctx.api_version)
    result_cls = sibling(response_cls, "DeletableTopicResult")
    if ctx.api_version >= 6:
        targets = [(topic.name, topic.topic_id) for topic in request.topics]
    else:
        targets = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in targets:
        error, message = _delete_one(ctx, name)
        results.append(build(result_cls, name=name, topic_id=topic_id,
                             error_code=kio_error(error), error_message=message))
    return build(response_cls, throttle_time=NO_THROTTLE, responses=tuple(results))


def _grow_one(ctx: RequestContext, topic: Any, validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Kafka's checks for one topic of CreatePartitions: it exists, is not internal, the count
    is an increase of at most MAX_RECORDS_PER_REQUEST, and any explicit assignment names this
    broker once per new partition."""
    current = ctx.broker.topics.partition_count(topic.name)
    if current is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic.name}' does not exist."
    if topic.name in INTERNAL_TOPICS:
        return ErrorCode.INVALID_REQUEST, f"Cannot add partitions to internal topic {topic.name}."
    count = int(topic.count)
    if count == current:
        return ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
    if count < current:
        return (ErrorCode.INVALID_PARTITIONS, f"The topic {topic.name} currently has {current} "
                f"partition(s); {count} would not be an increase.")
    if count - current > MAX_RECORDS_PER_REQUEST:
        # Kafka 4.3.1 adds the first 10,000 and answers UNKNOWN_SERVER_ERROR
        # (docs/compatibility.md); kgroups refuses the request whole.
        return ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS
    if topic.assignments is not None:
        if len(topic.assignments) != count - current:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {count - current} "
                    f"additional partition(s), but only {len(topic.assignments)} assignment(s) "
                    "were specified.")
        node = ctx.broker.config.node_id
        if any(tuple(int(b) for b in a.broker_ids) != (node,) for a in topic.assignments):
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Each new partition must be assigned to broker {node}, the only one.")
    no_room = descriptors.refusal(count - current)
    if no_room is not None:
        return ErrorCode.POLICY_VIOLATION, no_room
    if not validate_only:
        try:
            ctx.broker.topics.add_partitions(topic.name, count)
        except OSError as exc:  # the disk, or descriptors gone since the check: none added
            return ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
        log_event(logger, logging.INFO, "partitions_added", topic=topic.name, partitions=count)
    return ErrorCode.NONE, None


@handles(api_key=ApiKey.CREATE_PARTITIONS, min_version=0, max_version=3)
async def create_partitions(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.CREATE_PARTITIONS, ctx.api_version)
    result_cls = sibling(response_cls, "CreatePartitionsTopicResult")
    names = [topic.name for topic in request.topics]
    results = []
    for topic in request.topics:
        message: str | None
        if names.count(topic.name) > 1:
            error, message = ErrorCode.INVALID_REQUEST, "Duplicate topic name."
        else:
            error, message = _grow_one(ctx, topic, request.validate_only)
        results.append(build(result_cls, name=topic.name, error_code=kio_error(error),
                             error_message=message))
    return build(response_cls, throttle_time=NO_THROTTLE, results=tuple(results))


def install(registry: HandlerRegistry) -> None:
    registry.register(create_topics)
    registry.register(create_partitions)
    registry.register(delete_topics)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.CREATE_TOPICS)
async def _authorize_create_topics(ctx: RequestContext, request: Any, inner: authz.Inner,
                                   check: authz.Check) -> Any:
    on_cluster = check.cluster(Operation.CREATE)
    topics, denied = await authz.answer_allowed_topics(
        ctx, request, inner, lambda t: on_cluster or check.topic(Operation.CREATE, t.name),
        lambda response: response.topics)
    return authz.response(ctx, topics=topics + tuple(authz.nested(
        ctx, "CreatableTopicResult", name=t.name, topic_id=None,
        error_code=kio_error(authz.TOPIC_DENIED), error_message="Authorization failed.",
        topic_config_error_code=kio_error(ErrorCode.NONE), num_partitions=-1,
        replication_factor=-1, configs=None) for t in denied))


@authz.rule(ApiKey.DELETE_TOPICS)
async def _authorize_delete_topics(ctx: RequestContext, request: Any, inner: authz.Inner,
                                   check: authz.Check) -> Any:
    names = request_fields.deleted_topic_names(request)
    if names is not None:  # v0-v5: names only
        allowed, denied = authz.split(names, lambda n: check.topic(Operation.DELETE, n))
        forward = dataclasses.replace(request, topic_names=allowed)
        denied_names = denied
    else:
        topics = ctx.broker.topics
        by_id = {topics.topic_id(name): name for name in topics.partition_counts()}
        allowed, denied = authz.split(request.topics, lambda t: check.topic(
            Operation.DELETE, t.name if t.name is not None else by_id.get(t.topic_id, "")))
        forward = dataclasses.replace(request, topics=allowed)
        denied_names = tuple(t.name for t in denied)
    results: tuple[Any, ...] = ()
    if allowed:
        results = tuple((await inner(ctx, forward)).responses)
    return authz.response(ctx, responses=results + tuple(authz.nested(
        ctx, "DeletableTopicResult", name=name, topic_id=None,
        error_code=kio_error(authz.TOPIC_DENIED), error_message=authz.MESSAGES[authz.TOPIC_DENIED])
        for name in denied_names))


@authz.rule(ApiKey.CREATE_PARTITIONS)
async def _authorize_create_partitions(ctx: RequestContext, request: Any, inner: authz.Inner,
                                       check: authz.Check) -> Any:
    results, denied = await authz.answer_allowed_topics(
        ctx, request, inner, lambda t: check.topic(Operation.ALTER, t.name),
        lambda response: response.results)
    return authz.response(ctx, results=results + tuple(authz.nested(
        ctx, "CreatePartitionsTopicResult", name=t.name, error_code=kio_error(authz.TOPIC_DENIED),
        error_message="The topic authorization is failed.") for t in denied))
