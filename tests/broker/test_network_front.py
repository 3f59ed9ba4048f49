"""`kgroups serve` with a network process (num.network.threads=1): clients see one broker on one
port while sockets, TLS and framing run in a second process, and the rules that protect the
broker hold across the split (one bad connection closes alone, limits count every connection,
an answer nobody reads stays within the memory budget) and across either process dying."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from acl_scenarios import AUTHORIZER
from broker_wire_helpers import (
    connect,
    create_topic,
    fetch_request,
    is_closed_by_peer,
    produce_request,
    raw_socket,
    read_frame,
    send_and_decode,
)
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from security_helpers import CLIENT_PRINCIPAL, make_certificates, secure_settings
from tests.broker.servers import ServerProcess

from kgroups.broker.config import served_network_processes
from kgroups.broker.wire import encode_request
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch

pytestmark = pytest.mark.interop

RELAYED = "num.network.threads=1"
API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def api_versions_answered(port: int) -> bool:
    with raw_socket(port) as sock:
        answer = send_and_decode(sock, 7, API_VERSIONS)
    return answer.error_code == ErrorCode.NONE  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def relayed_server(tmp_path_factory: pytest.TempPathFactory) -> ServerProcess:
    scratch = tmp_path_factory.mktemp("relayed")
    server = ServerProcess(scratch / "data", scratch / "server.log", (RELAYED,))
    server.start()
    yield server
    server.close()


def test_records_and_answers_pass_through_the_network_process(
        relayed_server: ServerProcess) -> None:
    (front,) = relayed_server.network_processes()
    value = bytes(range(256)) * 2000  # a 500 KiB record: frames read in chunks, answer split
    with connect(relayed_server.port) as client:
        create_topic(client, "relayed")
        produced = client.call(produce_request("relayed", 0, build_batch(
            [(b"k", value, 1_700_000_000_000)])))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        fetched = client.call(fetch_request("relayed", 0, 0, max_bytes=2 * 1024 * 1024))
    assert value in bytes(fetched.responses[0].partitions[0].records)
    assert front.is_running()


def test_a_malformed_frame_closes_only_its_connection_logged_once(
        relayed_server: ServerProcess) -> None:
    with raw_socket(relayed_server.port) as bystander, raw_socket(relayed_server.port) as bad:
        bad_port = bad.getsockname()[1]
        # 24 bytes announcing a 20-byte body that is no request at all.
        bad.sendall(struct.pack(">i", 20) + b"\xff" * 20)
        assert is_closed_by_peer(bad)
        assert send_and_decode(bystander, 1, API_VERSIONS).error_code == ErrorCode.NONE  # type: ignore[attr-defined]
    closes = [line for line in relayed_server.log_text().splitlines()
              if "connection_closed" in line and f":{bad_port} " in line + " "]
    assert len(closes) == 1, closes


def test_pipelined_requests_are_all_answered_after_the_client_half_closes(
        relayed_server: ServerProcess) -> None:
    """A client that sends its requests and shuts its side down still gets every answer, in
    order, then the broker closes: the last one a Fetch long poll still waiting when the
    network process reads the client's EOF."""
    count = 100
    with connect(relayed_server.port) as admin:
        create_topic(admin, "half-closed")
    long_poll = encode_request(count, "t", fetch_request("half-closed", 0, 0, max_wait_ms=500))
    with raw_socket(relayed_server.port) as sock:
        sock.sendall(b"".join(encode_request(i, "t", API_VERSIONS) for i in range(count))
                     + long_poll)
        sock.shutdown(socket.SHUT_WR)
        answered = [struct.unpack(">i", read_frame(sock)[:4])[0] for _ in range(count + 1)]
        assert is_closed_by_peer(sock)
    assert answered == list(range(count + 1))


def test_a_network_process_that_dies_is_replaced(relayed_server: ServerProcess) -> None:
    (front,) = relayed_server.network_processes()
    os.kill(front.pid, signal.SIGKILL)
    wait_for(lambda: [p.pid for p in relayed_server.network_processes()] not in ([], [front.pid]),
             "a new network process")
    wait_for(lambda: api_versions_answered(relayed_server.port), "an answer from the new one")
    assert "network_process_exited" in relayed_server.log_text()


def test_the_network_process_ends_with_the_broker_process(tmp_path: pytest.TempPathFactory,
                                                          ) -> None:
    for stop in (ServerProcess.stop, ServerProcess.kill):
        server = ServerProcess(tmp_path / stop.__name__, tmp_path / f"{stop.__name__}.log",
                               (RELAYED,))
        server.start()
        (front,) = server.network_processes()
        stop(server)
        front.wait(timeout=10)  # raises psutil.TimeoutExpired if it stayed
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        server.close()


def test_kgroups_serve_starts_a_network_process_only_on_three_cores_or_more(
        tmp_path: pytest.TempPathFactory) -> None:
    """Without num.network.threads, `kgroups serve` serves its sockets itself when it may run on
    one or two cores (a relay only pays off with a core nothing else wants) and starts one
    network process from three cores (checked here as far as this machine's cores go)."""
    everywhere = sorted(os.sched_getaffinity(0))
    assert len(everywhere) >= 2, "this test needs a machine with two cores"
    counts = {}
    for cores in range(1, min(len(everywhere), 3) + 1):
        server = ServerProcess(tmp_path / str(cores), tmp_path / f"{cores}.log")
        os.sched_setaffinity(0, everywhere[:cores])  # `kgroups serve` inherits it
        try:
            server.start()
        finally:
            os.sched_setaffinity(0, everywhere)
        counts[cores] = len(server.network_processes())
        assert api_versions_answered(server.port)
        server.close()
    assert counts == {cores: served_network_processes(cores) for cores in counts}
    assert [served_network_processes(cores) for cores in (None, 1, 2, 3, 64)] == [0, 0, 0, 1, 1]


def test_max_connections_counts_relayed_connections(start_kgroups_server) -> None:  # type: ignore[no-untyped-def]
    server = start_kgroups_server(RELAYED, "max.connections=2")
    with raw_socket(server.port) as first, raw_socket(server.port) as second:
        for sock in (first, second):
            assert send_and_decode(sock, 1, API_VERSIONS).error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        with raw_socket(server.port) as third:
            assert is_closed_by_peer(third)
    wait_for(lambda: "reason=max_connections" in server.log_text(), "the refusal's log line")
    wait_for(lambda: api_versions_answered(server.port), "room again once two closed")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_tls_listeners_get_a_network_process_and_keep_their_identities(
        tmp_path: Path) -> None:
    """TLS runs in the network process; the principal of a client certificate and a SASL
    login made over TLS reach the broker process's authorizer through it."""
    certs = make_certificates(tmp_path / "certs")
    ssl_port, sasl_ssl_port = free_port(), free_port()
    settings = secure_settings(certs, **{
        "listeners": f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        "advertised.listeners": "", "authorizer.class.name": AUTHORIZER,
        "super.users": f"{CLIENT_PRINCIPAL};User:admin", "num.network.threads": "1"})
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log",
                           tuple(f"{key}={value}" for key, value in settings.items()))
    server.start()
    try:
        assert len(server.network_processes()) == 1
        tls = {"ssl.ca.location": str(certs.ca), "ssl.endpoint.identification.algorithm": "none"}
        by_certificate = AdminClient({
            "bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
            "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key), **tls})
        by_login = AdminClient({
            "bootstrap.servers": f"127.0.0.1:{sasl_ssl_port}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret",
            **tls})
        not_super = AdminClient({
            "bootstrap.servers": f"127.0.0.1:{sasl_ssl_port}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
            **tls})
        for client, topic in ((by_certificate, "by-certificate"), (by_login, "by-login")):
            client.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
        with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
            not_super.create_topics([NewTopic("by-alice", 1, 1)])["by-alice"].result(timeout=30)
        assert {"by-certificate", "by-login"} <= set(by_login.list_topics(timeout=30).topics)
    finally:
        server.close()


def test_a_failed_tls_handshake_does_not_keep_its_connection_slot(tmp_path: Path) -> None:
    """The broker process admits a TLS connection (max.connections) before its handshake; a
    handshake that fails in the network process must give the slot back, or a few clients
    speaking plain TCP to a TLS port would lock everyone out."""
    certs = make_certificates(tmp_path / "certs")
    port = free_port()
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log", (
        f"listeners=SSL://127.0.0.1:{port}", "advertised.listeners=",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs.server}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={certs.ca}",
        "max.connections=1", RELAYED))
    server.start()
    try:
        for _ in range(3):
            with raw_socket(port) as plain:
                plain.sendall(struct.pack(">i", 20) + b"\xff" * 20)  # no ClientHello
                assert is_closed_by_peer(plain)
        wait_for(lambda: server.log_text().count("tls_handshake_failed") == 3,
                 "the failed handshakes' log lines")
        context = ssl.create_default_context(cafile=str(certs.ca))
        context.check_hostname = False
        with raw_socket(port) as sock, context.wrap_socket(sock) as tls:
            answer = send_and_decode(tls, 1, API_VERSIONS)  # type: ignore[arg-type]
        assert answer.error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        assert "max_connections" not in server.log_text()
    finally:
        server.close()
