"""Differential: Kafka 4.3.1 with StandardAuthorizer and kgroups with the same listeners, users
and ACLs (literal, prefixed, `*` principal, DENY over ALLOW, a host that does not match) give a
restricted user, then a super user, the same error codes from every API in the reference
table at every version both serve, the same filtered ListGroups and Metadata, the same
per-partition errors and the same authorized-operations bitfields on groups, topics and the
cluster; with allow.everyone.if.no.acl.found as well (resources no binding names become open,
while one named only for another host stays closed). Without an authorizer, both brokers report
every operation Kafka supports on the resource when asked (but on a group in error)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from tests.broker import acl_scenarios
from tests.broker.broker_wire_helpers import create_topic, nested_of, request_of
from tests.broker.security_helpers import ClientSecurity, jaas_users, running_broker
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker

from kgroups.broker.apis.contract import HandlerRegistry
from kgroups.broker.broker import install_handlers
from kgroups.broker.security.authorizer import Operation
from kgroups.tools.wire_client import KafkaWireClient

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


def kgroups_versions() -> dict[int, range]:
    """The versions kgroups serves of each API, as its ApiVersions answers them."""
    registry = HandlerRegistry()
    install_handlers(registry)
    return {h.api_key: range(h.min_version, h.max_version + 1) for h in registry}


def observed(admin_port: int, sasl_port: int,
             limit: Mapping[int, Sequence[int]]) -> tuple[dict[int, list[int]], dict[Any, Any]]:
    """The versions observed (those both brokers serve), then alice's view, then the super
    user's (after alice's requests changed the groups)."""
    with KafkaWireClient("127.0.0.1", admin_port) as admin:
        acl_scenarios.set_up(admin)
    views: dict[Any, Any] = {}
    versions: dict[int, list[int]] = {}
    for name, security in USERS.items():
        with security.connect("127.0.0.1", sasl_port) as client:
            versions = acl_scenarios.served_versions(client, limit)
            views.update({(name, *key): value for key, value in acl_scenarios.observe(
                client, versions).items()})
    return versions, views


@pytest.fixture(scope="module", params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def kafka_view(tmp_path_factory: pytest.TempPathFactory, mode: str
               ) -> Iterator[tuple[dict[int, list[int]], dict[Any, Any]]]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-acls"),
                         settings={**KAFKA_TEST_SETTINGS, **SETTINGS, **MODES[mode]},
                         extra_listeners=("SASL_PLAINTEXT",))
    broker.start()
    try:
        yield observed(broker.port, broker.listener_ports["SASL_PLAINTEXT"], kgroups_versions())
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def kgroups_view(tmp_path_factory: pytest.TempPathFactory, mode: str,
                 kafka_view: tuple[dict[int, list[int]], dict[Any, Any]]
                 ) -> tuple[dict[int, list[int]], dict[Any, Any]]:
    settings = {**KAFKA_TEST_SETTINGS, **SETTINGS, **MODES[mode], "node.id": "1",  # Kafka's
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}
    with running_broker(tmp_path_factory.mktemp("kgroups-acls"), settings) as handle:
        ports = handle.broker.listener_addresses
        return observed(ports["PLAINTEXT"][1], ports["SASL_PLAINTEXT"][1], kafka_view[0])


def test_every_version_both_serve_is_compared(
        kafka_view: tuple[dict[int, list[int]], dict[Any, Any]]) -> None:
    """Old versions included: those Kafka 4 removed (KIP-896) are compared where kgroups
    stopped too, and DescribeGroups v0-v2 and OffsetFetch v1, which Kafka still serves."""
    versions, _ = kafka_view
    assert {0: 3, 1: 4, 2: 1, 3: 0, 9: 1, 15: 0}.items() <= {
        api: min(served) for api, served in versions.items()}.items()


def test_same_error_codes_as_kafka(kafka_view: tuple[dict[int, list[int]], dict[Any, Any]],
                                   kgroups_view: tuple[dict[int, list[int]], dict[Any, Any]]
                                   ) -> None:
    (kafka_versions, kafka), (kgroups_versions, kgroups) = kafka_view, kgroups_view
    assert kgroups_versions == kafka_versions
    differences = {key: {"kafka": kafka.get(key), "kgroups": kgroups.get(key)}
                   for key in sorted(kafka.keys() | kgroups.keys())
                   if kafka.get(key) != kgroups.get(key)}
    assert differences == {}


def operation_names(bits: int) -> set[str]:
    return {operation.name for operation in Operation if bits >= 0 and bits >> operation & 1}


def test_without_an_authorizer_every_supported_operation_is_reported(any_broker: Any) -> None:
    """Kafka 4.3.1 with no authorizer.class.name: asked, a group (live or dead), a topic (even a
    missing one) and the cluster carry every operation Kafka supports on them; a group
    ConsumerGroupDescribe cannot find carries Integer.MIN_VALUE, as does every field not asked."""
    suffix = uuid.uuid4().hex[:8]
    topic, group, dead = f"ops-t-{suffix}", f"ops-g-{suffix}", f"ops-dead-{suffix}"
    with KafkaWireClient(any_broker.host, any_broker.port) as client:
        create_topic(client, topic, partitions=1)
        deadline = time.monotonic() + 30
        while True:  # a Kafka just started may still be loading its group coordinator
            beat = client.call(request_of(
                68, 0, group_id=group, member_id="m-" + suffix, member_epoch=0,
                instance_id=None, rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
                subscribed_topic_names=(topic,), server_assignor=None, topic_partitions=()))
            if int(beat.error_code) not in (14, 15, 16) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert int(beat.error_code) == 0
        described = client.call(request_of(15, 5, groups=(group, dead),
                                           include_authorized_operations=True)).groups
        described_v6 = client.call(request_of(15, 6, groups=(group, dead),
                                              include_authorized_operations=True)).groups
        cg = client.call(request_of(69, 0, group_ids=(group, dead),
                                    include_authorized_operations=True)).groups
        metadata = client.call(request_of(
            3, 10, allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True, topics=tuple(
                nested_of(3, 10, "MetadataRequestTopic", topic_id=None, name=name)
                for name in (topic, f"missing-{suffix}"))))
        unasked = client.call(request_of(
            3, 10, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False, topics=(
                nested_of(3, 10, "MetadataRequestTopic", topic_id=None, name=topic),)))
    group_ops = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
    topic_ops = group_ops | {"WRITE", "CREATE", "ALTER"}
    assert [operation_names(int(g.authorized_operations)) for g in described] == [group_ops] * 2
    # From v6 a group DescribeGroups does not know (a missing one; a consumer group, which is
    # no classic group) is GROUP_ID_NOT_FOUND, and a group in error carries no operations.
    assert [(int(g.error_code), int(g.authorized_operations)) for g in described_v6] == [
        (69, -(2**31))] * 2
    assert [(int(g.error_code), operation_names(int(g.authorized_operations))) for g in cg] == [
        (0, group_ops), (69, set())]
    assert int(cg[1].authorized_operations) == -(2**31)
    assert [operation_names(int(t.topic_authorized_operations))
            for t in metadata.topics] == [topic_ops] * 2
    assert operation_names(int(metadata.cluster_authorized_operations)) == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
        "ALTER", "DESCRIBE"}
    assert int(unasked.cluster_authorized_operations) == -(2**31)
    assert int(unasked.topics[0].topic_authorized_operations) == -(2**31)
