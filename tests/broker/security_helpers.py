"""Certificates and broker settings for the security tests.

`make_certificates(directory)` writes a test CA, a server certificate for 127.0.0.1/localhost,
a client certificate signed by the CA and one signed by a CA the broker does not trust, as PEM
files (key and chain together, as ssl.keystore.type=PEM reads them, and apart, for librdkafka
and kafka-python)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kio.schema.alter_user_scram_credentials.v0 import request as scram_request
from tests.broker.servers import InProcessBroker

from kgroups.broker.broker import Broker
from kgroups.broker.config import BrokerConfig
from kgroups.broker.security.scram import salted_password
from kgroups.tools.client_security import ClientSecurity
from kgroups.tools.wire_client import KafkaWireClient

CLIENT_SUBJECT = "CN=client-one,OU=Ops,O=kgroups test,C=NL"
CLIENT_PRINCIPAL = "User:" + CLIENT_SUBJECT


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server: Path  # key + certificate
    client: Path  # key + certificate
    client_cert: Path
    client_key: Path
    untrusted_client: Path


def _name(text: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "O": NameOID.ORGANIZATION_NAME, "C": NameOID.COUNTRY_NAME}
    # RFC 2253 text lists the most specific RDN first; the certificate holds them reversed.
    parts = [part.split("=", 1) for part in text.split(",")]
    return x509.Name([x509.NameAttribute(oids[key], value) for key, value in reversed(parts)])


def _issue(subject: str, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
           *, ca: bool = False, server: bool = False
           ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(subject)
    issuer_name, issuer_key = issuer if issuer is not None else (name, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(issuer_key, hashes.SHA256()), key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _issue("CN=kgroups test CA", None, ca=True)
    other_ca, other_key = _issue("CN=someone else's CA", None, ca=True)
    server_cert, server_key = _issue("CN=localhost", (ca_cert.subject, ca_key), server=True)
    client_cert, client_key = _issue(CLIENT_SUBJECT, (ca_cert.subject, ca_key))
    stranger, stranger_key = _issue("CN=stranger", (other_ca.subject, other_key))
    files = {
        "ca.pem": _pem(ca_cert),
        "server.pem": _key_pem(server_key) + _pem(server_cert) + _pem(ca_cert),
        "client.pem": _key_pem(client_key) + _pem(client_cert),
        "client-cert.pem": _pem(client_cert),
        "client-key.pem": _key_pem(client_key),
        "stranger.pem": _key_pem(stranger_key) + _pem(stranger),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return Certificates(directory / "ca.pem", directory / "server.pem", directory / "client.pem",
                        directory / "client-cert.pem", directory / "client-key.pem",
                        directory / "stranger.pem")


def jaas_users(**users: str) -> str:
    """A PlainLoginModule entry declaring PLAIN users, as Kafka's broker config writes it."""
    entries = " ".join(f'user_{name}="{secret}"' for name, secret in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};"


SCRAM_MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


def secure_settings(certs: Certificates, **extra: str) -> dict[str, str]:
    """Four listeners on free ports (PLAINTEXT advertised under a made-up name), PEM TLS with
    client certificates required on SSL, and PLAIN and both SCRAMs on the SASL listeners."""
    jaas = jaas_users(alice="alice-secret", admin="admin-secret")
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0",
        "advertised.listeners": "PLAINTEXT://plain.example:19092",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        "connection.failed.authentication.delay.ms": "0",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
        **extra,
    }


@contextlib.contextmanager
def running_broker(data_dir: Path, settings: dict[str, str]) -> Iterator[InProcessBroker]:
    """An in-process broker on its own event-loop thread, stopped on exit."""
    config = BrokerConfig.build(port=0, data_dir=data_dir,
                                overrides=[f"{k}={v}" for k, v in settings.items()])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def create() -> Broker:
        broker = Broker(config)
        await broker.start()
        return broker

    handle = InProcessBroker(asyncio.run_coroutine_threadsafe(create(), loop).result(30), loop)
    try:
        yield handle
    finally:
        asyncio.run_coroutine_threadsafe(handle.broker.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def client_security(certs: Certificates, protocol: str, mechanism: str = "PLAIN",
                    user: str = "alice", password: str = "alice-secret",
                    keystore: Path | None = None) -> ClientSecurity:
    return ClientSecurity(protocol=protocol, mechanism=mechanism, username=user,
                          password=password, truststore=str(certs.ca),
                          keystore=str(keystore or certs.client))


def add_scram_user(client: KafkaWireClient, user: str, password: str,
                   mechanism: str = "SCRAM-SHA-256", iterations: int = 4096) -> Any:
    """AlterUserScramCredentials as kafka-configs sends it: the client salts the password."""
    salt = os.urandom(16)
    upsertion = scram_request.ScramCredentialUpsertion(
        name=user, mechanism=SCRAM_MECHANISM_IDS[mechanism], iterations=iterations, salt=salt,
        salted_password=salted_password(mechanism, password, salt, iterations))
    return client.call(scram_request.AlterUserScramCredentialsRequest(
        deletions=(), upsertions=(upsertion,)))


def logged(caplog: pytest.LogCaptureFixture, text: str, count: int,
           timeout: float = 10.0) -> int:
    """How many records mention `text`, waiting (up to `timeout`) until there are `count`: the
    broker's thread may log a close just after the client saw it."""
    deadline = time.monotonic() + timeout
    while True:
        found = sum(text in record.getMessage() for record in caplog.records)
        if found >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)
