"""Differential: DescribeConfigs on a GROUP resource (librdkafka's 0081_admin asks for it)
answers as Kafka 4.3.1 does for a group without settings of its own: every group setting
Kafka defines, with the broker's value (one given at start-up, or Kafka's default), its type,
source and synonyms. kgroups keeps no per-group settings: altering one is refused with a
message saying where to set it (docs/compatibility.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from config_wire_helpers import alter, alter_legacy
from kio.schema.describe_configs.v4 import request as describe_v4
from tests.broker.security_helpers import running_broker
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker

from kgroups.broker.group_configs import GROUP_SETTINGS
from kgroups.broker.topic_configs import SET
from kgroups.errors import ErrorCode
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

GROUP = 32
SETTINGS = {**KAFKA_TEST_SETTINGS, "group.consumer.session.timeout.ms": "50000"}


def described(port: int) -> dict[str, Any]:
    with KafkaWireClient("127.0.0.1", port) as client:
        response = client.call(describe_v4.DescribeConfigsRequest(
            resources=(describe_v4.DescribeConfigsResource(
                resource_type=GROUP, resource_name="no-such-group", configuration_keys=None),),
            include_synonyms=True, include_documentation=False))
    (result,) = response.results
    assert int(result.error_code) == 0, result.error_message
    return {entry.name: (entry.value, int(entry.config_source), int(entry.config_type),
                         entry.is_sensitive, entry.read_only,
                         [(s.name, s.value, int(s.source)) for s in entry.synonyms])
            for entry in result.configs}


@pytest.fixture(scope="module")
def kafka_answer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-group-configs"), settings=SETTINGS)
    broker.start()
    try:
        yield described(broker.port)
    finally:
        broker.stop()


def test_group_described_as_kafka_does(kafka_answer: dict[str, Any],
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    with running_broker(tmp_path_factory.mktemp("kgroups-group-configs"), SETTINGS) as handle:
        kgroups_answer = described(handle.port)
        with KafkaWireClient("127.0.0.1", handle.port) as client:
            change = ("consumer.session.timeout.ms", "50000")
            refused = alter(client, (GROUP, "g", [(*change[:1], SET, change[1])])) + \
                alter_legacy(client, (GROUP, "g", [change]))
    assert kgroups_answer == kafka_answer
    assert set(kafka_answer) == set(GROUP_SETTINGS)
    assert kafka_answer["consumer.session.timeout.ms"][:2] == ("50000", 4)
    assert [code for code, _ in refused] == [ErrorCode.INVALID_REQUEST] * 2
    assert all("group.* settings" in str(message) for _, message in refused)
