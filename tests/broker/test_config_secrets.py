"""No secret leaves the broker: DescribeConfigs on the broker answers every password-type
setting (Kafka's ConfigDef PASSWORD, bare or as a listener override) and every setting whose
type cannot be told as a null value marked sensitive, its synonyms' values null too, at every
served version, with and without synonyms; and `kgroups serve` logs none of them
(tests/broker/test_config_secrets_vs_kafka.py checks Kafka answers the same)."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from broker_wire_helpers import connect
from config_wire_helpers import alter
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v2 import request as describe_v2
from kio.schema.describe_configs.v3 import request as describe_v3
from kio.schema.describe_configs.v4 import request as describe_v4
from tests.broker.servers import InProcessBroker, ServerProcess

from kgroups.broker.kafka_settings import kafka_settings
from kgroups.broker.security.sensitive_settings import HIDDEN, is_sensitive, redacted
from kgroups.broker.topic_configs import SET
from kgroups.broker.wire import decode_response, encode_request, response_type
from kgroups.errors import ErrorCode

BROKER = 4
PASSWORD_TYPE = 9
DESCRIBE_REQUESTS = {1: describe_v1, 2: describe_v2, 3: describe_v3, 4: describe_v4}
PASSWORD_NAMES = sorted(name for name, setting in kafka_settings().items()
                        if setting.type == "PASSWORD")
LISTENER = "listener.name.sasl_plaintext."


def _secret(name: str) -> str:
    return f"s3cret-{name.replace('.', '-')}"


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-pw-0x51" user_admin="admin-pw-0x52";')
# Every PASSWORD-type name bare and as a listener override, the listener's PLAIN users, and
# two names nobody can type (an unknown listener override, an unknown setting).
SECRETS = {
    **{name: _secret(name) for name in PASSWORD_NAMES},
    **{LISTENER + name: _secret("listener-" + name) for name in PASSWORD_NAMES},
    LISTENER + "plain.sasl.jaas.config": JAAS,
    LISTENER + "foo.bar": "unknown-listener-value-0x53",
    "my.custom.secret": "unknown-value-0x54",
}
SECRET_VALUES = [value for value in SECRETS.values() if value != JAAS] + [
    "alice-pw-0x51", "admin-pw-0x52"]
PLAIN_SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
}


def test_every_password_type_is_known() -> None:
    """The walk below covers Kafka's whole list (kafka_broker_configs.tsv)."""
    assert {"ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
            "sasl.jaas.config"} <= set(PASSWORD_NAMES)


@pytest.fixture
def broker(make_inprocess_broker: Any) -> InProcessBroker:
    settings = {**PLAIN_SETTINGS, **SECRETS}
    started: InProcessBroker = make_inprocess_broker(
        *(f"{key}={value}" for key, value in settings.items()))
    return started


def _raw_describe(port: int, version: int, synonyms: bool) -> bytes:
    """The answer's bytes, as a client would read them off the socket."""
    schema = DESCRIBE_REQUESTS[version]
    fields: dict[str, Any] = {"include_synonyms": synonyms}
    if version >= 3:
        fields["include_documentation"] = False
    request = schema.DescribeConfigsRequest(resources=(schema.DescribeConfigsResource(
        resource_type=BROKER, resource_name="0", configuration_keys=None),), **fields)
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(encode_request(7, "secrets-test", request))
        size = struct.unpack(">i", _read(sock, 4))[0]
        return _read(sock, size)


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


@pytest.mark.parametrize("synonyms", [True, False])
@pytest.mark.parametrize("version", sorted(DESCRIBE_REQUESTS))
def test_describe_broker_answers_no_secret(broker: InProcessBroker, version: int,
                                           synonyms: bool) -> None:
    frame = _raw_describe(broker.port, version, synonyms)
    leaked = [value for value in SECRET_VALUES if value.encode() in frame]
    assert leaked == []
    _, response = decode_response(response_type(32, version), frame)
    (result,) = response.results
    assert result.error_code == ErrorCode.NONE
    entries = {entry.name: entry for entry in result.configs}
    for name in SECRETS:
        entry = entries[name]
        assert (entry.value, entry.is_sensitive) == (None, True), name
        assert all(synonym.value is None for synonym in entry.synonyms), name
        if synonyms:
            assert entry.synonyms[0].name == name
    # Settings that are not secrets still show their values.
    assert (entries["sasl.enabled.mechanisms"].value,
            entries["sasl.enabled.mechanisms"].is_sensitive) == ("PLAIN", False)
    if version >= 3:
        jaas = entries[LISTENER + "plain.sasl.jaas.config"]
        assert int(jaas.config_type) == PASSWORD_TYPE
        assert int(entries["ssl.key.password"].config_type) == PASSWORD_TYPE
        assert int(entries["my.custom.secret"].config_type) == 0


def test_asking_for_a_secret_by_name_answers_it_null(broker: InProcessBroker) -> None:
    keys = ("ssl.key.password", LISTENER + "plain.sasl.jaas.config")
    with connect(broker.port) as client:
        response = client.call(describe_v4.DescribeConfigsRequest(
            resources=(describe_v4.DescribeConfigsResource(
                resource_type=BROKER, resource_name="0", configuration_keys=keys),),
            include_synonyms=True, include_documentation=False))
    shown = {entry.name: (entry.value, entry.is_sensitive) for entry in
             response.results[0].configs}
    assert shown == {key: (None, True) for key in keys}


def test_sensitivity_follows_kafkas_types() -> None:
    assert is_sensitive("ssl.key.password")
    assert is_sensitive("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config")
    assert is_sensitive("listener.name.ssl.ssl.keystore.password")
    assert is_sensitive("listener.name.ssl.no.such.setting")
    assert not is_sensitive("listener.name.ssl.ssl.client.auth")
    assert not is_sensitive("log.retention.ms")
    assert not is_sensitive("kgroups.metrics.port")
    assert redacted({"ssl.key.password": "x", "log.retention.ms": "5"}) == {
        "ssl.key.password": HIDDEN, "log.retention.ms": "5"}


def test_serve_logs_no_secret(tmp_path: Path) -> None:
    """Start-up (warnings about settings kgroups does not use or does not know included), a
    dynamic change and shutdown: the secrets appear nowhere in what `kgroups serve` writes."""
    typo = {"ssl.key.pasword": "typo-secret-0x55"}  # warned about with a "did you mean"
    settings = {**SECRETS, **typo}
    server = ServerProcess(tmp_path / "data", tmp_path / "serve.log",
                           tuple(f"{key}={value}" for key, value in settings.items()))
    server.start()
    try:
        with connect(server.port) as client:
            assert alter(client, (BROKER, "", [("log.retention.ms", SET, "1000")])) == [(0, None)]
    finally:
        server.stop()
        server.close()
    text = server.log_text()
    assert "ssl.key.pasword" in text  # the warning is there, naming the key only
    assert [value for value in [*SECRET_VALUES, *typo.values()] if value in text] == []
