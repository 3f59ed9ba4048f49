"""The channel between the network process and the broker process (see docs/architecture.md).

One Unix socket pair carries every client connection's traffic, as messages of a 9-byte header
(kind, connection id, payload length) and a payload. Messages a side produces in one event-loop
iteration leave in one write, so a busy broker pays one system call per iteration for all its
clients instead of one per client. The network process's side hands them on MESSAGES_PER_PASS
at a time, one slice per event-loop iteration; the broker process's takes every whole message
at once and slices the work itself, each connection's frames in turn (`fair_frames`).

Per connection, messages keep their order both ways: a connection's frames reach the broker
process in the order its client sent them, its answers come back in request order, and a CLOSE
follows the last answer that is to be delivered.
"""

from __future__ import annotations

import asyncio
import enum
import struct
from collections.abc import Callable
from typing import cast

HEADER = struct.Struct(">BiI")  # kind, connection id, payload length
JOIN_BELOW = 64 * 1024  # pieces smaller than this are joined into one write
# A burst handed on whole keeps both processes in step: the broker runs every frame of it, then
# sends every answer, while the network process waits; then the reverse, so neither is ever busy
# while the other is, and with a network process kgroups was slower than without. Taken in
# slices, the first answers leave while the broker still works on the rest (bench/
# network_processes.py: x0.73-0.87 of one process before, x1.13-1.38 after).
MESSAGES_PER_PASS = 32


class Kind(enum.IntEnum):
    # network process -> broker process
    OPEN = 1  # a client connected: "listener\0host\0port"; answered by ADMIT or CLOSE
    IDENTITY = 2  # the principal its TLS client certificate names, before any FRAME
    FRAME = 3  # one request frame, without its size prefix
    GONE = 4  # the client's socket is closed; nothing more is owed to it
    READY = 5  # the network process serves every listener (connection id 0)
    TAKEN = 6  # the kernel took this many more bytes of the connection's answers (8 bytes)
    # broker process -> network process
    ADMIT = 11  # serve the connection OPEN announced
    ANSWER = 12  # the next answer owed, framed; empty when the request gets none (acks=0)
    CLOSE = 13  # close once the answers sent before this are written; the broker logged why
    ABORT = 14  # close at once, dropping what is unsent (memory budget); the broker logged why
    AUTHENTICATED = 15  # the SASL client authenticated: sent before the answer that did it


# kind (a Kind's value), connection id, payload
Receiver = Callable[[int, int, bytes], None]


class Channel(asyncio.Protocol):
    """Either end of the channel: `send` queues a message, `receive` gets each one whole."""

    def __init__(self, receive: Receiver, lost: Callable[[], None],
                 per_pass: int | None = MESSAGES_PER_PASS,
                 handed: Callable[[], None] | None = None) -> None:
        self._receive = receive
        self._per_pass = per_pass  # None: every whole message at once
        self._handed = handed  # called after each pass that handed something on
        self._lost = lost
        self._transport: asyncio.Transport | None = None
        self._inbox = bytearray()
        self._outbox: list[bytes] = []
        self._flush_due = False
        self._pass_due = False  # messages wait for the next pass, reading paused meanwhile
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        # Kept: asyncio.get_running_loop() makes a getpid system call (CPython 3.11).
        self._loop = asyncio.get_running_loop()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lost()

    def data_received(self, data: bytes) -> None:
        self._inbox += data
        if not self._pass_due:
            self._take_messages()

    def _take_messages(self) -> None:
        """Hand on up to `per_pass` whole messages; more wait for the next event-loop
        iteration, with reading paused meanwhile (see MESSAGES_PER_PASS)."""
        inbox = self._inbox
        if self.closed:  # the other side is gone: what it sent last is owed to no one
            inbox.clear()
            return
        size = len(inbox)
        position = 0
        taken = 0
        receive = self._receive
        per_pass = self._per_pass if self._per_pass is not None else size
        unpack = HEADER.unpack_from
        with memoryview(inbox) as view:  # each payload copied once, out of the inbox
            while size - position >= HEADER.size and taken < per_pass:
                kind, connection, length = unpack(view, position)
                end = position + HEADER.size + length
                if end > size:
                    break
                receive(kind, connection, view[position + HEADER.size:end].tobytes())
                position = end
                taken += 1
        del inbox[:position]
        if taken and self._handed is not None:
            self._handed()
        more = taken == per_pass and self._whole_message_waits()
        if more and not self._pass_due:
            self._pass_due = True
            if self._transport is not None:
                self._transport.pause_reading()
        elif not more and self._pass_due:
            self._pass_due = False
            if self._transport is not None and not self.closed:
                self._transport.resume_reading()
        if more:
            self._loop.call_soon(self._take_messages)

    def _whole_message_waits(self) -> bool:
        inbox = self._inbox
        if len(inbox) < HEADER.size:
            return False
        _, _, length = HEADER.unpack_from(inbox)
        return len(inbox) >= HEADER.size + length

    def send(self, kind: Kind, connection: int, payload: bytes = b"") -> None:
        if self.closed:
            return
        self._outbox.append(HEADER.pack(kind, connection, len(payload)))
        if payload:
            self._outbox.append(payload)
        if not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Write what was queued: small pieces joined into one write, a large one (a Fetch's
        answer, a Produce's frame) on its own, so it is never copied just to be joined."""
        self._flush_due = False
        outbox, self._outbox = self._outbox, []
        transport = self._transport
        if transport is None or self.closed or not outbox:
            return
        batch: list[bytes] = []
        for piece in outbox:
            if len(piece) < JOIN_BELOW:
                batch.append(piece)
                continue
            if batch:
                transport.write(b"".join(batch))
                batch = []
            transport.write(piece)
        if batch:
            transport.write(b"".join(batch))

    def close(self) -> None:
        self._flush()
        if self._transport is not None:
            self._transport.close()
