"""`kgroups users`, `kgroups acls` and `--command-config` on the admin commands, against a
broker with SASL_SSL and an authorizer; `kgroups acls --list` prints what kafka-acls prints."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker.acl_scenarios import AUTHORIZER
from tests.broker.broker_wire_helpers import create_topic
from tests.broker.security_helpers import (
    Certificates,
    make_certificates,
    running_broker,
    secure_settings,
)
from tests.broker.servers import InProcessBroker
from tests.kafka_harness import run_kafka_tool

from kgroups.cli import main
from kgroups.tools.wire_client import KafkaWireClient


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory,
           certs: Certificates) -> Iterator[InProcessBroker]:
    settings = secure_settings(certs, **{"advertised.listeners": "",
                                         "authorizer.class.name": AUTHORIZER,
                                         "super.users": "User:admin;User:ANONYMOUS"})
    with running_broker(tmp_path_factory.mktemp("cli"), settings) as handle:
        with KafkaWireClient("127.0.0.1", address(handle, "PLAINTEXT")[1]) as client:
            create_topic(client, "visible")
        yield handle


def address(handle: InProcessBroker, listener: str) -> tuple[str, int]:
    return handle.broker.listener_addresses[listener]


def bootstrap(handle: InProcessBroker) -> str:
    host, port = address(handle, "SASL_SSL")
    return f"{host}:{port}"


def client_properties(path: Path, certs: Certificates, mechanism: str, user: str,
                      password: str) -> Path:
    module = ("plain.PlainLoginModule" if mechanism == "PLAIN"
              else "scram.ScramLoginModule")
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
        f'username="{user}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n")
    return path


def kgroups(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_users_acls_and_command_config(broker: InProcessBroker, certs: Certificates,
                                       tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    admin = client_properties(tmp_path / "admin.properties", certs, "PLAIN", "admin",
                              "admin-secret")
    common = ("--bootstrap-server", bootstrap(broker), "--command-config", str(admin))
    code, out, err = kgroups(capsys, "users", *common, "--add", "bob", "--password", "bob-pw",
                             "--mechanism", "SCRAM-SHA-512", "--iterations", "8192")
    assert code == 0, err
    code, out, _ = kgroups(capsys, "users", *common, "--list")
    assert out.split("\n")[1].split() == ["bob", "SCRAM-SHA-512", "8192"]
    bob = client_properties(tmp_path / "bob.properties", certs, "SCRAM-SHA-512", "bob",
                            "bob-pw")
    as_bob = ("--bootstrap-server", bootstrap(broker), "--command-config", str(bob))
    code, out, err = kgroups(capsys, "topics", *as_bob, "--list")
    assert (code, out) == (0, ""), err  # no ACL lets bob see any topic
    code, out, err = kgroups(capsys, "acls", *common, "--add", "--allow-principal", "User:bob",
                             "--operation", "Describe", "--topic", "vis",
                             "--resource-pattern-type", "prefixed")
    assert code == 0, err
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=vis, " \
           "patternType=PREFIXED)`:\n\t(principal=User:bob, host=*, operation=DESCRIBE, " \
           "permissionType=ALLOW)\n" in out
    code, out, err = kgroups(capsys, "topics", *as_bob, "--list")
    assert (code, out) == (0, "visible\n"), err
    code, out, err = kgroups(capsys, "groups", *as_bob, "--list")
    assert code == 0, err
    code, out, err = kgroups(capsys, "acls", *common, "--remove", "--force",
                             "--allow-principal", "User:bob", "--operation", "Describe",
                             "--topic", "vis", "--resource-pattern-type", "prefixed")
    assert code == 0, err
    code, out, _ = kgroups(capsys, "topics", *as_bob, "--list")
    assert out == ""
    wrong = client_properties(tmp_path / "wrong.properties", certs, "SCRAM-SHA-512", "bob", "x")
    code, _, err = kgroups(capsys, "groups", "--bootstrap-server", bootstrap(broker),
                           "--command-config", str(wrong), "--list")
    assert code == 1 and "Authentication failed" in err


@pytest.mark.kafka
def test_acls_list_prints_what_kafka_acls_prints(broker: InProcessBroker, certs: Certificates,
                                                 tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    admin = client_properties(tmp_path / "admin.properties", certs, "PLAIN", "admin",
                              "admin-secret")
    common = ("--bootstrap-server", bootstrap(broker), "--command-config", str(admin))
    code, _, err = kgroups(capsys, "acls", *common, "--add", "--allow-principal", "User:carl",
                           "--deny-principal", "User:dora", "--consumer", "--topic", "audit",
                           "--group", "auditors")
    assert code == 0, err
    code, ours, err = kgroups(capsys, "acls", *common, "--list")
    assert code == 0, err
    theirs = run_kafka_tool("org.apache.kafka.tools.AclCommand", [*common, "--list"])
    assert theirs.returncode == 0, theirs.stderr
    assert blocks(ours) == blocks(theirs.stdout)


def blocks(listing: str) -> dict[str, set[str]]:
    """kafka-acls' output by resource; within one, Kafka's order is a hash set's."""
    result = {}
    for block in listing.strip().split("\n\n"):
        header, *acls = block.split("\n")
        result[header] = set(acls)
    return result


def test_coordinator_reached_with_the_same_security(broker: InProcessBroker,
                                                    certs: Certificates, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Bootstrapped as `localhost`, the tool finds the group's coordinator advertised as
    127.0.0.1 and opens a second connection: it must log in there too (SASL_SSL)."""
    admin = client_properties(tmp_path / "admin.properties", certs, "PLAIN", "admin",
                              "admin-secret")
    port = address(broker, "SASL_SSL")[1]
    common = ("--bootstrap-server", f"localhost:{port}", "--command-config", str(admin))
    code, out, err = kgroups(capsys, "groups", *common, "--reset-offsets", "--group", "fresh",
                             "--topic", "visible", "--to-earliest", "--execute")
    assert code == 0, err
    code, out, err = kgroups(capsys, "groups", *common, "--describe", "--group", "fresh")
    assert code == 0, err
    assert [line.split()[:3] for line in out.splitlines() if "visible" in line] == [
        ["fresh", "visible", "0"]]
