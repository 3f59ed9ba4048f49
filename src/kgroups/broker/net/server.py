"""The broker's listeners: connections served in this process, or by network processes.

`BrokerServer` binds every listener. With `num.network.threads=0` it serves each accepted socket
here as a `local_connection.LocalConnection`; otherwise the network processes accept from the
same listening sockets and relay frames (`front_link`). Either way the limits on connections
(max.connections, max.connections.per.ip, max.connection.creation.rate) are counted here, once
for all connections.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections import Counter
from typing import TYPE_CHECKING, Any

from kgroups.broker.events import log_event
from kgroups.broker.net.connection import set_buffer
from kgroups.broker.net.connection_rate import limiter
from kgroups.broker.net.front_link import NetworkFront
from kgroups.broker.net.local_connection import LocalConnection
from kgroups.broker.security.state import Security, TlsAcceptor, open_session

if TYPE_CHECKING:
    from kgroups.broker.apis.contract import HandlerServices
    from kgroups.broker.security.listeners import Listener

logger = logging.getLogger("kgroups.server")


class BrokerServer:
    """Accepts connections; each runs independently so one bad client affects only itself.
    max.connections and max.connections.per.ip (Kafka's names; unlimited by default) cap how
    many a host, or everyone, may hold, so many idle sockets cannot exhaust the broker.

    With `num.network.threads` above 0 the sockets are served by network processes instead
    (`front_link`): this process binds the listeners, hands them over, and answers what they
    relay, under the same limits."""

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
        self._held = 0  # connections counted against max.connections, served here or relayed
        self._per_host: Counter[str] = Counter()
        self._front: NetworkFront | None = None

    async def start(self) -> dict[str, tuple[str, int]]:
        """Listen on every listener; returns each one's bound address by listener name."""
        bound: dict[str, tuple[str, int]] = {}
        network_processes = self._broker.config.num_network_threads
        relayed = network_processes > 0
        listen: list[tuple[Listener, int, int]] = []
        for listener in self._security.listeners:
            serve = functools.partial(self._accept, listener)
            if listener.uses_tls and not relayed:
                context = self._security.ssl_contexts[listener.name]
                server = await asyncio.get_running_loop().create_server(
                    functools.partial(TlsAcceptor, context, listener,
                                      functools.partial(self._tls_protocol, listener),
                                      self._handshakes, functools.partial(self._admit_tls,
                                                                          listener)),
                    listener.host, listener.port, reuse_address=True)
            else:
                server = await asyncio.start_server(serve, listener.host, listener.port,
                                                    reuse_address=True,
                                                    start_serving=not relayed)
            self._servers.append(server)
            # Set on the listening socket, as Kafka does, so accepted connections start with it
            # (the TCP window is agreed at the handshake).
            for sock in server.sockets:
                set_buffer(sock, socket.SO_RCVBUF,
                            self._broker.config.socket_receive_buffer_bytes)
            sockname = server.sockets[0].getsockname()
            bound[listener.name] = (sockname[0], sockname[1])
            listen.extend((listener, sock.fileno(), sockname[1]) for sock in server.sockets)
        self._bound = bound
        if relayed:
            self._front = NetworkFront(self._broker, self._security, self, network_processes)
            await self._front.start(listen)
        return bound

    def hold(self, host: str, peer: str) -> bool:
        """Count a new connection against max.connections and max.connections.per.ip; False
        (and a log line) when it is one too many."""
        config = self._broker.config
        limit = None
        if 0 <= config.max_connections <= self._held:
            limit = "max_connections"
        elif 0 <= config.max_connections_per_ip <= self._per_host[host]:
            limit = "max_connections_per_ip"
        if limit is not None:
            log_event(logger, logging.WARNING, "connection_refused", peer=peer, reason=limit)
            return False
        self._held += 1
        self._per_host[host] += 1
        return True

    def release(self, host: str) -> None:
        self._held -= 1
        self._per_host[host] -= 1
        if not self._per_host[host]:
            del self._per_host[host]

    async def admit(self, listener: Listener) -> None:
        """Wait for max.connection.creation.rate (the listener's, then the broker's)."""
        for rate in self._rates[listener.name]:
            await rate.admit()

    async def _admit_tls(self, listener: Listener, _transport: asyncio.Transport) -> bool:
        await self.admit(listener)
        return True

    def _tls_protocol(self, listener: Listener, _admission: Any) -> asyncio.Protocol:
        """A TLS connection's streams, served by `_accept` once its handshake is done (it was
        admitted before the handshake), as asyncio.start_server serves a plain one."""
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(),
                                            functools.partial(self._accept, listener))

    async def _accept(self, listener: Listener, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if not listener.uses_tls and self._rates[listener.name]:  # TLS waited before its handshake
            self._handshakes.add(task)
            try:
                await self.admit(listener)
            except asyncio.CancelledError:  # stopping; see below for why this ends normally
                writer.close()
                return
            finally:
                self._handshakes.discard(task)
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else str(peer)
        if not self.hold(host, f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else host):
            writer.close()
            return
        self._connections.add(task)
        try:
            session = open_session(self._security, listener, self._bound[listener.name][1],
                                   writer)
            try:
                await LocalConnection(self._broker, reader, writer, session).serve()
            finally:  # the share sessions it opened end with it
                self._broker.share_partitions.connection_closed(session)
        except asyncio.CancelledError:
            # The broker is stopping. Ending normally matters: asyncio's stream callback asks a
            # cancelled connection task for its exception and logs a spurious traceback.
            pass
        finally:
            self._connections.discard(task)
            self.release(host)

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        if self._front is not None:
            await self._front.stop()
            self._front = None
        for task in [*self._handshakes, *self._connections]:
            task.cancel()
        await asyncio.gather(*self._handshakes, return_exceptions=True)
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in servers:
            await server.wait_closed()
