"""Consumer-protocol groups (KIP-848) of real clients growing, shrinking and restarting on one
`kgroups serve`: librdkafka (confluent-kafka) members scale from 3 to 8 (one of the five new
ones a Java client, kafka-clients 4.3.1) and back to 3 while records flow, consuming each
exactly once with commits, and no partition is ever held by two members at once
(revoke-before-assign as the clients see it in their callbacks); a static member
of librdkafka and one of the Java client (kafka-clients 4.3.1) each restart with their
group.instance.id and get their own partitions back, no other member's assignment moving."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from group_interop_helpers import create_topic, produce, wait_until
from tests.broker.servers import ServerProcess

from java_harness import JavaConsumer

pytestmark = pytest.mark.interop

# Heartbeats every 500 ms (Kafka's bound lowered with its own setting); the session stays at
# Kafka's 45 s, the time a static member has to come back (a JVM restart on a loaded machine
# can take longer than a short session).
OVERRIDES = (
    "group.consumer.min.heartbeat.interval.ms=500",
    "group.consumer.heartbeat.interval.ms=500",
)
_batches = itertools.count()


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("scaling")
    server = ServerProcess(directory / "data", directory / "server.log", OVERRIDES)
    server.start()
    yield server.bootstrap
    server.close()


class Member:
    """A librdkafka member: incremental assign/revoke callbacks, a commit after every batch."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str,
                 instance: str | None = None) -> None:
        self.name = name
        self.owned: set[int] = set()
        self.received: list[bytes] = []
        self.errors: list[str] = []
        settings = {
            "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "client.id": name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "error_cb": lambda error: self.errors.append(str(error)),
        }
        if instance is not None:
            settings["group.instance.id"] = instance
        self.consumer = Consumer(settings)
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned |= {p.partition for p in partitions}
        consumer.incremental_assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {p.partition for p in partitions}
        consumer.incremental_unassign(partitions)

    def pump(self) -> None:
        messages = self.consumer.consume(num_messages=500, timeout=0.02)
        batch = [m.value() for m in messages if m.error() is None]
        if batch:
            self.consumer.commit(asynchronous=False)
            self.received.extend(batch)


class JavaMember:
    """A kafka-clients 4.3.1 member (its own JVM) with group.protocol=consumer: incremental
    callbacks, commitSync after every batch."""

    def __init__(self, logs: Path, bootstrap: str, group: str, topic: str, name: str,
                 instance: str | None = None) -> None:
        self.name = name
        self.owned: set[int] = set()
        self.received: list[bytes] = []
        settings = {"bootstrap.servers": bootstrap, "group.id": group,
                    "group.protocol": "consumer", "client.id": name}
        if instance is not None:
            settings["group.instance.id"] = instance
        self.consumer = JavaConsumer(settings, logs / f"java-{name}.log")
        self.consumer.subscribe(topic)

    def pump(self) -> None:
        answer = self.consumer.poll(20)
        for kind, partitions in answer["events"]:
            changed = {partition for _, partition in partitions}
            self.owned = self.owned | changed if kind == "assigned" else self.owned - changed
        assert "error" not in answer, (self.name, answer["error"])
        values = [value.encode() for _, _, _, value in answer["records"]]
        if values:
            committed = self.consumer.commit()
            assert committed.get("ok"), (self.name, committed)
            self.received.extend(values)


class Group:
    """Members of one group, pumped together; every pump checks that no partition has two
    owners."""

    def __init__(self, bootstrap: str, name: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.name = name
        self.topic = f"{name}-topic"
        self.partitions = partitions
        self.members: list[Member | JavaMember] = []
        self.gone: list[Member | JavaMember] = []
        self.produced: list[bytes] = []
        create_topic(bootstrap, self.topic, partitions)

    def add(self, count: int, java_logs: Path | None = None) -> None:
        """`count` librdkafka members, or one Java member more when `java_logs` is given."""
        start = len(self.members) + len(self.gone)
        self.members += [Member(self.bootstrap, self.name, self.topic, f"m{start + i}")
                         for i in range(count)]
        if java_logs is not None:
            self.members.append(JavaMember(java_logs, self.bootstrap, self.name, self.topic,
                                           f"java{start + count}"))

    def remove(self, count: int) -> None:
        """The `count` oldest members leave (closing: a leave heartbeat)."""
        for member in self.members[:count]:
            member.consumer.close()
        self.gone += self.members[:count]
        self.members = self.members[count:]

    def pump(self) -> None:
        for member in self.members:
            member.pump()
        owned = [p for member in self.members for p in member.owned]
        assert len(owned) == len(set(owned)), {m.name: sorted(m.owned) for m in self.members}

    def balanced(self) -> bool:
        owned = sorted(p for member in self.members for p in member.owned)
        sizes = [len(member.owned) for member in self.members]
        return owned == list(range(self.partitions)) and max(sizes) - min(sizes) <= 1

    def produce_and_consume(self, count: int) -> None:
        values = [f"b{next(_batches)}-{i}".encode() for i in range(count)]
        produce(self.bootstrap, self.topic, values, self.partitions)
        self.produced += values
        members = [*self.members, *self.gone]
        wait_until(lambda: sum(len(m.received) for m in members) >= len(self.produced),
                   f"{len(self.produced)} records", pump=self.pump)
        for _ in range(3):
            self.pump()
        assert sorted(v for m in members for v in m.received) == sorted(self.produced)


def test_group_scales_out_and_in_consuming_exactly_once(bootstrap: str,
                                                       tmp_path: Path) -> None:
    group = Group(bootstrap, "scaling", 16)
    group.add(3)
    try:
        wait_until(group.balanced, "3 members sharing 16 partitions", pump=group.pump)
        group.produce_and_consume(320)
        group.add(4, java_logs=tmp_path)
        wait_until(group.balanced, "8 members with 2 partitions each", pump=group.pump)
        group.produce_and_consume(320)
        group.remove(3)  # the three first librdkafka members
        group.remove(2)
        wait_until(group.balanced, "the 3 members left sharing 16 partitions", pump=group.pump)
        assert any(isinstance(m, JavaMember) for m in group.members)
        group.produce_and_consume(320)
        for member in group.members:
            if isinstance(member, Member):
                assert not [e for e in member.errors if "FATAL" in e.upper()], member.errors
    finally:
        for member in group.members:
            if isinstance(member, JavaMember):
                member.consumer.kill()
            else:
                member.consumer.close()


def test_static_members_restart_without_moving_partitions(bootstrap: str,
                                                          tmp_path: Path) -> None:
    """A static librdkafka member and a static Java member leave with epoch -2 on close and
    come back under the same group.instance.id inside the session: each gets exactly the
    partitions it had, and the other members never lose or gain one."""
    name, partitions = "static", 6
    topic = f"{name}-topic"
    create_topic(bootstrap, topic, partitions)
    native = [Member(bootstrap, name, topic, f"n{i}", instance=f"native-{i}") for i in range(2)]
    java = JavaMember(tmp_path, bootstrap, name, topic, "java-0", "java-0")
    everyone: list[Member | JavaMember] = [*native, java]

    def pump() -> None:
        for member in everyone:
            member.pump()

    def settled() -> bool:
        owned = sorted(p for member in everyone for p in member.owned)
        return owned == list(range(partitions)) and all(len(m.owned) == 2 for m in everyone)

    try:
        wait_until(settled, "three static members with two partitions each", pump=pump)
        before = {member.name: set(member.owned) for member in everyone}
        history: list[dict[str, set[int]]] = []

        def pump_and_watch() -> None:
            pump()
            history.append({m.name: set(m.owned) for m in everyone if m.name in before})

        leaving = native[1]
        leaving.consumer.close()
        everyone = [native[0], java]
        back = Member(bootstrap, name, topic, leaving.name, instance="native-1")
        everyone = [native[0], java, back]
        wait_until(lambda: back.owned == before[leaving.name], "the librdkafka member back",
                   pump=pump_and_watch)

        java.consumer.close()
        everyone = [native[0], back]
        java = JavaMember(tmp_path, bootstrap, name, topic, "java-0", "java-0")
        everyone = [native[0], back, java]
        wait_until(lambda: java.owned == before["java-0"], "the Java member back",
                   pump=pump_and_watch)
        for _ in range(10):
            pump_and_watch()
        # The members that stayed never saw a partition taken or given.
        assert all(seen["n0"] == before["n0"] for seen in history)
        assert all(seen[m] == before[m] for seen in history[-10:] for m in before)
    finally:
        java.consumer.kill()
        for member in everyone:
            if isinstance(member, Member):
                member.consumer.close()
