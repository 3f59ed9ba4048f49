"""What a client socket's two servers share: the broker process's own sockets (`local_connection`)
and a network process's relays (`client_relay`) refuse the same frames, join answers into
writes, time idle connections out and reset a connection the same way, with these functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections import deque
from typing import Any, cast

# The 4-byte size before every frame, both ways.
SIZE_PREFIX = struct.Struct(">i")
# Answers ready together are joined into one write up to this size; a larger answer (a Fetch)
# goes alone, so joining never copies much.
_COALESCE = 64 * 1024
_LINGER_RESET = struct.pack("ii", 1, 0)  # struct linger {l_onoff = 1, l_linger = 0}
# Requests one connection may start in a row before the others get their turn: reading frames
# already buffered never yields to the event loop, so a client pipelining a thousand requests
# would otherwise have them all started (and run, next iteration) ahead of another client's
# one request that came meanwhile. A connection yields after this many requests read without
# waiting for its client. A network process's relays (client_relay) and the broker process's
# relayed frames (fair_frames) take the same turns.
FRAMES_IN_A_ROW = 32


def set_buffer(sock: Any, option: int, size: int) -> None:
    """socket.send.buffer.bytes / socket.receive.buffer.bytes (-1: leave the OS default)."""
    if sock is not None and size > 0:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, size)


def frame_refusal(size: int, limit: int, unauthenticated_limit: int,
                  authenticating: bool) -> tuple[str, dict[str, int]] | None:
    """Why a frame announcing `size` bytes closes its connection before its body is read
    (socket.request.max.bytes; sasl.server.max.receive.size before a SASL client authenticated),
    as the close's reason and log fields; None when it may be read."""
    if size < 0 or size > limit:
        return "frame_size_invalid", {"size": size, "limit": limit}
    if size > unauthenticated_limit and authenticating:
        return "sasl_receive_size_exceeded", {"size": size, "limit": unauthenticated_limit}
    return None


def next_write(ready: deque[bytes]) -> bytes:
    """The answers at the head of `ready` that leave in one write: joined up to _COALESCE, and
    a larger one alone, so joining never copies much."""
    data = ready.popleft()
    if ready and len(data) < _COALESCE:
        batch = [data]
        size = len(data)
        while ready and size + len(ready[0]) <= _COALESCE:
            data = ready.popleft()
            batch.append(data)
            size += len(data)
        data = b"".join(batch)
    return data


def idle_recheck_in(idle_for: float, timeout: float, in_flight: bool) -> float | None:
    """connections.max.idle.ms: None when a connection with nothing read or written for
    `idle_for` seconds is idle (nothing in flight either), else when to look again. One timer
    per connection, re-armed lazily, instead of a timeout around every read."""
    if in_flight:
        return timeout
    if idle_for < timeout:
        return timeout - idle_for
    return None


def reset(transport: asyncio.BaseTransport) -> None:
    """Close at once with a reset, dropping what the kernel still holds for a client that
    reads nothing (linger 0: a FIN would wait behind those bytes indefinitely)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    cast(asyncio.Transport, transport).abort()


class Refusal(Exception):
    """A frame closes its connection; `reason` and `fields` are what the close logs."""

    def __init__(self, reason: str, **fields: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fields = fields
