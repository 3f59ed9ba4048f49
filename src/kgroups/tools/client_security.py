"""The client side of TLS and SASL for kgroups' own admin commands, configured as Kafka's tools
are: a `--command-config client.properties` with security.protocol, sasl.mechanism,
sasl.jaas.config and ssl.* (PEM files), so one file serves kafka-acls and kgroups alike."""

from __future__ import annotations

import argparse
import base64
import hmac
import re
import secrets
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kgroups.broker.config import ConfigError, parse_properties
from kgroups.broker.security.scram import credential_from_salted, salted_password
from kgroups.tools.cli_output import DefaultsShown, parse_bootstrap
from kgroups.tools.wire_client import KafkaWireClient, WireError

_JAAS_OPTION = re.compile(r'\b(?P<key>username|password)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClientSecurity:
    """How to reach a listener: its protocol and, as it requires, TLS and SASL settings."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "GSSAPI"
    username: str = ""
    password: str = ""
    truststore: str = ""
    keystore: str = ""
    key_password: str | None = None
    check_hostname: bool = True

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientSecurity:
        protocol = properties.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(f"security.protocol={protocol} is not one of PLAINTEXT, SSL, "
                              "SASL_PLAINTEXT, SASL_SSL")
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            if properties.get(key, "PEM").upper() != "PEM":
                raise ConfigError(f"{key}: kgroups reads PEM files only")
        jaas = {m["key"]: re.sub(r"\\(.)", r"\1", m["value"])
                for m in _JAAS_OPTION.finditer(properties.get("sasl.jaas.config", ""))}
        return cls(
            protocol=protocol, mechanism=properties.get("sasl.mechanism", "GSSAPI").upper(),
            username=jaas.get("username", ""), password=jaas.get("password", ""),
            truststore=properties.get("ssl.truststore.location", ""),
            keystore=properties.get("ssl.keystore.location", ""),
            key_password=properties.get("ssl.key.password") or None,
            check_hostname=properties.get("ssl.endpoint.identification.algorithm",
                                          "https") != "")

    @classmethod
    def from_file(cls, path: Path | None) -> ClientSecurity:
        if path is None:
            return cls()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        return cls.from_properties(parse_properties(text, str(path)))

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.protocol not in ("SSL", "SASL_SSL"):
            return None
        try:
            context = ssl.create_default_context(cafile=self.truststore or None)
            context.check_hostname = self.check_hostname
            if self.keystore:
                context.load_cert_chain(self.keystore, password=self.key_password)
        except OSError as exc:  # an unreadable PEM file (ssl.SSLError is an OSError)
            raise ConfigError(f"cannot load the TLS files: {exc}") from None
        return context

    def connect(self, host: str, port: int, *, client_id: str = "kgroups-admin",
                timeout: float = 30.0) -> KafkaWireClient:
        """A connected, authenticated wire client."""
        client = KafkaWireClient(host, port, client_id=client_id, timeout=timeout,
                                 ssl_context=self.ssl_context())
        if self.protocol.startswith("SASL_"):
            try:
                self._authenticate(client)
            except WireError:
                client.close()
                raise
        client.open_another = lambda other_host, other_port: self.connect(
            other_host, other_port, client_id=client_id, timeout=timeout)
        return client

    def _authenticate(self, client: KafkaWireClient) -> None:
        handshake = client.call(SaslHandshakeRequest(mechanism=self.mechanism))
        if int(handshake.error_code) != 0:
            raise WireError(f"SASL mechanism {self.mechanism} is not enabled on "
                            f"{client.host}:{client.port} (it offers "
                            f"{', '.join(handshake.mechanisms)})")
        if self.mechanism == "PLAIN":
            token = f"\0{self.username}\0{self.password}".encode()
            self._step(client, token)
        elif self.mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            self._scram(client)
        else:
            raise WireError(f"kgroups' tools speak PLAIN and SCRAM, not {self.mechanism}")

    def _step(self, client: KafkaWireClient, token: bytes) -> bytes:
        response = client.call(SaslAuthenticateRequest(auth_bytes=token))
        if int(response.error_code) != 0:
            raise WireError(f"authentication failed: {response.error_message}")
        return bytes(response.auth_bytes)

    def _scram(self, client: KafkaWireClient) -> None:
        """RFC 5802's client: prove the password without sending it; check the server's
        signature, so a broker that does not know the credential is not believed."""
        name = self.username.replace("=", "=3D").replace(",", "=2C")
        nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        first_bare = f"n={name},r={nonce}"
        server_first = self._step(client, f"n,,{first_bare}".encode()).decode()
        fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
        if not fields.get("r", "").startswith(nonce):
            raise WireError("SCRAM: the server's nonce does not extend ours")
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        credential = credential_from_salted(self.mechanism, salt, salted, iterations)
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        digest = "sha256" if self.mechanism.endswith("256") else "sha512"
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        signature = hmac.new(credential.stored_key, auth_message, digest).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature,
                                                              strict=True))).decode()
        server_final = self._step(client, f"{without_proof},p={proof}".encode()).decode()
        expected = hmac.new(credential.server_key, auth_message, digest).digest()
        if server_final != "v=" + base64.b64encode(expected).decode():
            raise WireError("SCRAM: the server's signature is wrong")


def connect_tool(bootstrap: tuple[str, int], command_config: Path | None,
                 client_id: str = "kgroups-admin", timeout: float = 30.0) -> KafkaWireClient:
    """What each kgroups admin command opens: `--bootstrap-server` reached as
    `--command-config` says (PLAINTEXT without one), each answer awaited at most `timeout`
    seconds. A bad file is a WireError, so the commands report it as they report an
    unreachable broker."""
    try:
        security = ClientSecurity.from_file(command_config)
        return security.connect(*bootstrap, client_id=client_id, timeout=timeout)
    except ConfigError as exc:
        raise WireError(f"--command-config {command_config}: {exc}") from None


DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def admin_command(subparsers: argparse._SubParsersAction, name: str, summary: str,
                  description: str) -> argparse.ArgumentParser:
    """The subcommand of one admin command (groups, topics, acls, users), with the options
    every one of them reaches its broker by: --bootstrap-server and --command-config."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, formatter_class=DefaultsShown, description=description)
    parser.add_argument("--bootstrap-server", type=parse_bootstrap, default=DEFAULT_BOOTSTRAP,
                        metavar="HOST:PORT", help="broker to connect to")
    parser.add_argument("--command-config", type=Path, metavar="FILE",
                        help="client properties (security.protocol, sasl.mechanism, "
                             "sasl.jaas.config, ssl.truststore.location...) as Kafka's "
                             "tools read them")
    return parser
