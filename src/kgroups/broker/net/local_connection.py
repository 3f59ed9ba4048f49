"""A client socket of the broker process: size-prefixed frames in, responses out in request order.

The broker process serves its own sockets this way (a task per request that waits; those usually
answered at once are run as they are read, `first_step`); a network process
relays its clients' frames with `client_relay`, which keeps the same limits (the rules both
follow are `connection`'s functions) without a task per request. A slow request (a Fetch long
poll, a JoinGroup waiting for the rebalance) does not stop the next one from being *processed*,
while responses still leave in the order the requests came, as Kafka clients require. Memory per
connection is bounded: the socket is read at most 64 KiB (_READ) ahead of the frame being read;
a frame over socket.request.max.bytes (sasl.server.max.receive.size until a SASL client has
authenticated) is refused by its size prefix; at most queued.max.requests requests are in
flight; and reading pauses while the client leaves its responses unread, TCP then pushing back
on the client.

Memory across connections is bounded by one MemoryBudget (queued.max.request.bytes): a frame's
size is reserved before more of its body than that one read brought is read, and responses
count until the kernel has taken them. Responses wait in a per-connection queue of separate
bytes objects and go to the transport only when its buffer is empty: asyncio's transport would
otherwise copy every unread response into one ever-growing bytearray, whose size the budget
could not follow.

The path is kept cheap because it runs for every request: the frames one read brought whole are
cut out of it without an await (a pipelining client's requests arrive several to a read),
answers that become ready in the same event-loop iteration leave in one write (one system call,
not one per answer), a finished request updates the budget once for its frame and its answer
together, and the common case (room in the budget, nothing unread by the client) costs no
waiter, closure or extra event-loop turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from kgroups.broker.events import log_event
from kgroups.broker.net import first_step
from kgroups.broker.net.connection import (
    FRAMES_IN_A_ROW,
    SIZE_PREFIX,
    Refusal,
    frame_refusal,
    idle_recheck_in,
    next_write,
    reset,
    set_buffer,
)
from kgroups.broker.net.request_intake import (
    failed_request,
    failed_session,
    framed,
    request_work,
)

if TYPE_CHECKING:
    from kgroups.broker.apis.contract import HandlerServices, RequestContext
    from kgroups.broker.security.state import Session

logger = logging.getLogger("kgroups.server")

# Frames up to this size are read in one go; larger ones grow a buffer chunk by chunk as their
# bytes arrive, so an announced size is never allocated before the client has sent it.
_CHUNK = 256 * 1024
# What one read asks the stream for at least: every frame it holds whole is then cut out of
# it without another await (a pipelining client's requests arrive several to a read).
_READ = 64 * 1024


def _wake(waiter: asyncio.Future[None] | None) -> None:
    """Let whoever waits on `waiter` go on (unless it gave up: cancelled)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class FrameCutShortError(Exception):
    """The client closed in the middle of a large frame, after `received` of its bytes."""

    def __init__(self, received: int) -> None:
        super().__init__(f"frame cut short after {received} bytes")
        self.received = received


class ConnectionClosed(Exception):
    """Raised inside a connection to stop reading; the reason is already logged."""


class LocalConnection:
    """One client socket whose requests are answered in this process. The reader loop starts a
    task per request (or answers it at once, `first_step`); each completion moves, in request
    order, every response that is ready to the send queue, which is written once per event-loop
    iteration. No responder task sits between them: on a busy connection that saves several
    event-loop turns per request."""

    def __init__(self, broker: HandlerServices, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, session: Session) -> None:
        config = broker.config
        self._broker = broker
        self.session = session
        self._reader = reader
        self._writer = writer
        self._transport = writer.transport  # (the writer's property is a Python call)
        self._loop = asyncio.get_running_loop()
        peer = writer.get_extra_info("peername")
        self.client_host = peer[0] if isinstance(peer, tuple) else str(peer)
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._max_frame = config.socket_request_max_bytes
        self._max_frame_unauthenticated = config.sasl_server_max_receive_size
        self._idle_timeout = config.connections_max_idle_ms / 1000
        self._max_in_flight = max(1, config.queued_max_requests)
        # Requests in arrival order; the head is the next response owed to the client.
        self._in_flight: deque[asyncio.Future[bytes | None]] = deque()
        # Each open request's frame reservation, until its handler finishes.
        self._reserved: dict[asyncio.Future[Any], int] = {}
        # Futures made only when someone waits, so the common case pays for neither: the
        # reader's, resolved when fewer than _max_in_flight requests are open again; and
        # `_all_answered`'s, resolved when nothing is in flight any more.
        self._room_waiter: asyncio.Future[None] | None = None
        self._answered_waiter: asyncio.Future[None] | None = None
        self._last_activity = self._loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False  # a close reason has been logged; stop reading and answering
        # What this connection holds against the broker's MemoryBudget: frames reserved (until
        # their request's handler finishes), responses computed but not yet handed to the
        # transport, and what the transport's buffer still holds.
        self._budget = broker.memory
        self._gone = False  # forgotten by the budget: no more accounting
        self._frames_held = 0
        self._frame_reserved = 0  # reservation of the frame just read, until _submit takes it
        # Bytes read and not yet cut into frames, from _position on (at most _READ of them
        # beyond the frame being read, which is reserved in the budget first).
        self._inbox = b""
        self._position = 0
        self._max_buffered_frame = min(self._max_frame, _CHUNK)
        # A large frame's buffer and the read-only view handed out, freed once it is decoded.
        self._large_frame: tuple[bytearray, memoryview] | None = None
        self._in_a_row = 0  # requests read since the reader last waited for the client
        self._unsent = 0
        self._in_transport = 0
        self._ready: deque[bytes] = deque()  # answers in order, waiting for the transport
        self._pump_due = False  # a _pump is scheduled for this loop iteration
        self._drainer: asyncio.Task[None] | None = None
        set_buffer(writer.get_extra_info("socket"), socket.SO_SNDBUF,
                    config.socket_send_buffer_bytes)
        # The transport reports "drained" only once its buffer is empty, so what it holds for
        # this connection is known exactly; the kernel's send buffer is the slack instead.
        writer.transport.set_write_buffer_limits(high=0)

    def _start(self, frame: bytes | memoryview) -> tuple[Coroutine[Any, Any, bytes | None], bool]:
        """The work answering `frame` and whether it may run at once; Refusal closes the
        connection."""
        return request_work(self._broker, self.session, self.client_host, self.peer, frame,
                            self._dispatch)

    async def _dispatch(self, handler: Any, ctx: RequestContext, body: Any) -> bytes | None:
        """Run the handler once the budget has room for its answer (or this connection's
        client reads its answers and the headroom has some); the answer counts from here, at
        once, before the next handler checks the budget."""
        budget = self._budget
        if not budget.allows(0, self._light):
            await budget.wait_for(lambda: budget.allows(0, self._light))
        data = framed(ctx, await handler(ctx, body))
        task = asyncio.current_task(self._loop)
        if task in self._reserved:  # not when run at once: the reader's own task runs it
            self._settle(task, data)
        return data

    async def _all_answered(self) -> None:
        """Until nothing is in flight."""
        if self._in_flight:
            if self._answered_waiter is None:
                self._answered_waiter = self._loop.create_future()
            await asyncio.shield(self._answered_waiter)

    def _answered(self) -> None:
        """Nothing is in flight: whoever waits for that goes on."""
        waiter, self._answered_waiter = self._answered_waiter, None
        _wake(waiter)

    def _failed(self, error: BaseException) -> None:
        """A request raised: close the connection, logging why."""
        level, reason, fields = failed_request(error, self.peer)
        self._close(level, reason, **fields)

    def _authenticating(self) -> bool:
        """Whether this is a SASL connection whose client has not authenticated yet: its
        frames are then limited to sasl.server.max.receive.size."""
        return not self.session.authenticated

    def _closes_after(self) -> bool:
        """Called after each answer of a session whose authentication failed, in order, once
        queued: True closes the connection (logged here) and drops the requests behind it."""
        close = failed_session(self.session)
        if close is None:
            return False
        level, reason, fields = close
        self._close(level, reason, **fields)
        return True

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
        except ConnectionError:
            log_event(logger, logging.DEBUG, "connection_lost", peer=self.peer)
        except asyncio.CancelledError:
            shutting_down = True
            self._cancel_in_flight()
            raise
        finally:
            self._idle_timer.cancel()
            try:
                if self._transport.is_closing():
                    # Closed by us or lost (a client that leaves without reading resets the
                    # connection): nothing more can be delivered, so nothing more is computed.
                    self._cancel_in_flight()
                elif not shutting_down:
                    await self._all_answered()
            finally:
                # Reached with requests still open only when the broker stops while this
                # connection waits for them (a client gone with a Fetch long poll in flight):
                # they are cancelled and the socket closed, not left to the dying event loop.
                self._cancel_in_flight()
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
        self._answered()

    def _close(self, level: int | None, reason: str, **fields: Any) -> None:
        """Log why (once; level None: the broker process logged it) and close the socket;
        the reader then sees EOF and stops."""
        if self._closed:
            return
        self._closed = True
        if level is not None:
            log_event(logger, level, "connection_closed", peer=self.peer, reason=reason,
                      **fields)
        self._close_writer()
        self._budget.recheck()  # a frame of ours waiting for room need not wait any more

    def _close_writer(self) -> None:
        """Hand every queued answer to the transport, which sends them before closing (or
        drop them if it is already closing)."""
        if self._transport.is_closing():
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
        self.abort()

    def abort(self) -> None:
        """Reset the connection, dropping every answer not yet sent (the close is logged)."""
        self._closed = True
        self._gone = True
        self._budget.forget(self)
        self._ready.clear()
        self._large_frame = None
        self._cancel_in_flight()
        reset(self._transport)

    def _refuse(self, reason: str, **fields: Any) -> ConnectionClosed:
        self._close(logging.WARNING, reason, **fields)
        return ConnectionClosed(reason)

    def _check_idle(self) -> None:
        delay = idle_recheck_in(self._loop.time() - self._last_activity, self._idle_timeout,
                                bool(self._in_flight))
        if delay is not None:
            self._idle_timer = self._loop.call_later(delay, self._check_idle)
            return
        self._close(logging.WARNING, "idle", idle_ms=int(self._idle_timeout * 1000))

    def _buffered_frame(self) -> bytes | None:
        """The next frame when it is already read whole and nothing holds it back, the common
        case of a client that pipelines small requests: checked, reserved and cut out of the
        inbox without an await. None sends the reader to `_read_frame`, which waits for what
        is missing (bytes, room in the budget, a SASL client's previous answer) or refuses."""
        inbox = self._inbox
        position = self._position
        if len(inbox) - position < SIZE_PREFIX.size or not self.session.authenticated:
            return None
        (size,) = SIZE_PREFIX.unpack_from(inbox, position)
        end = position + SIZE_PREFIX.size + size
        if not 0 <= size <= self._max_buffered_frame or end > len(inbox) \
                or not self._budget.allows(size, self._light):
            return None
        self._frames_held += size
        self._frame_reserved = size
        self._account()
        self._position = end
        self._last_activity = self._loop.time()
        return inbox[end - size:end]

    async def _read_frame(self) -> bytes | memoryview | None:
        if self._in_flight and self._authenticating():
            # Until the client has authenticated, Kafka takes one frame at a time: each is
            # decided, and limited, in the state the ones before it left (a SaslAuthenticate
            # pipelined behind its handshake, a large request behind the SaslAuthenticate).
            await self._all_answered()
            if self._closed:
                return None
        if not await self._fill(SIZE_PREFIX.size):
            received = len(self._inbox) - self._position
            if received and not self._closed:
                raise self._refuse("truncated_size_prefix", received=received)
            return None
        (size,) = SIZE_PREFIX.unpack_from(self._inbox, self._position)
        self._position += SIZE_PREFIX.size
        refusal = frame_refusal(size, self._max_frame, self._max_frame_unauthenticated,
                                self._authenticating())
        if refusal is not None:
            reason, fields = refusal
            raise self._refuse(reason, **fields)
        if not self._budget.allows(size, self._light):
            await self._budget.wait_for(
                lambda: self._closed or self._budget.allows(size, self._light))
        if self._closed:  # closed (idle, a failed handler) while waiting for room
            return None
        self._frames_held += size
        self._frame_reserved = size
        self._account()
        frame: bytes | memoryview
        if size <= _CHUNK:
            if await self._fill(size):
                frame = self._inbox[self._position:self._position + size]
                self._position += size
                self._last_activity = self._loop.time()
                return frame
            received = len(self._inbox) - self._position
        else:
            try:
                frame = await self._read_large_frame(size)
            except FrameCutShortError as exc:
                received = exc.received
            else:
                self._last_activity = self._loop.time()
                return frame
        if self._closed:
            return None
        raise self._refuse("truncated_frame", size=size, received=received) from None

    async def _fill(self, count: int) -> bool:
        """Read until the inbox holds `count` bytes past its position; False when the client
        closed first. A read asks for what is missing or _READ, whichever is more, so bytes
        not yet reserved in the budget stay under _READ."""
        while (missing := count - (len(self._inbox) - self._position)) > 0:
            data = await self._reader.read(max(missing, _READ))
            self._in_a_row = 0  # it waited for the client: the others had their turn
            if not data:
                return False
            self._inbox = self._inbox[self._position:] + data
            self._position = 0
        return True

    async def _read_large_frame(self, size: int) -> memoryview:
        """The frame's bytes as they come (resident memory follows what the client really
        sent), in one buffer that _submit frees once the request is decoded."""
        body = bytearray(self._inbox[self._position:self._position + size])
        self._inbox = b""  # it held less than the frame: all of it is the frame's
        self._position = 0
        while len(body) < size:
            chunk = await self._reader.read(min(_CHUNK, size - len(body)))
            if not chunk:  # the count alone: a copy of what came would double its memory
                raise FrameCutShortError(len(body))
            body += chunk
        view = memoryview(body).toreadonly()
        self._large_frame = (body, view)
        return view

    async def _read_requests(self) -> None:
        while True:
            frame: bytes | memoryview | None = self._buffered_frame()
            if frame is None and (frame := await self._read_frame()) is None:
                return
            try:
                work, at_once = self._start(frame)
            except Refusal as refusal:
                raise self._refuse(refusal.reason, **refusal.fields) from None
            except Exception as error:  # its schema could not be loaded (EMFILE), say
                self._failed(error)
                raise ConnectionClosed("handler_failed") from None
            await self._submit(work, at_once)
            if self._closed:  # a request answered at once failed: read nothing more
                return
            self._in_a_row += 1
            if self._in_a_row == FRAMES_IN_A_ROW:
                # The other connections' turn (see the constant): only a client with that many
                # requests read since it last waited for bytes yields, one keeping a few in
                # flight never does.
                self._in_a_row = 0
                await asyncio.sleep(0)

    async def _submit(self, work: Coroutine[Any, Any, bytes | None], at_once: bool) -> None:
        """Start a request (its first step at once, if `at_once`: `first_step`); then, before
        reading on, wait while too many are open or while the client is not reading its
        responses (the transport still holds some).

        The frame's reservation stays until the request's handler has finished (its decoded
        copy lives that long); a large frame's own buffer is freed now."""
        if self._large_frame is not None:
            body, view = self._large_frame
            self._large_frame = None
            with contextlib.suppress(BufferError):  # a slice still alive frees it later
                view.release()
                body.clear()
        # At once only behind nothing: a connection's requests reach the coordinator in the
        # order they came (an OffsetFetch behind a commit still to start sees the commit), as
        # Kafka takes a connection's requests one after another.
        in_flight = self._in_flight
        task = (first_step.start(self._loop, work) if at_once and not in_flight
                else self._loop.create_task(work))
        self._reserved[task] = self._frame_reserved
        self._frame_reserved = 0
        in_flight.append(task)
        if task.done():  # answered (or failed) at once
            self._finished(task)
        else:
            task.add_done_callback(self._finished)
        if len(in_flight) >= self._max_in_flight:
            self._room_waiter = self._loop.create_future()
            await self._room_waiter
        # The transport holds something only while the client has not read it (it is paused
        # then), and a closing one tells drain() that the connection is lost.
        if self._in_transport or self._transport.is_closing():
            await self._writer.drain()

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
        self._in_transport = self._transport.get_write_buffer_size()

    def _pump(self) -> None:
        """Send queued answers while the transport's buffer is empty, those ready together in
        one write; when it is not, a drainer task waits for it to empty (the client read) and
        pumps again."""
        self._pump_due = False
        ready = self._ready
        if not self._transport.is_closing():
            while ready and not self._in_transport:
                self._send(next_write(ready))
                self._last_activity = self._loop.time()
        self._account()
        if self._in_transport and self._drainer is None and not self._transport.is_closing():
            self._drainer = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError):
            return
        finally:
            self._drainer = None
        self._in_transport = self._transport.get_write_buffer_size()
        self._pump()

    def _finished(self, task: asyncio.Future[bytes | None]) -> None:
        """A request is done: unless its handler already did (`_settle` from inside it), its
        frame stops counting and its answer starts to; then the answers ready at the head move
        to the send queue."""
        if task in self._reserved:
            data = None
            if not task.cancelled() and task.exception() is None:
                data = task.result()
            self._settle(task, data)
        self._flush()

    def _settle(self, task: asyncio.Future[bytes | None], data: bytes | None) -> None:
        """The request's frame stops counting and its answer starts to, in one update."""
        self._frames_held -= self._reserved.pop(task, 0)
        if data is not None:
            self._unsent += len(data)
        self._account()

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
            if error is not None:
                self._failed(error)
                self._cancel_in_flight()
                break
            data = task.result()
            if data is not None:
                if self._closed or self._transport.is_closing():
                    self._unsent -= len(data)
                else:
                    self._ready.append(data)
            if self.session.failure is not None and self._closes_after():
                self._cancel_in_flight()
                break
        if self._ready and not self._closed:
            if not self._pump_due:
                self._pump_due = True
                self._loop.call_soon(self._pump)
        else:
            self._pump()
        if self._room_waiter is not None and len(in_flight) < self._max_in_flight:
            waiter, self._room_waiter = self._room_waiter, None
            _wake(waiter)
        if not in_flight and self._answered_waiter is not None:
            self._answered()
