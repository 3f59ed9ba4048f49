"""Differential: Kafka 4.3.1 with StandardAuthorizer and kgroups with the same listeners, users
and ACLs (literal, prefixed, `*` principal, DENY over ALLOW, a host that does not match) give a
restricted user, then a super user, the same error codes from every API in the reference
table, the same filtered ListGroups and Metadata, and the same per-partition errors; with
allow.everyone.if.no.acl.found as well (resources no binding names become open, while one named
only for another host stays closed)."""

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
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas_users(
        alice="alice-secret", admin="admin-secret"),
    "connection.failed.authentication.delay.ms": "0",
}
USERS = {name: ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="PLAIN", username=name,
                              password=f"{name}-secret") for name in ("alice", "admin")}
MODES = {"default": {}, "allow-everyone": {"allow.everyone.if.no.acl.found": "true"}}


def observed(admin_port: int, sasl_port: int) -> dict[str, Any]:
    """alice's view, then the super user's (after alice's requests changed the groups)."""
    with KafkaWireClient("127.0.0.1", admin_port) as admin:
        acl_scenarios.set_up(admin)
    views = {}
    for name, security in USERS.items():
        with security.connect("127.0.0.1", sasl_port) as client:
            views.update({f"{name}: {key}": value
                          for key, value in acl_scenarios.observe(client).items()})
    return views


@pytest.fixture(scope="module", params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def kafka_view(tmp_path_factory: pytest.TempPathFactory, mode: str
               ) -> Iterator[dict[str, Any]]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-acls"),
                         settings={**KAFKA_TEST_SETTINGS, **SETTINGS, **MODES[mode]},
                         extra_listeners=("SASL_PLAINTEXT",))
    broker.start()
    try:
        yield observed(broker.port, broker.listener_ports["SASL_PLAINTEXT"])
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def kgroups_view(tmp_path_factory: pytest.TempPathFactory, mode: str) -> dict[str, Any]:
    settings = {**KAFKA_TEST_SETTINGS, **SETTINGS, **MODES[mode], "node.id": "1",  # Kafka's
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
