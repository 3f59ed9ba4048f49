"""DeleteRecords (API 21): the log start moves, consumers see it, it survives a kill -9, and the
segments below it go. What Kafka 4.3.1 answers to the same requests is checked in
tests/differential/test_diff_delete_records.py; these are the parts only kgroups can show (files
on disk, a restart) and the answers a Kafka broker would give a single node."""

from __future__ import annotations

import dataclasses
import datetime
import errno
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
from tests.broker.broker_wire_helpers import (
    connect,
    create_topic,
    fetch_request,
    list_offsets_request,
    nested_of,
    produce_request,
    request_of,
)
from tests.broker.servers import InProcessBroker, ServerProcess
from tests.kafka_harness import KafkaBroker

from kgroups.broker.log_cleaner import clean_once
from kgroups.errors import ErrorCode
from kgroups.log import manager
from kgroups.log.batch import build_batch, iter_batches
from kgroups.tools.wire_client import KafkaWireClient

NOW_MS = int(time.time() * 1000)


def delete_records(client: KafkaWireClient, offsets: dict[tuple[str, int], int],
                   version: int = 2) -> dict[tuple[str, int], tuple[str, int]]:
    """(topic, partition) -> (error name, low watermark)."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    response = client.call(request_of(21, version, timeout=datetime.timedelta(seconds=5),
                                      topics=tuple(nested_of(
        21, version, "DeleteRecordsTopic", name=topic, partitions=tuple(nested_of(
            21, version, "DeleteRecordsPartition", partition_index=partition, offset=offset)
            for partition, offset in entries)) for topic, entries in by_topic.items())))
    return {(t.name, int(p.partition_index)): (ErrorCode(int(p.error_code)).name,
                                               int(p.low_watermark))
            for t in response.topics for p in t.partitions}


def fill(client: KafkaWireClient, topic: str, count: int, partition: int = 0) -> None:
    """`count` single-record batches (about 90 bytes each), keyed (compacted topics want it)."""
    for index in range(count):
        batch = build_batch([(f"k{index}".encode(), b"v" * 20, NOW_MS + index)])
        response = client.call(produce_request(topic, partition, batch))
        assert int(response.responses[0].partition_responses[0].error_code) == 0


def earliest(client: KafkaWireClient, topic: str, partition: int = 0) -> int:
    (answer,) = client.call(list_offsets_request(topic, partition, -2)).topics[0].partitions
    return int(answer.offset)


def fetch(client: KafkaWireClient, topic: str, offset: int) -> Any:
    (answer,) = client.call(fetch_request(topic, 0, offset)).responses[0].partitions
    return answer


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(path.stem) for path in directory.glob("*.log"))


def test_the_log_start_moves_and_consumers_see_it(make_inprocess_broker: Any) -> None:
    broker: InProcessBroker = make_inprocess_broker("log.segment.bytes=200")
    with connect(broker.port) as client:
        create_topic(client, "trimmed")
        fill(client, "trimmed", 10)
        directory = broker.broker.config.data_dir / "trimmed-0"
        before = segment_bases(directory)
        assert len(before) >= 4

        assert delete_records(client, {("trimmed", 0): 5}) == {("trimmed", 0): ("NONE", 5)}
        assert earliest(client, "trimmed") == 5
        below, at = fetch(client, "trimmed", 4), fetch(client, "trimmed", 5)
        assert int(below.error_code) == ErrorCode.OFFSET_OUT_OF_RANGE
        assert int(at.error_code) == 0 and int(at.log_start_offset) == 5
        offsets = [r.offset for b in iter_batches(bytes(at.records)) for r in b.records]
        assert offsets[0] == 5
        # ListOffsets by time never answers an offset below the start.
        (by_time,) = client.call(list_offsets_request("trimmed", 0, NOW_MS)).topics[0].partitions
        assert int(by_time.offset) == 5
        # Whole segments below the start are gone; the one holding it stays.
        after = segment_bases(directory)
        assert after == [base for base in before if base >= max(b for b in before if b <= 5)]

        # Never backwards; -1 is the high watermark; past it is out of range.
        assert delete_records(client, {("trimmed", 0): 2}) == {("trimmed", 0): ("NONE", 5)}
        assert delete_records(client, {("trimmed", 0): 11}) == {
            ("trimmed", 0): ("OFFSET_OUT_OF_RANGE", -1)}
        assert delete_records(client, {("trimmed", 0): -1}) == {("trimmed", 0): ("NONE", 10)}
        assert earliest(client, "trimmed") == 10
        # A produce answer carries the new start too.
        response = client.call(produce_request("trimmed", 0, build_batch([(None, b"x", NOW_MS)])))
        assert int(response.responses[0].partition_responses[0].log_start_offset) == 10


@pytest.mark.parametrize("version", [0, 1, 2])
def test_refusals_per_partition(make_inprocess_broker: Any, version: int) -> None:
    broker: InProcessBroker = make_inprocess_broker()
    with connect(broker.port) as client:
        create_topic(client, "plain", partitions=2)
        create_topic(client, "compacted", configs={"cleanup.policy": "compact"})
        create_topic(client, "both", configs={"cleanup.policy": "compact,delete"})
        fill(client, "plain", 3)
        fill(client, "both", 3)
        answers = delete_records(client, {
            ("plain", 0): 2, ("plain", 1): -2, ("plain", 5): 0, ("missing", 0): 0,
            ("compacted", 0): 0, ("both", 0): 1, ("__consumer_offsets", 0): 0}, version)
    assert answers == {
        ("plain", 0): ("NONE", 2),
        ("plain", 1): ("OFFSET_OUT_OF_RANGE", -1),
        ("plain", 5): ("UNKNOWN_TOPIC_OR_PARTITION", -1),
        ("missing", 0): ("UNKNOWN_TOPIC_OR_PARTITION", -1),
        ("compacted", 0): ("POLICY_VIOLATION", -1),
        ("both", 0): ("NONE", 1),
        ("__consumer_offsets", 0): ("INVALID_TOPIC_EXCEPTION", -1),
    }


def test_a_failed_checkpoint_write_moves_nothing(make_inprocess_broker: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    broker: InProcessBroker = make_inprocess_broker()

    def full_disk(*_args: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with connect(broker.port) as client:
        create_topic(client, "full")
        fill(client, "full", 4)
        monkeypatch.setattr(manager, "write_log_start_offsets", full_disk)
        assert delete_records(client, {("full", 0): 2, ("full", 9): 0}) == {
            ("full", 0): ("KAFKA_STORAGE_ERROR", -1),
            ("full", 9): ("UNKNOWN_TOPIC_OR_PARTITION", -1)}
        assert earliest(client, "full") == 0
        assert int(fetch(client, "full", 0).error_code) == 0
        monkeypatch.undo()
        assert delete_records(client, {("full", 0): 2}) == {("full", 0): ("NONE", 2)}


def test_retention_moves_the_start_on_and_drops_segments_left_below_it(
        make_inprocess_broker: Any) -> None:
    """DeleteRecords into the active segment deletes nothing yet; once newer segments follow,
    the retention check deletes it. Retention moves the start forward, never back."""
    broker: InProcessBroker = make_inprocess_broker("log.segment.bytes=200")
    logs = broker.broker.logs
    directory = broker.broker.config.data_dir / "streams-repartition-0"
    with connect(broker.port) as client:
        create_topic(client, "streams-repartition", configs={"retention.ms": "-1"})
        fill(client, "streams-repartition", 2)  # two records fill a segment
        assert delete_records(client, {("streams-repartition", 0): -1}) == {
            ("streams-repartition", 0): ("NONE", 2)}
        assert segment_bases(directory) == [0]  # the active segment stays
        fill(client, "streams-repartition", 6)
        assert segment_bases(directory) == [0, 2, 4, 6]
        assert broker.call(_async(lambda: clean_once(logs, NOW_MS))) == 1
        assert segment_bases(directory) == [2, 4, 6]
        assert earliest(client, "streams-repartition") == 2

        # A start inside a segment, then retention.bytes deletes whole segments past it.
        assert delete_records(client, {("streams-repartition", 0): 4}) == {
            ("streams-repartition", 0): ("NONE", 4)}
        log = logs.get("streams-repartition", 0)
        assert log is not None
        log.config = dataclasses.replace(log.config, retention_bytes=1)
        broker.call(_async(lambda: clean_once(logs, NOW_MS)))
        start = earliest(client, "streams-repartition")
        assert start == segment_bases(directory)[0] > 4
        assert delete_records(client, {("streams-repartition", 0): 4}) == {
            ("streams-repartition", 0): ("NONE", start)}


def _async(function: Any) -> Any:
    async def run() -> Any:
        return function()
    return run


@pytest.mark.interop
def test_the_start_survives_kill_9(start_kgroups_server: Any) -> None:
    server: ServerProcess = start_kgroups_server("log.segment.bytes=200")
    with connect(server.port) as client:
        create_topic(client, "kept", partitions=2)
        fill(client, "kept", 10)
        fill(client, "kept", 4, partition=1)
        assert delete_records(client, {("kept", 0): 7, ("kept", 1): 3}) == {
            ("kept", 0): ("NONE", 7), ("kept", 1): ("NONE", 3)}
    server.kill()
    checkpoint = (server.data_dir / "log-start-offset-checkpoint").read_text().splitlines()
    assert checkpoint[:2] == ["0", "2"]  # Kafka's format: version, count, then the entries
    assert sorted(checkpoint[2:]) == ["kept 0 7", "kept 1 3"]
    server.start()
    with connect(server.port) as client:
        assert earliest(client, "kept", 0) == 7
        assert earliest(client, "kept", 1) == 3
        assert int(fetch(client, "kept", 6).error_code) == ErrorCode.OFFSET_OUT_OF_RANGE
        assert delete_records(client, {("kept", 0): 5}) == {("kept", 0): ("NONE", 7)}


@pytest.mark.kafka
@pytest.mark.slow
def test_after_kill_9_kafka_forgets_the_start_and_kgroups_keeps_it(
        tmp_path: Path, start_kgroups_server: Any) -> None:
    """docs/compatibility.md: Kafka 4.3.1 checkpoints log starts on a schedule, so a kill -9
    right after DeleteRecords brings the deleted records back; kgroups fsyncs the start before
    it answers."""
    kafka = KafkaBroker(tmp_path / "kafka")
    kafka.start()
    try:
        brokers: dict[str, Any] = {"kafka": kafka,
                                   "kgroups": start_kgroups_server("log.segment.bytes=200")}
        for broker in brokers.values():
            with connect(broker.port) as client:
                create_topic(client, "killed")
                deadline = time.monotonic() + 30
                while earliest(client, "killed") < 0:  # Kafka elects the leader a moment later
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
                fill(client, "killed", 10)
                assert delete_records(client, {("killed", 0): 5}) == {("killed", 0): ("NONE", 5)}
            broker.kill()
            broker.start()
        after = {}
        for name, broker in brokers.items():
            with connect(broker.port) as client:
                deadline = time.monotonic() + 30
                while (start := earliest(client, "killed")) < 0:  # Kafka reloads the log
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
                after[name] = start
        assert after == {"kafka": 0, "kgroups": 5}
    finally:
        kafka.close()


@pytest.mark.interop
def test_librdkafka_trims_a_topic_and_a_consumer_behind_it_resets_to_the_start(
        start_kgroups_server: Any) -> None:
    """What Kafka Streams does to its repartition topics, with librdkafka's admin client: the
    records go, and a group whose committed offset now lies below the start resumes there."""
    server: ServerProcess = start_kgroups_server()
    topic, group = "repartition", "trimmed-group"
    with connect(server.port) as client:
        create_topic(client, topic)
        fill(client, topic, 10)
    bootstrap = {"bootstrap.servers": server.bootstrap}
    consumer = confluent_kafka.Consumer({**bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 2)],
                        asynchronous=False)
        admin = confluent_kafka.admin.AdminClient(bootstrap)
        (future,) = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 6)]).values()
        assert future.result(timeout=30).low_watermark == 6
        consumer.subscribe([topic])
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                first = message.offset()
        assert first == 6
    finally:
        consumer.close()
