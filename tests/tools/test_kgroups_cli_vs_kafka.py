"""`kgroups topics` / `kgroups groups` and Kafka's kafka-topics / kafka-consumer-groups on the
same broker for the same actions: the same answers (rows compared as sets, since Kafka's tool
lists partitions in hash order), and each tool reads the other's reset CSV."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_tools import GROUPS, TOPICS, Side, run_tool
from tests.broker.broker_wire_helpers import produce_request

from kgroups.cli import main
from kgroups.log.batch import build_batch
from kgroups.tools import admin
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka

BASE_MS = 1_700_000_000_000
COUNTS = {0: 10, 1: 4, 2: 7}


@pytest.fixture(scope="module")
def names() -> dict[str, str]:
    tail = uuid.uuid4().hex[:6]
    return {"topic": f"cli-topic-{tail}", "group": f"cli-group-{tail}"}


@pytest.fixture(scope="module")
def side(kgroups_broker: Any, names: dict[str, str]) -> Side:
    """The kgroups broker with a 2-partition topic made by `kgroups topics`, grown to 3 by
    kafka-topics, filled (records a second apart) and a group's offsets committed."""
    side = Side("kgroups", kgroups_broker)
    assert main(["topics", "--bootstrap-server", side.bootstrap, "--create", "--topic",
                 names["topic"], "--partitions", "2", "--config", "retention.ms=-1"]) == 0
    altered = run_tool(side, TOPICS, ["--alter", "--topic", names["topic"], "--partitions", "3"])
    assert altered.returncode == 0, altered.stderr[-2000:]
    host, port = side.bootstrap.rsplit(":", 1)
    with KafkaWireClient(host, int(port), client_id="cli-setup") as client:
        for partition, count in COUNTS.items():
            batch = build_batch([(None, b"v%d" % i, BASE_MS + i * 1000) for i in range(count)])
            response = client.call(produce_request(names["topic"], partition, batch))
            assert response.responses[0].partition_responses[0].error_code == 0
        admin.execute_reset(client, names["group"], [
            admin.OffsetReset(names["topic"], 0, None, 6),
            admin.OffsetReset(names["topic"], 1, None, 1)])
    return side


def _kgroups(capsys: Any, side: Side, command: str, *args: str) -> tuple[int, str]:
    code = main([command, "--bootstrap-server", side.bootstrap, *args])
    return code, capsys.readouterr().out


def _kgroups_err(capsys: Any, side: Side, command: str, *args: str) -> str:
    main([command, "--bootstrap-server", side.bootstrap, *args])
    return capsys.readouterr().err


def _kafka(side: Side, tool: str, *args: str) -> str:
    return _kafka_run(side, tool, *args).stdout


def _kafka_run(side: Side, tool: str, *args: str) -> Any:
    result = run_tool(side, tool, list(args))
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def _rows(text: str, first: str) -> set[tuple[str, ...]]:
    return {tuple(line.split()) for line in text.splitlines() if line.split()[:1] == [first]}


def test_topics_describe_is_kafkas_plus_log_offsets(side: Side, names: dict[str, str],
                                                    capsys: Any) -> None:
    code, ours = _kgroups(capsys, side, "topics", "--describe", "--topic", names["topic"])
    theirs = _kafka(side, TOPICS, "--describe", "--topic", names["topic"])
    assert code == 0
    stripped = [line.split("\tLogStartOffset:")[0] for line in ours.splitlines()]
    assert stripped == theirs.splitlines()
    ends = [line.rsplit("LogEndOffset: ", 1)[1] for line in ours.splitlines()[1:]]
    assert ends == [str(COUNTS[p]) for p in range(3)]


def test_topics_list_is_kafkas(side: Side, capsys: Any) -> None:
    assert _kgroups(capsys, side, "topics", "--list")[1] == _kafka(side, TOPICS, "--list")


def test_groups_describe_and_list_are_kafkas(side: Side, names: dict[str, str],
                                             capsys: Any) -> None:
    group = names["group"]
    code, ours = _kgroups(capsys, side, "groups", "--describe", "--group", group)
    theirs = _kafka(side, GROUPS, "--describe", "--group", group)
    assert code == 0
    # kgroups adds LAG-SECONDS as the last column; Kafka's columns are the same, in place.
    assert {row[:-1] for row in _rows(ours, group)} == _rows(theirs, group)
    # Both say so on stderr, so the table on stdout stays parseable.
    message = f"Consumer group '{group}' has no active members."
    assert message in _kafka_run(side, GROUPS, "--describe", "--group", group).stderr
    assert message in _kgroups_err(capsys, side, "groups", "--describe", "--group", group)
    _, ours = _kgroups(capsys, side, "groups", "--list", "--state")
    assert _rows(ours, group) == _rows(_kafka(side, GROUPS, "--list", "--state"), group)


@pytest.mark.parametrize("mode", [
    ["--to-earliest"], ["--to-latest"], ["--to-current"], ["--to-offset", "5"],
    ["--shift-by", "-2"], ["--to-datetime", "2023-11-14T22:13:22.500Z"],
    ["--by-duration", "PT1H"]])
@pytest.mark.parametrize("scope", ["all-topics", "topic-partitions"])
def test_reset_plans_are_kafkas(side: Side, names: dict[str, str], capsys: Any,
                                mode: list[str], scope: str) -> None:
    group, topic = names["group"], names["topic"]
    scoped = ["--all-topics"] if scope == "all-topics" else ["--topic", f"{topic}:0,1"]
    _, ours = _kgroups(capsys, side, "groups", "--reset-offsets", "--group", group, *scoped,
                       *mode)
    theirs = _kafka(side, GROUPS, "--reset-offsets", "--group", group, *scoped, *mode)
    # Kafka prints GROUP TOPIC PARTITION NEW-OFFSET; kgroups also shows CURRENT-OFFSET.
    assert {(r[0], r[1], r[2], r[4]) for r in _rows(ours, group)} == _rows(theirs, group)


def test_each_tool_reads_the_others_export(side: Side, names: dict[str, str], capsys: Any,
                                           tmp_path: Path) -> None:
    group, topic = names["group"], names["topic"]
    code, ours = _kgroups(capsys, side, "groups", "--reset-offsets", "--group", group,
                          "--all-topics", "--to-offset", "3", "--export")
    theirs = _kafka(side, GROUPS, "--reset-offsets", "--group", group, "--all-topics",
                    "--to-offset", "3", "--export")
    assert code == 0
    assert set(ours.split()) == set(theirs.split())
    (tmp_path / "ours.csv").write_text(ours)
    from_ours = _kafka(side, GROUPS, "--reset-offsets", "--group", group, "--from-file",
                       str(tmp_path / "ours.csv"))
    assert _rows(from_ours, group) == {(group, topic, "0", "3"), (group, topic, "1", "3")}
    (tmp_path / "theirs.csv").write_text(theirs)
    _, from_theirs = _kgroups(capsys, side, "groups", "--reset-offsets", "--group", group,
                              "--from-file", str(tmp_path / "theirs.csv"))
    assert {(r[0], r[1], r[2], r[4]) for r in _rows(from_theirs, group)} == _rows(from_ours,
                                                                                    group)
