"""Clients with group.protocol=consumer (KIP-848) against `kgroups serve`: librdkafka
(confluent-kafka) members form a group of three through ConsumerGroupHeartbeat, consume every
record exactly once with synchronous commits, and a member that leaves hands its partitions to
the others; the group then reads as a consumer group through ConsumerGroupDescribe and
ListGroups. Java (kafka-clients 4.3.1) and librdkafka members share one group, and a Java
member killed with SIGKILL loses its partitions to the others when its session ends."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from group_interop_helpers import create_topic, produce, wait_until
from tests.broker.servers import ServerProcess

from java_harness import JavaConsumer

pytestmark = pytest.mark.interop

PARTITIONS = 6
TOPIC = "orders"
GROUP = "kip848"
# Heartbeats every 500 ms and a 6 s session keep the test short (Kafka's bounds are lowered
# with Kafka's own min settings).
OVERRIDES = (
    "group.consumer.min.heartbeat.interval.ms=500",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.session.timeout.ms=6000",
    "group.consumer.session.timeout.ms=6000",
)


class Member:
    """A consumer-protocol member: incremental assign/revoke callbacks, manual commits."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.name = name
        self.owned: set[int] = set()
        self.received: list[bytes] = []
        self.errors: list[str] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "group.protocol": "consumer",
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": lambda error: self.errors.append(str(error)),
        })
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned |= {p.partition for p in partitions}
        consumer.incremental_assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {p.partition for p in partitions}
        consumer.incremental_unassign(partitions)

    def pump(self) -> None:
        messages = self.consumer.consume(num_messages=200, timeout=0.05)
        batch = [m.value() for m in messages if m.error() is None]
        if batch:
            self.consumer.commit(asynchronous=False)
            self.received.extend(batch)


def _cover_once(members: list[Member] | list[JavaMember | Member]) -> bool:
    owned = [p for member in members for p in member.owned]
    return sorted(owned) == list(range(PARTITIONS))


def test_consumer_protocol_group_forms_consumes_once_and_takes_over(
    start_kgroups_server,  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*OVERRIDES)
    bootstrap = server.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)
    members = [Member(bootstrap, f"member-{i}") for i in range(3)]

    def pump() -> None:
        for member in members:
            member.pump()

    wait_until(lambda: _cover_once(members) and all(len(m.owned) == 2 for m in members),
               "three members with two partitions each", pump=pump)

    first = [f"first-{i}".encode() for i in range(300)]
    produce(bootstrap, TOPIC, first, PARTITIONS)
    wait_until(lambda: sum(len(m.received) for m in members) >= len(first), "300 records",
               pump=pump)
    for _ in range(5):
        pump()
    assert sorted(v for m in members for v in m.received) == sorted(first)

    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    (described,) = admin_client.describe_consumer_groups([GROUP]).values()
    group = described.result(timeout=30)
    assert str(group.type).endswith("CONSUMER")
    assert len(group.members) == 3
    assert sorted(tp.partition for m in group.members for tp in m.assignment.topic_partitions) \
        == list(range(PARTITIONS))

    leaver, members = members[0], members[1:]
    leaver.consumer.close()
    wait_until(lambda: _cover_once(members), "the two survivors owning every partition",
               pump=pump)
    assert sorted(len(m.owned) for m in members) == [3, 3]

    second = [f"second-{i}".encode() for i in range(300)]
    produce(bootstrap, TOPIC, second, PARTITIONS)
    wait_until(lambda: sum(len(m.received) for m in [*members, leaver])
               >= len(first) + len(second), "600 records", pump=pump)
    for _ in range(5):
        pump()
    everything = [v for m in [*members, leaver] for v in m.received]
    assert sorted(everything) == sorted(first + second)  # nothing lost, nothing twice

    listed = admin_client.list_consumer_groups().result(timeout=30)
    (ours,) = [g for g in listed.valid if g.group_id == GROUP]
    assert str(ours.type).endswith("CONSUMER")
    for member in members:
        assert not [e for e in member.errors if "FATAL" in e.upper()], member.errors
        member.consumer.close()


class JavaMember:
    """A kafka-clients 4.3.1 member with group.protocol=consumer (its own JVM): incremental
    assign/revoke callbacks, commitSync after every batch."""

    def __init__(self, logs: Path, bootstrap: str, name: str) -> None:
        self.name = name
        self.owned: set[int] = set()
        self.received: list[bytes] = []
        self.errors: list[str] = []
        self.consumer = JavaConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                      "group.protocol": "consumer", "client.id": name},
                                     logs / f"java-{name}.log")
        self.consumer.subscribe(TOPIC)

    def pump(self) -> None:
        answer = self.consumer.poll(50)
        for kind, partitions in answer["events"]:
            changed = {partition for _, partition in partitions}
            self.owned = self.owned | changed if kind == "assigned" else self.owned - changed
        if "error" in answer:
            self.errors.append(answer["error"])
        values = [value.encode() for _, _, _, value in answer["records"]]
        if values:
            committed = self.consumer.commit()
            assert committed.get("ok"), (self.name, committed)
            self.received.extend(values)


@pytest.mark.kafka
def test_java_and_librdkafka_members_share_a_group_and_survive_a_sigkill(
    start_kgroups_server, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*OVERRIDES)
    bootstrap = server.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)
    java = [JavaMember(tmp_path, bootstrap, f"java-{i}") for i in range(2)]
    native = Member(bootstrap, "librdkafka-0")
    members: list[JavaMember | Member] = [*java, native]
    try:
        def pump() -> None:
            for member in members:
                member.pump()

        wait_until(lambda: _cover_once(members) and all(len(m.owned) == 2 for m in members),
                   "two Java and one librdkafka member with two partitions each", pump=pump)
        first = [f"first-{i}".encode() for i in range(300)]
        produce(bootstrap, TOPIC, first, PARTITIONS)
        wait_until(lambda: sum(len(m.received) for m in members) >= len(first), "300 records",
                   pump=pump)

        victim = java[0]
        victim.consumer.kill()  # no leave heartbeat: the session (6 s) must run out
        members = [java[1], native]
        wait_until(lambda: _cover_once(members), "the survivors owning every partition",
                   pump=pump)
        second = [f"second-{i}".encode() for i in range(300)]
        produce(bootstrap, TOPIC, second, PARTITIONS)
        wait_until(lambda: sum(len(m.received) for m in [*members, victim])
                   >= len(first) + len(second), "600 records", pump=pump)
        for _ in range(5):
            pump()
        everything = sorted(v for m in [*members, victim] for v in m.received)
        assert everything == sorted(first + second)
        assert "member_removed" in server.log_text() and "session_timeout" in server.log_text()
        assert not java[1].errors and not native.errors
    finally:
        for member in java:
            member.consumer.kill()
        native.consumer.close()
