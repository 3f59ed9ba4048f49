"""`kgroups storage import` and `export` as a user runs them: a broker's data directory into a
PostgreSQL store and back out, the batches byte for byte at their offsets, topic ids and
committed offsets kept, the exported directory served by `kgroups serve` and read by Kafka's
DumpLogSegments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.broker.broker_wire_helpers import (
    connect,
    create_topic,
    fetch_request,
    nested_of,
    produce_request,
    request_of,
)
from tests.kafka_harness import run_kafka_tool

from kgroups import serve_in_background
from kgroups.broker.dynamic_configs import CLUSTER_DEFAULT, PER_BROKER, BrokerConfigFiles
from kgroups.broker.security.authorizer import (
    ACL_FILE,
    AclBinding,
    AclFile,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kgroups.broker.security.scram import CredentialFile, credential_from_password
from kgroups.broker.security.state import SCRAM_FILE
from kgroups.broker.topic_configs import TopicConfigStore
from kgroups.cli import main
from kgroups.log.batch import build_batch, iter_batches
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager
from kgroups.log.topic_ids import read_partition_metadata
from kgroups.storage.postgresql import PostgresStore
from kgroups.tools import admin

pytestmark = pytest.mark.postgresql

PARTITIONS = 3


def _populate(data_dir: Path) -> None:
    """A topic with batches in every partition and a group's commits in __consumer_offsets."""
    with serve_in_background(data_dir=data_dir) as broker, connect(broker.port) as client:
        create_topic(client, "events", PARTITIONS)
        for partition in range(PARTITIONS):
            for round_ in range(4):
                client.call(produce_request("events", partition, build_batch(
                    [(f"k{i}".encode(), f"p{partition}r{round_}v{i}".encode(), 1_000 + i)
                     for i in range(round_ + 1)])))
        for offset in (3, 7, 10):
            admin.execute_reset(client, "billing", [
                admin.OffsetReset("events", partition, None, offset)
                for partition in range(PARTITIONS)])


def _log_bytes(data_dir: Path) -> dict[tuple[str, int], bytes]:
    """Every partition's batches from its log start, as one bytes object."""
    logs = LogManager(data_dir, LogConfig())
    try:
        found = {}
        for topic, partition in logs.partitions():
            log = logs.get(topic, partition)
            assert log is not None
            found[(topic, partition)] = log.read(log.log_start_offset, 1 << 30)
        return found
    finally:
        logs.close()


def _storage(*args: str) -> int:
    return main(["storage", *args])


def test_a_data_directory_survives_the_round_trip_through_postgresql(
        tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    source, exported = tmp_path / "source", tmp_path / "exported"
    _populate(source)
    assert _storage("import", str(source), "--to", postgres_url) == 0
    out, _ = capsys.readouterr()
    offsets_partitions = len(list(source.glob("__consumer_offsets-*")))
    assert out.startswith(f"imported 2 topics, {PARTITIONS + offsets_partitions} partitions, ")
    assert _storage("export", postgres_url, "--to", str(exported)) == 0
    assert capsys.readouterr().out.startswith("exported 2 topics, ")
    before, after = _log_bytes(source), _log_bytes(exported)
    assert after == before and before[("events", 2)]
    for name in ("events-0", "__consumer_offsets-0"):
        assert read_partition_metadata(exported / name) == read_partition_metadata(source / name)
    assert main(["offsets", "dump", str(source)]) == 0
    dumped_before = capsys.readouterr().out
    assert main(["offsets", "dump", str(exported)]) == 0
    assert capsys.readouterr().out == dumped_before
    assert [json.loads(line)["key"]["type"] for line in dumped_before.splitlines()].count(
        1) == 3 * PARTITIONS  # OffsetCommitKey
    # The exported directory is a data directory: the group's offsets and the records are there.
    with serve_in_background(data_dir=exported) as broker, connect(broker.port) as client:
        assert admin.committed_offsets(client, "billing") == {
            ("events", partition): 10 for partition in range(PARTITIONS)}
        response = client.call(fetch_request("events", 1, 4))  # whole batches: from 3
        records = response.responses[0].partitions[0].records
        values = [r.value for b in iter_batches(bytes(records)) for r in b.records]
        assert values == [b"p1r2v0", b"p1r2v1", b"p1r2v2", b"p1r3v0", b"p1r3v1", b"p1r3v2",
                          b"p1r3v3"]


def test_mistakes_are_one_line_and_move_nothing(
        tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "source"
    _populate(source)
    assert _storage("import", str(source), "--to", postgres_url) == 0
    capsys.readouterr()
    assert _storage("import", str(source), "--to", postgres_url) == 2
    assert capsys.readouterr().err == (
        "kgroups storage: the store already has topic(s) __consumer_offsets, events\n")
    assert _storage("export", postgres_url, "--to", str(source)) == 2
    assert capsys.readouterr().err == f"kgroups storage: {source} is not an empty directory\n"
    assert _storage("import", str(tmp_path / "missing"), "--to", postgres_url) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert _storage("export", "postgresql://kg:pw@127.0.0.1:1/x", "--to",
                    str(tmp_path / "new")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ":pw@" not in err and "unreachable" in err
    assert not (tmp_path / "new").exists()


@pytest.mark.kafka
def test_kafkas_dump_log_segments_reads_the_exported_segments(
        tmp_path: Path, postgres_url: str) -> None:
    source, exported = tmp_path / "source", tmp_path / "exported"
    _populate(source)
    assert _storage("import", str(source), "--to", postgres_url) == 0
    assert _storage("export", postgres_url, "--to", str(exported)) == 0
    (segment,) = (exported / "events-0").glob("*.log")
    dumped = run_kafka_tool("org.apache.kafka.tools.DumpLogSegments",
                            ["--files", str(segment), "--print-data-log"])
    assert dumped.returncode == 0, dumped.stderr
    assert dumped.stdout.count("baseOffset:") == 4
    assert "payload: p0r3v2" in dumped.stdout


def _catalog_files(data_dir: Path) -> tuple[object, ...]:
    """What a single node serves from its catalog files: topic settings, ACLs, SCRAM users
    and dynamic broker settings, as its books read them."""
    return (TopicConfigStore(data_dir).load_all(),
            sorted(AclFile(data_dir / ACL_FILE).load(), key=repr),
            CredentialFile(data_dir / SCRAM_FILE).load(),
            BrokerConfigFiles(data_dir).load())


def test_the_catalog_moves_with_the_topics_both_ways(
        tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    source, exported = tmp_path / "source", tmp_path / "exported"
    _populate(source)
    TopicConfigStore(source).save("events", {"retention.ms": "3600000",
                                             "cleanup.policy": "compact,delete"})
    TopicConfigStore(source).save("deleted-long-ago", {"retention.ms": "1"})
    acl = AclBinding(ResourceType.TOPIC, "events", PatternType.LITERAL, "User:alice", "*",
                     Operation.READ, Permission.ALLOW)
    AclFile(source / ACL_FILE).add([acl], [acl])
    alice = credential_from_password("SCRAM-SHA-256", "secret", iterations=4096)
    CredentialFile(source / SCRAM_FILE).apply([], [], {"alice": {"SCRAM-SHA-256": alice}})
    BrokerConfigFiles(source).save(CLUSTER_DEFAULT, {"log.retention.ms": "86400000"})
    BrokerConfigFiles(source).save(PER_BROKER, {"message.max.bytes": "2000000"})
    assert _storage("import", str(source), "--to", postgres_url, "--node-id", "3") == 0
    out, err = capsys.readouterr()
    assert "and 1 topics' settings, 1 ACLs, 1 SCRAM users, 2 dynamic broker setting layers" \
        in out
    assert "security" not in err and "__topic_configs" not in err
    store = PostgresStore.open(postgres_url)
    try:
        assert store.catalog.topic_configs() == {
            "events": {"retention.ms": "3600000", "cleanup.policy": "compact,delete"}}
        assert [AclBinding(*row) for row in store.catalog.acls()] == [acl]
        assert store.catalog.scram_credentials() == {"alice": {"SCRAM-SHA-256": (
            alice.salt, alice.stored_key, alice.server_key, alice.iterations)}}
        assert store.catalog.broker_configs() == {
            "": {"log.retention.ms": "86400000"}, "3": {"message.max.bytes": "2000000"}}
        store.catalog.set_broker_configs("4", {"message.max.bytes": "1"})
    finally:
        store.close()
    assert _storage("export", postgres_url, "--to", str(exported), "--node-id", "3") == 0
    out, err = capsys.readouterr()
    assert err == "not moved: dynamic settings of node 4\n"
    TopicConfigStore(source).remove("deleted-long-ago")  # a topic's settings, not the topic
    assert _catalog_files(exported) == _catalog_files(source)
    # A single node serves the exported catalog: the topic's settings are in force.
    with serve_in_background(data_dir=exported) as broker, connect(broker.port) as client:
        described = client.call(request_of(32, 4, include_synonyms=False,
                                           include_documentation=False, resources=(nested_of(
            32, 4, "DescribeConfigsResource", resource_type=2, resource_name="events",
            configuration_keys=("retention.ms",)),)))
        (entry,) = described.results[0].configs
        assert (entry.value, int(entry.config_source)) == ("3600000", 1)  # a topic's own
