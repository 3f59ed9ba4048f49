"""ACLs: the authorizer's decisions, the ACL APIs (as kafka-acls uses them) and their
durability, the certificate principal under an ACL, super users, allow.everyone.if.no.acl.found,
an API without a rule closed to all but super users, and Kafka's own kafka-acls and
kafka-configs (SCRAM) tools against kgroups."""

from __future__ import annotations

import asyncio
import datetime
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.describe_acls.v3 import request as describe_acls
from tests.broker import acl_scenarios
from tests.broker.acl_scenarios import codes
from tests.broker.broker_wire_helpers import (
    create_topic,
    nested_of,
    produce_request,
    request_of,
)
from tests.broker.security_helpers import (
    CLIENT_PRINCIPAL,
    Certificates,
    client_security,
    make_certificates,
    running_broker,
    secure_settings,
)
from tests.broker.servers import InProcessBroker
from tests.kafka_harness import run_kafka_tool

from kgroups.broker.apis.contract import CloseConnection, HandlerRegistry, RequestContext
from kgroups.broker.broker import install_handlers
from kgroups.broker.security.acl_enforcement import RULES, UNCHECKED, AuthorizedHandler
from kgroups.broker.security.authorizer import (
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kgroups.log.batch import build_batch
from kgroups.tools.wire_client import KafkaWireClient

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(kind: ResourceType, name: str, operation: Operation, permission: Permission = ALLOW,
        principal: str = "User:alice", pattern: PatternType = PatternType.LITERAL,
        host: str = "*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


def authorizer(tmp_path: Path, *bindings: AclBinding, allow_if_no_acl: bool = False,
               supers: tuple[str, ...] = ()) -> Authorizer:
    result = Authorizer(tmp_path / "acls.json", supers, allow_if_no_acl)
    result.create(list(bindings))
    return result


def test_kafkas_rules(tmp_path: Path) -> None:
    rules = authorizer(
        tmp_path,
        acl(TOPIC, "orders", Operation.READ),
        acl(TOPIC, "logs-", Operation.WRITE, pattern=PatternType.PREFIXED),
        acl(TOPIC, "*", Operation.DESCRIBE, principal="User:bob"),
        acl(GROUP, "g", Operation.ALL, principal="User:*"),
        acl(GROUP, "g", Operation.READ, DENY),
        acl(GROUP, "h", Operation.READ, host="10.0.0.1"),
        supers=("User:root",))

    def can(operation: Operation, kind: ResourceType, name: str, who: str = "User:alice",
            host: str = "127.0.0.1") -> bool:
        return rules.authorize(who, host, operation, kind, name)

    assert can(Operation.READ, TOPIC, "orders")
    assert can(Operation.DESCRIBE, TOPIC, "orders")  # implied by Read
    assert not can(Operation.WRITE, TOPIC, "orders")
    assert can(Operation.WRITE, TOPIC, "logs-app") and not can(Operation.WRITE, TOPIC, "log")
    assert can(Operation.DESCRIBE, TOPIC, "anything", "User:bob")  # the literal wildcard
    assert not can(Operation.DESCRIBE, TOPIC, "unlisted")  # no ACL: denied by default
    assert not can(Operation.READ, GROUP, "g")  # DENY beats the wildcard principal's ALL
    assert can(Operation.DESCRIBE, GROUP, "g")  # a DENY of Read does not deny Describe
    assert can(Operation.READ, GROUP, "g", "User:carol")
    assert not can(Operation.READ, GROUP, "h") and can(Operation.READ, GROUP, "h",
                                                       host="10.0.0.1")
    assert can(Operation.DELETE, GROUP, "unlisted", "User:root")
    lenient = authorizer(tmp_path / "lenient", acl(GROUP, "g", Operation.READ),
                         allow_if_no_acl=True)
    assert lenient.authorize("User:x", "h", Operation.READ, GROUP, "other")
    assert not lenient.authorize("User:x", "h", Operation.READ, GROUP, "g")


def test_allowed_operations_are_those_a_request_would_be_allowed(tmp_path: Path) -> None:
    """The values Kafka 4.3.1 answered in the differential test: ALL minus a denied Read on a
    group, Read plus DescribeConfigs (each implying Describe) on a topic, nothing where no ACL
    names the resource, everything Kafka supports for a super user or with no ACL and
    allow.everyone.if.no.acl.found."""
    rules = authorizer(
        tmp_path,
        acl(GROUP, "g", Operation.ALL, principal="User:*"),
        acl(GROUP, "g", Operation.READ, DENY),
        acl(TOPIC, "orders", Operation.READ),
        acl(TOPIC, "orders", Operation.DESCRIBE_CONFIGS),
        supers=("User:root",))

    def bits(kind: ResourceType, name: str, who: str = "User:alice") -> int:
        return rules.allowed_operations(who, "127.0.0.1", kind, name)

    assert bits(GROUP, "g") == 3392  # Describe, Delete, DescribeConfigs, AlterConfigs
    assert bits(TOPIC, "orders") == 1288  # Read, Describe, DescribeConfigs
    assert bits(TOPIC, "unlisted") == 0
    assert bits(ResourceType.CLUSTER, "kafka-cluster") == 0
    assert (bits(GROUP, "g", "User:root"), bits(TOPIC, "x", "User:root"),
            bits(ResourceType.CLUSTER, "kafka-cluster", "User:root")) == (3400, 3576, 8096)
    lenient = authorizer(tmp_path / "lenient", allow_if_no_acl=True)
    assert lenient.allowed_operations("User:x", "h", TOPIC, "t") == 3576


def test_acls_survive_a_restart_and_delete_by_filter(tmp_path: Path) -> None:
    first = authorizer(tmp_path, acl(TOPIC, "a", Operation.READ), acl(GROUP, "a", Operation.READ))
    reloaded = Authorizer(tmp_path / "acls.json", (), False)
    assert set(reloaded.acls()) == set(first.acls())
    (removed,) = reloaded.delete([AclFilter(resource_type=GROUP)])
    assert removed == [acl(GROUP, "a", Operation.READ)]
    assert Authorizer(tmp_path / "acls.json", (), False).acls() == [acl(TOPIC, "a", Operation.READ)]


def test_api_without_a_rule_serves_super_users_only(tmp_path: Path) -> None:
    async def inner(_ctx: RequestContext, _request: Any) -> str:
        return "served"

    # 67 (AllocateProducerIds) is controller-to-controller: no broker rule will ever exist.
    guarded = AuthorizedHandler(67, 0, 0, inner,  # type: ignore[arg-type]
                                authorizer(tmp_path, supers=("User:root",)))

    def call(principal: str) -> Any:
        ctx = RequestContext(67, 0, 1, "t", "127.0.0.1", None,  # type: ignore[arg-type]
                             types.SimpleNamespace(principal=principal))  # type: ignore[arg-type]
        return asyncio.run(guarded(ctx, None))

    assert call("User:root") == "served"
    with pytest.raises(CloseConnection):
        call("User:alice")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory,
               certs: Certificates) -> Iterator[InProcessBroker]:
    settings = secure_settings(certs, **{"advertised.listeners": "",
                                         "authorizer.class.name": acl_scenarios.AUTHORIZER,
                                         "super.users": acl_scenarios.SUPER_USERS})
    with running_broker(tmp_path_factory.mktemp("acls"), settings) as handle:
        yield handle


def port_of(handle: InProcessBroker, listener: str) -> int:
    return handle.broker.listener_addresses[listener][1]


def everything() -> describe_acls.DescribeAclsRequest:
    return describe_acls.DescribeAclsRequest(
        resource_type_filter=ResourceType.ANY, resource_name_filter=None,
        pattern_type_filter=PatternType.ANY, principal_filter=None, host_filter=None,
        operation=Operation.ANY, permission_type=Permission.ANY)


def test_certificate_subject_is_the_principal_acls_name(acl_broker: InProcessBroker,
                                                         certs: Certificates) -> None:
    describe = request_of(15, 5, groups=("cert-group",), include_authorized_operations=False)
    with client_security(certs, "SSL").connect("127.0.0.1", port_of(acl_broker, "SSL")) as c:
        (group,) = c.call(describe).groups
        assert int(group.error_code) == 30
        with KafkaWireClient("127.0.0.1", port_of(acl_broker, "PLAINTEXT")) as admin:
            admin.call(create_acls.CreateAclsRequest(creations=(acl_scenarios.binding(
                GROUP, "cert-group", Operation.DESCRIBE, ALLOW, principal=CLIENT_PRINCIPAL),)))
        (group,) = c.call(describe).groups
        assert int(group.error_code) == 0


def test_acl_apis_validate_and_need_cluster_rights(acl_broker: InProcessBroker,
                                                   certs: Certificates) -> None:
    bad = (
        acl_scenarios.binding(TOPIC, "t", Operation.ANY, ALLOW),
        acl_scenarios.binding(ResourceType.CLUSTER, "other", Operation.ALTER, ALLOW),
        acl_scenarios.binding(TOPIC, "t", Operation.READ, ALLOW, principal="alice"),
        acl_scenarios.binding(TOPIC, "t", Operation.READ, ALLOW, pattern=PatternType.MATCH),
    )
    with KafkaWireClient("127.0.0.1", port_of(acl_broker, "PLAINTEXT")) as admin:
        results = admin.call(create_acls.CreateAclsRequest(creations=bad)).results
        assert [int(r.error_code) for r in results] == [42, 42, 42, 42]
        assert results[1].error_message == (
            "The only valid name for the CLUSTER resource is kafka-cluster")
    with client_security(certs, "SASL_PLAINTEXT").connect(
            "127.0.0.1", port_of(acl_broker, "SASL_PLAINTEXT")) as alice:
        assert int(alice.call(everything()).error_code) == 31
        denied = alice.call(delete_acls.DeleteAclsRequest(filters=(delete_acls.DeleteAclsFilter(
            resource_type_filter=ResourceType.ANY, resource_name_filter=None,
            pattern_type_filter=PatternType.ANY, principal_filter=None, host_filter=None,
            operation=Operation.ANY, permission_type=Permission.ANY),)))
        assert [int(r.error_code) for r in denied.filter_results] == [31]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_needs_delete_on_the_topic(acl_broker: InProcessBroker,
                                                  certs: Certificates, version: int) -> None:
    """Kafka's rule: Delete on each topic, TOPIC_AUTHORIZATION_FAILED per partition otherwise,
    whether or not the topic exists (the differential ACL suite checks it against Kafka)."""
    allowed, other, missing = (f"dr-{name}-v{version}" for name in ("ok", "no", "missing"))

    def delete_records(client: KafkaWireClient) -> list[tuple[str, int, int, int]]:
        response = client.call(request_of(21, version, timeout=datetime.timedelta(seconds=5),
                                          topics=tuple(nested_of(
            21, version, "DeleteRecordsTopic", name=name, partitions=(nested_of(
                21, version, "DeleteRecordsPartition", partition_index=0, offset=-1),))
            for name in (allowed, other, missing))))
        return sorted((t.name, int(p.partition_index), int(p.error_code), int(p.low_watermark))
                      for t in response.topics for p in t.partitions)

    with KafkaWireClient("127.0.0.1", port_of(acl_broker, "PLAINTEXT")) as admin:
        for name in (allowed, other):
            create_topic(admin, name)
            admin.call(produce_request(name, 0, build_batch([(None, b"v", 1)])))
        admin.call(create_acls.CreateAclsRequest(creations=(acl_scenarios.binding(
            TOPIC, allowed, Operation.DELETE, ALLOW),)))
        as_super_user = delete_records(admin)
    with client_security(certs, "SASL_PLAINTEXT").connect(
            "127.0.0.1", port_of(acl_broker, "SASL_PLAINTEXT")) as alice:
        as_alice = delete_records(alice)
    assert as_super_user == [(missing, 0, 3, -1), (other, 0, 0, 1), (allowed, 0, 0, 1)]
    assert as_alice == [(missing, 0, 29, -1), (other, 0, 29, -1), (allowed, 0, 0, 1)]


@pytest.fixture(scope="module")
def every_version(acl_broker: InProcessBroker, certs: Certificates) -> dict[str, Any]:
    """alice's view, then the super user's, at every version kgroups serves of each probed
    API (observe fails on a closed connection)."""
    with KafkaWireClient("127.0.0.1", port_of(acl_broker, "PLAINTEXT")) as admin:
        acl_scenarios.set_up(admin)
    views = {}
    for user, password in (("alice", "alice-secret"), ("admin", "admin-secret")):
        security = client_security(certs, "SASL_PLAINTEXT", user=user, password=password)
        with security.connect("127.0.0.1", port_of(acl_broker, "SASL_PLAINTEXT")) as client:
            views[user] = acl_scenarios.observe(client, acl_scenarios.served_versions(client))
    return views


def test_every_served_version_is_authorized_without_closing(
        every_version: dict[str, Any]) -> None:
    """Older versions answer through other fields (no authorized operations before
    DescribeGroups v3, no group error before OffsetFetch v2, kgroups' own classes for Fetch
    v0-v3 and ListOffsets v0): each is answered, for a restricted user and a super user."""
    for view in every_version.values():
        assert {(api, version) for api, version, _ in view} >= {
            (15, 0), (15, 1), (15, 2), (9, 1), (1, 0), (1, 3), (2, 0), (3, 0)}
    alice = every_version["alice"]
    assert alice[(15, 0, "operations asked=False")] == alice[(15, 2, "operations asked=False")]
    assert [(g, code) for g, code, _ in alice[(15, 0, "operations asked=False")]] == [
        ("g-denied", 0), ("g-none", 30), ("g-ok", 0), ("team-a", 0), ("team-cg", 0)]


def test_offset_fetch_v1_denied_group_is_an_error_in_each_partition(
        every_version: dict[str, Any]) -> None:
    """v1 has no group-level error: Kafka puts GROUP_AUTHORIZATION_FAILED in every partition
    asked for, where kgroups used to answer no topics at all."""
    assert every_version["alice"][(9, 1, "g-none")] == (
        -1, [(topic, [30]) for topic in sorted(acl_scenarios.TOPICS)])
    assert every_version["admin"][(9, 1, "g-none")] == (
        -1, [(topic, [0]) for topic in sorted(acl_scenarios.TOPICS)])


def test_versions_kafka_4_removed_answer_as_the_oldest_it_serves(
        every_version: dict[str, Any]) -> None:
    """Fetch v0-v3 and ListOffsets v0 (served for Burrow) decide per topic as Fetch v4 and
    ListOffsets v1 do, which the differential test compares with Kafka."""
    for view in every_version.values():
        for api, legacy, oldest in ((1, range(4), 4), (2, range(1), 1)):
            for version in legacy:
                assert view[(api, version, "")] == view[(api, oldest, "")]
    assert every_version["alice"][(1, 0, "")] == [
        ("denied-t", [29]), ("orders", [0]), ("pre-x", [0]), ("secret", [29])]


def test_refusals_answer_as_kafka_does(every_version: dict[str, Any]) -> None:
    """Metadata v0 naming only denied topics lists just those (an empty v0 list would mean
    every topic); IncrementalAlterConfigs says why it refused."""
    alice = every_version["alice"]
    assert alice[(3, 0, "only denied")] == (None, [("secret", 29, None)])
    for version in (0, 1):
        assert [(name, code, message) for name, code, message in alice[(44, version, "")]
                if code == 29] == [(name, 29, "Topic authorization failed.")
                                   for name in ("orders", "pre-x", "secret")]


@pytest.mark.filterwarnings(r"ignore:list_groups\(\) is deprecated:DeprecationWarning")
def test_librdkafka_lists_groups_under_an_authorizer(tmp_path: Path) -> None:
    """rd_kafka_list_groups() (librdkafka's 0019_list_groups) asks ListGroups, then
    DescribeGroups at an old version: under an authorizer that closed the connection for every
    principal, super users and allow.everyone.if.no.acl.found included."""
    settings = {"authorizer.class.name": acl_scenarios.AUTHORIZER,
                "allow.everyone.if.no.acl.found": "true", "super.users": "User:ANONYMOUS",
                "group.initial.rebalance.delay.ms": "0"}
    with running_broker(tmp_path, settings) as handle, \
            KafkaWireClient("127.0.0.1", handle.port) as client:
        create_topic(client, "listed-t")
        for group in ("listed-a", "listed-b"):
            commit = request_of(8, 9, group_id=group, generation_id_or_member_epoch=-1,
                                member_id="", group_instance_id=None, topics=(nested_of(
                8, 9, "OffsetCommitRequestTopic", name="listed-t", partitions=(nested_of(
                    8, 9, "OffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                    committed_leader_epoch=-1, committed_metadata=""),)),))
            for _ in range(100):  # COORDINATOR_LOAD_IN_PROGRESS while the broker starts
                if codes(client.call(commit), "topics", "partitions") != [14]:
                    break
                time.sleep(0.05)
            assert codes(client.call(commit), "topics", "partitions") == [0]
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{handle.port}"})
        groups = admin.list_groups(timeout=15)
    assert {(g.id, g.error.code() if g.error else 0) for g in groups} >= {
        ("listed-a", 0), ("listed-b", 0)}


def test_acl_apis_answer_security_disabled_without_an_authorizer(tmp_path: Path) -> None:
    with running_broker(tmp_path, {}) as handle, \
            KafkaWireClient("127.0.0.1", handle.port) as client:
        assert int(client.call(everything()).error_code) == 54


@pytest.mark.kafka
def test_kafka_tools_manage_acls_and_scram_users_on_kgroups(acl_broker: InProcessBroker,
                                                            certs: Certificates) -> None:
    bootstrap = f"127.0.0.1:{port_of(acl_broker, 'PLAINTEXT')}"
    added = run_kafka_tool("org.apache.kafka.tools.AclCommand", [
        "--bootstrap-server", bootstrap, "--add", "--allow-principal", "User:tool",
        "--operation", "Read", "--group", "tool-", "--resource-pattern-type", "prefixed"])
    assert added.returncode == 0, added.stderr
    authorizer = acl_broker.broker.security.authorizer
    assert authorizer is not None
    assert acl(GROUP, "tool-", Operation.READ, principal="User:tool",
               pattern=PatternType.PREFIXED) in authorizer.acls()
    # (kafka-acls --list is compared with kgroups acls --list in test_security_cli.py)
    removed = run_kafka_tool("org.apache.kafka.tools.AclCommand", [
        "--bootstrap-server", bootstrap, "--remove", "--force", "--allow-principal",
        "User:tool", "--operation", "Read", "--group", "tool-",
        "--resource-pattern-type", "prefixed"])
    assert removed.returncode == 0, removed.stderr
    assert not [a for a in authorizer.acls() if a.principal == "User:tool"]
    configured = run_kafka_tool("kafka.admin.ConfigCommand", [
        "--bootstrap-server", bootstrap, "--alter", "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=tool-secret]", "--entity-type", "users",
        "--entity-name", "tool"])
    assert configured.returncode == 0, configured.stderr
    described = run_kafka_tool("kafka.admin.ConfigCommand", [
        "--bootstrap-server", bootstrap, "--describe", "--entity-type", "users",
        "--entity-name", "tool"])
    assert "SCRAM-SHA-256=iterations=8192" in described.stdout, described.stderr
    scram = client_security(certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", "tool", "tool-secret")
    with scram.connect("127.0.0.1", port_of(acl_broker, "SASL_PLAINTEXT")):
        pass  # authenticated with the credential kafka-configs stored


def test_every_served_api_has_its_kafka_authorization_rule() -> None:
    """An API added without a rule is served to super users only; this names it."""
    registry = HandlerRegistry()
    install_handlers(registry)
    assert [h.api_key for h in registry if h.api_key not in RULES | dict.fromkeys(UNCHECKED)] == []
