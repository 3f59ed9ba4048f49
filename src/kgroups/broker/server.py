"""The TCP front of the broker: size-prefixed frames in, responses out in request order.

Each connection reads frames and starts one task per request, so a slow handler (a Fetch long
poll, a JoinGroup waiting for the rebalance) does not stop the next request from being
*processed*, while responses still leave in the order the requests came, as Kafka clients
require. Memory per connection is bounded: a frame over socket.request.max.bytes is refused
before it is read, at most queued.max.requests requests are in flight, and reading pauses
while the client leaves its responses unread; TCP then pushes back on the client.

Memory across connections is bounded by one MemoryBudget (queued.max.request.bytes): a frame's
size is reserved before its body is read, and responses count until the kernel has taken them.
Responses wait in a per-connection queue of separate bytes objects and go to the transport only
when its buffer is empty: asyncio's transport would otherwise copy every unread response into
one ever-growing bytearray, whose size the budget could not follow.

The path is kept cheap because it runs for every request: answers that become ready in the same
event-loop iteration leave in one write (one system call, not one per answer), a finished
request updates the budget once for its frame and its answer together, and the common case
(room in the budget, nothing unread by the client) costs no waiter, closure or extra
event-loop turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import struct
from collections import Counter, deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse

from kgroups.broker import sasl
from kgroups.broker.api import CloseConnection, RequestContext
from kgroups.broker.connection_rate import limiter
from kgroups.broker.events import log_event
from kgroups.broker.memory_budget import MemoryBudget
from kgroups.broker.security import (
    PRE_AUTH_API_KEYS,
    Security,
    Session,
    TlsAcceptor,
    open_session,
)
from kgroups.broker.wire import (
    FrameDecodeError,
    decode_request,
    encode_response,
    kio_error,
    peek_header,
)
from kgroups.errors import ErrorCode

if TYPE_CHECKING:
    from kgroups.broker.api import HandlerServices
    from kgroups.broker.listeners import Listener

logger = logging.getLogger("kgroups.server")

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
# Frames up to this size are read in one go; larger ones grow a buffer chunk by chunk as their
# bytes arrive, so an announced size is never allocated before the client has sent it.
_CHUNK = 256 * 1024
# Answers ready together are joined into one write up to this size; a larger answer (a Fetch)
# goes alone, so joining never copies much.
_COALESCE = 64 * 1024
_LINGER_RESET = struct.pack("ii", 1, 0)  # struct linger {l_onoff = 1, l_linger = 0}


def _set_buffer(sock: Any, option: int, size: int) -> None:
    """socket.send.buffer.bytes / socket.receive.buffer.bytes (-1: leave the OS default)."""
    if sock is not None and size > 0:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, size)


class ConnectionClosed(Exception):
    """Raised inside a connection to stop reading; the reason is already logged."""


class Connection:
    """One client socket. The reader loop starts a task per request; each task's completion
    moves, in request order, every response that is ready to the send queue, which is written
    once per event-loop iteration. No responder task sits between them: on a busy connection
    that saves several event-loop turns per request."""

    def __init__(
        self, broker: HandlerServices, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter, session: Session
    ) -> None:
        self._broker = broker
        self.session = session
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
        # Each open request's frame reservation, until its handler finishes.
        self._reserved: dict[asyncio.Task[Any], int] = {}
        self._room = asyncio.Event()  # set while fewer than _max_in_flight requests are open
        self._room.set()
        self._all_answered = asyncio.Event()  # set while nothing is in flight
        self._all_answered.set()
        self._last_activity = self._loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False  # a close reason has been logged; stop reading and answering
        # What this connection holds against the broker's MemoryBudget: frames reserved (until
        # their request's handler finishes), responses computed but not yet handed to the
        # transport, and what the transport's buffer still holds.
        self._budget: MemoryBudget = broker.memory
        self._gone = False  # forgotten by the budget: no more accounting
        self._frames_held = 0
        self._frame_reserved = 0  # reservation of the frame just read, until _submit takes it
        # A large frame's buffer and the read-only view handed out, freed once it is decoded.
        self._large_frame: tuple[bytearray, memoryview] | None = None
        self._unsent = 0
        self._in_transport = 0
        self._ready: deque[bytes] = deque()  # answers in order, waiting for the transport
        self._pump_due = False  # a _pump is scheduled for this loop iteration
        self._drainer: asyncio.Task[None] | None = None
        _set_buffer(writer.get_extra_info("socket"), socket.SO_SNDBUF,
                    config.socket_send_buffer_bytes)
        # The transport reports "drained" only once its buffer is empty, so what it holds for
        # this connection is known exactly; the kernel's send buffer is the slack instead.
        writer.transport.set_write_buffer_limits(high=0)

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
            if self._writer.transport.is_closing():
                # Closed by us or lost (a client that leaves without reading resets the
                # connection): nothing more can be delivered, so nothing more is computed.
                self._cancel_in_flight()
            elif not shutting_down:
                await self._all_answered.wait()
            self._close_writer()
            try:
                with contextlib.suppress(ConnectionError, OSError):
                    await self._writer.wait_closed()
            finally:
                self._gone = True
                self._budget.forget(self)

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
        self._close_writer()
        self._budget.recheck()  # a frame of ours waiting for room need not wait any more

    def _close_writer(self) -> None:
        """Hand every queued answer to the transport, which sends them before closing (or
        drop them if it is already closing)."""
        if self._writer.is_closing():
            self._unsent -= sum(map(len, self._ready))
            self._ready.clear()
        while self._ready:
            self._send(self._ready.popleft())
        self._account()
        self._writer.close()

    def evict(self, held: int, total: int, limit: int) -> None:
        """The memory budget stayed exhausted and this connection holds the most: close it at
        once (abort: a client that reads nothing would keep a graceful close waiting forever)
        and drop what it holds."""
        if not self._closed:
            self._closed = True
            log_event(logger, logging.WARNING, "connection_closed", peer=self.peer,
                      reason="memory_budget", held=held, total=total, limit=limit)
        self._gone = True
        self._ready.clear()
        self._large_frame = None
        self._cancel_in_flight()
        # Linger 0: the close resets the connection, dropping what the kernel still holds for
        # a client that reads nothing (a FIN would wait behind those bytes indefinitely).
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        self._writer.transport.abort()

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

    async def _read_frame(self) -> bytes | memoryview | None:
        try:
            prefix = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError as exc:
            if exc.partial and not self._closed:
                raise self._refuse("truncated_size_prefix", received=len(exc.partial)) from None
            return None
        (size,) = _SIZE.unpack(prefix)
        if size < 0 or size > self._max_frame:
            raise self._refuse("frame_size_invalid", size=size, limit=self._max_frame)
        if not self._budget.allows(size, self._light):
            await self._budget.wait_for(
                lambda: self._closed or self._budget.allows(size, self._light))
        if self._closed:  # closed (idle, a failed handler) while waiting for room
            return None
        self._frames_held += size
        self._frame_reserved = size
        self._account()
        try:
            if size <= _CHUNK:
                frame: bytes | memoryview = await self._reader.readexactly(size)
            else:
                frame = await self._read_large_frame(size)
        except asyncio.IncompleteReadError as exc:
            if self._closed:
                return None
            raise self._refuse("truncated_frame", size=size, received=len(exc.partial)) from None
        self._last_activity = self._loop.time()
        return frame

    async def _read_large_frame(self, size: int) -> memoryview:
        """The frame's bytes as they come (resident memory follows what the client really
        sent), in one buffer that _submit frees once the request is decoded."""
        body = bytearray()
        while len(body) < size:
            chunk = await self._reader.read(min(_CHUNK, size - len(body)))
            if not chunk:
                raise asyncio.IncompleteReadError(body, size)
            body += chunk
        view = memoryview(body).toreadonly()
        self._large_frame = (body, view)
        return view

    async def _read_requests(self) -> None:
        registry = self._broker.registry
        while (frame := await self._read_frame()) is not None:
            if self.session.raw_tokens:
                await self._submit(self._raw_sasl_token(bytes(frame)))
                continue
            try:
                api_key, api_version, correlation_id = peek_header(frame)
            except FrameDecodeError:
                raise self._refuse("frame_too_short", size=len(frame)) from None
            if not self.session.authenticated and api_key not in PRE_AUTH_API_KEYS:
                raise self._refuse("unauthenticated_request", api_key=api_key,
                                   listener=self.session.listener.name)
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
                                 self.client_host, self._broker, self.session)
            await self._submit(self._dispatch(handler, ctx, request.body))

    async def _submit(self, work: Coroutine[Any, Any, bytes | None]) -> None:
        """Start a request; then, before reading on, wait while too many are open or while
        the client is not reading its responses (the transport still holds some).

        The frame's reservation stays until the request's handler has finished (its decoded
        copy lives that long); a large frame's own buffer is freed now."""
        if self._large_frame is not None:
            body, view = self._large_frame
            self._large_frame = None
            with contextlib.suppress(BufferError):  # a slice still alive frees it later
                view.release()
                body.clear()
        task = self._loop.create_task(work)
        self._reserved[task] = self._frame_reserved
        self._frame_reserved = 0
        self._in_flight.append(task)
        self._all_answered.clear()
        if len(self._in_flight) >= self._max_in_flight:
            self._room.clear()
        task.add_done_callback(self._finished)
        if not self._room.is_set():
            await self._room.wait()
        # The transport holds something only while the client has not read it (it is paused
        # then), and a closing one tells drain() that the connection is lost.
        if self._in_transport or self._writer.transport.is_closing():
            await self._writer.drain()

    async def _raw_sasl_token(self, token: bytes) -> bytes | None:
        reply = await sasl.raw_token(self.session, token)
        return None if reply is None else _SIZE.pack(len(reply)) + reply

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
        """Run the handler once the budget has room for its answer (or this connection's
        client reads its answers and the headroom has some); the answer counts from here."""
        budget = self._budget
        if not budget.allows(0, self._light):
            await budget.wait_for(lambda: budget.allows(0, self._light))
        response = await handler(ctx, body)
        data = None if response is None else encode_response(ctx.correlation_id, response)
        # At once, before another handler checks the budget: the frame stops counting and the
        # answer starts to, in one update.
        self._frames_held -= self._reserved.pop(asyncio.current_task(), 0)  # type: ignore[arg-type]
        if data is not None:
            self._unsent += len(data)
        self._account()
        return data

    @property
    def _light(self) -> bool:
        """The client has taken every answer so far: it may use the budget's headroom."""
        return not (self._unsent or self._in_transport)

    def _account(self) -> None:
        if not self._gone:
            self._budget.set_held(self, self._frames_held + self._unsent + self._in_transport)

    def _send(self, data: bytes) -> None:
        self._writer.write(data)
        self._unsent -= len(data)
        self._in_transport = self._writer.transport.get_write_buffer_size()

    def _pump(self) -> None:
        """Send queued answers while the transport's buffer is empty, those ready together in
        one write; when it is not, a drainer task waits for it to empty (the client read) and
        pumps again."""
        self._pump_due = False
        ready = self._ready
        if not self._writer.is_closing():
            while ready and not self._in_transport:
                data = ready.popleft()
                if ready and len(data) < _COALESCE:
                    batch = [data]
                    size = len(data)
                    while ready and size + len(ready[0]) <= _COALESCE:
                        data = ready.popleft()
                        batch.append(data)
                        size += len(data)
                    data = b"".join(batch)
                self._send(data)
                self._last_activity = self._loop.time()
        self._account()
        if self._in_transport and self._drainer is None and not self._writer.is_closing():
            self._drainer = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError):
            return
        finally:
            self._drainer = None
        self._in_transport = self._writer.transport.get_write_buffer_size()
        self._pump()

    def _finished(self, task: asyncio.Task[bytes | None]) -> None:
        """A request is done: its frame stops counting if its handler did not release it (the
        request failed, was cancelled, or was not a handler's); then the answers ready at the
        head move to the send queue."""
        reserved = self._reserved.pop(task, 0)
        if reserved:
            self._frames_held -= reserved
            self._account()
        self._flush()

    def _flush(self) -> None:
        """Queue every response that is ready at the head, in request order, and have them
        written once this loop iteration's other finished requests have queued theirs. A
        failing handler closes the connection (Kafka's behaviour for an exception it cannot map
        to an error code) after logging it; the requests behind it are cancelled."""
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
            if data is not None:
                if self._closed or self._writer.is_closing():
                    self._unsent -= len(data)
                else:
                    self._ready.append(data)
            if self.session.failure is not None:  # answered; now close, as Kafka does
                fields = dict(self.session.failure)
                self._close(logging.WARNING, fields.pop("reason", "authentication_failed"),
                            listener=self.session.listener.name, **fields)
                self._cancel_in_flight()
                break
        if self._ready and not self._closed:
            if not self._pump_due:
                self._pump_due = True
                self._loop.call_soon(self._pump)
        else:
            self._pump()
        if len(in_flight) < self._max_in_flight:
            self._room.set()
        if not in_flight:
            self._all_answered.set()


class BrokerServer:
    """Accepts connections; each runs independently so one bad client affects only itself.
    max.connections and max.connections.per.ip (Kafka's names; unlimited by default) cap how
    many a host, or everyone, may hold, so many idle sockets cannot exhaust the broker."""

    def __init__(self, broker: HandlerServices, security: Security) -> None:
        self._broker = broker
        self._security = security
        self._servers: list[asyncio.Server] = []
        self._bound: dict[str, tuple[str, int]] = {}
        # Connections not yet served: waiting for max.connection.creation.rate, or in TLS.
        self._handshakes: set[asyncio.Task[None]] = set()
        properties = broker.config.properties
        self._rates = {listener.name: [rate for rate in (
            limiter(properties.get(listener.prefix() + "max.connection.creation.rate")),
            limiter(properties.get("max.connection.creation.rate"))) if rate is not None]
            for listener in security.listeners}
        self._connections: set[asyncio.Task[None]] = set()
        self._per_host: Counter[str] = Counter()

    async def start(self) -> dict[str, tuple[str, int]]:
        """Listen on every listener; returns each one's bound address by listener name."""
        bound: dict[str, tuple[str, int]] = {}
        for listener in self._security.listeners:
            serve = functools.partial(self._accept, listener)
            if listener.uses_tls:
                context = self._security.ssl_contexts[listener.name]
                server = await asyncio.get_running_loop().create_server(
                    functools.partial(TlsAcceptor, context, listener, serve, self._handshakes,
                                      functools.partial(self._admit, listener)),
                    listener.host, listener.port, reuse_address=True)
            else:
                server = await asyncio.start_server(serve, listener.host, listener.port,
                                                    reuse_address=True)
            self._servers.append(server)
            # Set on the listening socket, as Kafka does, so accepted connections start with it
            # (the TCP window is agreed at the handshake).
            for sock in server.sockets:
                _set_buffer(sock, socket.SO_RCVBUF,
                            self._broker.config.socket_receive_buffer_bytes)
            sockname = server.sockets[0].getsockname()
            bound[listener.name] = (sockname[0], sockname[1])
        self._bound = bound
        return bound

    def _over_limit(self, host: str) -> str | None:
        config = self._broker.config
        if 0 <= config.max_connections <= len(self._connections):
            return "max_connections"
        if 0 <= config.max_connections_per_ip <= self._per_host[host]:
            return "max_connections_per_ip"
        return None

    async def _admit(self, listener: Listener) -> None:
        """Wait for max.connection.creation.rate (the listener's, then the broker's)."""
        for rate in self._rates[listener.name]:
            await rate.admit()

    async def _accept(self, listener: Listener, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if not listener.uses_tls and self._rates[listener.name]:  # TLS waited before its handshake
            self._handshakes.add(task)
            try:
                await self._admit(listener)
            except asyncio.CancelledError:  # stopping; see below for why this ends normally
                writer.close()
                return
            finally:
                self._handshakes.discard(task)
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else str(peer)
        limit = self._over_limit(host)
        if limit is not None:
            log_event(logger, logging.WARNING, "connection_refused",
                      peer=f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else peer,
                      reason=limit)
            writer.close()
            return
        self._connections.add(task)
        self._per_host[host] += 1
        try:
            session = open_session(self._security, listener, self._bound[listener.name][1],
                                   writer)
            await Connection(self._broker, reader, writer, session).serve()
        except asyncio.CancelledError:
            # The broker is stopping. Ending normally matters: asyncio's stream callback asks a
            # cancelled connection task for its exception and logs a spurious traceback.
            pass
        finally:
            self._connections.discard(task)
            self._per_host[host] -= 1
            if not self._per_host[host]:
                del self._per_host[host]

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for task in [*self._handshakes, *self._connections]:
            task.cancel()
        await asyncio.gather(*self._handshakes, return_exceptions=True)
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in servers:
            await server.wait_closed()
