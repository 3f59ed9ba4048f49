"""The TCP front of the broker: size-prefixed frames in, responses out in request order.

Each connection reads frames and starts one task per request, so a slow handler (a Fetch long
poll, a JoinGroup waiting for the rebalance) does not stop the next request from being
*processed*, while responses still leave in the order the requests came, as Kafka clients
require. Memory per connection is bounded: a frame over socket.request.max.bytes is refused
before it is read, at most queued.max.requests requests are in flight, and reading pauses
while the client leaves its responses unread; TCP then pushes back on the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import Counter, deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse

from kgroups.broker.api import CloseConnection, RequestContext
from kgroups.broker.events import log_event
from kgroups.broker.wire import (
    FrameDecodeError,
    decode_request,
    encode_response,
    kio_error,
    peek_header,
)
from kgroups.errors import ErrorCode

if TYPE_CHECKING:
    from kgroups.broker.broker import Broker

logger = logging.getLogger("kgroups.server")

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")


class ConnectionClosed(Exception):
    """Raised inside a connection to stop reading; the reason is already logged."""


class Connection:
    """One client socket. The reader loop starts a task per request; each task's completion
    flushes, in request order, every response that is ready. No responder task or queue sits
    between them: on a busy connection that saves several event-loop turns per request."""

    def __init__(
        self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._broker = broker
        self._reader = reader
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        peer = writer.get_extra_info("peername")
        self.client_host = peer[0] if isinstance(peer, tuple) else str(peer)
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        config = broker.config
        self._max_frame = config.socket_request_max_bytes
        self._idle_timeout = config.connections_max_idle_ms / 1000
        self._max_in_flight = max(1, config.queued_max_requests)
        # Requests in arrival order; the head is the next response owed to the client.
        self._in_flight: deque[asyncio.Task[bytes | None]] = deque()
        self._room = asyncio.Event()  # set while fewer than _max_in_flight requests are open
        self._room.set()
        self._all_answered = asyncio.Event()  # set while nothing is in flight
        self._all_answered.set()
        self._last_activity = self._loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False  # a close reason has been logged; stop reading and answering

    async def serve(self) -> None:
        """Read until the client leaves or misbehaves, then deliver what is still owed to it.

        When the broker shuts down (this task is cancelled) nothing more is delivered: every
        request still in flight is cancelled instead of awaited."""
        self._idle_timer = self._loop.call_later(self._idle_timeout, self._check_idle)
        shutting_down = False
        try:
            await self._read_requests()
        except ConnectionClosed:
            pass
        except (ConnectionError, asyncio.IncompleteReadError):
            log_event(logger, logging.DEBUG, "connection_lost", peer=self.peer)
        except asyncio.CancelledError:
            shutting_down = True
            self._cancel_in_flight()
            raise
        finally:
            self._idle_timer.cancel()
            if not shutting_down:
                await self._all_answered.wait()
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()

    def _cancel_in_flight(self) -> None:
        for task in self._in_flight:
            task.cancel()
        self._in_flight.clear()
        self._all_answered.set()

    def _close(self, level: int, reason: str, **fields: Any) -> None:
        """Log why (once) and close the socket; the reader then sees EOF and stops."""
        if self._closed:
            return
        self._closed = True
        log_event(logger, level, "connection_closed", peer=self.peer, reason=reason, **fields)
        self._writer.close()

    def _refuse(self, reason: str, **fields: Any) -> ConnectionClosed:
        self._close(logging.WARNING, reason, **fields)
        return ConnectionClosed(reason)

    def _check_idle(self) -> None:
        """connections.max.idle.ms: nothing read or written and nothing in flight that long.
        One timer per connection, re-armed lazily, instead of a timeout around every read."""
        idle_for = self._loop.time() - self._last_activity
        if self._in_flight or idle_for < self._idle_timeout:
            delay = self._idle_timeout if self._in_flight else self._idle_timeout - idle_for
            self._idle_timer = self._loop.call_later(delay, self._check_idle)
            return
        self._close(logging.WARNING, "idle", idle_ms=int(self._idle_timeout * 1000))

    async def _read_frame(self) -> bytes | None:
        try:
            prefix = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError as exc:
            if exc.partial and not self._closed:
                raise self._refuse("truncated_size_prefix", received=len(exc.partial)) from None
            return None
        (size,) = _SIZE.unpack(prefix)
        if size < 0 or size > self._max_frame:
            raise self._refuse("frame_size_invalid", size=size, limit=self._max_frame)
        try:
            frame = await self._reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            if self._closed:
                return None
            raise self._refuse("truncated_frame", size=size, received=len(exc.partial)) from None
        self._last_activity = self._loop.time()
        return frame

    async def _read_requests(self) -> None:
        registry = self._broker.registry
        while (frame := await self._read_frame()) is not None:
            try:
                api_key, api_version, correlation_id = peek_header(frame)
            except FrameDecodeError:
                raise self._refuse("frame_too_short", size=len(frame)) from None
            handler = registry.get(api_key)
            if handler is None:
                raise self._refuse("unknown_api_key", api_key=api_key, version=api_version)
            if not registry.supports(api_key, api_version):
                if api_key != API_VERSIONS_KEY:
                    raise self._refuse("unsupported_version", api_key=api_key,
                                       version=api_version)
                # Kafka answers an ApiVersions it cannot parse with v0 + the supported list, so a
                # newer client can retry with a version both sides know.
                log_event(logger, logging.INFO, "api_versions_fallback", peer=self.peer,
                          version=api_version)
                await self._submit(self._unsupported_api_versions(correlation_id))
                continue
            try:
                request = decode_request(frame)
            except FrameDecodeError as exc:
                raise self._refuse("malformed_request", api_key=api_key, version=api_version,
                                   error=exc) from None
            if request.unused_bytes:
                log_event(logger, logging.DEBUG, "request_trailing_bytes", peer=self.peer,
                          api_key=api_key, version=api_version, unused=request.unused_bytes)
            ctx = RequestContext(api_key, api_version, correlation_id, request.client_id,
                                 self.client_host, self._broker)
            await self._submit(self._dispatch(handler, ctx, request.body))

    async def _submit(self, work: Coroutine[Any, Any, bytes | None]) -> None:
        """Start a request; then, before reading on, wait while too many are open or while
        the client is not reading its responses (the transport's buffer is over its mark)."""
        task = self._loop.create_task(work)
        self._in_flight.append(task)
        self._all_answered.clear()
        if len(self._in_flight) >= self._max_in_flight:
            self._room.clear()
        task.add_done_callback(self._flush)
        await self._room.wait()
        await self._writer.drain()

    async def _unsupported_api_versions(self, correlation_id: int) -> bytes:
        response = ApiVersionsResponse(
            error_code=kio_error(ErrorCode.UNSUPPORTED_VERSION),
            api_keys=tuple(
                ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
                for h in self._broker.registry
            ),
        )
        return encode_response(correlation_id, response)

    async def _dispatch(self, handler: Any, ctx: RequestContext, body: Any) -> bytes | None:
        response = await handler(ctx, body)
        if response is None:
            return None
        return encode_response(ctx.correlation_id, response)

    def _flush(self, _finished: asyncio.Task[bytes | None]) -> None:
        """Write every response that is ready at the head, in request order. A failing handler
        closes the connection (Kafka's behaviour for an exception it cannot map to an error
        code) after logging it; the requests behind it are cancelled."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].done():
            task = in_flight.popleft()
            if task.cancelled():
                continue
            error = task.exception()
            if isinstance(error, CloseConnection):
                self._close(logging.INFO, error.reason)
                self._cancel_in_flight()
                break
            if error is not None:
                logger.error("handler failed peer=%s", self.peer, exc_info=error)
                self._close(logging.ERROR, "handler_failed", error=repr(error))
                self._cancel_in_flight()
                break
            data = task.result()
            if data is not None and not self._closed and not self._writer.is_closing():
                self._writer.write(data)
                self._last_activity = self._loop.time()
        if len(in_flight) < self._max_in_flight:
            self._room.set()
        if not in_flight:
            self._all_answered.set()


class BrokerServer:
    """Accepts connections; each runs independently so one bad client affects only itself.
    max.connections and max.connections.per.ip (Kafka's names; unlimited by default) cap how
    many a host, or everyone, may hold, so many idle sockets cannot exhaust the broker."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._per_host: Counter[str] = Counter()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    def _over_limit(self, host: str) -> str | None:
        config = self._broker.config
        if 0 <= config.max_connections <= len(self._connections):
            return "max_connections"
        if 0 <= config.max_connections_per_ip <= self._per_host[host]:
            return "max_connections_per_ip"
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connection = Connection(self._broker, reader, writer)
        limit = self._over_limit(connection.client_host)
        if limit is not None:
            log_event(logger, logging.WARNING, "connection_refused", peer=connection.peer,
                      reason=limit)
            writer.close()
            return
        self._connections.add(task)
        self._per_host[connection.client_host] += 1
        try:
            await connection.serve()
        except asyncio.CancelledError:
            # The broker is stopping. Ending normally matters: asyncio's stream callback asks a
            # cancelled connection task for its exception and logs a spurious traceback.
            pass
        finally:
            self._connections.discard(task)
            self._per_host[connection.client_host] -= 1
            if not self._per_host[connection.client_host]:
                del self._per_host[connection.client_host]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
