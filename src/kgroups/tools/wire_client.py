"""A minimal blocking Kafka wire client built on kio, for the admin commands.

The admin tool must speak to any Kafka-compatible broker exactly as kafka-consumer-groups.sh does,
so it goes over the wire rather than reading kgroups' data directory. One request at a time on
one socket is all an operator command needs; the broker's own handlers never use this module.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0

from kgroups.broker.wire import decode_response, encode_request, response_type

# A response bigger than this is not an admin answer but a broken peer; refuse to buffer it.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class WireError(RuntimeError):
    """The broker could not be reached, closed the connection, or answered nonsense."""


@dataclass(frozen=True, slots=True)
class VersionRange:
    min_version: int
    max_version: int


class KafkaWireClient:
    """One connection to one broker: `call(request)` sends a kio request and returns its reply."""

    def __init__(
        self, host: str, port: int, *, client_id: str = "kgroups-admin", timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        # How to reach another broker of the cluster (a group's coordinator) the way this
        # connection was reached; client_security.py replaces it to add TLS and SASL.
        self.open_another: Callable[[str, int], KafkaWireClient] = (
            lambda other_host, other_port: KafkaWireClient(
                other_host, other_port, client_id=client_id, timeout=timeout,
                ssl_context=ssl_context))
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:  # an SSL or SASL_SSL listener (client_security.py)
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            raise WireError(f"cannot connect to {host}:{port}: {exc}") from exc
        self._sock = sock
        self._correlation_id = 0
        self.api_versions: dict[int, VersionRange] = self._fetch_api_versions()

    def __enter__(self) -> KafkaWireClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def supports(self, api_key: int, version: int) -> bool:
        advertised = self.api_versions.get(api_key)
        return advertised is not None and (
            advertised.min_version <= version <= advertised.max_version
        )

    def require(self, api_key: int, version: int, api_name: str) -> None:
        """Fail with a readable message instead of sending a request the broker would refuse."""
        if not self.supports(api_key, version):
            raise WireError(
                f"broker {self.host}:{self.port} does not support {api_name} v{version}"
            )

    def call(self, request: Any, response_schema: type[Any] | None = None) -> Any:
        """Send one request and block until its response arrives (read as `response_schema`
        when given: a kio response class extended with a tagged field kgroups sends)."""
        self._correlation_id += 1
        correlation_id = self._correlation_id
        try:
            self._sock.sendall(encode_request(correlation_id, self.client_id, request))
            frame = self._read_frame()
        except OSError as exc:
            if isinstance(exc, TimeoutError):
                raise WireError(f"{self.host}:{self.port} did not answer within "
                                f"{self.timeout:g} s") from exc
            raise WireError(f"connection to {self.host}:{self.port} failed: {exc}") from exc
        schema = response_schema or response_type(int(request.__api_key__),
                                                   int(request.__version__))
        try:
            answered_id, response = decode_response(schema, frame)
        except Exception as exc:
            raise WireError(f"cannot decode {schema.__name__}: {exc}") from exc
        if answered_id != correlation_id:
            raise WireError(f"correlation id mismatch: sent {correlation_id}, got {answered_id}")
        return response

    def _read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read_exactly(4))
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise WireError(f"broker sent a frame of {size} bytes")
        return self._read_exactly(size)

    def _read_exactly(self, size: int) -> bytes:
        chunks: list[bytes] = []
        remaining = size
        while remaining:
            chunk = self._sock.recv(min(remaining, 1 << 20))
            if not chunk:
                raise WireError(f"{self.host}:{self.port} closed the connection")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def _fetch_api_versions(self) -> dict[int, VersionRange]:
        response = self.call(ApiVersionsRequestV0())
        if int(response.error_code) != 0:
            raise WireError(f"ApiVersions failed with error {int(response.error_code)}")
        return {
            int(entry.api_key): VersionRange(int(entry.min_version), int(entry.max_version))
            for entry in response.api_keys
        }
