"""Listeners, TLS and SASL over the wire: four listeners on one in-process broker, each
advertising itself; client certificates; PLAIN and SCRAM logins, their failures and the
connection closing after them; SCRAM credentials managed with APIs 50/51 and kept on disk."""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from tests.broker.broker_wire_helpers import metadata_request
from tests.broker.security_helpers import (
    CLIENT_PRINCIPAL,
    Certificates,
    add_scram_user,
    client_security,
    logged,
    make_certificates,
    running_broker,
    secure_settings,
)
from tests.broker.servers import InProcessBroker, ServerProcess

from kgroups.broker.config import BrokerConfig, ConfigError
from kgroups.broker.security.listeners import certificate_principal
from kgroups.broker.security.scram import CredentialStore, credential_from_password
from kgroups.broker.security.state import Security
from kgroups.broker.wire import encode_request
from kgroups.tools.client_security import ClientSecurity
from kgroups.tools.wire_client import KafkaWireClient, WireError


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory,
                  certs: Certificates) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path_factory.mktemp("secure"), secure_settings(certs)) as handle:
        with KafkaWireClient("127.0.0.1", port_of(handle, "PLAINTEXT")) as admin:
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                (result,) = add_scram_user(admin, "carol", "carol-secret", mechanism).results
                assert int(result.error_code) == 0
        yield handle


def port_of(handle: InProcessBroker, listener: str) -> int:
    return handle.broker.listener_addresses[listener][1]


def advertised_broker(client: KafkaWireClient) -> tuple[str, int]:
    (broker,) = client.call(metadata_request(all_topics=True)).brokers
    return broker.host, int(broker.port)


@pytest.mark.parametrize(("listener", "mechanism", "user", "password"), [
    ("SSL", "", "", ""),
    ("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
    ("SASL_SSL", "SCRAM-SHA-256", "carol", "carol-secret"),
    ("SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret"),
])
def test_each_listener_authenticates_and_advertises_itself(
        secure_broker: InProcessBroker, certs: Certificates, listener: str, mechanism: str,
        user: str, password: str) -> None:
    security = client_security(certs, listener, mechanism, user, password)
    port = port_of(secure_broker, listener)
    with security.connect("127.0.0.1", port) as client:
        assert advertised_broker(client) == ("127.0.0.1", port)


def test_plaintext_listener_advertises_advertised_listeners(
        secure_broker: InProcessBroker) -> None:
    with KafkaWireClient("127.0.0.1", port_of(secure_broker, "PLAINTEXT")) as client:
        assert advertised_broker(client) == ("plain.example", 19092)


def test_ssl_principal_is_the_certificate_subject_as_kafka_writes_it(
        secure_broker: InProcessBroker, certs: Certificates) -> None:
    context = client_security(certs, "SSL").ssl_context()
    assert context is not None
    port = port_of(secure_broker, "SSL")
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(encode_request(1, "t", metadata_request(all_topics=True)))
        assert tls.recv(4)
    # The broker's view of that connection is not reachable from outside without ACLs (see
    # test_security_acls.py); the conversion itself, on the dict ssl.getpeercert() returns:
    peer = {"subject": ((("countryName", "NL"),), (("organizationName", "kgroups test"),),
                        (("organizationalUnitName", "Ops"),), (("commonName", "client-one"),))}
    assert certificate_principal(peer) == CLIENT_PRINCIPAL
    assert certificate_principal({"subject": ((("commonName", "a,b+c"),),)}) == r"User:CN=a\,b\+c"
    assert certificate_principal(None) == "User:ANONYMOUS"


def test_untrusted_or_missing_client_certificate_is_refused(
        secure_broker: InProcessBroker, certs: Certificates,
        caplog: pytest.LogCaptureFixture) -> None:
    port = port_of(secure_broker, "SSL")
    for keystore in (certs.untrusted_client, None):
        context = ssl.create_default_context(cafile=str(certs.ca))
        if keystore is not None:
            context.load_cert_chain(str(keystore))
        with caplog.at_level(logging.WARNING, logger="kgroups"), pytest.raises(WireError):
            # TLS 1.3 reports the refusal on the first read, inside ApiVersions.
            KafkaWireClient("127.0.0.1", port, ssl_context=context, timeout=10)
    assert logged(caplog, "reason=tls_handshake_failed", 2) == 2


def _raw_sasl(port: int, *requests: object) -> tuple[list[object], bool]:
    """Send requests one by one on a fresh connection; the answers, and whether the broker
    closed the connection after the last."""
    client = KafkaWireClient("127.0.0.1", port, timeout=10)
    answers = [client.call(request) for request in requests]
    try:
        client.call(metadata_request(all_topics=True))
        closed = False
    except WireError:
        closed = True
    client.close()
    return answers, closed


@pytest.mark.parametrize(("mechanism", "token", "message"), [
    ("PLAIN", b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
    ("PLAIN", b"\0mallory\0alice-secret", "Authentication failed: Invalid username"),
    ("PLAIN", b"no separators", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    ("SCRAM-SHA-256", b"n,,n=nobody,r=abc", "Authentication failed during authentication"),
    ("SCRAM-SHA-512", b"\xff\xfe garbage", "Authentication failed during authentication"),
])
def test_failed_authentication_answers_58_then_closes(
        secure_broker: InProcessBroker, mechanism: str, token: bytes, message: str,
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kgroups"):
        (handshake, auth), closed = _raw_sasl(
            port_of(secure_broker, "SASL_PLAINTEXT"), SaslHandshakeRequest(mechanism=mechanism),
            SaslAuthenticateRequest(auth_bytes=token))
    assert int(handshake.error_code) == 0  # type: ignore[attr-defined]
    assert int(auth.error_code) == 58  # type: ignore[attr-defined]
    assert auth.error_message.startswith(message)  # type: ignore[attr-defined]
    assert closed
    assert logged(caplog, "reason=sasl_authentication_failed", 1) == 1


def test_wrong_scram_password_fails(secure_broker: InProcessBroker,
                                    certs: Certificates) -> None:
    security = client_security(certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "wrong")
    with pytest.raises(WireError, match="Authentication failed during authentication"):
        security.connect("127.0.0.1", port_of(secure_broker, "SASL_PLAINTEXT"))


def test_unsupported_mechanism_lists_the_enabled_ones_and_closes(
        secure_broker: InProcessBroker) -> None:
    (handshake,), closed = _raw_sasl(port_of(secure_broker, "SASL_PLAINTEXT"),
                                     SaslHandshakeRequest(mechanism="GSSAPI"))
    assert int(handshake.error_code) == 33  # type: ignore[attr-defined]
    assert handshake.mechanisms == (  # type: ignore[attr-defined]
        "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert closed


def test_nothing_but_api_versions_and_sasl_before_authentication(
        secure_broker: InProcessBroker) -> None:
    port = port_of(secure_broker, "SASL_PLAINTEXT")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(1, "t", metadata_request(all_topics=True)))
        assert sock.recv(4) == b""  # closed without an answer
    # On an authenticated connection the SASL APIs answer ILLEGAL_SASL_STATE and it stays open.
    answers, closed = _raw_sasl(port_of(secure_broker, "PLAINTEXT"),
                                SaslHandshakeRequest(mechanism="PLAIN"))
    assert int(answers[0].error_code) == 34 and not closed  # type: ignore[attr-defined]


def test_sasl_server_max_receive_size_limits_frames_until_authenticated(
        tmp_path: Path, certs: Certificates, caplog: pytest.LogCaptureFixture) -> None:
    """A frame over the setting closes an unauthenticated SASL connection at its size prefix
    (test_sasl_state_vs_kafka.py compares the default with Kafka's on both socket paths); a
    larger one is read once the client has authenticated, and on other listeners."""
    settings = secure_settings(certs, **{"sasl.server.max.receive.size": "1024"})
    big = metadata_request(*(f"topic-{index}" for index in range(200)), auto_create=False)
    assert len(encode_request(1, "t", big)) > 1024
    with running_broker(tmp_path, settings) as handle, \
            caplog.at_level(logging.WARNING, logger="kgroups"):
        with socket.create_connection(("127.0.0.1", port_of(handle, "SASL_PLAINTEXT")),
                                      timeout=10) as sock:
            sock.sendall(struct.pack(">i", 1025))
            assert sock.recv(4) == b""  # closed without waiting for the frame
        assert logged(caplog, "reason=sasl_receive_size_exceeded", 1) == 1
        with client_security(certs, "SASL_PLAINTEXT").connect(
                "127.0.0.1", port_of(handle, "SASL_PLAINTEXT")) as client:
            assert len(client.call(big).topics) == 200
        with KafkaWireClient("127.0.0.1", port_of(handle, "PLAINTEXT")) as client:
            assert len(client.call(big).topics) == 200


def test_many_malformed_tokens_leave_other_clients_served(
        secure_broker: InProcessBroker, certs: Certificates,
        caplog: pytest.LogCaptureFixture) -> None:
    port = port_of(secure_broker, "SASL_PLAINTEXT")
    attempts = 300
    with caplog.at_level(logging.WARNING, logger="kgroups"):
        for index in range(attempts):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                token = struct.pack(">I", index) * (index % 7)
                sock.sendall(encode_request(1, "t", SaslHandshakeRequest(mechanism="PLAIN"))
                             + encode_request(2, "t", SaslAuthenticateRequest(auth_bytes=token)))
                while sock.recv(65536):  # answers, then the broker closes
                    pass
    assert logged(caplog, "reason=sasl_authentication_failed", attempts) == attempts
    with client_security(certs, "SASL_PLAINTEXT").connect("127.0.0.1", port) as client:
        assert advertised_broker(client)[1] == port


def test_scram_credentials_are_described_altered_and_checked(
        secure_broker: InProcessBroker) -> None:
    with KafkaWireClient("127.0.0.1", port_of(secure_broker, "PLAINTEXT")) as admin:
        (too_few,) = add_scram_user(admin, "dave", "pw", iterations=1000).results
        assert (int(too_few.error_code), too_few.error_message) == (93, "Too few iterations")
        missing = alter_scram.ScramCredentialDeletion(name="nobody", mechanism=1)
        (result,) = admin.call(alter_scram.AlterUserScramCredentialsRequest(
            deletions=(missing,), upsertions=())).results
        assert int(result.error_code) == 91
        described = admin.call(describe_scram.DescribeUserScramCredentialsRequest(
            users=(describe_scram.UserName(name="carol"), describe_scram.UserName(name="x"))))
        carol, unknown = described.results
        assert [(int(i.mechanism), int(i.iterations)) for i in carol.credential_infos] == [
            (1, 4096), (2, 4096)]
        assert int(unknown.error_code) == 91


def test_credentials_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "scram.json"
    password = "correct-horse-battery-staple"
    CredentialStore(path).apply(
        [("erin", "SCRAM-SHA-512", credential_from_password("SCRAM-SHA-512", password))], [])
    reloaded = CredentialStore(path).get("erin", "SCRAM-SHA-512")
    assert reloaded is not None and reloaded.iterations == 4096
    assert password.encode() not in path.read_bytes()  # salted and hashed, never kept


@pytest.mark.parametrize(("settings", "message"), [
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "needs sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "GSSAPI"},
     "does not offer GSSAPI"),
    ({"listeners": "SSL://127.0.0.1:0"}, "needs ssl.keystore.location"),
    ({"listeners": "INSIDE://127.0.0.1:0"}, "INSIDE has no security protocol"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent.pem"},
     "cannot load the key"),
])
def test_bad_listener_settings_fail_at_start(tmp_path: Path, settings: dict[str, str],
                                             message: str) -> None:
    config = BrokerConfig.build(port=0, data_dir=tmp_path,
                                overrides=[f"{k}={v}" for k, v in settings.items()])
    with pytest.raises(ConfigError, match=message):
        Security(config)


def test_client_properties_read_as_kafka_tools_read_them() -> None:
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="bob" password="b\\"s";',
        "ssl.truststore.location": "/ca.pem", "ssl.endpoint.identification.algorithm": ""})
    assert (security.username, security.password, security.mechanism) == (
        "bob", 'b"s', "SCRAM-SHA-512")
    assert not security.check_hostname


def test_tls_garbage_is_refused_once_each_and_others_are_served(
        secure_broker: InProcessBroker, certs: Certificates,
        caplog: pytest.LogCaptureFixture) -> None:
    port = port_of(secure_broker, "SASL_SSL")
    attempts = 200
    with caplog.at_level(logging.WARNING, logger="kgroups"):
        for index in range(attempts):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                # Not TLS at all, or a TLS record whose handshake message is garbage.
                sock.sendall(b"GET / HTTP/1.1\r\n\r\n" if index % 2 else
                             struct.pack(">BHH", 22, 0x0301, 64) + bytes([index % 256]) * 64)
                while sock.recv(65536):  # the broker answers with an alert, then closes
                    pass
    assert logged(caplog, "reason=tls_handshake_failed", attempts) == attempts
    with client_security(certs, "SASL_SSL").connect("127.0.0.1", port) as client:
        assert advertised_broker(client)[1] == port


def test_serve_over_sasl_ssl_accepts_every_handshake(
        start_kgroups_server: Callable[..., ServerProcess], certs: Certificates) -> None:
    """`kgroups serve` (uvloop) reads nothing before the TLS handshake, so a ClientHello sent
    at once, as every client sends it, is never lost to a plain buffer."""
    settings = secure_settings(certs, **{"listeners": "SASL_SSL://127.0.0.1:0",
                                         "advertised.listeners": ""})
    server = start_kgroups_server(*(f"{key}={value}" for key, value in settings.items()))
    security = client_security(certs, "SASL_SSL", "PLAIN", "admin", "admin-secret")
    for _ in range(30):
        with security.connect("127.0.0.1", server.port, timeout=5) as client:
            assert advertised_broker(client) == ("127.0.0.1", server.port)


def test_damaged_security_files_stop_the_start_with_their_path(tmp_path: Path) -> None:
    config = BrokerConfig.build(port=0, data_dir=tmp_path, overrides=[
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"])
    (tmp_path / "security").mkdir()
    (tmp_path / "security" / "scram-credentials.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"scram-credentials\.json"):
        Security(config)
    (tmp_path / "security" / "scram-credentials.json").unlink()
    (tmp_path / "security" / "acls.json").write_text('[{"resource": 1}]')
    with pytest.raises(ConfigError, match=r"acls\.json"):
        Security(config)


def test_connection_creation_rate_delays_new_connections(tmp_path: Path) -> None:
    """max.connection.creation.rate=20: 40 connections at once take about a second beyond the
    first second's worth, and none is refused."""
    with running_broker(tmp_path, {"listeners": "PLAINTEXT://127.0.0.1:0",
                                   "max.connection.creation.rate": "20"}) as handle:
        began = time.monotonic()
        for _ in range(40):
            with KafkaWireClient("127.0.0.1", handle.port, timeout=10):
                pass
        elapsed = time.monotonic() - began
    assert 0.8 < elapsed < 5
