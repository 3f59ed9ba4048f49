"""Differential: what Kafka 4.3.1 and kgroups do with a SASL_PLAINTEXT connection that has not
authenticated yet: a request out of the SASL sequence, and a frame larger than
`sasl.server.max.receive.size` (Kafka closes at the size prefix, before reading the body, so an
unauthenticated client cannot make the broker hold 100 MB). kgroups is run both ways it
serves sockets: in the broker's process and in a network process."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from tests.broker.broker_wire_helpers import (
    is_closed_by_peer,
    metadata_request,
    raw_socket,
    read_frame,
)
from tests.broker.security_helpers import jaas_users
from tests.broker.servers import ServerProcess
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker

from kgroups.broker.wire import decode_response, encode_request, response_type

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SETTINGS = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas_users(alice="alice-secret"),
    "connection.failed.authentication.delay.ms": "0",
}
LIMIT = 524288  # Kafka's default sasl.server.max.receive.size
PLAIN = SaslHandshakeRequest(mechanism="PLAIN")
LOGIN = SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret")
API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


@dataclass(frozen=True)
class Target:
    name: str
    port: int  # the SASL_PLAINTEXT listener's


@pytest.fixture(scope="module", params=["kafka", "kgroups", "kgroups-network-process"])
def target(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    name = str(request.param)
    scratch = tmp_path_factory.mktemp(name)
    if name == "kafka":
        broker = KafkaBroker(scratch, settings={**KAFKA_TEST_SETTINGS, **SETTINGS},
                             extra_listeners=("SASL_PLAINTEXT",))
        broker.start()
        try:
            yield Target(name, broker.listener_ports["SASL_PLAINTEXT"])
        finally:
            broker.stop()
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        sasl_port = probe.getsockname()[1]
    threads = "1" if name == "kgroups-network-process" else "0"
    overrides = [f"{key}={value}" for key, value in {
        **KAFKA_TEST_SETTINGS, **SETTINGS, "num.network.threads": threads,
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
    }.items()]
    server = ServerProcess(scratch / "data", scratch / "server.log", tuple(overrides))
    server.start()
    try:
        yield Target(name, sasl_port)
    finally:
        server.stop()


def reduced(answer: Any) -> Any:
    """What a client learns from an answer: its API, error codes, and what it lists."""
    if isinstance(answer, str):
        return answer
    name = type(answer).__name__
    if name == "MetadataResponse":
        return (name, len(answer.brokers), [(t.name, int(t.error_code)) for t in answer.topics])
    if name == "ApiVersionsResponse":
        return (name, int(answer.error_code), len(answer.api_keys) > 0)
    if name == "SaslHandshakeResponse":
        return (name, int(answer.error_code), answer.mechanisms)
    return (name, int(answer.error_code))


def exchange(port: int, *requests: Any) -> list[Any]:
    """Each request's answer in turn on one connection, until the broker closes it: then
    "closed" (and nothing after)."""
    seen: list[Any] = []
    with raw_socket(port) as sock:
        for correlation_id, request in enumerate(requests, 1):
            try:
                sock.sendall(encode_request(correlation_id, "t", request))
                frame = read_frame(sock)
            except (ConnectionError, OSError):
                seen.append("closed")
                return seen
            schema = response_type(int(request.__api_key__), int(request.__version__))
            seen.append(reduced(decode_response(schema, frame)[1]))
    return seen


HANDSHAKE_OK = ("SaslHandshakeResponse", 0, ("PLAIN",))


@pytest.mark.parametrize(("requests", "answers"), [
    pytest.param((PLAIN, metadata_request("orders", auto_create=False), API_VERSIONS),
                 [HANDSHAKE_OK, ("MetadataResponse", 0, [("orders", 34)]), "closed"],
                 id="metadata after the handshake: each topic ILLEGAL_SASL_STATE, then closed"),
    pytest.param((PLAIN, metadata_request(all_topics=True), API_VERSIONS),
                 [HANDSHAKE_OK, ("MetadataResponse", 0, []), "closed"],
                 id="all-topics metadata after the handshake: empty, then closed"),
    pytest.param((PLAIN, API_VERSIONS, API_VERSIONS),
                 [HANDSHAKE_OK, ("ApiVersionsResponse", 34, False), "closed"],
                 id="api versions after the handshake"),
    pytest.param((PLAIN, PLAIN, API_VERSIONS),
                 [HANDSHAKE_OK, ("SaslHandshakeResponse", 34, ()), "closed"],
                 id="a second handshake"),
    pytest.param((LOGIN,), ["closed"], id="authenticate before the handshake: closed"),
    pytest.param((metadata_request(all_topics=True),), ["closed"],
                 id="metadata before the handshake: closed"),
    pytest.param((API_VERSIONS, PLAIN, LOGIN, metadata_request("orders", auto_create=False)),
                 [("ApiVersionsResponse", 0, True), HANDSHAKE_OK,
                  ("SaslAuthenticateResponse", 0), ("MetadataResponse", 1, [("orders", 3)])],
                 id="in sequence: served"),
])
def test_requests_out_of_the_sasl_sequence(target: Target, requests: tuple[Any, ...],
                                           answers: list[Any]) -> None:
    assert exchange(target.port, *requests) == answers


def padded(request: Any, size: int) -> bytes:
    """The request framed, with zero bytes after its last field up to a frame of `size` bytes
    (both brokers read a request's fields and ignore what follows)."""
    frame = encode_request(1, "t", request)
    padding = size - (len(frame) - 4)
    return struct.pack(">i", size) + frame[4:] + bytes(padding)


def test_a_frame_over_the_limit_closes_before_its_body_is_read(target: Target) -> None:
    """Only the size prefix is sent: the broker closes at once instead of waiting for (and
    holding) 100 MB an unauthenticated client announced; one byte over the limit too."""
    for size in (100 * 1024 * 1024, LIMIT + 1):
        with raw_socket(target.port, timeout=10) as sock:
            sock.sendall(struct.pack(">i", size) + encode_request(1, "t", PLAIN)[4:])
            assert is_closed_by_peer(sock), size


def test_a_frame_at_the_limit_is_read(target: Target) -> None:
    with raw_socket(target.port) as sock:
        sock.sendall(padded(PLAIN, LIMIT))
        _, answer = decode_response(response_type(17, 1), read_frame(sock))
    assert reduced(answer) == HANDSHAKE_OK


def big_metadata() -> Any:
    """A Metadata request over the limit: 3,000 topic names of 200 characters."""
    return metadata_request(*(f"{index:04d}" + "x" * 196 for index in range(3000)),
                            auto_create=False)


@pytest.mark.parametrize("pipelined", [False, True], ids=["after the answer", "pipelined"])
def test_once_authenticated_frames_up_to_socket_request_max_bytes(target: Target,
                                                                   pipelined: bool) -> None:
    """After SaslAuthenticate the limit is socket.request.max.bytes, also for a request sent
    right behind the SaslAuthenticate, before its answer."""
    request = big_metadata()
    assert len(encode_request(3, "t", request)) > LIMIT
    with raw_socket(target.port) as sock:
        sock.sendall(encode_request(1, "t", PLAIN))
        read_frame(sock)
        sock.sendall(encode_request(2, "t", LOGIN))
        if pipelined:
            sock.sendall(encode_request(3, "t", request))
        _, answer = decode_response(response_type(36, 2), read_frame(sock))
        assert int(answer.error_code) == 0
        if not pipelined:
            sock.sendall(encode_request(3, "t", request))
        _, metadata = decode_response(response_type(3, 12), read_frame(sock))
    assert {int(t.error_code) for t in metadata.topics} == {3}
    assert len(metadata.topics) == 3000


def test_a_pipelined_login_is_taken_in_order(target: Target) -> None:
    """Handshake, SaslAuthenticate and a request sent at once, before any answer: each is
    decided after the one before it, as Kafka reads them."""
    requests = (PLAIN, LOGIN, metadata_request("orders", auto_create=False))
    with raw_socket(target.port) as sock:
        sock.sendall(b"".join(encode_request(index, "t", request)
                              for index, request in enumerate(requests, 1)))
        answers = [reduced(decode_response(response_type(
            int(request.__api_key__), int(request.__version__)), read_frame(sock))[1])
            for request in requests]
    assert answers == [HANDSHAKE_OK, ("SaslAuthenticateResponse", 0),
                       ("MetadataResponse", 1, [("orders", 3)])]
