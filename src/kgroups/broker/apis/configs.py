"""DescribeConfigs and IncrementalAlterConfigs: topic settings, and the broker's own.

Kafka's tools ask for them (`kafka-topics --describe` prints a topic's non-default settings and
fails when the broker cannot answer; `kafka-configs --describe` prints each setting's synonyms,
the broker settings it falls back to), so a topic's `retention.ms` set at CreateTopics or with
`kafka-configs --alter` shows up as it does on Kafka, and survives a restart as there.

Broker resources (this node, or the cluster default) are described layer by layer as Kafka
does, and the broker-wide defaults of the topic settings are altered dynamically
(dynamic_configs.py); a broker setting kgroups reads only at start-up is refused, naming where
to set it, rather than stored and not applied. Logger, client-metrics and group configs are
refused per resource.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.dynamic_configs import (
    CLUSTER_DEFAULT,
    DYNAMIC_SETTINGS,
    PER_BROKER,
    DynamicConfigError,
)
from kgroups.broker.events import log_event
from kgroups.broker.group_configs import GROUP_SETTINGS
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.security.sensitive_settings import (
    is_sensitive,
    overridden_setting,
    redacted,
    setting_type,
)
from kgroups.broker.topic_configs import (
    KAFKA_BROKER_DEFAULTS,
    SET,
    TOPIC_SETTINGS,
    ConfigChange,
    InvalidRequestError,
    TopicConfigError,
    apply_changes,
    check_shape,
    topic_log_config,
)
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

logger = logging.getLogger("kgroups.configs")

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32
# Kafka's DescribeConfigsResponse.ConfigSource values.
TOPIC_CONFIG_SOURCE = 1
DYNAMIC_BROKER_CONFIG_SOURCE = 2
DYNAMIC_DEFAULT_BROKER_CONFIG_SOURCE = 3
STATIC_BROKER_CONFIG_SOURCE = 4
DEFAULT_CONFIG_SOURCE = 5
# Kafka's ConfigDef types, as DescribeConfigs v3+ reports them.
_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
             "LIST": 7, "CLASS": 8, "PASSWORD": 9}
_UNKNOWN_TYPE = 0

Synonym = tuple[str, str, int]  # name, value, config source


def topic_config_entries(ctx: RequestContext, topic: str) -> list[tuple[str, str, int]]:
    """(name, value, Kafka config source) of every topic setting: the topic's own value, else
    the broker's (its first broker synonym set), else Kafka's default."""
    entries = []
    for name, value, own in ctx.broker.topics.config_entries(topic):
        if own:
            entries.append((name, str(value), TOPIC_CONFIG_SOURCE))
            continue
        broker_side = _synonyms(ctx, TOPIC_SETTINGS[name].broker_synonyms)
        source = broker_side[0][2] if broker_side else DEFAULT_CONFIG_SOURCE
        if value is None:
            value = broker_side[0][1] if broker_side else TOPIC_SETTINGS[name].default
        entries.append((name, value, source))
    return entries


def _synonyms(ctx: RequestContext, names: Sequence[str]) -> list[Synonym]:
    """Kafka's order: each of `names` set dynamically for this broker, then as the cluster
    default, then given at start-up, then Kafka's default; from the first of them that is
    `names[0]` on (Kafka drops those before it)."""
    layers = ctx.broker.dynamic_configs.layers
    sources = ((layers[PER_BROKER], DYNAMIC_BROKER_CONFIG_SOURCE),
               (layers[CLUSTER_DEFAULT], DYNAMIC_DEFAULT_BROKER_CONFIG_SOURCE),
               (ctx.broker.config.supplied(), STATIC_BROKER_CONFIG_SOURCE),
               (KAFKA_BROKER_DEFAULTS, DEFAULT_CONFIG_SOURCE))
    found = [(n, values[n], source) for values, source in sources for n in names if n in values]
    first = next((i for i, synonym in enumerate(found) if synonym[0] == names[0]), len(found))
    return found[first:]


def _broker_names(name: str) -> tuple[str, ...]:
    """A broker setting and those it stands for (log.retention.ms: also .minutes, .hours; a
    listener override: the setting it overrides)."""
    overridden = overridden_setting(name)
    if overridden is not None:
        return name, overridden
    return next((s.broker_synonyms for s in TOPIC_SETTINGS.values()
                 if s.broker_synonyms[:1] == (name,)), (name,))


def _describe_topic(ctx: RequestContext, entry_cls: type[Any], name: str,
                    keys: Sequence[str] | None, with_synonyms: bool,
                    ) -> tuple[ErrorCode, str | None, tuple[Any, ...]]:
    if ctx.broker.topics.partition_count(name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.", ()
    synonym_cls = sibling(entry_cls, "DescribeConfigsSynonym")
    entries = []
    for key, value, source in topic_config_entries(ctx, name):
        if keys is not None and key not in keys:
            continue
        broker_side = _synonyms(ctx, TOPIC_SETTINGS[key].broker_synonyms)
        synonyms: list[Synonym] = []
        if with_synonyms:
            synonyms = [(key, value, source)] if source == TOPIC_CONFIG_SOURCE else []
            synonyms += broker_side
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
    """This broker: the dynamic settings and those given at start-up, each from the layer it
    comes from. The cluster default (empty name): its dynamic settings, with only their
    dynamic-default synonyms, as Kafka describes it."""
    problem = _broker_name_error(ctx, name)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem, ()
    synonym_cls = sibling(entry_cls, "DescribeConfigsSynonym")
    layers = ctx.broker.dynamic_configs.layers
    if name:
        shown = {**{k: (v, STATIC_BROKER_CONFIG_SOURCE)
                    for k, v in ctx.broker.config.supplied().items()},
                 **{k: (v, DYNAMIC_DEFAULT_BROKER_CONFIG_SOURCE)
                    for k, v in layers[CLUSTER_DEFAULT].items()},
                 **{k: (v, DYNAMIC_BROKER_CONFIG_SOURCE) for k, v in layers[PER_BROKER].items()}}
    else:
        shown = {k: (v, DYNAMIC_DEFAULT_BROKER_CONFIG_SOURCE)
                 for k, v in layers[CLUSTER_DEFAULT].items()}
    entries = []
    for key, (value, source) in sorted(shown.items()):
        if keys is not None and key not in keys:
            continue
        synonyms = _synonyms(ctx, _broker_names(key)) if with_synonyms else []
        if not name:
            synonyms = [s for s in synonyms if s[2] == DYNAMIC_DEFAULT_BROKER_CONFIG_SOURCE]
        # A secret's value, and its synonyms', is never answered (sensitive_settings.py).
        secret, kind = is_sensitive(key), setting_type(key)
        entries.append(build(
            entry_cls, name=key, value=None if secret else value,
            read_only=key not in DYNAMIC_SETTINGS, config_source=source, is_sensitive=secret,
            documentation=None,
            config_type=_TYPE_IDS.get(kind or "", _UNKNOWN_TYPE),
            synonyms=tuple(synonym_cls(name=n, value=None if secret else v, source=src)
                           for n, v, src in synonyms)))
    return ErrorCode.NONE, None, tuple(entries)


def _describe_group(ctx: RequestContext, entry_cls: type[Any], name: str,
                    keys: Sequence[str] | None, with_synonyms: bool,
                    ) -> tuple[ErrorCode, str | None, tuple[Any, ...]]:
    """Any group, existing or not, as Kafka answers: the broker's group settings (kgroups
    keeps none per group), from start-up or Kafka's defaults."""
    synonym_cls = sibling(entry_cls, "DescribeConfigsSynonym")
    supplied = ctx.broker.config.supplied()
    entries = []
    for key, setting in GROUP_SETTINGS.items():
        if keys is not None and key not in keys:
            continue
        synonyms: list[Synonym] = [(setting.broker_synonym, setting.default,
                                    DEFAULT_CONFIG_SOURCE)]
        if setting.broker_synonym in supplied:
            synonyms.insert(0, (setting.broker_synonym, supplied[setting.broker_synonym],
                                STATIC_BROKER_CONFIG_SOURCE))
        _, value, source = synonyms[0]
        entries.append(build(
            entry_cls, name=key, value=value, read_only=False, config_source=source,
            is_sensitive=False, config_type=_TYPE_IDS[setting.type], documentation=None,
            synonyms=tuple(synonym_cls(name=n, value=v, source=s)
                           for n, v, s in (synonyms if with_synonyms else []))))
    return ErrorCode.NONE, None, tuple(entries)


@handles(api_key=ApiKey.DESCRIBE_CONFIGS, min_version=1, max_version=4)
async def describe_configs(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.DESCRIBE_CONFIGS, ctx.api_version)
    result_cls = sibling(response_cls, "DescribeConfigsResult")
    entry_cls = sibling(response_cls, "DescribeConfigsResourceResult")
    results = []
    for resource in request.resources:
        kind = int(resource.resource_type)
        describe = {TOPIC_RESOURCE: _describe_topic, BROKER_RESOURCE: _describe_broker,
                    GROUP_RESOURCE: _describe_group}.get(kind)
        if describe is not None:
            error, message, entries = describe(
                ctx, entry_cls, resource.resource_name, resource.configuration_keys,
                bool(request.include_synonyms))
        else:
            error, message, entries = (
                ErrorCode.INVALID_REQUEST,
                f"kgroups describes topic, broker and group configs only, not resource type "
                f"{kind}", ())
        results.append(build(result_cls, error_code=kio_error(error), error_message=message,
                             resource_type=resource.resource_type,
                             resource_name=resource.resource_name, configs=entries))
    return build(response_cls, throttle_time=NO_THROTTLE, results=tuple(results))


def _alter_topic(ctx: RequestContext, name: str, changes: list[ConfigChange],
                 validate_only: bool, replace: bool) -> tuple[ErrorCode, str | None]:
    """Kafka's order: the request's shape, the topic's existence, then the settings (with
    `replace`, `changes` are the topic's whole new set)."""
    topics = ctx.broker.topics
    try:
        check_shape(changes)
    except InvalidRequestError as exc:
        return ErrorCode.INVALID_REQUEST, str(exc)
    if topics.partition_count(name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
    try:
        overrides = apply_changes({} if replace else topics.overrides(name), changes)
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


def _alter_broker(ctx: RequestContext, name: str, changes: list[ConfigChange],
                  validate_only: bool, replace: bool) -> tuple[ErrorCode, str | None]:
    """This broker's own layer or the cluster default (empty name), `changes` applied to it
    (with `replace`: made of them alone): saved, then every topic's log settings rebuilt on
    the new broker-wide ones."""
    try:
        check_shape(changes)
    except InvalidRequestError as exc:
        return ErrorCode.INVALID_REQUEST, str(exc)
    problem = _broker_name_error(ctx, name)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem
    scope = PER_BROKER if name else CLUSTER_DEFAULT
    dynamic = ctx.broker.dynamic_configs
    try:
        layer = dynamic.changed(scope, changes, replace=replace)
    except DynamicConfigError as exc:
        return ErrorCode(exc.error_code), str(exc)
    if validate_only:
        return ErrorCode.NONE, None
    try:
        dynamic.replace(scope, layer)
    except OSError as exc:
        return ErrorCode.KAFKA_STORAGE_ERROR, f"broker settings could not be written: {exc}"
    ctx.broker.log_config = dynamic.log_config()
    ctx.broker.topics.rebase(ctx.broker.log_config)
    log_event(logger, logging.INFO, "broker_configs_altered", scope=scope,
              client=ctx.client_id, **redacted(layer))
    return ErrorCode.NONE, None


def _alter_resources(ctx: RequestContext, request: Any, legacy: bool) -> Any:
    """Each resource's answer, resources named twice refused (Kafka would apply one of them
    twice)."""
    response_cls = response_type(ctx.api_key, ctx.api_version)
    result_cls = sibling(response_cls, "AlterConfigsResourceResponse")
    seen: dict[tuple[int, str], int] = {}
    for resource in request.resources:
        key = (int(resource.resource_type), resource.resource_name)
        seen[key] = seen.get(key, 0) + 1
    results = []
    for resource in request.resources:
        kind, name = int(resource.resource_type), resource.resource_name
        changes = [ConfigChange(c.name, SET if legacy else int(c.config_operation), c.value)
                   for c in resource.configs]
        error: ErrorCode
        message: str | None
        if seen[(kind, name)] > 1:
            error, message = ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
        elif kind == TOPIC_RESOURCE:
            error, message = _alter_topic(ctx, name, changes, bool(request.validate_only),
                                          replace=legacy)
        elif kind == BROKER_RESOURCE:
            error, message = _alter_broker(ctx, name, changes, bool(request.validate_only),
                                           replace=legacy)
        elif kind == GROUP_RESOURCE:
            error, message = (ErrorCode.INVALID_REQUEST,
                              "kgroups keeps no per-group settings; every group uses the "
                              "broker's group.* settings (kgroups serve --override NAME=VALUE)")
        else:
            error, message = (ErrorCode.INVALID_REQUEST,
                              f"kgroups alters topic and broker configs only, not resource "
                              f"type {kind}")
        results.append(build(result_cls, error_code=kio_error(error), error_message=message,
                             resource_type=resource.resource_type, resource_name=name))
    return build(response_cls, throttle_time=NO_THROTTLE, responses=tuple(results))


@handles(api_key=ApiKey.INCREMENTAL_ALTER_CONFIGS, min_version=0, max_version=1)
async def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    """Each named setting set, deleted, appended to or subtracted from."""
    return _alter_resources(ctx, request, legacy=False)


@handles(api_key=ApiKey.ALTER_CONFIGS, min_version=0, max_version=2)
async def alter_configs(ctx: RequestContext, request: Any) -> Any:
    """The legacy AlterConfigs (clients' admin APIs still send it): as on Kafka, a resource's
    whole set of settings (a topic's own, or a broker layer's) is replaced by the given ones,
    so a setting not named is removed."""
    return _alter_resources(ctx, request, legacy=True)


def install(registry: HandlerRegistry) -> None:
    registry.register(describe_configs)
    registry.register(incremental_alter_configs)
    registry.register(alter_configs)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

# ConfigResource types: topic, broker, broker logger, client metrics, group.
_CONFIG_TOPIC, _CONFIG_GROUP = 2, 32
_CONFIG_CLUSTER_WIDE = frozenset({4, 8, 16})


def _config_denial(check: authz.Check, operation: Operation, resource: Any) -> ErrorCode | None:
    """Kafka's check of one config resource: the topic, the group, or the cluster."""
    kind, name = int(resource.resource_type), resource.resource_name
    if kind == _CONFIG_TOPIC:
        return None if check.topic(operation, name) else authz.TOPIC_DENIED
    if kind == _CONFIG_GROUP:
        return None if check.group(operation, name) else authz.GROUP_DENIED
    if kind in _CONFIG_CLUSTER_WIDE:
        return None if check.cluster(operation) else authz.CLUSTER_DENIED
    return None  # the handler refuses a type it does not know


async def _checked_resources(ctx: RequestContext, request: Any, inner: authz.Inner,
                             check: authz.Check, operation: Operation,
                             results: Callable[[Any], Iterable[Any]], entry_class: str,
                             **denied_extra: Any) -> tuple[Any, ...]:
    """Each resource's entry in request order: the handler's for the allowed ones (asked
    about those alone), a denied `entry_class` with the denial's error for the rest."""
    resources = tuple(request.resources)
    allowed = tuple(r for r in resources if _config_denial(check, operation, r) is None)
    answered: dict[tuple[int, str], Any] = {}
    if allowed:
        answered = {(int(r.resource_type), r.resource_name): r for r in results(await inner(
            ctx, dataclasses.replace(request, resources=allowed)))}
    entries = []
    for resource in resources:
        error = _config_denial(check, operation, resource)
        key = (int(resource.resource_type), resource.resource_name)
        entries.append(answered[key] if error is None and key in answered else authz.nested(
            ctx, entry_class, error_code=kio_error(error or ErrorCode.NONE),
            error_message=authz.MESSAGES.get(error) if error else None,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
            **denied_extra))
    return tuple(entries)


@authz.rule(ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
async def _authorize_alter_configs(ctx: RequestContext, request: Any, inner: authz.Inner,
                                   check: authz.Check) -> Any:
    return authz.response(ctx, responses=await _checked_resources(
        ctx, request, inner, check, Operation.ALTER_CONFIGS, lambda response: response.responses,
        "AlterConfigsResourceResponse"))


@authz.rule(ApiKey.DESCRIBE_CONFIGS)
async def _authorize_describe_configs(ctx: RequestContext, request: Any, inner: authz.Inner,
                                      check: authz.Check) -> Any:
    return authz.response(ctx, results=await _checked_resources(
        ctx, request, inner, check, Operation.DESCRIBE_CONFIGS, lambda response: response.results,
        "DescribeConfigsResult", configs=()))
