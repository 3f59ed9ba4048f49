"""The TCP front of the broker: size-prefixed frames in, responses out in request order.

Each connection reads frames and starts one task per request, so a slow handler (a Fetch long
poll, a JoinGroup waiting for the rebalance) does not stop the next request from being
*processed*, while responses still leave in the order the requests came, as Kafka clients
require. Memory per connection is bounded: a frame over socket.request.max.bytes is refused
before it is read, and at most queued.max.requests requests are in flight; beyond that the
reader stops reading and TCP pushes back on the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import TYPE_CHECKING, Any

from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse

from kgroups.broker.api import RequestContext
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
    """One client socket: a reader loop that dispatches and a writer loop that answers in order."""

    def __init__(
        self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._broker = broker
        self._reader = reader
        self._writer = writer
        peer = writer.get_extra_info("peername")
        self.client_host = peer[0] if isinstance(peer, tuple) else str(peer)
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        config = broker.config
        self._max_frame = config.socket_request_max_bytes
        self._idle_timeout = config.connections_max_idle_ms / 1000
        self._pending: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(
            maxsize=max(1, config.queued_max_requests)
        )

    async def serve(self) -> None:
        """Read until the client leaves or misbehaves, then deliver what is still owed to it.

        When the broker shuts down (this task is cancelled) nothing more is delivered: the
        responder and every request still in flight are cancelled instead of awaited."""
        responder = asyncio.create_task(self._respond())
        shutting_down = False
        try:
            await self._read_requests()
        except ConnectionClosed:
            pass
        except (ConnectionError, asyncio.IncompleteReadError):
            log_event(logger, logging.DEBUG, "connection_lost", peer=self.peer)
        except asyncio.CancelledError:
            shutting_down = True
            self._cancel_in_flight(responder)
            raise
        finally:
            if not shutting_down:
                await self._pending.put(None)
                with contextlib.suppress(ConnectionError):
                    await responder
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()

    def _cancel_in_flight(self, responder: asyncio.Task[None]) -> None:
        responder.cancel()
        while not self._pending.empty():
            task = self._pending.get_nowait()
            if task is not None:
                task.cancel()

    def _refuse(self, reason: str, **fields: Any) -> ConnectionClosed:
        log_event(logger, logging.WARNING, "connection_closed", peer=self.peer, reason=reason,
                  **fields)
        return ConnectionClosed(reason)

    async def _read_frame(self) -> bytes | None:
        # asyncio.timeout rather than wait_for: wait_for wraps each read in a new task, a
        # measurable cost on every request.
        try:
            async with asyncio.timeout(self._idle_timeout):
                prefix = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise self._refuse("truncated_size_prefix", received=len(exc.partial)) from None
            return None
        except TimeoutError:
            raise self._refuse("idle", idle_ms=int(self._idle_timeout * 1000)) from None
        (size,) = _SIZE.unpack(prefix)
        if size < 0 or size > self._max_frame:
            raise self._refuse("frame_size_invalid", size=size, limit=self._max_frame)
        try:
            async with asyncio.timeout(self._idle_timeout):
                return await self._reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            raise self._refuse("truncated_frame", size=size, received=len(exc.partial)) from None
        except TimeoutError:
            raise self._refuse("frame_stalled", size=size) from None

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
                await self._enqueue(self._unsupported_api_versions(correlation_id))
                continue
            try:
                request = decode_request(frame)
            except FrameDecodeError as exc:
                raise self._refuse("malformed_request", api_key=api_key, version=api_version,
                                   error=exc) from None
            ctx = RequestContext(api_key, api_version, correlation_id, request.client_id,
                                 self.client_host, self._broker)
            await self._enqueue(self._dispatch(handler, ctx, request.body))

    async def _enqueue(self, work: Any) -> None:
        await self._pending.put(asyncio.create_task(work))

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

    async def _respond(self) -> None:
        """Answer in request order; a failing handler closes the connection (Kafka's behaviour
        for an exception it cannot map to an error code) after logging it."""
        failed = False
        while (task := await self._pending.get()) is not None:
            if failed:
                task.cancel()
                continue
            try:
                data = await task
            except Exception as exc:
                logger.exception("handler failed peer=%s", self.peer)
                log_event(logger, logging.ERROR, "connection_closed", peer=self.peer,
                          reason="handler_failed", error=repr(exc))
                failed = True
                self._reader.feed_eof()
                self._writer.close()
                continue
            if data is None:
                continue
            try:
                self._writer.write(data)
                await self._writer.drain()
            except ConnectionError:
                failed = True
                self._reader.feed_eof()


class BrokerServer:
    """Accepts connections; each runs independently so one bad client affects only itself."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await Connection(self._broker, reader, writer).serve()
        except asyncio.CancelledError:
            # The broker is stopping. Ending normally matters: asyncio's stream callback asks a
            # cancelled connection task for its exception and logs a spurious traceback.
            pass
        finally:
            self._connections.discard(task)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
