"""DescribeConfigs for topics: the settings kgroups honours per topic, with where each comes from.

Kafka's tools ask for them (`kafka-topics --describe` prints a topic's non-default settings and
fails when the broker cannot answer), so a topic's `retention.ms` set at CreateTopics shows up as
it does on Kafka. Only topic resources are described: kgroups has no dynamic broker, logger,
client-metrics or group configs, and says so per resource rather than answering with nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kgroups.broker.api import HandlerRegistry, RequestContext, handles
from kgroups.broker.cluster_handlers import NO_THROTTLE
from kgroups.broker.topics import TopicCatalog
from kgroups.broker.wire import build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

TOPIC_RESOURCE = 2
# Kafka's DescribeConfigsResponse.ConfigSource values.
TOPIC_CONFIG_SOURCE = 1
DEFAULT_CONFIG_SOURCE = 5
# Kafka's ConfigDef types, as DescribeConfigs v3+ reports them.
_CONFIG_TYPES = {"cleanup.policy": 7, "segment.bytes": 3, "index.interval.bytes": 3}
_LONG_TYPE = 5


def topic_config_entries(topics: TopicCatalog, topic: str) -> list[tuple[str, str, int]]:
    """(name, value, Kafka config source) of every topic setting kgroups honours."""
    return [(name, value, TOPIC_CONFIG_SOURCE if own else DEFAULT_CONFIG_SOURCE)
            for name, value, own in topics.config_entries(topic)]


def _describe_topic(ctx: RequestContext, entry_cls: type[Any], name: str,
                    keys: Sequence[str] | None) -> tuple[ErrorCode, str | None, tuple[Any, ...]]:
    if ctx.broker.topics.partition_count(name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.", ()
    entries = tuple(
        build(entry_cls, name=key, value=value, read_only=False, config_source=source,
              is_sensitive=False, synonyms=(), config_type=_CONFIG_TYPES.get(key, _LONG_TYPE),
              documentation=None)
        for key, value, source in topic_config_entries(ctx.broker.topics, name)
        if keys is None or key in keys)
    return ErrorCode.NONE, None, entries


@handles(api_key=32, min_version=1, max_version=4)
async def describe_configs(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(32, ctx.api_version)
    result_cls = sibling(response_cls, "DescribeConfigsResult")
    entry_cls = sibling(response_cls, "DescribeConfigsResourceResult")
    results = []
    for resource in request.resources:
        if int(resource.resource_type) == TOPIC_RESOURCE:
            error, message, entries = _describe_topic(
                ctx, entry_cls, resource.resource_name, resource.configuration_keys)
        else:
            error, message, entries = (
                ErrorCode.INVALID_REQUEST,
                f"kgroups describes topic configs only, not resource type "
                f"{int(resource.resource_type)}", ())
        results.append(build(result_cls, error_code=kio_error(error), error_message=message,
                             resource_type=resource.resource_type,
                             resource_name=resource.resource_name, configs=entries))
    return build(response_cls, throttle_time=NO_THROTTLE, results=tuple(results))


def install(registry: HandlerRegistry) -> None:
    registry.register(describe_configs)
