"""__consumer_offsets files both ways between kgroups and Apache Kafka 4.3.1.

The same group activity (a classic consumer group, a static member, a consumer-protocol group on
Kafka, offsets committed by the admin tools with and without metadata, offsets and groups
deleted) runs against a dedicated Kafka broker and a dedicated `kgroups serve`; each is stopped
and then:
- Kafka's DumpLogSegments (--offsets-decoder) and `kgroups offsets dump` read each broker's
  segments, and every record must decode the same in both (kgroups' log read by Kafka, Kafka's
  log read by kgroups: OffsetCommitValue v4 with its topic id, the consumer protocol's records);
- `kgroups analyze` on Kafka's log directory finds the committed offsets Kafka's OffsetFetch
  returned;
- `kgroups serve --data-dir` on a copy of Kafka's log directory (KRaft metadata, checkpoints and
  all) serves those same offsets: a migration from Kafka to kgroups.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_tools import CONSOLE_CONSUMER, GET_OFFSETS, GROUPS, TOPICS, Side, run_tool
from tests.broker.broker_wire_helpers import create_topic, produce_request
from tests.broker.servers import ServerProcess

from kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker, kgroups_overrides, run_kafka_tool
from kgroups.log.batch import build_batch
from kgroups.pipeline.job import run_analysis
from kgroups.records.codec import encode_key, encode_value
from kgroups.records.consumer_group import (
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    SubscribedTopicMetadata,
)
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka

DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"
TOPIC = "logs-t"
PARTITIONS = 3


@dataclass(frozen=True)
class Activity:
    """What one broker went through, and the offsets its OffsetFetch returned at the end."""

    groups: tuple[str, ...]
    committed: dict[str, dict[tuple[str, int], tuple[int, str]]]


def _group_names() -> dict[str, str]:
    tail = uuid.uuid4().hex[:6]
    return {role: f"logs-{role}-{tail}" for role in
            ("classic", "static", "admin", "deleted", "consumer")}


def _produce_all(bootstrap: str) -> None:
    host, port = bootstrap.rsplit(":", 1)
    with KafkaWireClient(host, int(port), client_id="logs-setup") as client:
        create_topic(client, TOPIC, PARTITIONS)
        now = int(time.time() * 1000)
        for partition in range(PARTITIONS):
            batch = build_batch([(f"k{i}".encode(), f"v{i}".encode(), now + i)
                                 for i in range(5 + partition)])
            deadline = time.monotonic() + 30
            while int(client.call(produce_request(TOPIC, partition, batch)).responses[0]
                      .partition_responses[0].error_code) != 0:
                assert time.monotonic() < deadline, "produce kept failing"
                time.sleep(0.1)


def _offset_fetch(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
            for tp in future.result(timeout=30).topic_partitions if tp.offset >= 0}


def _consume(side: Side, group: str, *extra: str) -> None:
    result = run_tool(side, CONSOLE_CONSUMER, [
        "--topic", TOPIC, "--group", group, "--from-beginning", "--timeout-ms", "60000",
        "--max-messages", str(sum(5 + p for p in range(PARTITIONS))), *extra])
    assert "Processed a total of" in result.stderr, result.stderr[-3000:]


def run_activity(side: Side, *, consumer_protocol: bool) -> Activity:
    """The group activity the log files are made of (see the module doc)."""
    names = _group_names()
    _produce_all(side.bootstrap)
    _consume(side, names["classic"])
    _consume(side, names["static"], "--consumer-property", "group.instance.id=logs-static-1",
             "--consumer-property", "partition.assignment.strategy="
             "org.apache.kafka.clients.consumer.CooperativeStickyAssignor")
    if consumer_protocol:
        _consume(side, names["consumer"], "--consumer-property", "group.protocol=consumer")
    for group in (names["admin"], names["deleted"]):
        result = run_tool(side, GROUPS, ["--reset-offsets", "--group", group, "--topic", TOPIC,
                                         "--to-offset", "2", "--execute"])
        assert result.returncode == 0, result.stdout + result.stderr
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    with_metadata = [TopicPartition(TOPIC, 1, 4, metadata="from the admin client, ünïcödé")]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        names["admin"], with_metadata)])[names["admin"]].result(timeout=30)
    deleted = run_tool(side, GROUPS, ["--delete-offsets", "--group", names["classic"],
                                      "--topic", f"{TOPIC}:0"])
    assert "Successful" in deleted.stdout, deleted.stdout + deleted.stderr
    gone = run_tool(side, GROUPS, ["--delete", "--group", names["deleted"]])
    assert "was successful" in gone.stdout, gone.stdout + gone.stderr
    groups = tuple(name for role, name in names.items()
                   if consumer_protocol or role != "consumer")
    committed = {group: _offset_fetch(side.bootstrap, group) for group in groups}
    assert committed[names["deleted"]] == {}
    assert committed[names["admin"]][(TOPIC, 1)] == (4, "from the admin client, ünïcödé")
    assert (TOPIC, 0) not in committed[names["classic"]]
    return Activity(groups, committed)


# ---------------------------------------------------------------- reading both outputs


_DUMP_RECORD = re.compile(
    r"^\| offset: (\d+) (?:CreateTime|LogAppendTime): (-?\d+) .*? key: (.*) payload: (.*)$")


def kafka_dump(directory: Path) -> list[dict[str, Any]]:
    """DumpLogSegments --offsets-decoder over every segment of a partition directory, as
    records shaped like `kgroups offsets dump`'s (Kafka prints types and versions as strings)."""
    records = []
    for segment in sorted(directory.glob("*.log")):
        result = run_kafka_tool(DUMP_LOG_SEGMENTS, [
            "--offsets-decoder", "--print-data-log", "--files", str(segment)])
        assert result.returncode == 0, result.stderr[-3000:]
        for line in result.stdout.splitlines():
            if not line.startswith("| offset:"):
                continue
            match = _DUMP_RECORD.match(line)
            assert match, line
            offset, timestamp, key, payload = match.groups()
            key_json = json.loads(key)
            key_json["type"] = int(key_json["type"])
            value = None
            if payload != "<DELETE>":
                value = json.loads(payload)
                value["version"] = int(value["version"])
            records.append({"offset": int(offset), "timestamp": int(timestamp),
                            "key": key_json, "value": value})
    return records


def kgroups_dump(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "kgroups.cli", "offsets", "dump",
                             str(directory)], capture_output=True, text=True, check=False,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    records = []
    for line in result.stdout.splitlines():
        record = json.loads(line)
        record.pop("partition")
        records.append(record)
    return records


def assert_same_records(directory: Path) -> list[dict[str, Any]]:
    """Every record as Kafka's tool decodes it equals kgroups' decoding of it."""
    kafka = kafka_dump(directory)
    kgroups = kgroups_dump(directory)
    assert [r["offset"] for r in kgroups] == [r["offset"] for r in kafka]
    differing = [f"offset {theirs['offset']}:\n  DumpLogSegments: {json.dumps(theirs)}\n"
                 f"  kgroups:         {json.dumps(ours)}"
                 for theirs, ours in zip(kafka, kgroups, strict=True) if ours != theirs]
    assert not differing, f"{len(differing)} of {len(kafka)} records differ:\n" + "\n".join(
        differing[:10])
    return kafka


def record_kinds(records: list[dict[str, Any]]) -> set[tuple[int, int | None]]:
    """(key type, value version or None for a tombstone) of every record."""
    return {(r["key"]["type"], None if r["value"] is None else r["value"]["version"])
            for r in records}


# -------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def kafka_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Activity]]:
    """A dedicated Kafka broker's data directory after the activity, Kafka stopped."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-logs"))
    broker.start()
    try:
        activity = run_activity(Side("kafka", broker), consumer_protocol=True)
        # SIGTERM runs Kafka's controlled shutdown; the JVM then exits with 128 + 15.
        assert broker.stop() == 143, broker.log_text()[-3000:]
    finally:
        broker.close()
    yield broker.data_dir, activity


def test_kgroups_reads_every_record_kafka_wrote(kafka_log: tuple[Path, Activity]) -> None:
    data_dir, _ = kafka_log
    records = assert_same_records(data_dir / "__consumer_offsets-0")
    kinds = record_kinds(records)
    # Kafka 4.3 writes OffsetCommitValue v4 (with the topic id), GroupMetadataValue v3, and
    # the consumer protocol's records (types 3, 5, 6, 7, 8; value version 0) for its groups.
    assert {(1, 4), (1, None), (2, 3), (2, None)} <= kinds
    assert {3, 5, 6, 7, 8} <= {kind for kind, _ in kinds}
    assert all("topicId" in r["value"]["data"] for r in records
               if r["key"]["type"] == 1 and r["value"] is not None)


def test_kafka_reads_every_record_kgroups_wrote(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log",
                           kgroups_overrides(KAFKA_TEST_SETTINGS))
    server.start()
    try:
        run_activity(Side("kgroups", server), consumer_protocol=True)
        assert server.stop() == 0
    finally:
        server.close()
    records = assert_same_records(tmp_path / "data" / "__consumer_offsets-0")
    kinds = record_kinds(records)
    assert {(1, 3), (1, None), (2, 3), (2, None)} <= kinds
    # The consumer-protocol group's records, and their tombstones once its member left.
    assert {(3, 0), (5, 0), (6, 0), (7, 0), (8, 0), (5, None), (7, None), (8, None)} <= kinds


def test_analyze_finds_the_offsets_kafka_served(spark: Any,
                                                kafka_log: tuple[Path, Activity],
                                                tmp_path: Path) -> None:
    data_dir, activity = kafka_log
    out = tmp_path / "out"
    run_analysis(spark, [str(data_dir)], str(out))
    committed = pq.read_table(out / "committed_offsets").to_pylist()
    for group in activity.groups:
        found = {(r["topic"], r["partition"]): r["offset"] for r in committed
                 if r["group"] == group}
        assert found == {tp: offset for tp, (offset, _) in activity.committed[group].items()}
    # The consumer-protocol group's history: its first target assignment gave the console
    # consumer every partition, the topic named from Kafka's partition.metadata.
    (consumer_group,) = [g for g in activity.groups if g.startswith("logs-consumer-")]
    generations = [g for g in pq.read_table(out / "group_generations").to_pylist()
                   if g["group"] == consumer_group]
    assert generations and {g["group_type"] for g in generations} == {"consumer"}
    first = generations[0]
    assert first["member_count"] == 1 and first["group_epoch"] >= first["generation"] >= 1
    assert sorted((p["topic"], p["partition"]) for p in first["members"][0]["partitions"]) == [
        (TOPIC, p) for p in range(PARTITIONS)]


def test_kgroups_serves_a_copy_of_kafkas_log_directory(kafka_log: tuple[Path, Activity],
                                                       tmp_path: Path) -> None:
    """Migration: Kafka stopped, its log directory copied, `kgroups serve` started on it."""
    data_dir, activity = kafka_log
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    server = ServerProcess(copy, tmp_path / "server.log", kgroups_overrides(KAFKA_TEST_SETTINGS))
    server.start()
    try:
        for group in activity.groups:
            assert _offset_fetch(server.bootstrap, group) == activity.committed[group], group
        # The topic's records came along too, and KRaft's metadata log is not a topic.
        offsets = run_tool(Side("kgroups", server), GET_OFFSETS, ["--topic", TOPIC])
        assert sorted(offsets.stdout.split()) == [f"{TOPIC}:{p}:{5 + p}"
                                                  for p in range(PARTITIONS)]
        listed = run_tool(Side("kgroups", server), TOPICS, ["--list"])
        assert listed.stdout.split() == ["__consumer_offsets", TOPIC]
    finally:
        server.stop()
        server.close()


def test_kafka_decodes_the_records_kgroups_encodes_but_kafka_43_no_longer_writes(
        tmp_path: Path) -> None:
    """Type 4 (subscription metadata: written by Kafka 3.7-4.0, only tombstoned since 4.1) and
    type 16 (regular expressions, which a console consumer never makes) as kgroups encodes
    them, read by DumpLogSegments and by `kgroups offsets dump` alike."""
    topic = SubscribedTopicMetadata(uuid.UUID(int=0x5F4D3C2B1A0948778665544332211000), "orders",
                                    3, ((0, ("rack-a", "rack-b")), (1, ()), (2, ("rack-c",))))
    plain = SubscribedTopicMetadata(uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF),
                                    "payments", 2)
    records = [
        (ConsumerGroupPartitionMetadataKey("g"),
         ConsumerGroupPartitionMetadataValue((topic, plain))),
        (ConsumerGroupPartitionMetadataKey("g"), ConsumerGroupPartitionMetadataValue(())),
        (ConsumerGroupPartitionMetadataKey("g"), None),
        (ConsumerGroupRegularExpressionKey("g", "ord.*"),
         ConsumerGroupRegularExpressionValue(("orders", "orders-eu"), 7, 1_700_000_000_000)),
        (ConsumerGroupRegularExpressionKey("g", "ord.*"), None),
    ]
    directory = tmp_path / "__consumer_offsets-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(build_batch(
        [(encode_key(key), None if value is None else encode_value(value), 1_700_000_000_000)
         for key, value in records]))
    decoded = assert_same_records(directory)
    assert [(r["key"]["type"], r["value"] is None) for r in decoded] == [
        (4, False), (4, False), (4, True), (16, False), (16, True)]
    assert decoded[0]["value"]["data"]["topics"][0]["partitionMetadata"][0] == {
        "partition": 0, "racks": ["rack-a", "rack-b"]}
