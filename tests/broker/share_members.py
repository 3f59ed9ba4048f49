"""Share-group members (KIP-932) for the interop tests: Kafka's Java KafkaShareConsumer (its own
JVM, tests/java ShareConsumerDriver) and librdkafka's share consumer (confluent-kafka's
ShareConsumer), both in explicit acknowledgement mode behind one small interface, so a test runs
the same scenario with either client; and the brokers those tests start, with the group settings
that make acquisition locks and delivery count limits observable within seconds."""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from confluent_kafka import AcknowledgeType, ShareConsumer

from java_harness import JavaShareConsumer
from kafka_harness import KAFKA_TEST_SETTINGS

# Short acquisition locks (Kafka allows down to 1 s once the broker minimum is lowered), a
# delivery count limit of 3, heartbeats every 500 ms so a member gets its assignment quickly,
# and one __share_group_state partition (Kafka's default 50 only slow its start).
LOCK_DURATION_MS = 4000
DELIVERY_COUNT_LIMIT = 3
SHARE_SETTINGS = {
    **KAFKA_TEST_SETTINGS,
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_DURATION_MS),
    "group.share.delivery.count.limit": str(DELIVERY_COUNT_LIMIT),
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "share.coordinator.state.topic.num.partitions": "1",
}

ACKNOWLEDGEMENTS = ("ACCEPT", "RELEASE", "REJECT")


@dataclass(frozen=True)
class Delivery:
    """One record as a member received it: which member, its offset, value and delivery count."""

    member: str
    partition: int
    offset: int
    value: str
    delivery_count: int | None


class ShareClient(Protocol):
    """The three things a test does with a share consumer."""

    def poll(self, timeout_ms: int) -> list[Delivery]: ...

    def acknowledge(self, acknowledgements: Sequence[tuple[Delivery, str]]) -> None: ...

    def commit(self) -> dict[int, str | None]:
        """commitSync: each partition's error (None when the broker took the acknowledgements)."""
        ...

    def close(self) -> None: ...

    def freeze(self) -> None:
        """Stop all activity, as a hung consumer does: no poll, no fetch, no acknowledgement."""
        ...

    def thaw(self) -> None: ...


class JavaShareMember:
    """A Java KafkaShareConsumer member (explicit acknowledgement)."""

    def __init__(self, name: str, bootstrap: str, group_id: str, topic: str, logs: Path) -> None:
        self.name, self.topic = name, topic
        self.consumer = JavaShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                                           "client.id": name}, logs / f"share-{name}.log")
        self.consumer.subscribe(topic)

    def poll(self, timeout_ms: int) -> list[Delivery]:
        answer = self.consumer.poll(timeout_ms)
        assert "error" not in answer, (self.name, answer)
        return [Delivery(self.name, partition, offset, value, count)
                for _, partition, offset, value, count in answer["records"]]

    def acknowledge(self, acknowledgements: Sequence[tuple[Delivery, str]]) -> None:
        answer = self.consumer.acknowledge(
            [(self.topic, d.partition, d.offset, kind) for d, kind in acknowledgements])
        assert answer.get("ok"), (self.name, answer)

    def commit(self) -> dict[int, str | None]:
        answer = self.consumer.commit()
        assert "results" in answer, (self.name, answer)
        return {partition: error for _, partition, error in answer["results"]}

    def close(self) -> None:
        self.consumer.close()

    def kill(self) -> None:
        self.consumer.kill()

    def freeze(self) -> None:
        """SIGSTOP: the Java client fetches ahead in its background thread between polls, so
        merely not polling would leave it acquiring (and hiding) records."""
        self.consumer.driver.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.consumer.driver.process.send_signal(signal.SIGCONT)


class LibrdkafkaShareMember:
    """librdkafka's share consumer (confluent-kafka ShareConsumer, explicit acknowledgement)."""

    _KINDS = {"ACCEPT": AcknowledgeType.ACCEPT, "RELEASE": AcknowledgeType.RELEASE,
              "REJECT": AcknowledgeType.REJECT}

    def __init__(self, name: str, bootstrap: str, group_id: str, topic: str, logs: Path) -> None:
        del logs  # librdkafka logs through the Python process
        self.name = name
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                                       "client.id": name,
                                       "share.acknowledgement.mode": "explicit"})
        self.consumer.subscribe([topic])
        self._polled: dict[tuple[int, int], object] = {}

    def poll(self, timeout_ms: int) -> list[Delivery]:
        messages = self.consumer.poll(timeout_ms / 1000)
        errors = [m.error() for m in messages if m.error() is not None]
        assert not errors, (self.name, errors)
        self._polled = {(m.partition(), m.offset()): m for m in messages}
        return [Delivery(self.name, m.partition(), m.offset(), m.value().decode(),
                         m.delivery_count()) for m in messages]

    def acknowledge(self, acknowledgements: Sequence[tuple[Delivery, str]]) -> None:
        for delivery, kind in acknowledgements:
            message = self._polled[(delivery.partition, delivery.offset)]
            self.consumer.acknowledge(message, self._KINDS[kind])

    def commit(self) -> dict[int, str | None]:
        return {tp.partition: None if error is None else str(error)
                for tp, error in self.consumer.commit_sync(30).items()}

    def close(self) -> None:
        self.consumer.close()

    def freeze(self) -> None:
        """Nothing to stop: librdkafka's share consumer runs in this process and fetches for
        poll() only, so a member not polled is a member that stopped."""

    def thaw(self) -> None:
        """See freeze()."""


MEMBER_KINDS: dict[str, Callable[[str, str, str, str, Path], ShareClient]] = {
    "java": JavaShareMember,
    "librdkafka": LibrdkafkaShareMember,
}


@dataclass
class DeliveryLog:
    """Every delivery of every record, in the order members received them."""

    deliveries: list[Delivery] = field(default_factory=list)

    def of(self, value: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.value == value]

    def counts(self, value: str) -> list[int | None]:
        return [d.delivery_count for d in self.of(value)]
