"""The broker's security state: listeners with their TLS contexts and SASL mechanisms, the PLAIN
users, the SCRAM credentials, and each connection's Session.

Built once from the config before anything listens, so a missing certificate or an unknown
mechanism stops `kgroups serve` at start-up with the setting's name rather than failing the
first client. Handlers reach it through their connection's Session (`ctx.session`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.cluster.catalog_books import StoreAcls, StoreCredentials
from kgroups.broker.events import log_event
from kgroups.broker.security.authorizer import Authorizer
from kgroups.broker.security.listeners import (
    ANONYMOUS,
    Listener,
    ListenerError,
    advertised_address,
    certificate_principal,
    parse_listeners,
    server_ssl_context,
    setting,
)
from kgroups.broker.security.scram import CredentialStore, ScramExchange
from kgroups.storage.catalog import Catalog

if TYPE_CHECKING:
    from kgroups.broker.config import BrokerConfig

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# A JAAS entry `user_alice="alice-secret"` declares a PLAIN user (Kafka's PlainLoginModule).
_JAAS_USER = re.compile(r'\buser_(?P<name>[^\s=]+)\s*=\s*"(?P<secret>(?:[^"\\]|\\.)*)"')
# Kafka's connection.failed.authentication.delay.ms default: the answer to a failed
# authentication is held back that long, which bounds how fast one client can guess.
DEFAULT_FAILED_AUTH_DELAY_MS = 100
SCRAM_FILE = "security/scram-credentials.json"
# Served before a SASL connection has authenticated: SaslHandshake, ApiVersions, SaslAuthenticate.
PRE_AUTH_API_KEYS = frozenset({
    ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.SASL_AUTHENTICATE})
TLS_HANDSHAKE_TIMEOUT_S = 10.0
logger = logging.getLogger("kgroups.security")


def plain_users(jaas: str) -> dict[str, str]:
    return {m["name"]: re.sub(r"\\(.)", r"\1", m["secret"]) for m in _JAAS_USER.finditer(jaas)}


class Security:
    """Everything connections need to authenticate clients, built and checked from the config."""

    def __init__(self, config: BrokerConfig, catalog: Catalog | None = None) -> None:
        """`catalog`: a cluster's store catalog, where its brokers keep SCRAM credentials and
        ACLs (a single node keeps them in its data directory)."""
        self.listeners = parse_listeners(config)
        self.ssl_contexts: dict[str, ssl.SSLContext] = {
            listener.name: server_ssl_context(config, listener)
            for listener in self.listeners if listener.uses_tls}
        self.mechanisms: dict[str, tuple[str, ...]] = {}
        self.plain_users: dict[str, dict[str, str]] = {}
        for listener in self.listeners:
            if listener.uses_sasl:
                self.mechanisms[listener.name] = self._enabled_mechanisms(config, listener)
                jaas = setting(config, listener, "plain.sasl.jaas.config")
                self.plain_users[listener.name] = plain_users(jaas)
                if "PLAIN" in self.mechanisms[listener.name] and not jaas:
                    raise ListenerError(
                        f"listener {listener.name} enables PLAIN but "
                        f"{listener.prefix()}plain.sasl.jaas.config declares no users")
        raw_delay = config.properties.get("connection.failed.authentication.delay.ms",
                                          str(DEFAULT_FAILED_AUTH_DELAY_MS))
        self.failed_auth_delay_s = int(raw_delay) / 1000
        self.scram = CredentialStore(config.data_dir / SCRAM_FILE if catalog is None
                                     else StoreCredentials(catalog))
        # None without authorizer.class.name: every principal may do everything, as in Kafka.
        self.authorizer = Authorizer.from_config(
            config, None if catalog is None else StoreAcls(catalog))

    @staticmethod
    def _enabled_mechanisms(config: BrokerConfig, listener: Listener) -> tuple[str, ...]:
        raw = setting(config, listener, "sasl.enabled.mechanisms")
        names = tuple(item.strip().upper() for item in raw.split(",") if item.strip())
        if not names:
            raise ListenerError(
                f"listener {listener.name} ({listener.protocol}) needs sasl.enabled.mechanisms "
                f"(kgroups offers {', '.join(SUPPORTED_MECHANISMS)})")
        unsupported = [name for name in names if name not in SUPPORTED_MECHANISMS]
        if unsupported:
            raise ListenerError(
                f"sasl.enabled.mechanisms: kgroups does not offer {', '.join(unsupported)} "
                f"(it offers {', '.join(SUPPORTED_MECHANISMS)})")
        return names


@dataclass(eq=False)
class Session:
    """One connection's identity: its listener, the address to advertise on it, and, once
    authenticated, the principal every authorization decision uses."""

    security: Security
    listener: Listener
    advertised: tuple[str, int]
    principal: str = ANONYMOUS
    authenticated: bool = True
    mechanism: str | None = None
    scram: ScramExchange | None = None
    # Set when authentication failed: the connection answers, then closes, logging these.
    failure: dict[str, str] | None = None
    # After a v0 SaslHandshake: the next frames are bare SASL tokens, not Kafka requests.
    raw_tokens: bool = False

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self.security.mechanisms.get(self.listener.name, ())


def new_session(security: Security, listener: Listener, bound_port: int,
                principal: str = ANONYMOUS) -> Session:
    """A new connection's Session; SASL listeners start unauthenticated."""
    return Session(security, listener, advertised_address(listener, bound_port),
                   principal=principal, authenticated=not listener.uses_sasl)


def tls_principal(listener: Listener,
                  connection: asyncio.StreamWriter | asyncio.BaseTransport) -> str | None:
    """The principal a client certificate names on an SSL listener (None elsewhere)."""
    ssl_object = connection.get_extra_info("ssl_object")
    if listener.protocol == "SSL" and ssl_object is not None:
        return certificate_principal(ssl_object.getpeercert())
    return None


def open_session(security: Security, listener: Listener, bound_port: int,
                 writer: asyncio.StreamWriter) -> Session:
    """A new connection's Session. A client certificate names the principal on SSL."""
    return new_session(security, listener, bound_port,
                       tls_principal(listener, writer) or ANONYMOUS)


# The protocol that serves a connection once TLS is up, given what `admit` returned for it.
ProtocolFor = Callable[[Any], asyncio.Protocol]
# Waits until a new connection may start its handshake; None refuses it (closed at once).
Admit = Callable[[asyncio.Transport], Awaitable[Any]]


class TlsAcceptor(asyncio.Protocol):
    """One accepted connection of a TLS listener: reads nothing until the TLS handshake
    (loop.start_tls) takes the socket over, then hands the decrypted connection to the protocol
    `protocol_for` makes. If the handshake fails instead, the protocol hears `connection_lost`
    without `connection_made` (asyncio tells it too after some failures: it must bear hearing
    it twice), so whatever it announced when made (a network process's admitted connection)
    is given back.

    Reading nothing first matters: a ClientHello read into a plain stream's buffer would be
    lost to TLS and the handshake would stall. A failed handshake (an untrusted or missing
    certificate, bytes that are not TLS, a client too slow) is logged once and closes the
    connection; asyncio itself would drop it silently."""

    def __init__(self, context: ssl.SSLContext, listener: Listener, protocol_for: ProtocolFor,
                 tasks: set[asyncio.Task[None]], admit: Admit) -> None:
        self._context = context
        self._listener = listener
        self._protocol_for = protocol_for
        self._tasks = tasks
        self._admit = admit  # max.connection.creation.rate, waited before the handshake

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's transports start reading only after this returns, so pausing here keeps
        # every byte in the socket (uvloop's read at once: `kgroups serve` runs TLS
        # listeners on asyncio's loop).
        stream = cast(asyncio.Transport, transport)
        stream.pause_reading()
        task = asyncio.get_running_loop().create_task(self._handshake(stream))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handshake(self, transport: asyncio.Transport) -> None:
        admission = await self._admit(transport)
        if admission is None:
            transport.abort()
            return
        loop = asyncio.get_running_loop()
        protocol = self._protocol_for(admission)
        try:
            tls = await loop.start_tls(transport, protocol, self._context, server_side=True,
                                       ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
        except (OSError, TimeoutError, EOFError) as exc:
            peer = transport.get_extra_info("peername")
            log_event(logger, logging.WARNING, "connection_closed",
                      peer=f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else peer,
                      reason="tls_handshake_failed", listener=self._listener.name,
                      error=str(exc)[:200] or type(exc).__name__)
            transport.abort()
            protocol.connection_lost(exc)
            return
        except asyncio.CancelledError:
            transport.abort()
            protocol.connection_lost(None)
            raise
        if tls is None:  # the client left during the handshake
            transport.abort()
            protocol.connection_lost(None)
            return
        protocol.connection_made(tls)
