"""Client-supplied strings reach the broker's log (SASL user names, group and member ids,
client ids); none of them may forge a log line or send a terminal escape to whoever reads it."""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Callable, Iterator

import pytest
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from tests.broker.servers import ServerProcess

from kgroups.broker.events import LOGGER_NAME, configure_logging, log_event
from kgroups.tools.wire_client import KafkaWireClient, WireError

FORGED = "\n2026-11-27T00:00:00 INFO kgroups.server forged_event admin=granted"
HOSTILE = f"mallory\x00{FORGED}\x1b[31m\u2028red"


@pytest.fixture
def kgroups_log() -> Iterator[io.StringIO]:
    """kgroups' own handler (the one `kgroups serve` installs), writing to a buffer."""
    logger = logging.getLogger(LOGGER_NAME)
    saved = (logger.handlers[:], logger.level, logger.propagate)
    configure_logging("DEBUG")
    buffer = io.StringIO()
    handler = logger.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(buffer)
    yield buffer
    logger.handlers[:], logger.level, logger.propagate = saved


def _lines(buffer: io.StringIO) -> list[str]:
    return buffer.getvalue().splitlines()


def test_an_event_with_hostile_fields_is_one_line_showing_what_was_sent(
        kgroups_log: io.StringIO) -> None:
    log_event(logging.getLogger("kgroups.coordinator"), logging.INFO, "member_joined",
              group=HOSTILE, member="m\r1", client="back\\slash")
    (line,) = _lines(kgroups_log)
    assert "\x1b" not in line and "\x00" not in line and "\u2028" not in line
    assert r'group="mallory\x00\n2026-11-27T00:00:00 INFO' in line
    assert r"\x1b[31m\u2028red" in line
    assert r'member="m\r1"' in line
    assert r'client="back\\slash"' in line


def test_a_plain_message_and_a_traceback_cannot_start_a_line_of_their_own(
        kgroups_log: io.StringIO) -> None:
    logger = logging.getLogger("kgroups.server")
    logger.warning("request from %s refused", HOSTILE)
    try:
        raise ValueError(f"bad group {HOSTILE}")
    except ValueError as exc:
        logger.error("handler failed", exc_info=exc)
    lines = _lines(kgroups_log)
    records = [line for line in lines if re.match(r"\d{4}-\d\d-\d\dT", line)]
    assert len(records) == 2, lines
    assert not any(line.startswith("2026-11-27T00:00:00") for line in records)
    assert all(line.startswith("\t") for line in lines if line not in records)
    assert not any(ch in kgroups_log.getvalue() for ch in "\x1b\x00\u2028")


def _sasl_plain(port: int, token: bytes) -> None:
    client = KafkaWireClient("127.0.0.1", port, timeout=10)
    try:
        client.call(SaslHandshakeRequest(mechanism="PLAIN"))
        client.call(SaslAuthenticateRequest(auth_bytes=token))
    except WireError:
        pass
    finally:
        client.close()


@pytest.mark.slow
def test_a_served_broker_logs_a_hostile_plain_user_on_one_line(
        start_kgroups_server: Callable[..., ServerProcess]) -> None:
    server = start_kgroups_server(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="s3cret";',
        "connection.failed.authentication.delay.ms=0")
    _sasl_plain(server.port, b"\0" + HOSTILE.replace("\x00", "").encode() + b"\0guess")
    deadline = time.monotonic() + 10
    while "sasl_authentication_failed" not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    text = server.log_text()
    assert "sasl_authentication_failed" in text
    assert r"mallory\n2026-11-27T00:00:00" in text
    assert not any(line.startswith("2026-11-27T00:00:00") for line in text.splitlines())
    assert "\x1b" not in text and "\x00" not in text

