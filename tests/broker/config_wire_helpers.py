"""IncrementalAlterConfigs, AlterConfigs and DescribeConfigs (with synonyms) as plain values,
for the topic settings tests here and their comparison with Kafka in tests/tools."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.alter_configs.v0 import request as legacy_alter_v0
from kio.schema.alter_configs.v2 import request as legacy_alter_v2
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.incremental_alter_configs.v1 import request as alter_configs

from kgroups.errors import ErrorCode


def alter(client: Any, *resources: tuple[int, str, list[tuple[str, int, str | None]]],
          validate_only: bool = False) -> list[tuple[int, str | None]]:
    response = client.call(alter_configs.IncrementalAlterConfigsRequest(
        validate_only=validate_only, resources=tuple(
            alter_configs.AlterConfigsResource(
                resource_type=kind, resource_name=name, configs=tuple(
                    alter_configs.AlterableConfig(name=key, config_operation=op, value=value)
                    for key, op, value in changes))
            for kind, name, changes in resources)))
    return [(int(r.error_code), r.error_message) for r in response.responses]


def describe(client: Any, kind: int, name: str,
             known_within: float = 0.0) -> dict[str, tuple[str, int, list[str]]]:
    """name -> (value, source, synonyms as SOURCE_ID:name=value). With `known_within`, asks
    again for that many seconds while the broker does not know the topic yet: Kafka's broker
    answers from its metadata image, which takes a topic the controller just created a moment
    later (kgroups knows it once CreateTopics has answered)."""
    deadline = time.monotonic() + known_within
    while True:
        response = client.call(describe_configs.DescribeConfigsRequest(
            resources=(describe_configs.DescribeConfigsResource(
                resource_type=kind, resource_name=name, configuration_keys=None),),
            include_synonyms=True, include_documentation=False))
        (result,) = response.results
        if result.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION \
                or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert result.error_code == ErrorCode.NONE, result.error_message
    return {c.name: (c.value, int(c.config_source),
                     [f"{int(s.source)}:{s.name}={s.value}" for s in c.synonyms])
            for c in result.configs}


def alter_legacy(client: Any, *resources: tuple[int, str, list[tuple[str, str | None]]],
                 validate_only: bool = False, version: int = 2) -> list[tuple[int, str | None]]:
    """The legacy AlterConfigs (API 33): each resource's whole set of settings."""
    schema = {0: legacy_alter_v0, 2: legacy_alter_v2}[version]
    response = client.call(schema.AlterConfigsRequest(
        validate_only=validate_only, resources=tuple(
            schema.AlterConfigsResource(
                resource_type=kind, resource_name=name, configs=tuple(
                    schema.AlterableConfig(name=key, value=value) for key, value in changes))
            for kind, name, changes in resources)))
    return [(int(r.error_code), r.error_message) for r in response.responses]


def own_settings(client: Any, topic: str) -> dict[str, str]:
    """The settings the topic sets itself (config source TOPIC_CONFIG)."""
    shown = describe(client, 2, topic, known_within=15)
    return {name: value for name, (value, source, _) in shown.items() if source == 1}
