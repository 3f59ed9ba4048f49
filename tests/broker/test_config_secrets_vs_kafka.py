"""Differential: Kafka 4.3.1 and kgroups started with the same secrets (ssl.key.password, a
listener's PLAIN JAAS text, a listener override of a password, names neither can type) describe
them alike: null values marked sensitive, their synonyms null, the same types and sources, at
DescribeConfigs v1 and v4 (tests/broker/test_config_secrets.py walks every password setting on
kgroups alone)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v4 import request as describe_v4
from tests.broker.security_helpers import jaas_users, running_broker
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker

from kgroups.tools.wire_client import KafkaWireClient

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SECRETS = {
    "ssl.key.password": "key-pw-0x61",
    "ssl.keystore.password": "keystore-pw-0x62",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas_users(
        alice="alice-pw-0x63", admin="admin-pw-0x64"),
    "listener.name.sasl_plaintext.ssl.truststore.password": "truststore-pw-0x65",
    "listener.name.sasl_plaintext.foo.bar": "unknown-0x66",
    "my.custom.thing": "unknown-0x67",
}
SETTINGS = {**KAFKA_TEST_SETTINGS, **SECRETS, "sasl.enabled.mechanisms": "PLAIN"}


def described(port: int) -> dict[str, Any]:
    """Each secret's (value, sensitive, type, source, synonyms) at v4, and (value, sensitive,
    synonyms) at v1."""
    seen: dict[str, Any] = {}
    for version, schema in ((1, describe_v1), (4, describe_v4)):
        fields = {"include_documentation": False} if version >= 3 else {}
        with KafkaWireClient("127.0.0.1", port) as client:
            response = client.call(schema.DescribeConfigsRequest(
                resources=(schema.DescribeConfigsResource(
                    resource_type=4, resource_name="1", configuration_keys=tuple(SECRETS)),),
                include_synonyms=True, **fields))
        (result,) = response.results
        assert int(result.error_code) == 0, result.error_message
        for entry in result.configs:
            synonyms = [(s.name, s.value, int(s.source)) for s in entry.synonyms]
            shown = (entry.value, entry.is_sensitive, synonyms)
            if version >= 3:
                shown += (int(entry.config_type), int(entry.config_source))
            seen[f"v{version} {entry.name}"] = shown
    return seen


@pytest.fixture(scope="module")
def kafka_answer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-secrets"), settings=SETTINGS,
                         extra_listeners=("SASL_PLAINTEXT",))
    broker.start()
    try:
        yield described(broker.port)
    finally:
        broker.stop()


def test_secrets_described_as_kafka_does(kafka_answer: dict[str, Any],
                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = {**SETTINGS, "node.id": "1",
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}
    with running_broker(tmp_path_factory.mktemp("kgroups-secrets"), settings) as handle:
        kgroups_answer = described(handle.broker.listener_addresses["PLAINTEXT"][1])
    assert kgroups_answer == kafka_answer
    assert len(kafka_answer) == 2 * len(SECRETS)
    assert all(shown[:2] == (None, True) for shown in kafka_answer.values())
