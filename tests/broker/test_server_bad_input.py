"""Bad input on one connection: Kafka's answer or a close, one log line, everyone else served."""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest
from broker_wire_helpers import (
    connect,
    is_closed_by_peer,
    metadata_request,
    raw_socket,
    read_frame,
    send_and_decode,
)
from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDirsRequest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from tests.broker.servers import InProcessBroker

from kgroups.broker.apis.contract import FunctionHandler
from kgroups.broker.wire import decode_response, encode_request
from kgroups.errors import ErrorCode
from kgroups.tools.wire_client import WireError


def _still_serves(port: int) -> None:
    with connect(port) as client:
        response = client.call(metadata_request(all_topics=True))
        assert response.brokers[0].port == port


def _closed_reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "connection_closed" in r.getMessage()]


def test_api_versions_lists_exactly_the_registered_apis(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        advertised = {key: (r.min_version, r.max_version) for key, r in client.api_versions.items()}
    registered = {h.api_key: (h.min_version, h.max_version)
                  for h in inprocess_broker.broker.registry}
    assert advertised == registered
    assert {0, 1, 2, 3, 10, 18, 19, 20, 22} <= set(advertised)


def test_unsupported_api_versions_version_gets_v0_fallback(
    inprocess_broker: InProcessBroker,
) -> None:
    """A newer client's ApiVersions gets UNSUPPORTED_VERSION + the list, and may carry on."""
    with raw_socket(inprocess_broker.port) as sock:
        frame = bytearray(encode_request(7, "future", ApiVersionsRequest(
            client_software_name="x", client_software_version="1")))
        struct.pack_into(">h", frame, 6, 99)  # claim ApiVersions v99
        sock.sendall(bytes(frame))
        correlation_id, response = decode_response(ApiVersionsResponseV0, read_frame(sock))
        assert correlation_id == 7
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert any(entry.api_key == 18 for entry in response.api_keys)
        # The same connection keeps working with a supported version.
        body = send_and_decode(sock, 8, metadata_request(all_topics=True))
        assert body.brokers[0].node_id == 0


@pytest.mark.parametrize(
    ("label", "payload"),
    [
        ("unknown api key", struct.pack(">ihhi", 8, 999, 0, 1)),
        ("unsupported version", struct.pack(">ihhi", 8, 3, 99, 1)),
        ("frame over socket.request.max.bytes", struct.pack(">i", 200_000_000)),
        ("negative frame size", struct.pack(">i", -5)),
        ("frame shorter than a header", struct.pack(">i", 3) + b"\x00\x03\x00"),
        ("garbage body", struct.pack(">ihhi", 40, 3, 12, 1) + b"\xff" * 32),
    ],
)
def test_bad_frame_closes_only_that_connection(
    inprocess_broker: InProcessBroker, caplog: pytest.LogCaptureFixture, label: str,
    payload: bytes,
) -> None:
    port = inprocess_broker.port
    with connect(port) as bystander, raw_socket(port) as sock, caplog.at_level(logging.WARNING):
        sock.sendall(payload)
        assert is_closed_by_peer(sock), label
        # The other connection, opened before, and a new one are both still served.
        assert bystander.call(metadata_request(all_topics=True)).brokers
        _still_serves(port)
    assert len(_closed_reasons(caplog)) == 1


def test_truncated_frame_is_dropped_when_the_client_goes_away(
    inprocess_broker: InProcessBroker, caplog: pytest.LogCaptureFixture,
) -> None:
    with raw_socket(inprocess_broker.port) as sock, caplog.at_level(logging.WARNING):
        sock.sendall(struct.pack(">i", 100) + b"\x00\x03\x00\x0c")
        sock.shutdown(socket.SHUT_WR)
        assert is_closed_by_peer(sock)
        _still_serves(inprocess_broker.port)
    assert any("truncated_frame" in line for line in _closed_reasons(caplog))


def test_idle_connection_is_closed(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("connections.max.idle.ms=300")
    with raw_socket(broker.port) as sock:
        started = time.monotonic()
        assert is_closed_by_peer(sock)
        assert time.monotonic() - started < 5
        _still_serves(broker.port)


def test_pipelined_requests_are_answered_in_order(inprocess_broker: InProcessBroker) -> None:
    requests = [metadata_request(all_topics=True) if i % 2 else ApiVersionsRequest(
        client_software_name="t", client_software_version="1") for i in range(60)]
    with raw_socket(inprocess_broker.port) as sock:
        sock.sendall(b"".join(encode_request(i, "pipe", r) for i, r in enumerate(requests)))
        answered = [struct.unpack_from(">i", read_frame(sock))[0] for _ in requests]
    assert answered == list(range(60))


def test_pipelining_past_queued_max_requests_is_answered_in_order(
    make_inprocess_broker,  # type: ignore[no-untyped-def]
) -> None:
    """With four requests in flight the broker stops reading; each answer read lets it go on,
    until all sixty are answered, in order."""
    broker = make_inprocess_broker("queued.max.requests=4")
    requests = [metadata_request(all_topics=True) for _ in range(60)]
    with raw_socket(broker.port, timeout=5.0) as sock:
        sock.sendall(b"".join(encode_request(i, "pipe", r) for i, r in enumerate(requests)))
        answered = [struct.unpack_from(">i", read_frame(sock))[0] for _ in requests]
    assert answered == list(range(60))


def test_client_that_never_reads_cannot_make_the_broker_buffer_without_bound(
    make_inprocess_broker,  # type: ignore[no-untyped-def]
) -> None:
    """The broker stops reading when answers pile up, so the client's sends stall instead."""
    broker = make_inprocess_broker("queued.max.requests=4")
    # Many frames per send, so the socket buffers fill within the deadline even when this
    # process is slowed down by a loaded machine.
    frames = encode_request(1, "hog", metadata_request(all_topics=True)) * 2048
    with raw_socket(broker.port) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        sent = 0
        pending = memoryview(frames)
        deadline = time.monotonic() + 20
        stalled_since = None
        while time.monotonic() < deadline:
            try:
                written = sock.send(pending)
                sent += written
                # A partial send leaves the rest of a frame queued, so the stream stays framed.
                pending = pending[written:] or memoryview(frames)
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 0.5:
                    break
                time.sleep(0.01)
        assert stalled_since is not None, f"broker accepted {sent} bytes without pushing back"
        assert sent < 64 * 1024 * 1024
        _still_serves(broker.port)


def test_failing_handler_closes_its_connection_only(
    inprocess_broker: InProcessBroker, caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler bug must not take the broker down: that connection closes, with a log line."""

    async def explode(ctx: object, request: object) -> object:
        raise RuntimeError("handler bug")

    # AlterReplicaLogDirs (34) v2 is an API this broker does not otherwise answer.
    inprocess_broker.broker.registry.register(FunctionHandler(34, 2, 2, explode))
    request = AlterReplicaLogDirsRequest(dirs=())
    with raw_socket(inprocess_broker.port) as sock, caplog.at_level(logging.WARNING):
        sock.sendall(encode_request(1, "t", request))
        assert is_closed_by_peer(sock)
        _still_serves(inprocess_broker.port)
    assert any("handler_failed" in line for line in _closed_reasons(caplog))


def test_connections_per_ip_are_capped(
    make_inprocess_broker, caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    broker = make_inprocess_broker("max.connections.per.ip=2")
    with connect(broker.port) as first, connect(broker.port), caplog.at_level(logging.WARNING):
        with raw_socket(broker.port) as third:
            assert is_closed_by_peer(third)
        assert first.call(metadata_request(all_topics=True)).brokers
    assert any("max_connections_per_ip" in r.getMessage() for r in caplog.records)
    # Closed connections give their slots back (once the broker has seen them close).
    deadline = time.monotonic() + 5
    while True:
        try:
            _still_serves(broker.port)
            break
        except WireError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
