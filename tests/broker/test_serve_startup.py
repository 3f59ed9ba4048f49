"""`kgroups serve` start-up: every mistake an operator can make ends in one line on stderr
naming the cause and exit status 2, never a traceback; settings kgroups does not read are
warned about (a Kafka setting kgroups has no use for told apart from a typo)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgroups.broker.config import BrokerConfig, ConfigError
from kgroups.broker.kafka_settings import kafka_settings


def _serve(
    tmp_path: Path, *args: str, data_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kgroups.cli", "serve", "--port", "0",
               "--data-dir", str(data_dir or tmp_path / "data"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def _one_line_failure(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kgroups serve: ")
    return lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize(
    ("override", "cause"),
    [("group.initial.rebalance.delay.ms=-5", "group.initial.rebalance.delay.ms must be >= 0"),
     ("group.min.session.timeout.ms=x", "group.min.session.timeout.ms=x: expected an integer"),
     ("message.max.bytes=-1", "message.max.bytes=-1: must be at least 0"),
     ("offsets.topic.num.partitions=0", "offsets.topic.num.partitions=0: must be at least 1"),
     ("log.cleanup.policy=shred", "'shred' is not one of compact, delete"),
     ("group.max.session.timeout.ms=1000", "must not exceed group.max.session.timeout.ms")],
)
def test_a_bad_value_is_one_line_naming_the_key(tmp_path: Path, override: str, cause: str) -> None:
    line = _one_line_failure(_serve(tmp_path, "--override", override))
    assert cause in line


def test_port_in_use_is_one_line(tmp_path: Path, taken_port: int) -> None:
    result = _serve(tmp_path, "--port", str(taken_port))
    line = _one_line_failure(result)
    assert f"cannot listen on 127.0.0.1:{taken_port}: address already in use" in line


def test_data_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "data"
    a_file.write_text("not a directory")
    line = _one_line_failure(_serve(tmp_path, data_dir=a_file))
    assert f"data dir {a_file} is not a directory" in line


def test_data_dir_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    line = _one_line_failure(_serve(tmp_path, data_dir=blocked / "data"))
    assert f"cannot create data dir {blocked / 'data'}" in line


def test_unknown_settings_are_warned_with_a_did_you_mean(tmp_path: Path, taken_port: int) -> None:
    # The port is taken so the run ends right after the warnings.
    result = _serve(tmp_path, "--port", str(taken_port),
                    "--override", "group.inital.rebalance.delay.ms=0",
                    "--override", "no.such.key=1", "--override", "log.dirs=/var/kafka")
    assert result.returncode == 2
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert warnings == [
        "kgroups serve: warning: The configuration 'group.inital.rebalance.delay.ms' was "
        "supplied but isn't a known config. Did you mean 'group.initial.rebalance.delay.ms'?",
        "kgroups serve: warning: 'log.dirs' is a Kafka broker setting kgroups does not use; "
        "ignored (kgroups serve keeps its data in --data-dir)",
        "kgroups serve: warning: The configuration 'no.such.key' was supplied but isn't a "
        "known config.",
    ]


def test_settings_kgroups_reads_and_its_own_defaults_raise_no_warning() -> None:
    config = BrokerConfig.build(overrides=[
        "group.initial.rebalance.delay.ms=0", "offsets.retention.minutes=5",
        "log.segment.bytes=1048576", "advertised.listeners=PLAINTEXT://localhost:9092",
        "kgroups.memory.exhausted.close.ms=100"])
    assert config.warnings() == []


@pytest.mark.parametrize(
    ("override", "accepted"),
    [("num.io.threads=8", True), ("num.io.threads=0", False),
     ("log.message.timestamp.type=LogAppendTime", True),
     ("log.message.timestamp.type=Wallclock", False),
     ("delete.topic.enable=TRUE", True), ("delete.topic.enable=1", False),
     ("log.cleaner.min.cleanable.ratio=0.5", True), ("log.cleaner.min.cleanable.ratio=2", False),
     ("process.roles=broker,controller", True), ("process.roles=broker,client", False),
     ("socket.request.max.bytes=2147483648", False)],
)
def test_kafka_settings_kgroups_ignores_are_still_checked_with_kafkas_rules(
    override: str, accepted: bool
) -> None:
    if accepted:
        BrokerConfig.build(overrides=[override])
    else:
        with pytest.raises(ConfigError, match=override.partition("=")[0]):
            BrokerConfig.build(overrides=[override])


def test_the_kafka_settings_list_is_kafkas_own() -> None:
    settings = kafka_settings()
    assert len(settings) > 300
    assert {"listeners", "log.dirs", "process.roles", "group.initial.rebalance.delay.ms",
            "offsets.retention.minutes"} <= set(settings)
    assert settings["num.partitions"].type == "INT"
    assert settings["num.partitions"].validator == "[1,...]"


def test_a_damaged_log_start_checkpoint_is_one_line(tmp_path: Path) -> None:
    """Serving without the starts DeleteRecords left would bring deleted records back."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "log-start-offset-checkpoint").write_text("0\n3\norders 0 5\n")
    line = _one_line_failure(_serve(tmp_path, data_dir=data))
    assert "log-start-offset-checkpoint line 2: says 3 entries, the file has 1" in line
