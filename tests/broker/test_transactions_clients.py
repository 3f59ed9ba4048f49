"""Exactly-once with real clients against `kgroups serve`: confluent-kafka's consume-transform-
produce loop with an aborted transaction in the middle, a producer committing transactions
in a loop across a kill -9 of the broker, and a Java producer fenced by a newer instance with
the same transactional.id (the same conversation against Kafka 4.3.1 for its errors). What a
user of transactions relies on: a read_committed consumer sees each committed output once and
nothing aborted, the group's offsets move only with committed transactions, a crash leaves no
transaction half visible, and a zombie's transaction is never seen."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from tests.broker.servers import ServerProcess
from tests.java_harness import JavaTransactionalProducer

pytestmark = [pytest.mark.interop, pytest.mark.slow]

PARTITIONS = 3
GROUP_SETTINGS = ("group.initial.rebalance.delay.ms=0",)


def _create(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS) for t in topics]).values():
        future.result(30)


def _read_all(bootstrap: str, topic: str, isolation: str, expected: int,
              timeout_s: float = 30.0) -> list[str]:
    """Every value of the topic a fresh consumer with `isolation` reads, waiting until
    `expected` arrived (then a little longer, to see any extra) or the timeout."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[str] = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
                continue
            if len(values) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return values


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)]
    finally:
        consumer.close()


def test_consume_transform_produce_with_an_abort(
        start_kgroups_server: Callable[..., ServerProcess]) -> None:
    server = start_kgroups_server(*GROUP_SETTINGS)
    _create(server.bootstrap, "ctp-in", "ctp-out")
    feeder = Producer({"bootstrap.servers": server.bootstrap})
    inputs = [f"m-{p}-{i}" for p in range(PARTITIONS) for i in range(10)]
    for value in inputs:
        feeder.produce("ctp-in", value.encode(), partition=int(value.split("-")[1]))
    assert feeder.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "ctp",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "ctp-tx"})
    producer.init_transactions(30)
    consumer.subscribe(["ctp-in"])
    transactions, aborted_values = 0, []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and _committed_total(server, consumer) < 30:
            messages = [m for m in consumer.consume(num_messages=7, timeout=1.0)
                        if m.error() is None]
            if not messages:
                continue
            before = _committed(server.bootstrap, "ctp", "ctp-in")
            producer.begin_transaction()
            for message in messages:
                producer.produce("ctp-out", b"out:" + message.value(),
                                 partition=message.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            transactions += 1
            if transactions == 2:  # the one in the middle is aborted, then done again
                assert producer.flush(30) == 0  # the aborted records reach the log
                producer.abort_transaction(30)
                assert _committed(server.bootstrap, "ctp", "ctp-in") == before
                aborted_values += [m.value().decode() for m in messages]
                for tp in consumer.committed(consumer.assignment(), timeout=30):
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 max(tp.offset, 0)))
                continue
            producer.commit_transaction(30)
            assert _committed(server.bootstrap, "ctp", "ctp-in") != before
    finally:
        consumer.close()
    assert aborted_values, "no transaction was aborted"
    assert _committed(server.bootstrap, "ctp", "ctp-in") == [10] * PARTITIONS

    committed = _read_all(server.bootstrap, "ctp-out", "read_committed", len(inputs))
    assert Counter(committed) == Counter(f"out:{v}" for v in inputs)
    everything = _read_all(server.bootstrap, "ctp-out", "read_uncommitted",
                           len(inputs) + len(aborted_values))
    assert Counter(everything) - Counter(committed) == Counter(
        f"out:{v}" for v in aborted_values)


def _committed_total(server: ServerProcess, consumer: Consumer) -> int:
    """The group's committed offsets summed (0 before any assignment)."""
    if not consumer.assignment():
        return 0
    return sum(max(tp.offset, 0) for tp in consumer.committed(
        [TopicPartition("ctp-in", p) for p in range(PARTITIONS)], timeout=30))


class _TransactionLoop:
    """A producer committing transactions of one record per partition, numbered, until told
    to stop or until its broker goes away; `committed` are those whose commit it heard back."""

    def __init__(self, bootstrap: str, first: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "loop-tx",
                                  "transaction.timeout.ms": 10_000,
                                  "message.timeout.ms": 10_000})
        self.producer.init_transactions(30)
        self.next = first
        self.committed: list[int] = []
        self.stopped = threading.Event()
        self.failure: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopped.is_set():
                number = self.next
                self.producer.begin_transaction()
                for partition in range(PARTITIONS):
                    self.producer.produce("loop", f"t{number}-{partition}".encode(),
                                          partition=partition)
                self.producer.commit_transaction(10)
                self.committed.append(number)
                self.next += 1
        except KafkaException as exc:
            self.failure = exc.args[0]

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


def test_kill_during_a_stream_of_transactions(
        start_kgroups_server: Callable[..., ServerProcess]) -> None:
    server = start_kgroups_server(*GROUP_SETTINGS)
    _create(server.bootstrap, "loop")
    loop = _TransactionLoop(server.bootstrap, first=0)
    deadline = time.monotonic() + 30
    while len(loop.committed) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(loop.committed) >= 20, loop.failure
    server.kill()
    loop.stop()
    before_kill = list(loop.committed)
    server.start()

    again = _TransactionLoop(server.bootstrap, first=10_000)
    deadline = time.monotonic() + 30
    while len(again.committed) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    again.stop()
    assert again.failure is None or again.failure.code() == KafkaError._DESTROY, again.failure
    assert len(again.committed) >= 10

    expected = PARTITIONS * (len(before_kill) + len(again.committed))
    values = _read_all(server.bootstrap, "loop", "read_committed", expected)
    per_transaction = Counter(value.split("-")[0] for value in values)
    half_visible = {t: n for t, n in per_transaction.items() if n != PARTITIONS}
    assert half_visible == {}
    assert {f"t{n}" for n in before_kill + again.committed} <= set(per_transaction)


def _error_class(answer: dict[str, Any]) -> str:
    """The exception class a driver's answer names ("ok" when none)."""
    return str(answer["error"]).split(":")[0] if "error" in answer else "ok"


def _zombie_conversation(bootstrap: str, logs: Path, topic: str) -> dict[str, Any]:
    """A Java producer opens a transaction; a second instance with the same transactional.id
    starts, which fences the first and aborts its transaction, and commits its own; the first
    then tries to go on. What each step answered, and what each isolation level reads."""
    _create(bootstrap, topic)
    settings = {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx",
                "delivery.timeout.ms": 15_000, "request.timeout.ms": 5_000,
                "max.block.ms": 15_000}
    zombie = JavaTransactionalProducer(settings, logs / f"{topic}-zombie.log")
    newer = JavaTransactionalProducer(settings, logs / f"{topic}-newer.log")
    seen: dict[str, Any] = {}
    try:
        seen["zombie init"] = _error_class(zombie.init())
        seen["zombie begin"] = _error_class(zombie.begin())
        seen["zombie send"] = _error_class(zombie.send(topic, 0, "zombie-1"))
        seen["newer init"] = _error_class(newer.init())
        seen["newer begin"] = _error_class(newer.begin())
        seen["newer send"] = _error_class(newer.send(topic, 1, "newer-1"))
        seen["newer commit"] = _error_class(newer.commit())
        seen["zombie send after"] = _error_class(zombie.send(topic, 0, "zombie-2"))
        seen["zombie commit"] = _error_class(zombie.commit())
        seen["zombie abort"] = _error_class(zombie.abort())
    finally:
        zombie.driver.kill()
        newer.close()
    seen["read_committed"] = sorted(_read_all(bootstrap, topic, "read_committed", 1))
    seen["read_uncommitted"] = sorted(set(_read_all(bootstrap, topic, "read_uncommitted", 2)))
    return seen


@pytest.mark.kafka
def test_a_zombie_java_producer_is_fenced(kafka_broker: Any, kgroups_broker: ServerProcess,
                                          tmp_path: Path) -> None:
    kgroups = _zombie_conversation(kgroups_broker.bootstrap, tmp_path, "zombie")
    kafka = _zombie_conversation(kafka_broker.bootstrap, tmp_path, "zombie")
    assert kgroups == kafka
    assert kgroups["zombie send"] == kgroups["newer commit"] == "ok"
    # As from Kafka 4.3.1: the late send and the commit fail with InvalidProducerEpochException
    # (abortable), and the abort the application then tries with ProducerFencedException.
    assert (kgroups["zombie send after"], kgroups["zombie commit"]) == (
        "InvalidProducerEpochException", "InvalidProducerEpochException")
    assert kgroups["zombie abort"] == "ProducerFencedException"
    assert kgroups["read_committed"] == ["newer-1"]
    assert "zombie-1" in kgroups["read_uncommitted"]  # written, then aborted


def test_kafka_python_transactional_producer(
        start_kgroups_server: Callable[..., ServerProcess]) -> None:
    """kafka-python's own transaction manager (not librdkafka's): a committed and an aborted
    transaction, read back by kafka-python's read_committed consumer."""
    server = start_kgroups_server(*GROUP_SETTINGS)
    _create(server.bootstrap, "kp")
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="kp-tx")
    producer.init_transactions()
    for outcome in ("kept", "dropped", "kept-too"):
        producer.begin_transaction()
        for partition in range(PARTITIONS):
            producer.send("kp", f"{outcome}-{partition}".encode(), partition=partition)
        producer.flush()
        if outcome == "dropped":
            producer.abort_transaction()
        else:
            producer.commit_transaction()
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=3_000)
    consumer.assign([KafkaTopicPartition("kp", p) for p in range(PARTITIONS)])
    values = sorted(message.value.decode() for message in consumer)
    consumer.close()
    assert values == sorted(f"{o}-{p}" for o in ("kept", "kept-too") for p in range(PARTITIONS))
