"""Producers writing with acks=all through a failover, and the audit that reads every
acknowledged record back: librdkafka (idempotent) and kafka-python, each on its own thread,
each remembering the partition, offset and value of every record the cluster acknowledged."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from tests.cluster.committers import PARTITIONS

# (partition, offset) -> value, as the producer's acknowledgement gave them
Acknowledged = dict[tuple[int, int], bytes]


@dataclass(frozen=True)
class Ack:
    at: float
    partition: int
    offset: int
    value: bytes


@dataclass(eq=False)
class Writer(threading.Thread):
    """Sends a numbered record every few milliseconds until `stop`, then waits for the last
    answers; `acks` are the records the cluster acknowledged, `failed` the ones it did not."""

    bootstrap: str
    topic: str
    kind: str  # "librdkafka" or "kafka-python"
    stop: threading.Event
    acks: list[Ack] = field(default_factory=list)
    failed: int = 0

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def _acknowledged(self, partition: int, offset: int, value: bytes) -> None:
        self.acks.append(Ack(time.monotonic(), partition, offset, value))

    def run(self) -> None:
        if self.kind == "librdkafka":
            self._run_librdkafka()
        else:
            self._run_kafka_python()

    def _run_librdkafka(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "topic.metadata.refresh.interval.ms": 2000, "log_level": 0})

        def delivered(error: object, message: object) -> None:
            if error is not None:
                self.failed += 1
                return
            self._acknowledged(message.partition(), message.offset(),  # type: ignore[attr-defined]
                               message.value())  # type: ignore[attr-defined]

        for number in _numbers(self.stop):
            producer.produce(self.topic, value=f"{self.kind}-{number}".encode(),
                             on_delivery=delivered)
            producer.poll(0.005)
        assert producer.flush(90) == 0, "records still unanswered 90 s after the last send"

    def _run_kafka_python(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), acks="all",
                                 linger_ms=5, retries=1_000_000, delivery_timeout_ms=120_000,
                                 metadata_max_age_ms=2000)

        def failed(_: object) -> None:
            self.failed += 1

        for number in _numbers(self.stop):
            value = f"{self.kind}-{number}".encode()
            future = producer.send(self.topic, value=value)
            future.add_callback(lambda answer, value=value: self._acknowledged(
                answer.partition, answer.offset, value))
            future.add_errback(failed)
            time.sleep(0.005)
        producer.flush(90)
        producer.close(30)


def _numbers(stop: threading.Event) -> Iterator[int]:
    number = 0
    while not stop.is_set():
        yield number
        number += 1


def acknowledged(writers: list[Writer]) -> Acknowledged:
    return {(ack.partition, ack.offset): ack.value for writer in writers for ack in writer.acks}


def missing(bootstrap: str, topic: str, wanted: Acknowledged) -> list[tuple[int, int]]:
    """The acknowledged records that a fresh read of every partition from the start does not
    find with the value the producer sent."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-audit",
                       "enable.auto.commit": False, "log_level": 0})
    reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    found: Acknowledged = {}
    quiet_since = time.monotonic()
    try:
        while wanted.keys() - found.keys() and time.monotonic() - quiet_since < 15:
            batch = reader.consume(num_messages=10_000, timeout=1.0)
            for message in batch:
                if message.error() is None:
                    found[(message.partition(), message.offset())] = message.value()
            if batch:
                quiet_since = time.monotonic()
    finally:
        reader.close()
    return sorted(key for key, value in wanted.items() if found.get(key) != value)
