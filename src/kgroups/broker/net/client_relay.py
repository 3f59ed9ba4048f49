"""A client socket of a network process, relayed to the broker process frame by frame.

The broker process's own sockets (`local_connection.LocalConnection`) start a task per request
and need a future per request to put the answers back in order. A network process needs neither:
it only passes frames on, and the broker process sends a connection's answers back in request
order (`relay_channel`). So this is an asyncio Protocol that cuts frames out of the bytes as
they arrive and hands each straight to the channel, and writes each answer as it comes: no task,
future or stream await per request. That bookkeeping was most of the network process's cost per
request (bench/RESULTS.md, "a relay without a future per frame").

The limits are `LocalConnection`'s, kept the same way: a frame over socket.request.max.bytes (or
sasl.server.max.receive.size before a SASL client has authenticated) closes the connection
before its body is read; its size is reserved in the MemoryBudget before its body is read and
stays reserved until its answer comes; at most queued.max.requests are in flight; reading pauses
while the client leaves an answer unread (the transport holds it), while a SASL client's frame
waits for its answer, and after FRAMES_IN_A_ROW frames of one read until the next event-loop
iteration, so one client's burst never delays another client's frame for long;
connections.max.idle.ms closes a connection with nothing read, written or in flight that long.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol, cast

from kgroups.broker.events import log_event
from kgroups.broker.net.connection import (
    FRAMES_IN_A_ROW,
    SIZE_PREFIX,
    frame_refusal,
    idle_recheck_in,
    next_write,
    reset,
    set_buffer,
)
from kgroups.broker.net.memory_budget import MemoryBudget
from kgroups.broker.security.state import tls_principal

if TYPE_CHECKING:
    from kgroups.broker.config import BrokerConfig
    from kgroups.broker.security.listeners import Listener

logger = logging.getLogger("kgroups.server")


class Link(Protocol):
    """What a relay tells the broker process (network_front.BrokerLink)."""

    def announce(self, relay: ClientRelay, peer: object) -> None:
        """A client connected: ask whether it may stay (`admit` or `refused` follows)."""

    def identify(self, relay: ClientRelay, principal: str) -> None:
        """The principal its TLS client certificate names, before any frame."""

    def forward(self, relay: ClientRelay, frame: bytes) -> None:
        """A frame, without its size prefix."""

    def taken(self, relay: ClientRelay, count: int) -> None:
        """The kernel took this many more bytes of the relay's answers."""

    def gone(self, relay: ClientRelay) -> None:
        """The socket is closed, whoever closed it."""


class ClientRelay(asyncio.Protocol):
    """One client connection of a network process.

    `network_front.BrokerLink` makes it with its connection id, and `admitted` when the broker
    process admitted the connection before it was made (TLS: before the handshake); otherwise
    the relay announces itself once connected and reads no frame until `admit`. The link then
    feeds it the broker process's answers in order (`answer`)."""

    def __init__(self, config: BrokerConfig, budget: MemoryBudget, link: Link,
                 connection_id: int, listener: Listener, admitted: bool) -> None:
        self.connection_id = connection_id
        self._link = link
        self.listener = listener
        self._admitted = admitted
        self._budget = budget
        self._max_frame = config.socket_request_max_bytes
        self._max_frame_unauthenticated = config.sasl_server_max_receive_size
        self._idle_timeout = config.connections_max_idle_ms / 1000
        self._max_in_flight = max(1, config.queued_max_requests)
        self._send_buffer = config.socket_send_buffer_bytes
        # A SASL listener's client authenticates in the broker process, which says so
        # (AUTHENTICATED) before the answer that authenticated it.
        self._unauthenticated = listener.uses_sasl
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self.peer = "?"
        self._inbox = bytearray()  # bytes read and not yet relayed
        self._body_size = -1  # the frame being read: its size once its prefix was taken
        self._in_flight: deque[int] = deque()  # each relayed frame's reservation, in order
        self._frames_held = 0
        self._unsent = 0  # answers queued in _ready
        self._in_transport = 0  # answers the transport holds (the client has not read them)
        self._taken = 0  # answer bytes the kernel took, not yet reported
        self._ready: deque[bytes] = deque()
        self._pump_due = False
        self._resume_due = False  # frames left in the inbox wait for the next iteration
        self._reading = True
        self._budget_wait: asyncio.Task[None] | None = None
        self._eof = False
        self._closed = False  # a close reason has been logged; nothing more is read or sent
        self._gone = False  # the socket is closed; nothing counts against the budget any more
        self._last_activity = self._loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None

    # The transport's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        set_buffer(transport.get_extra_info("socket"), socket.SO_SNDBUF, self._send_buffer)
        # The transport says it is paused as soon as it holds any answer, so what it holds is
        # known exactly; the kernel's send buffer is the slack instead.
        self._transport.set_write_buffer_limits(high=0)
        if self._admitted:
            principal = tls_principal(self.listener, transport)
            if principal is not None:
                self._link.identify(self, principal)
            self.admit()
        else:
            # Reading pauses at the first bytes (data_received), not here: uvloop starts
            # reading after this returns whatever it was told, and then ignores later pauses.
            self._link.announce(self, peer)

    def admit(self) -> None:
        """The broker process admitted the connection: serve it."""
        self._admitted = True
        self._last_activity = self._loop.time()
        self._idle_timer = self._loop.call_later(self._idle_timeout, self._check_idle)
        self._relay_frames()

    def refused(self) -> None:
        """The broker process refused the connection (and logged why)."""
        self._close(None, "refused")

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._inbox += data
        self._last_activity = self._loop.time()
        if self._admitted:
            self._relay_unless_waiting()
        else:
            self._update_reading()

    def eof_received(self) -> bool:
        """The client sent all it will: what it cut short is refused, what it asked for is
        still answered (the socket stays open for writing until then)."""
        self._eof = True
        if self._admitted:
            # The frames a limit still holds back are relayed as it lifts; then a cut-short
            # tail is refused, or the socket closes once everything is answered.
            self._relay_unless_waiting()
        # TLS cannot half-close: its transport closes whatever this says (and warns if asked
        # to stay open), so what is in flight is not delivered, as for the broker's own sockets.
        return not self.listener.uses_tls

    def pause_writing(self) -> None:
        """The client left an answer unread: stop reading its frames until it reads."""
        self._in_transport = self._pending_in_transport()
        self._update_reading()

    def resume_writing(self) -> None:
        self._in_transport = 0
        self._report_taken()
        self._pump()
        self._relay_unless_waiting()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._gone:
            return
        self._closed = True
        self._gone = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._budget_wait is not None:
            self._budget_wait.cancel()
        self._ready.clear()
        self._inbox = bytearray()
        self._budget.forget(self)
        if exc is not None:
            log_event(logger, logging.DEBUG, "connection_lost", peer=self.peer)
        self._link.gone(self)

    # Frames in.

    def _relay_frames(self) -> None:
        """Relay every whole frame the limits let through, reserving each one's size before
        its body is read; stop at the first limit (reading pauses until it lifts)."""
        inbox = self._inbox
        size = len(inbox)
        position = 0
        relayed = 0
        reserved = 0  # reserved in this pass, told to the budget once at its end
        while not self._closed:
            body = self._body_size
            if body < 0:
                if self._held_back:
                    break
                if size - position < SIZE_PREFIX.size:
                    if self._eof and size > position:
                        self._refuse("truncated_size_prefix", received=size - position)
                    break
                (body,) = SIZE_PREFIX.unpack_from(inbox, position)
                refusal = frame_refusal(body, self._max_frame, self._max_frame_unauthenticated,
                                        self._unauthenticated)
                if refusal is not None:
                    reason, fields = refusal
                    self._refuse(reason, **fields)
                    return
                if not self._budget.allows(reserved + body, self._light):
                    self._account()
                    self._wait_for_room(body)
                    break
                position += SIZE_PREFIX.size
                self._body_size = body
                self._frames_held += body
                reserved += body
            if size - position < body:
                if self._eof:
                    self._refuse("truncated_frame", size=body, received=size - position)
                break
            with memoryview(inbox) as view:
                frame = view[position:position + body].tobytes()
            position += body
            self._body_size = -1
            self._in_flight.append(body)
            self._link.forward(self, frame)
            relayed += 1
            if relayed == FRAMES_IN_A_ROW:
                # The other connections' turn (see FRAMES_IN_A_ROW): the rest of this read
                # waits for the next event-loop iteration.
                if not self._resume_due:
                    self._resume_due = True
                    self._loop.call_soon(self._resume_frames)
                break
        if reserved:
            self._account()
        del inbox[:position]
        self._update_reading()
        if self._eof:
            self._close_when_answered()

    @property
    def _held_back(self) -> bool:
        """Whether a limit holds the next frame back: queued.max.requests are in flight, the
        client left an answer unread, or a SASL client's frame waits for its answer."""
        return (len(self._in_flight) >= self._max_in_flight or self._in_transport > 0
                or (self._unauthenticated and bool(self._in_flight)))

    def _relay_unless_waiting(self) -> None:
        """Relay what a limit held back, unless the frames wait for their turn or for room in
        the budget, which relay them when it comes."""
        if not self._resume_due and self._budget_wait is None:
            self._relay_frames()

    def _resume_frames(self) -> None:
        self._resume_due = False
        self._relay_frames()

    def _wait_for_room(self, size: int) -> None:
        """The budget has no room for the next frame: wait for it (rare: a task is fine)."""
        if self._budget_wait is None:
            self._budget_wait = self._loop.create_task(self._room_for(size))

    async def _room_for(self, size: int) -> None:
        budget = self._budget
        try:
            await budget.wait_for(lambda: self._closed or budget.allows(size, self._light))
        finally:
            self._budget_wait = None
        self._relay_frames()

    def _update_reading(self) -> None:
        """Read while the limits let frames through and nothing waits in the inbox."""
        transport = self._transport
        if transport is None or self._gone:
            return
        reading = not (self._closed or not self._admitted or self._resume_due
                       or self._budget_wait is not None or self._held_back)
        if reading != self._reading:
            self._reading = reading
            if reading:
                transport.resume_reading()
            else:
                transport.pause_reading()

    # Answers out.

    def answer(self, data: bytes) -> None:
        """The broker process's answer to the oldest frame in flight (empty: none is owed)."""
        if not self._in_flight:
            return
        self._frames_held -= self._in_flight.popleft()
        if data and not self._closed:
            self._unsent += len(data)
            self._ready.append(data)
            if not self._pump_due:
                self._pump_due = True
                self._loop.call_soon(self._pump)
        else:
            self._account()  # otherwise the pump does, later in this iteration
        if self._inbox or not self._reading or self._eof:  # a limit may have held some back
            self._relay_unless_waiting()

    def authenticated(self) -> None:
        self._unauthenticated = False

    def _pump(self) -> None:
        """Send queued answers while the transport holds none, those ready together in one
        write; when it holds some (the client is not reading), resume_writing pumps again."""
        self._pump_due = False
        ready = self._ready
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        while ready and not self._in_transport:
            data = next_write(ready)
            transport.write(data)
            self._unsent -= len(data)
            self._taken += len(data)
            self._in_transport = self._pending_in_transport()
            self._last_activity = self._loop.time()
        self._report_taken()
        self._account()
        if self._eof:
            self._close_when_answered()

    def _pending_in_transport(self) -> int:
        return self._transport.get_write_buffer_size() if self._transport is not None else 0

    def _report_taken(self) -> None:
        """Once the transport holds none of them, the answers handed to it were taken by the
        kernel: the broker process stops counting them (front_link.RelayedConnection)."""
        if self._taken and not self._in_transport:
            self._link.taken(self, self._taken)
            self._taken = 0

    @property
    def _light(self) -> bool:
        """The client has taken every answer so far: it may use the budget's headroom."""
        return not (self._unsent or self._in_transport)

    def _account(self) -> None:
        if not self._gone:
            self._budget.set_held(self, self._frames_held + self._unsent + self._in_transport)

    # Closing.

    def _close_when_answered(self) -> None:
        """After the client's EOF: close once every frame it sent is relayed and answered."""
        if not (self._in_flight or self._ready or self._pump_due or self._inbox):
            self._close(None, "client_done")

    def _refuse(self, reason: str, **fields: Any) -> None:
        self._close(logging.WARNING, reason, **fields)

    def _check_idle(self) -> None:
        delay = idle_recheck_in(self._loop.time() - self._last_activity, self._idle_timeout,
                                bool(self._in_flight))
        if delay is not None:
            self._idle_timer = self._loop.call_later(delay, self._check_idle)
            return
        self._close(logging.WARNING, "idle", idle_ms=int(self._idle_timeout * 1000))

    def stop(self) -> None:
        """This process ends: hand the transport what is queued and close."""
        self._close(None, "stopping")

    def close_from_broker(self) -> None:
        """CLOSE came after this connection's last answer: write the answers that came before
        it, then close without a log line of our own (the broker process logged why)."""
        self._close(None, "closed_by_broker")

    def _close(self, level: int | None, reason: str, **fields: Any) -> None:
        """Log why (level None: not ours to log), hand the queued answers to the transport,
        which sends them before it closes, and stop reading."""
        if self._closed:
            return
        self._closed = True
        if level is not None:
            log_event(logger, level, "connection_closed", peer=self.peer, reason=reason,
                      **fields)
        transport = self._transport
        if transport is not None and not transport.is_closing():
            while self._ready:
                data = self._ready.popleft()
                transport.write(data)
                self._unsent -= len(data)
            transport.close()
        self._account()
        self._budget.recheck()  # a frame of ours waiting for room need not wait any more

    def evict(self, held: int, total: int, limit: int) -> None:
        """The memory budget stayed exhausted and this connection holds the most: close it at
        once (abort: a client that reads nothing would keep a graceful close waiting forever)
        and drop what it holds."""
        if not self._closed:
            log_event(logger, logging.WARNING, "connection_closed", peer=self.peer,
                      reason="memory_budget", held=held, total=total, limit=limit)
        self.abort()

    def abort(self) -> None:
        """Reset the connection, dropping every answer not yet sent (the close is logged)."""
        self._closed = True
        self._ready.clear()
        if self._transport is not None:
            reset(self._transport)
