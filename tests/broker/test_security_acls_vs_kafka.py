"""Differential: Kafka 4.3.1 with StandardAuthorizer and kgroups with the same listeners, users
and ACLs (literal, prefixed, `*` principal, DENY over ALLOW, a host that does not match,
super users) give a restricted user the same error codes from every API in the reference
table, the same filtered ListGroups and Metadata, and the same per-partition errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.broker import acl_scenarios
from tests.broker.security_helpers import ClientSecurity, jaas_users, running_broker
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker

from kgroups.broker.wire_client import KafkaWireClient

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SETTINGS = {
    "authorizer.class.name": acl_scenarios.AUTHORIZER,
    "super.users": acl_scenarios.SUPER_USERS,
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas_users(alice="alice-secret"),
    "connection.failed.authentication.delay.ms": "0",
}
ALICE = ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="alice",
                       password="alice-secret")


def observed(admin_port: int, sasl_port: int) -> dict[str, Any]:
    with KafkaWireClient("127.0.0.1", admin_port) as admin:
        acl_scenarios.set_up(admin)
    with ALICE.connect("127.0.0.1", sasl_port) as alice:
        return acl_scenarios.observe(alice)


@pytest.fixture(scope="module")
def kafka_view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-acls"),
                         settings={**KAFKA_TEST_SETTINGS, **SETTINGS},
                         extra_listeners=("SASL_PLAINTEXT",))
    broker.start()
    try:
        yield observed(broker.port, broker.listener_ports["SASL_PLAINTEXT"])
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def kgroups_view(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = {**KAFKA_TEST_SETTINGS, **SETTINGS,
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}
    with running_broker(tmp_path_factory.mktemp("kgroups-acls"), settings) as handle:
        ports = handle.broker.listener_addresses
        return observed(ports["PLAINTEXT"][1], ports["SASL_PLAINTEXT"][1])


def test_same_error_codes_as_kafka(kafka_view: dict[str, Any],
                                   kgroups_view: dict[str, Any]) -> None:
    differences = {key: {"kafka": kafka_view.get(key), "kgroups": kgroups_view.get(key)}
                   for key in sorted(kafka_view.keys() | kgroups_view.keys())
                   if kafka_view.get(key) != kgroups_view.get(key)}
    assert differences == {}
