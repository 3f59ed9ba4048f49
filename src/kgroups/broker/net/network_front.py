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
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from kgroups.broker.config import BrokerConfig
from kgroups.broker.events import configure_logging
from kgroups.broker.gc_tuning import collect_for_serving
from kgroups.broker.malloc_tuning import fix_mmap_threshold
from kgroups.broker.net.client_relay import ClientRelay
from kgroups.broker.net.memory_budget import MemoryBudget
from kgroups.broker.net.relay_channel import Channel, Kind
from kgroups.broker.security.listeners import Listener, parse_listeners, server_ssl_context
from kgroups.broker.security.state import TlsAcceptor


class BrokerLink:
    """This process's end of the channel: announces connections, relays their frames, and hands
    each answer to its connection's relay (`client_relay`), which owes it to its oldest frame."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self._budget = MemoryBudget(config.queued_max_request_bytes,
                                    config.memory_exhausted_close_ms / 1000)
        self._ids = itertools.count(1)
        self._admissions: dict[int, asyncio.Future[bool]] = {}  # TLS: before the handshake
        self._announced: dict[int, ClientRelay] = {}  # plain: connected, waiting for ADMIT
        self._relays: dict[int, ClientRelay] = {}
        self.ended = asyncio.Event()
        self._channel: Channel | None = None

    async def connect(self, descriptor: int) -> None:
        loop = asyncio.get_running_loop()
        _, self._channel = await loop.create_unix_connection(
            lambda: Channel(self._received, self.ended.set), sock=socket.socket(fileno=descriptor))

    def ready(self) -> None:
        """Every listener is served."""
        self._send(Kind.READY, 0)

    def _send(self, kind: Kind, connection_id: int, payload: bytes = b"") -> None:
        assert self._channel is not None
        self._channel.send(kind, connection_id, payload)

    def _received(self, kind: int, connection_id: int, payload: bytes) -> None:
        if kind == Kind.ANSWER:
            relay = self._relays.get(connection_id)
            if relay is not None:
                relay.answer(payload)
        elif kind == Kind.ABORT:
            relay = self._relays.get(connection_id)
            if relay is not None:
                relay.abort()
        elif kind == Kind.AUTHENTICATED:
            relay = self._relays.get(connection_id)
            if relay is not None:
                relay.authenticated()
        elif kind == Kind.ADMIT or kind == Kind.CLOSE:
            admission = self._admissions.pop(connection_id, None)
            announced = self._announced.pop(connection_id, None)
            if admission is not None:
                if not admission.done():
                    admission.set_result(kind == Kind.ADMIT)
            elif announced is not None:
                if kind == Kind.ADMIT:
                    self._relays[connection_id] = announced
                    announced.admit()
                else:
                    announced.refused()
            elif kind == Kind.CLOSE and connection_id in self._relays:
                self._relays[connection_id].close_from_broker()

    # What a relay tells the broker process (client_relay.Link).

    def announce(self, relay: ClientRelay, peer: object) -> None:
        self._announced[relay.connection_id] = relay
        self._open(relay.connection_id, relay.listener, peer)

    def identify(self, relay: ClientRelay, principal: str) -> None:
        self._send(Kind.IDENTITY, relay.connection_id, principal.encode())

    def forward(self, relay: ClientRelay, frame: bytes) -> None:
        self._send(Kind.FRAME, relay.connection_id, frame)

    def taken(self, relay: ClientRelay, count: int) -> None:
        self._send(Kind.TAKEN, relay.connection_id, count.to_bytes(8, "big"))

    def gone(self, relay: ClientRelay) -> None:
        self._announced.pop(relay.connection_id, None)
        self._relays.pop(relay.connection_id, None)
        if not self.ended.is_set():
            self._send(Kind.GONE, relay.connection_id)

    # Connections.

    def _open(self, connection_id: int, listener: Listener, peer: object) -> None:
        host, port = peer[:2] if isinstance(peer, tuple) else (str(peer), 0)
        self._send(Kind.OPEN, connection_id, f"{listener.name}\0{host}\0{port}".encode())

    def plain_relay(self, listener: Listener) -> ClientRelay:
        """A new connection of a plain listener; it announces itself once connected."""
        return ClientRelay(self._config, self._budget, self, next(self._ids), listener,
                           admitted=False)

    async def admit_tls(self, listener: Listener, transport: asyncio.Transport) -> int | None:
        """Announce a TLS connection before its handshake; its id once admitted, else None."""
        connection_id = next(self._ids)
        admission: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._admissions[connection_id] = admission
        self._open(connection_id, listener, transport.get_extra_info("peername"))
        try:
            admitted = await admission
        except asyncio.CancelledError:
            self._admissions.pop(connection_id, None)
            self._send(Kind.GONE, connection_id)
            raise
        return connection_id if admitted else None

    def tls_relay(self, listener: Listener, connection_id: int) -> ClientRelay:
        """The relay of a TLS connection admitted before its handshake."""
        relay = ClientRelay(self._config, self._budget, self, connection_id, listener,
                            admitted=True)
        self._relays[connection_id] = relay
        return relay

    def close_all(self) -> None:
        """This process ends: every client's socket closes with it."""
        for relay in [*self._announced.values(), *self._relays.values()]:
            relay.stop()


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
                                  functools.partial(link.tls_relay, listener), handshakes,
                                  functools.partial(link.admit_tls, listener)),
                sock=sock)
        else:
            server = await loop.create_server(functools.partial(link.plain_relay, listener),
                                              sock=sock)
        servers.append(server)
    collect_for_serving()  # the process is ours, as the broker process's is (gc_tuning)
    link.ready()
    await link.ended.wait()
    for server in servers:
        server.close()
    for task in handshakes:
        task.cancel()
    await asyncio.gather(*handshakes, return_exceptions=True)
    link.close_all()


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
