"""kafka-python 3.x, aiokafka and kcat in consumer groups on a real `kgroups serve`: formation,
commit, close and resume from the committed offset; a group mixing librdkafka and kafka-python;
kcat's balanced consumer."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from confluent_kafka import Consumer
from group_interop_helpers import (
    FAST_GROUP_OVERRIDES,
    create_topic,
    describe,
    produce,
    stable_with,
    wait_until,
)
from tests.broker.servers import ServerProcess

pytestmark = pytest.mark.interop

KCAT_TIMEOUT_S = 60


def _kafka_python_consume(bootstrap: str, group_id: str, topic: str, count: int) -> list[bytes]:
    """Join the group, read `count` messages, commit, close (which leaves the group)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group_id,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500)
    values: list[bytes] = []
    # A long poll: kafka-python 3.0.12 drops a metadata-triggered rejoin whose JoinGroup is still
    # out when poll() times out (the member then stops heartbeating); poll returns as soon as
    # records arrive, so the length costs nothing.
    try:
        wait_until(lambda: len(values) >= count, f"{count} messages", pump=lambda: values.extend(
            record.value
            for records in consumer.poll(timeout_ms=5000, max_records=count - len(values)).values()
            for record in records
        ))
        consumer.commit()
    finally:
        consumer.close()
    return values


def test_kafka_python_group_commits_and_resumes(start_kgroups_server) -> None:  # type: ignore[no-untyped-def]
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    create_topic(server.bootstrap, "kp-topic", 3)
    values = [f"kp-{i}".encode() for i in range(60)]
    produce(server.bootstrap, "kp-topic", values, 3)

    first = _kafka_python_consume(server.bootstrap, "kp-group", "kp-topic", 60)
    assert sorted(first) == sorted(values)
    described = describe(server.bootstrap, "kp-group")
    assert described.state == "Empty"
    assert {(p.topic, p.partition): p.lag for p in described.partitions} == {
        ("kp-topic", partition): 0 for partition in range(3)
    }

    more = [f"kp-more-{i}".encode() for i in range(30)]
    produce(server.bootstrap, "kp-topic", more, 3)
    resumed = _kafka_python_consume(server.bootstrap, "kp-group", "kp-topic", 30)
    assert sorted(resumed) == sorted(more)


async def _aiokafka_consume(bootstrap: str, group_id: str, topic: str, count: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group_id,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                session_timeout_ms=6000, heartbeat_interval_ms=500)
    await consumer.start()
    values: list[bytes] = []
    try:
        async with asyncio.timeout(60):
            while len(values) < count:
                batches = await consumer.getmany(timeout_ms=200, max_records=count - len(values))
                values.extend(record.value for records in batches.values() for record in records)
        await consumer.commit()
    finally:
        await consumer.stop()
    return values


def test_aiokafka_group_commits_and_resumes(start_kgroups_server) -> None:  # type: ignore[no-untyped-def]
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    create_topic(server.bootstrap, "aio-topic", 2)
    values = [f"aio-{i}".encode() for i in range(40)]
    produce(server.bootstrap, "aio-topic", values, 2)

    first = asyncio.run(_aiokafka_consume(server.bootstrap, "aio-group", "aio-topic", 40))
    assert sorted(first) == sorted(values)
    more = [f"aio-more-{i}".encode() for i in range(20)]
    produce(server.bootstrap, "aio-topic", more, 2)
    resumed = asyncio.run(_aiokafka_consume(server.bootstrap, "aio-group", "aio-topic", 20))
    assert sorted(resumed) == sorted(more)


def test_group_mixing_librdkafka_and_kafka_python(start_kgroups_server) -> None:  # type: ignore[no-untyped-def]
    from kafka import KafkaConsumer

    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    create_topic(server.bootstrap, "mixed", 4)
    librdkafka = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "mixed-group",
                           "client.id": "librdkafka-member",
                           "partition.assignment.strategy": "range",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
    librdkafka.subscribe(["mixed"])
    python = KafkaConsumer("mixed", bootstrap_servers=server.bootstrap, group_id="mixed-group",
                           client_id="kafka-python-member", auto_offset_reset="earliest",
                           enable_auto_commit=False, session_timeout_ms=6000,
                           heartbeat_interval_ms=500)
    received: dict[str, list[bytes]] = {"librdkafka": [], "kafka-python": []}

    def pump() -> None:
        messages = librdkafka.consume(num_messages=100, timeout=0.05)
        batch = [m.value() for m in messages if m.error() is None]
        if batch:
            received["librdkafka"].extend(batch)
            librdkafka.commit(asynchronous=False)
        records = python.poll(timeout_ms=50)
        batch = [record.value for rs in records.values() for record in rs]
        if batch:
            received["kafka-python"].extend(batch)
            python.commit()

    try:
        wait_until(stable_with(server.bootstrap, "mixed-group", 2), "a Stable mixed group",
                   pump=pump)
        wait_until(lambda: {p.partition for p in librdkafka.assignment()}
                   | {tp.partition for tp in python.assignment()} == set(range(4)),
                   "both clients holding their partitions", pump=pump)
        described = describe(server.bootstrap, "mixed-group")
        owned = {m.client_id: {p for _, p in m.partitions} for m in described.members}
        assert set(owned) == {"librdkafka-member", "kafka-python-member"}
        assert owned["librdkafka-member"].isdisjoint(owned["kafka-python-member"])
        assert owned["librdkafka-member"] | owned["kafka-python-member"] == set(range(4))

        values = [f"mixed-{i}".encode() for i in range(80)]
        produce(server.bootstrap, "mixed", values, 4)
        wait_until(lambda: sum(map(len, received.values())) >= 80, "80 messages", pump=pump)
        for _ in range(5):
            pump()
        assert sorted(received["librdkafka"] + received["kafka-python"]) == sorted(values)
        assert received["librdkafka"] and received["kafka-python"]
    finally:
        librdkafka.close()
        python.close()


def test_kcat_balanced_consumer_receives_the_data(start_kgroups_server) -> None:  # type: ignore[no-untyped-def]
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    create_topic(server.bootstrap, "kcat-group-topic", 3)
    values = [f"kcat-{i}" for i in range(45)]
    produce(server.bootstrap, "kcat-group-topic", [v.encode() for v in values], 3)
    consumed = subprocess.run(
        ["kcat", "-b", server.bootstrap, "-G", "kcat-group", "kcat-group-topic",
         "-X", "auto.offset.reset=earliest", "-c", str(len(values)), "-q"],
        capture_output=True, text=True, check=True, timeout=KCAT_TIMEOUT_S,
    )
    assert sorted(consumed.stdout.splitlines()) == sorted(values)
    # kcat commits automatically: the group's offsets reach the end of every partition.
    described = describe(server.bootstrap, "kcat-group")
    assert sum(p.committed_offset or 0 for p in described.partitions) == len(values)
