"""A rolling switch of a live group's members from the classic protocol to the consumer protocol
(KIP-848) and back, with two librdkafka (confluent-kafka) members and one Java (kafka-clients
4.3.1) member against `kgroups serve`: the group converts when the first consumer-protocol
member joins, its classic members keep working in it, it survives a restart of the server
half-way, and it turns classic again when the last consumer-protocol member leaves. At every
step every partition has exactly one owner again, and every record produced is consumed, none
twice beyond a batch whose commit was refused (uncommitted work)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from group_interop_helpers import FAST_GROUP_OVERRIDES, create_topic, produce, wait_until
from tests.broker.servers import ServerProcess

from java_harness import JavaConsumer

pytestmark = [pytest.mark.interop, pytest.mark.kafka]  # kafka: the Java client's jars

PARTITIONS = 6
TOPIC = "rolling"
GROUP = "rolling-switch"
OVERRIDES = (
    *FAST_GROUP_OVERRIDES,
    "group.consumer.min.heartbeat.interval.ms=500",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.session.timeout.ms=6000",
    "group.consumer.session.timeout.ms=6000",
)


class Member:
    """One consumer of either protocol, committing synchronously after every batch. Classic
    members use the range assignor: librdkafka's cooperative-sticky puts user data in its
    assignments, and Kafka (so kgroups) refuses to carry such a group over."""

    def __init__(self, bootstrap: str, name: str, protocol: str) -> None:
        self.name = name
        self.protocol = protocol
        self.owned: set[int] = set()
        self.received: list[bytes] = []
        self.uncommitted: list[bytes] = []
        self.errors: list[str] = []
        settings: dict[str, object] = {
            "bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": name,
            "group.protocol": protocol, "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": lambda error: self.errors.append(str(error)),
        }
        if protocol == "classic":
            settings.update({"partition.assignment.strategy": "range",
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        self.consumer = Consumer(settings)
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Eager (classic range) callbacks name the whole assignment, incremental ones a
        change; confluent-kafka applies either after the callback."""
        assigned = {p.partition for p in partitions}
        self.owned = assigned if self.protocol == "classic" else self.owned | assigned

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {p.partition for p in partitions}

    def close(self) -> None:
        self.consumer.close()

    def pump(self) -> None:
        messages = self.consumer.consume(num_messages=100, timeout=0.05)
        batch = [m.value() for m in messages if m.error() is None]
        if not batch:
            return
        self.received.extend(batch)
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException:  # e.g. a generation that just moved on: may be consumed again
            self.uncommitted.extend(batch)


class JavaMember:
    """The same for a Java consumer in its own JVM (classic: its default assignors, range
    first, so the group agrees on range with the librdkafka members)."""

    def __init__(self, logs: Path, bootstrap: str, name: str, protocol: str) -> None:
        self.name = name
        self.protocol = protocol
        self.owned: set[int] = set()
        self.received: list[bytes] = []
        self.uncommitted: list[bytes] = []
        self.errors: list[str] = []
        settings: dict[str, object] = {
            "bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": name,
            "group.protocol": protocol, "enable.auto.commit": "false",
            "auto.offset.reset": "earliest",
        }
        if protocol == "classic":
            settings.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        self.consumer = JavaConsumer(settings, logs / f"java-{name}-{protocol}.log")
        self.consumer.subscribe(TOPIC)

    def close(self) -> None:
        self.consumer.close()

    def pump(self) -> None:
        answer = self.consumer.poll(50)
        for kind, partitions in answer["events"]:
            changed = {partition for _, partition in partitions}
            self.owned = self.owned | changed if kind == "assigned" else self.owned - changed
        if "error" in answer:
            self.errors.append(answer["error"])
        batch = [value.encode() for _, _, _, value in answer["records"]]
        if not batch:
            return
        self.received.extend(batch)
        if not self.consumer.commit().get("ok"):
            self.uncommitted.extend(batch)


def test_rolling_switch_to_the_consumer_protocol_and_back(
    start_kgroups_server, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*OVERRIDES)
    bootstrap = server.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)
    names = ("m0", "m1", "java")

    def member(name: str, protocol: str) -> Member | JavaMember:
        if name == "java":
            return JavaMember(tmp_path, bootstrap, name, protocol)
        return Member(bootstrap, name, protocol)

    live = {name: member(name, "classic") for name in names}
    retired: list[Member | JavaMember] = []
    produced: list[bytes] = []

    def pump() -> None:
        for m in live.values():
            m.pump()

    def settled() -> bool:
        owned = [p for m in live.values() for p in m.owned]
        return sorted(owned) == list(range(PARTITIONS)) and all(
            len(m.owned) == PARTITIONS // len(live) for m in live.values())

    def consumed() -> int:
        return len({v for m in [*live.values(), *retired] for v in m.received})

    def step(label: str) -> None:
        wait_until(settled, f"{label}: every partition owned once, in equal shares", pump=pump)
        batch = [f"{label}-{i}".encode() for i in range(60)]
        produced.extend(batch)
        produce(bootstrap, TOPIC, batch, PARTITIONS)
        wait_until(lambda: consumed() == len(produced), f"{label}: every record", pump=pump)

    def group_type() -> str:
        # A new admin client per look: while the server is down librdkafka 2.16 re-bootstraps
        # and decommissions its broker handle, but keeps that handle as the group's cached
        # coordinator (librdkafka issue #5511), so an older client's describe sent after its
        # new connection is up waits out its whole timeout without sending anything. Kafka
        # 4.3.1 restarted the same way gets the same wait.
        admin_client = AdminClient({"bootstrap.servers": bootstrap})
        (future,) = admin_client.describe_consumer_groups([GROUP]).values()
        return str(future.result(timeout=30).type).rsplit(".", 1)[-1]

    try:
        step("classic")
        assert group_type() == "CLASSIC"
        for target in ("consumer", "classic"):
            for name in names:
                old = live.pop(name)
                old.close()
                retired.append(old)
                wait_until(settled, f"{name} gone: the others owning every partition",
                           pump=pump)
                live[name] = member(name, target)
                step(f"{name}-{target}")
                if (name, target) == ("m1", "consumer"):  # two consumer, one classic member
                    assert server.stop() == 0
                    server.start()
                    step("restarted")
                expected = "CLASSIC" if target == "classic" and name == names[-1] else "CONSUMER"
                assert group_type() == expected, (name, target)
        for _ in range(5):
            pump()
    finally:
        for remaining in live.values():
            remaining.close()
    everyone = [*retired, *live.values()]
    counts = Counter(v for m in everyone for v in m.received)
    assert set(counts) == set(produced)  # no partition was lost along the way
    twice = {v for v, n in counts.items() if n > 1}
    uncommitted = {v for m in everyone for v in m.uncommitted}
    assert twice <= uncommitted, sorted(twice - uncommitted)[:10]
    assert not [e for m in everyone for e in m.errors if "FATAL" in e.upper()]
    log = server.log_text()
    assert "Traceback" not in log
