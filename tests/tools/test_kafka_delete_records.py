"""kafka-delete-records (Kafka's DeleteRecordsCommand) against kgroups and against Kafka 4.3.1,
and `kgroups topics --delete-records` against both: the same offset file, the same printed
lines (sorted: Kafka's tool prints partitions in hash order), the same log starts after."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_tools import GET_OFFSETS, Side, on_both, run_tool, stdout_of
from tests.broker.broker_wire_helpers import create_topic, produce_request

from kgroups.cli import main
from kgroups.log.batch import build_batch
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka

DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"  # bin/kafka-delete-records.sh
COUNTS = {0: 10, 1: 4, 2: 0}
BASE_MS = 1_700_000_000_000


def _filled_topic(side: Side, topic: str, configs: dict[str, str] | None = None) -> None:
    host, port = side.bootstrap.rsplit(":", 1)
    with KafkaWireClient(host, int(port), client_id="delete-records-setup") as client:
        create_topic(client, topic, partitions=len(COUNTS), configs=configs)
        for partition, count in COUNTS.items():
            if not count:
                continue
            batch = build_batch([(b"k%d" % i, b"v%d" % i, BASE_MS + i) for i in range(count)])
            deadline = time.monotonic() + 30
            while True:  # Kafka elects the new topic's leaders a moment later
                answer = client.call(produce_request(topic, partition, batch))
                error = int(answer.responses[0].partition_responses[0].error_code)
                if error == 0:
                    break
                assert time.monotonic() < deadline, f"produce failed with {error}"
                time.sleep(0.1)


@pytest.fixture(scope="module")
def sides(kafka_broker: Any, kgroups_broker: Any) -> list[Side]:
    return [Side("kafka", kafka_broker), Side("kgroups", kgroups_broker)]


def _offset_file(tmp_path: Path, topic: str, compacted: str) -> Path:
    path = tmp_path / f"{topic}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 4},
        {"topic": topic, "partition": 1, "offset": -1},
        {"topic": topic, "partition": 2, "offset": 3},  # beyond an empty partition's end
        {"topic": compacted, "partition": 0, "offset": 1},
        {"topic": "__consumer_offsets", "partition": 0, "offset": 0},
    ]}))
    return path


def _lines(text: str, topic: str, compacted: str) -> list[str]:
    return sorted(text.replace(compacted, "COMPACTED").replace(topic, "TOPIC").splitlines())


def _earliest(sides: list[Side], topic: str) -> dict[str, list[list[str]]]:
    printed = stdout_of(on_both(sides, GET_OFFSETS, ["--topic", topic, "--time", "-2"]), sides)
    return {name: sorted(lines) for name, lines in printed.items()}


def test_kafkas_tool_and_kgroups_print_the_same_on_both_brokers(
        sides: list[Side], tmp_path: Path, capsys: Any) -> None:
    tail = uuid.uuid4().hex[:6]
    by_tool, by_kgroups = f"dr-tool-{tail}", f"dr-cli-{tail}"
    compacted = f"dr-compacted-{tail}"
    for side in sides:
        _filled_topic(side, by_tool)
        _filled_topic(side, by_kgroups)
        _filled_topic(side, compacted, {"cleanup.policy": "compact"})

    printed = {}
    results = on_both(sides, DELETE_RECORDS,
                      ["--offset-json-file", str(_offset_file(tmp_path, by_tool, compacted))])
    for side in sides:
        result = results[side.name]
        assert result.returncode == 0, result.stderr[-3000:]
        printed[f"kafka-delete-records on {side.name}"] = _lines(result.stdout, by_tool,
                                                                 compacted)
        code = main(["topics", "--bootstrap-server", side.bootstrap, "--delete-records",
                     "--offset-json-file", str(_offset_file(tmp_path, by_kgroups, compacted))])
        assert code == 0
        printed[f"kgroups on {side.name}"] = _lines(capsys.readouterr().out, by_kgroups,
                                                    compacted)

    expected = printed["kafka-delete-records on kafka"]
    assert expected == sorted([
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: TOPIC-0\tlow_watermark: 4",
        "partition: TOPIC-1\tlow_watermark: 4",
        "partition: TOPIC-2\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
        "The requested offset is not within the range of offsets maintained by the server.",
        "partition: COMPACTED-0\terror: org.apache.kafka.common.errors."
        "PolicyViolationException: Request parameters do not satisfy the configured policy.",
        "partition: __consumer_offsets-0\terror: org.apache.kafka.common.errors."
        "InvalidTopicException: The request attempted to perform an operation on an invalid "
        "topic."])
    assert printed == dict.fromkeys(printed, expected)
    for topic in (by_tool, by_kgroups):
        starts = _earliest(sides, topic)
        assert starts["kafka"] == starts["kgroups"] == [
            [f"{topic}:0:4"], [f"{topic}:1:4"], [f"{topic}:2:0"]]


def test_an_unknown_partition_is_reported_at_once_where_kafkas_tool_waits(
        sides: list[Side], tmp_path: Path, capsys: Any) -> None:
    """docs/compatibility.md: Kafka's admin client retries UNKNOWN_TOPIC_OR_PARTITION until
    default.api.timeout.ms (60 s) and prints a TimeoutException; kgroups prints the error."""
    kafka = sides[0]
    offsets = tmp_path / "unknown.json"
    offsets.write_text(json.dumps({"partitions": [
        {"topic": f"dr-unknown-{uuid.uuid4().hex[:6]}", "partition": 0, "offset": 0}]}))
    settings = tmp_path / "client.properties"
    settings.write_text("default.api.timeout.ms=3000\nrequest.timeout.ms=3000\n")
    theirs = run_tool(kafka, DELETE_RECORDS, ["--offset-json-file", str(offsets),
                                              "--command-config", str(settings)])
    assert theirs.returncode == 0
    assert "error: org.apache.kafka.common.errors.TimeoutException: " in theirs.stdout
    assert main(["topics", "--bootstrap-server", kafka.bootstrap, "--delete-records",
                 "--offset-json-file", str(offsets)]) == 0
    assert ("error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server "
            "does not host this topic-partition.") in capsys.readouterr().out
