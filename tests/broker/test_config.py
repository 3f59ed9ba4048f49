"""Broker settings: Kafka's names and defaults, server.properties, --override, clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroups.broker.config import BrokerConfig, ConfigError, parse_override, parse_properties
from kgroups.broker.security.state import plain_users


def test_kafka_defaults() -> None:
    config = BrokerConfig.build()
    assert config.num_partitions == 1
    assert config.auto_create_topics is True
    assert config.socket_request_max_bytes == 104857600
    assert config.sasl_server_max_receive_size == 524288
    assert config.offsets_topic_num_partitions == 50
    assert config.message_max_bytes == 1048588


def test_properties_file_then_overrides_win(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("# comment\n! also a comment\nnum.partitions=3\n"
                          "group.initial.rebalance.delay.ms: 0\n\n"
                          "auto.create.topics.enable=false\n")
    config = BrokerConfig.build(config_file=properties, overrides=["num.partitions=7"])
    assert config.num_partitions == 7
    assert config.auto_create_topics is False
    assert config.with_prefixes("group.") == {"group.initial.rebalance.delay.ms": "0"}


@pytest.mark.parametrize(
    ("override", "named"),
    [("num.partitions=many", "num.partitions"),
     ("num.partitions=0", "num.partitions"),
     ("auto.create.topics.enable=yes", "auto.create.topics.enable"),
     ("log.segment.bytes=tiny", "log.segment.bytes"),
     ("sasl.server.max.receive.size=big", "sasl.server.max.receive.size"),
     ("sasl.server.max.receive.size=0", "sasl.server.max.receive.size"),
     ("advertised.listeners=somewhere", "advertised.listeners"),
     ("novalue", "key=value")],
)
def test_bad_values_name_the_key(override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        BrokerConfig.build(overrides=[override])


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        BrokerConfig.build(config_file=tmp_path / "absent.properties")


def test_malformed_properties_line_names_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"server\.properties:2"):
        parse_properties("a=1\njust words\n", "server.properties")


@given(key=st.from_regex(r"[a-z][a-z.]{0,20}", fullmatch=True),
       value=st.from_regex(r"[A-Za-z0-9=:._-]{0,20}", fullmatch=True))
def test_override_round_trips_any_value(key: str, value: str) -> None:
    assert parse_override(f"{key}={value}") == (key, value)
    assert parse_properties(f"{key}={value}") == {key: value}


def test_serve_refuses_a_bad_setting_with_exit_code_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kgroups.cli", "serve", "--port", "0", "--data-dir",
         str(tmp_path), "--override", "socket.request.max.bytes=lots"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "socket.request.max.bytes" in result.stderr


def test_properties_continue_lines_and_unescape_as_java_reads_them(tmp_path: Path) -> None:
    """Kafka's documented multi-line JAAS entry is one setting, and its users are read from it
    (a continuation split it into junk settings before)."""
    text = ("listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security"
            ".plain.PlainLoginModule required \\\n"
            '    username="admin" \\\n'
            '    password="admin-secret" \\\n'
            '    user_admin="admin-secret" \\\n'
            '    user_alice="alice-secret";\n'
            "# a comment ending in a backslash is not continued \\\n"
            "path=C\\:\\\\data\\ttab\\u0041\n"
            "ends.in.two.backslashes=x\\\\\n"
            "next=1\n")
    parsed = parse_properties(text)
    assert parsed == {
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="admin" password="admin-secret" user_admin="admin-secret" '
            'user_alice="alice-secret";'),
        "path": "C:\\data\ttabA", "ends.in.two.backslashes": "x\\", "next": "1"}
    assert plain_users(parsed["listener.name.sasl_plaintext.plain.sasl.jaas.config"]) == {
        "admin": "admin-secret", "alice": "alice-secret"}
