"""DescribeConfigs and IncrementalAlterConfigs: topic settings, and the broker's own.

Kafka's tools ask for them (`kafka-topics --describe` prints a topic's non-default settings and
fails when the broker cannot answer; `kafka-configs --describe` prints each setting's synonyms,
the broker settings it falls back to), so a topic's `retention.ms` set at CreateTopics or with
`kafka-configs --alter` shows up as it does on Kafka, and survives a restart as there.

Broker resources are described (the settings given at start-up, as Kafka's static broker
configs) but not altered: kgroups has no dynamic broker configs, and says so per resource
rather than storing a setting it would not apply. Logger, client-metrics and group configs are
refused the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kgroups.broker.api import HandlerRegistry, RequestContext, handles
from kgroups.broker.cluster_handlers import NO_THROTTLE
from kgroups.broker.events import log_event
from kgroups.broker.kafka_settings import kafka_settings
from kgroups.broker.topic_configs import (
    KAFKA_BROKER_DEFAULTS,
    TOPIC_SETTINGS,
    ConfigChange,
    InvalidRequestError,
    TopicConfigError,
    apply_changes,
    check_shape,
    topic_log_config,
)
from kgroups.broker.topics import TopicCatalog
from kgroups.broker.wire import build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

logger = logging.getLogger("kgroups.configs")

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
# Kafka's DescribeConfigsResponse.ConfigSource values.
TOPIC_CONFIG_SOURCE = 1
STATIC_BROKER_CONFIG_SOURCE = 4
DEFAULT_CONFIG_SOURCE = 5
# Kafka's ConfigDef types, as DescribeConfigs v3+ reports them.
_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
             "LIST": 7, "CLASS": 8, "PASSWORD": 9}
_UNKNOWN_TYPE = 0

Synonym = tuple[str, str, int]  # name, value, config source


def topic_config_entries(topics: TopicCatalog, topic: str) -> list[tuple[str, str, int]]:
    """(name, value, Kafka config source) of every topic setting kgroups honours."""
    return [(name, value, TOPIC_CONFIG_SOURCE if own else DEFAULT_CONFIG_SOURCE)
            for name, value, own in topics.config_entries(topic)]


def _broker_synonyms(ctx: RequestContext, topic_setting: str) -> list[Synonym]:
    """Kafka's order: every synonym given at start-up, then every one with a default, from
    the first that is the setting's own broker name (Kafka drops those before it)."""
    names = TOPIC_SETTINGS[topic_setting].broker_synonyms
    supplied = ctx.broker.config.supplied()
    found = [(n, supplied[n], STATIC_BROKER_CONFIG_SOURCE) for n in names if n in supplied]
    found += [(n, KAFKA_BROKER_DEFAULTS[n], DEFAULT_CONFIG_SOURCE)
              for n in names if n in KAFKA_BROKER_DEFAULTS]
    first = next((i for i, synonym in enumerate(found) if synonym[0] == names[0]), len(found))
    return found[first:]


def _describe_topic(ctx: RequestContext, entry_cls: type[Any], name: str,
                    keys: Sequence[str] | None, with_synonyms: bool,
                    ) -> tuple[ErrorCode, str | None, tuple[Any, ...]]:
    if ctx.broker.topics.partition_count(name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.", ()
    synonym_cls = sibling(entry_cls, "DescribeConfigsSynonym")
    entries = []
    for key, value, source in topic_config_entries(ctx.broker.topics, name):
        if keys is not None and key not in keys:
            continue
        synonyms: list[Synonym] = []
        if with_synonyms:
            synonyms = [(key, value, source)] if source == TOPIC_CONFIG_SOURCE else []
            synonyms += _broker_synonyms(ctx, key)
        entries.append(build(
            entry_cls, name=key, value=value, read_only=False, config_source=source,
            is_sensitive=False, config_type=_TYPE_IDS[TOPIC_SETTINGS[key].type],
            documentation=None, synonyms=tuple(
                synonym_cls(name=n, value=v, source=s) for n, v, s in synonyms)))
    return ErrorCode.NONE, None, tuple(entries)


def _broker_name_error(ctx: RequestContext, name: str) -> str | None:
    """Kafka's refusal of a broker resource that is neither this broker nor the cluster
    default (the empty name)."""
    if name in ("", str(ctx.broker.node_id)):
        return None
    return (f"Unexpected broker id, expected {ctx.broker.node_id} or empty string, but "
            f"received {name}")


def _describe_broker(ctx: RequestContext, entry_cls: type[Any], name: str,
                     keys: Sequence[str] | None, with_synonyms: bool,
                     ) -> tuple[ErrorCode, str | None, tuple[Any, ...]]:
    """The settings given at start-up, as Kafka's static broker configs; the cluster default
    (empty name) has none, as kgroups has no dynamic defaults."""
    problem = _broker_name_error(ctx, name)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem, ()
    synonym_cls = sibling(entry_cls, "DescribeConfigsSynonym")
    supplied = ctx.broker.config.supplied() if name else {}
    known = kafka_settings()
    entries = tuple(
        build(entry_cls, name=key, value=value, read_only=True,
              config_source=STATIC_BROKER_CONFIG_SOURCE, is_sensitive=False,
              config_type=_TYPE_IDS.get(known[key].type, _UNKNOWN_TYPE) if key in known
              else _UNKNOWN_TYPE, documentation=None,
              synonyms=(synonym_cls(name=key, value=value, source=STATIC_BROKER_CONFIG_SOURCE),)
              if with_synonyms else ())
        for key, value in sorted(supplied.items()) if keys is None or key in keys)
    return ErrorCode.NONE, None, entries


@handles(api_key=32, min_version=1, max_version=4)
async def describe_configs(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(32, ctx.api_version)
    result_cls = sibling(response_cls, "DescribeConfigsResult")
    entry_cls = sibling(response_cls, "DescribeConfigsResourceResult")
    results = []
    for resource in request.resources:
        kind = int(resource.resource_type)
        if kind in (TOPIC_RESOURCE, BROKER_RESOURCE):
            describe = _describe_topic if kind == TOPIC_RESOURCE else _describe_broker
            error, message, entries = describe(
                ctx, entry_cls, resource.resource_name, resource.configuration_keys,
                bool(request.include_synonyms))
        else:
            error, message, entries = (
                ErrorCode.INVALID_REQUEST,
                f"kgroups describes topic and broker configs only, not resource type {kind}", ())
        results.append(build(result_cls, error_code=kio_error(error), error_message=message,
                             resource_type=resource.resource_type,
                             resource_name=resource.resource_name, configs=entries))
    return build(response_cls, throttle_time=NO_THROTTLE, results=tuple(results))


def _alter_topic(ctx: RequestContext, name: str, changes: list[ConfigChange],
                 validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Kafka's order: the request's shape, the topic's existence, then the settings."""
    topics = ctx.broker.topics
    try:
        check_shape(changes)
    except InvalidRequestError as exc:
        return ErrorCode.INVALID_REQUEST, str(exc)
    if topics.partition_count(name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
    try:
        overrides = apply_changes(topics.overrides(name), changes)
        topic_log_config(ctx.broker.log_config, overrides)
        if not validate_only:
            topics.set_overrides(name, overrides)
    except TopicConfigError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    except OSError as exc:
        return ErrorCode.KAFKA_STORAGE_ERROR, f"topic settings could not be written: {exc}"
    if not validate_only:
        log_event(logger, logging.INFO, "topic_configs_altered", topic=name,
                  client=ctx.client_id, **overrides)
    return ErrorCode.NONE, None


def _alter_broker(ctx: RequestContext, name: str,
                  changes: list[ConfigChange]) -> tuple[ErrorCode, str]:
    try:
        check_shape(changes)
    except InvalidRequestError as exc:
        return ErrorCode.INVALID_REQUEST, str(exc)
    problem = _broker_name_error(ctx, name)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem
    names = ", ".join(change.name for change in changes)
    return (ErrorCode.INVALID_REQUEST,
            f"kgroups has no dynamic broker configs; set [{names}] at start-up "
            "(kgroups serve --override NAME=VALUE)")


@handles(api_key=44, min_version=0, max_version=1)
async def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(44, ctx.api_version)
    result_cls = sibling(response_cls, "AlterConfigsResourceResponse")
    seen: dict[tuple[int, str], int] = {}
    for resource in request.resources:
        key = (int(resource.resource_type), resource.resource_name)
        seen[key] = seen.get(key, 0) + 1
    results = []
    for resource in request.resources:
        kind, name = int(resource.resource_type), resource.resource_name
        changes = [ConfigChange(c.name, int(c.config_operation), c.value)
                   for c in resource.configs]
        error: ErrorCode
        message: str | None
        if seen[(kind, name)] > 1:
            error, message = ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
        elif kind == TOPIC_RESOURCE:
            error, message = _alter_topic(ctx, name, changes, bool(request.validate_only))
        elif kind == BROKER_RESOURCE:
            error, message = _alter_broker(ctx, name, changes)
        else:
            error, message = (ErrorCode.INVALID_REQUEST,
                              f"kgroups alters topic configs only, not resource type {kind}")
        results.append(build(result_cls, error_code=kio_error(error), error_message=message,
                             resource_type=resource.resource_type, resource_name=name))
    return build(response_cls, throttle_time=NO_THROTTLE, responses=tuple(results))


def install(registry: HandlerRegistry) -> None:
    registry.register(describe_configs)
    registry.register(incremental_alter_configs)
