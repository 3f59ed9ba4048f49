"""Listeners under Kafka's settings: `listeners`, `advertised.listeners`,
`listener.security.protocol.map`, and TLS from PEM files.

A Kafka deployment usually runs several listeners at once (PLAINTEXT inside, SASL_SSL outside);
each has a name, a security protocol and an address, and clients on one listener must be told
that listener's advertised address in Metadata and FindCoordinator, or they would hop to one
they cannot use. Settings are looked up as Kafka does: `listener.name.<name>.<key>` first, then
the plain key, so one broker can use different certificates or mechanisms per listener.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from kgroups.broker.config import BrokerConfig, ConfigError

PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
ANONYMOUS = "User:ANONYMOUS"
# Python's names for the attribute types Java's X500Principal.getName() (RFC 2253) spells out;
# Kafka's default principal builder uses that string as the SSL principal's name.
_RFC2253_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}


class ListenerError(ConfigError):
    """A listener setting is malformed or names something kgroups cannot serve."""


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: where it binds, what it tells clients, and how clients prove who they are."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def prefix(self) -> str:
        """Kafka's per-listener setting prefix, e.g. `listener.name.sasl_ssl.`."""
        return f"listener.name.{self.name.lower()}."


def _split_address(entry: str, key: str) -> tuple[str, str, int]:
    name, sep, address = entry.strip().partition("://")
    host, port_sep, port = address.rpartition(":")
    if not sep or not name or not port_sep or not port.isdigit():
        raise ListenerError(f"{key}: expected NAME://host:port, got {entry.strip()!r}")
    host = host.strip("[]")  # an IPv6 literal is written [::1]:9092
    if not 0 <= int(port) < 65536:
        raise ListenerError(f"{key}: port must be in 0..65535, got {port}")
    return name.upper(), host, int(port)


def protocol_map(properties: Mapping[str, str]) -> dict[str, str]:
    """listener.security.protocol.map; without it each protocol's own name maps to itself."""
    raw = properties.get("listener.security.protocol.map", "")
    mapping = {name: name for name in PROTOCOLS}
    if raw.strip():
        mapping = {}
        for item in raw.split(","):
            name, sep, protocol = item.strip().partition(":")
            if not sep or protocol.strip().upper() not in PROTOCOLS:
                raise ListenerError(
                    "listener.security.protocol.map: expected NAME:PROTOCOL with PROTOCOL one "
                    f"of {', '.join(sorted(PROTOCOLS))}, got {item.strip()!r}")
            mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


def parse_listeners(config: BrokerConfig) -> list[Listener]:
    """The broker's listeners in the order given; without `listeners`, one PLAINTEXT listener
    on --host/--port (kgroups' own default). Advertised addresses come from
    `advertised.listeners` by name; a listener not named there advertises where it listens."""
    properties = config.properties
    raw = properties.get("listeners", "").strip()
    mapping = protocol_map(properties)
    if not raw:
        entries = [("PLAINTEXT", config.host, config.port)]
    else:
        entries = [_split_address(item, "listeners") for item in raw.split(",") if item.strip()]
    advertised: dict[str, tuple[str, int]] = {}
    for index, item in enumerate(properties.get("advertised.listeners", "").split(",")):
        if item.strip():
            name, host, port = _split_address(item, "advertised.listeners")
            if not 0 < port < 65536:
                raise ListenerError(f"advertised.listeners port must be in 1..65535, got {port}")
            # Before named listeners, kgroups took advertised.listeners' first entry for its one
            # listener whatever the name; that still holds when `listeners` is not set.
            advertised[entries[0][0] if not raw and index == 0 else name] = (host, port)
    seen: set[str] = set()
    listeners = []
    for name, host, port in entries:
        if name in seen:
            raise ListenerError(f"listeners: listener name {name} appears twice")
        seen.add(name)
        protocol = mapping.get(name)
        if protocol is None:
            raise ListenerError(
                f"listeners: {name} has no security protocol; add {name}:PROTOCOL to "
                "listener.security.protocol.map")
        adv_host, adv_port = advertised.get(name, (None, None))
        listeners.append(Listener(name, protocol, host, port, adv_host, adv_port))
    unknown = set(advertised) - seen
    if unknown:
        raise ListenerError(
            f"advertised.listeners names {', '.join(sorted(unknown))}, not in listeners")
    return listeners


def setting(config: BrokerConfig, listener: Listener, key: str, default: str = "") -> str:
    """A setting for this listener: `listener.name.<name>.<key>`, else `<key>`."""
    properties = config.properties
    value = properties.get(listener.prefix() + key)
    if value is None:
        value = properties.get(key, default)
    return value.strip()


def advertised_address(listener: Listener, bound_port: int) -> tuple[str, int]:
    """What clients on this listener are told to connect to."""
    if listener.advertised_host is not None and listener.advertised_port is not None:
        return listener.advertised_host, listener.advertised_port
    host = socket.gethostname() if listener.host in WILDCARD_HOSTS else listener.host
    return host, bound_port


_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}


def server_ssl_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener, from PEM files: the keystore holds the
    private key and the certificate chain, the truststore the CAs client certificates must
    chain to. Anything unreadable fails at start-up, naming the setting."""

    def get(key: str, default: str = "") -> str:
        return setting(config, listener, key, default)

    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        kind = get(key, "PEM")
        if kind.upper() != "PEM":
            raise ListenerError(
                f"{listener.prefix()}{key}={kind}: kgroups reads PEM files only (convert with "
                "keytool -importkeystore and openssl)")
    keystore = get("ssl.keystore.location")
    if not keystore:
        raise ListenerError(f"listener {listener.name} ({listener.protocol}) needs "
                            "ssl.keystore.location (a PEM file with the key and certificate)")
    client_auth = get("ssl.client.auth", "none").lower()
    if client_auth not in _CLIENT_AUTH:
        raise ListenerError(f"ssl.client.auth must be required, requested or none, "
                            f"got {client_auth!r}")
    rules = get("ssl.principal.mapping.rules", "DEFAULT")
    if rules != "DEFAULT":
        raise ListenerError("ssl.principal.mapping.rules: kgroups supports DEFAULT only "
                            "(the principal is the certificate's full subject)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    password = get("ssl.key.password") or get("ssl.keystore.password") or None
    try:
        context.load_cert_chain(keystore, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise ListenerError(f"ssl.keystore.location={keystore}: cannot load the key and "
                            f"certificate: {exc}") from None
    truststore = get("ssl.truststore.location")
    if truststore:
        try:
            context.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise ListenerError(f"ssl.truststore.location={truststore}: {exc}") from None
    elif client_auth != "none":
        raise ListenerError(f"ssl.client.auth={client_auth} needs ssl.truststore.location")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    return context


def _rfc2253_escape(value: str) -> str:
    out = []
    for index, char in enumerate(value):
        if char in ',+"\\<>;' or (char == "#" and index == 0) or (
                char == " " and index in (0, len(value) - 1)):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def certificate_principal(peer_certificate: dict[str, object] | None) -> str:
    """Kafka's default SSL principal: `User:` and the client certificate's subject as Java's
    X500Principal.getName() writes it (RFC 2253: last RDN first, no spaces after commas);
    ANONYMOUS when the client sent no certificate."""
    if not peer_certificate:
        return ANONYMOUS
    subject = peer_certificate.get("subject") or ()
    rdns = []
    for rdn in reversed(list(subject)):  # type: ignore[call-overload]
        parts = [f"{_RFC2253_KEYWORDS.get(kind, kind)}={_rfc2253_escape(value)}"
                 for kind, value in rdn]
        rdns.append("+".join(parts))
    return "User:" + ",".join(rdns) if rdns else ANONYMOUS
