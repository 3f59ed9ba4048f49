"""A network process of `kgroups serve`: the client sockets, on a core of their own.

Started by the broker process (`front_link`) with the listening sockets it bound and one end of
a channel (`relay_channel`); run as `python -m kgroups.broker.net.network_front CHANNEL_FD
LISTEN_FD...` with the settings as JSON on standard input. It does what costs CPU per byte and
per system call and needs no broker state: accepting, TLS, reading frames (sizes checked against
socket.request.max.bytes and the memory budget, queued.max.requests, connections.max.idle.ms),
and writing answers (joined per event-loop iteration, paused while a client does not read). It
relays each frame to the broker process and writes the answers it gets back; every decision
about a request, and who may connect, is the broker process's.

It ends when the channel closes: the broker process stopped or died, and its clients' sockets
close with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import signal
import socket
import sys
from collections import deque
from pathlib import Path
from typing import Any

from kgroups.broker.config import BrokerConfig
from kgroups.broker.events import configure_logging
from kgroups.broker.gc_tuning import collect_for_serving
from kgroups.broker.malloc_tuning import fix_mmap_threshold
from kgroups.broker.net.connection import Connection
from kgroups.broker.net.memory_budget import MemoryBudget
from kgroups.broker.net.relay_channel import Channel, Kind
from kgroups.broker.security.listeners import Listener, parse_listeners, server_ssl_context
from kgroups.broker.security.state import TlsAcceptor, tls_principal


class RelayingConnection(Connection):
    """A client socket whose frames are answered by the broker process."""

    def __init__(self, link: BrokerLink, connection_id: int, config: BrokerConfig,
                 budget: MemoryBudget, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, sasl: bool) -> None:
        super().__init__(config, budget, reader, writer)
        self._link = link
        self._id = connection_id
        # A SASL listener's client authenticates in the broker process, which says so
        # (AUTHENTICATED) before the answer that authenticated it.
        self._unauthenticated = sasl
        self._taken = 0  # answer bytes the kernel took, not yet reported to the broker process

    def _start(self, frame: bytes | memoryview) -> asyncio.Future[bytes | None]:
        return self._link.forward(self._id, frame)

    def _failed(self, error: BaseException) -> None:
        self._close(logging.ERROR, "relay_failed", error=repr(error))

    def _authenticating(self) -> bool:
        return self._unauthenticated

    def authenticated(self) -> None:
        self._unauthenticated = False

    def _closes_after(self) -> bool:
        return False  # the broker process says so with CLOSE

    def _send(self, data: bytes) -> None:
        super()._send(data)
        self._taken += len(data)
        self._report_taken()

    async def _drain(self) -> None:
        await super()._drain()
        self._report_taken()

    def _report_taken(self) -> None:
        """Once the transport holds none of them, the answers handed to it were taken by the
        kernel: the broker process stops counting them (RelayedConnection)."""
        if self._taken and not self._in_transport:
            self._link.send(Kind.TAKEN, self._id, self._taken.to_bytes(8, "big"))
            self._taken = 0

    def close_from_broker(self) -> None:
        """CLOSE came after this connection's last answer: write the answers that came before
        it (their futures' callbacks run first), then close without a log line of our own."""
        self._loop.call_soon(self._close_now)

    def _close_now(self) -> None:
        self._close(None, "closed_by_broker")
        self._cancel_in_flight()


class BrokerLink:
    """This process's end of the channel: announces connections, relays frames, and hands each
    answer to the oldest request of its connection still waiting."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self._budget = MemoryBudget(config.queued_max_request_bytes,
                                    config.memory_exhausted_close_ms / 1000)
        self._ids = itertools.count(1)
        self._admissions: dict[int, asyncio.Future[bool]] = {}
        self._answers: dict[int, deque[asyncio.Future[bytes | None]]] = {}
        self._connections: dict[int, RelayingConnection] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.ended = asyncio.Event()
        self._channel: Channel | None = None
        # The loop, kept: asyncio.get_running_loop() makes a getpid system call (CPython
        # 3.11), and `forward` runs for every request.
        self._loop: asyncio.AbstractEventLoop | None = None

    async def connect(self, descriptor: int) -> None:
        self._loop = asyncio.get_running_loop()
        _, self._channel = await self._loop.create_unix_connection(
            lambda: Channel(self._received, self.ended.set), sock=socket.socket(fileno=descriptor))

    def send(self, kind: Kind, connection_id: int, payload: bytes = b"") -> None:
        assert self._channel is not None
        self._channel.send(kind, connection_id, payload)

    def _received(self, kind: int, connection_id: int, payload: bytes) -> None:
        if kind == Kind.ANSWER:
            waiting = self._answers.get(connection_id)
            if waiting:
                future = waiting.popleft()
                if not future.done():
                    future.set_result(payload or None)
        elif kind == Kind.ABORT:
            connection = self._connections.get(connection_id)
            if connection is not None:
                connection.abort()
        elif kind == Kind.AUTHENTICATED:
            connection = self._connections.get(connection_id)
            if connection is not None:
                connection.authenticated()
        elif kind == Kind.ADMIT or kind == Kind.CLOSE:
            admission = self._admissions.pop(connection_id, None)
            if admission is not None:
                if not admission.done():
                    admission.set_result(kind == Kind.ADMIT)
            elif kind == Kind.CLOSE and connection_id in self._connections:
                self._connections[connection_id].close_from_broker()

    def forward(self, connection_id: int,
                frame: bytes | memoryview) -> asyncio.Future[bytes | None]:
        assert self._loop is not None
        future: asyncio.Future[bytes | None] = self._loop.create_future()
        self._answers[connection_id].append(future)
        # A large frame's view is released once this returns; the channel keeps a copy.
        self.send(Kind.FRAME, connection_id, frame if isinstance(frame, bytes) else bytes(frame))
        return future

    async def _admitted(self, listener: Listener, peer: Any) -> int | None:
        """Announce a new connection; its id once the broker process admits it, else None."""
        connection_id = next(self._ids)
        host, port = peer[:2] if isinstance(peer, tuple) else (str(peer), 0)
        admission: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._admissions[connection_id] = admission
        self.send(Kind.OPEN, connection_id, f"{listener.name}\0{host}\0{port}".encode())
        try:
            admitted = await admission
        except asyncio.CancelledError:
            self._admissions.pop(connection_id, None)
            self.send(Kind.GONE, connection_id)
            raise
        return connection_id if admitted else None

    async def admit_tls(self, listener: Listener, transport: asyncio.Transport) -> int | None:
        return await self._admitted(listener, transport.get_extra_info("peername"))

    async def serve_plain(self, listener: Listener, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self._track()
        try:
            connection_id = await self._admitted(listener, writer.get_extra_info("peername"))
        except asyncio.CancelledError:
            writer.close()
            return
        if connection_id is None:
            writer.close()
            return
        await self._serve(connection_id, reader, writer, listener.uses_sasl)

    async def serve_tls(self, listener: Listener, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, connection_id: int) -> None:
        self._track()
        principal = tls_principal(listener, writer)
        if principal is not None:
            self.send(Kind.IDENTITY, connection_id, principal.encode())
        await self._serve(connection_id, reader, writer, listener.uses_sasl)

    def _track(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve(self, connection_id: int, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, sasl: bool) -> None:
        connection = RelayingConnection(self, connection_id, self._config, self._budget, reader,
                                        writer, sasl)
        self._connections[connection_id] = connection
        self._answers[connection_id] = deque()
        try:
            await connection.serve()
        except asyncio.CancelledError:
            pass  # this process is ending; see BrokerServer._accept for why this ends normally
        finally:
            del self._connections[connection_id]
            del self._answers[connection_id]
            if not self.ended.is_set():
                self.send(Kind.GONE, connection_id)


async def serve(config: BrokerConfig, channel: int, listen: list[tuple[Listener, int]]) -> None:
    link = BrokerLink(config)
    await link.connect(channel)
    loop = asyncio.get_running_loop()
    handshakes: set[asyncio.Task[None]] = set()
    servers: list[asyncio.Server] = []
    for listener, descriptor in listen:
        sock = socket.socket(fileno=descriptor)
        if listener.uses_tls:
            server = await loop.create_server(
                functools.partial(TlsAcceptor, server_ssl_context(config, listener), listener,
                                  functools.partial(link.serve_tls, listener), handshakes,
                                  functools.partial(link.admit_tls, listener)),
                sock=sock)
        else:
            server = await asyncio.start_server(functools.partial(link.serve_plain, listener),
                                                sock=sock)
        servers.append(server)
    collect_for_serving()  # the process is ours, as the broker process's is (gc_tuning)
    link.send(Kind.READY, 0)
    await link.ended.wait()
    for server in servers:
        server.close()
    for task in [*handshakes, *link.tasks]:
        task.cancel()
    await asyncio.gather(*handshakes, *link.tasks, return_exceptions=True)


def main() -> None:
    channel, *listening = map(int, sys.argv[1:])
    settings = json.load(sys.stdin)
    configure_logging(settings["log_level"])
    fix_mmap_threshold()  # answers come and go in large buffers here too (see malloc_tuning)
    # Ctrl-C reaches the whole process group; the broker process stops us by closing the channel.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = BrokerConfig(host=settings["host"], port=settings["port"],
                          data_dir=Path(settings["data_dir"]), properties=settings["properties"])
    by_name = {listener.name: listener for listener in parse_listeners(config)}
    listen = [(by_name[name], descriptor)
              for name, descriptor in zip(settings["listeners"], listening, strict=True)]
    runner: Any = asyncio.run
    if not any(listener.uses_tls for listener, _ in listen):
        # TLS listeners pause each new socket before reading it (security.TlsAcceptor), which
        # uvloop does not allow; without them uvloop's faster loop serves.
        with contextlib.suppress(ImportError):
            import uvloop

            runner = uvloop.run
    runner(serve(config, channel, listen))


if __name__ == "__main__":
    main()
