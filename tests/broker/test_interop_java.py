"""The Java client (kafka-clients 4.3.1, classic group protocol) as a peer of `kgroups serve`:
groups under each of Kafka's assignors with exactly-once consumption through synchronous
commits, cooperative rebalancing that never takes away a partition that does not move, a static
member restarting inside its session timeout without a rebalance, commit and resume, a member
killed with SIGKILL, and one group mixing Java, librdkafka and kafka-python members.

Each Java member is its own JVM (tests/java ConsumerDriver, built by `make java-harness`),
driven line by line, so a test can poll members in turn and kill one like any process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from group_interop_helpers import (
    FAST_GROUP_OVERRIDES,
    TrackedConsumer,
    create_topic,
    describe,
    produce,
    stable_with,
    wait_until,
)
from tests.broker.servers import ServerProcess

from java_harness import ASSIGNOR_CLASSES, JavaConsumer

pytestmark = [pytest.mark.interop, pytest.mark.kafka]

PARTITIONS = 6
TOPIC = "orders"


class JavaMember:
    """A Java group member consuming with commitSync after every batch; `owned` follows its
    rebalance callbacks (eager: everything revoked, then the full assignment; cooperative:
    increments)."""

    def __init__(self, logs: Path, bootstrap: str, group_id: str, topic: str, name: str,
                 strategy: str = "range", **settings: object) -> None:
        self.name = name
        self.owned: set[int] = set()
        self.events: list[tuple[str, frozenset[int]]] = []
        self.received: list[str] = []
        self.errors: list[str] = []
        self.consumer = JavaConsumer({
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "client.id": name,
            "partition.assignment.strategy": ASSIGNOR_CLASSES[strategy],
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            **settings,
        }, logs / f"java-{name}.log")
        self.consumer.subscribe(topic)

    def pump(self) -> None:
        answer = self.consumer.poll(50)
        for kind, partitions in answer["events"]:
            changed = frozenset(partition for _, partition in partitions)
            self.events.append((kind, changed))
            if kind == "assigned":
                self.owned |= changed
            else:
                self.owned -= changed
        if "error" in answer:
            self.errors.append(answer["error"])
        values = [value for _, _, _, value in answer["records"]]
        if values:
            committed = self.consumer.commit()
            assert committed.get("ok"), (self.name, committed)
            self.received.extend(values)

    def close(self) -> None:
        self.consumer.close()

    def kill(self) -> None:
        self.consumer.kill()


def _pump(*members: JavaMember | TrackedConsumer) -> None:
    for member in members:
        member.pump()


def _owners_cover_partitions_once(members: list[JavaMember]) -> bool:
    return sorted(p for member in members for p in member.owned) == list(range(PARTITIONS))


def _consume(members: list[JavaMember], expected: int) -> None:
    wait_until(lambda: sum(len(m.received) for m in members) >= expected,
               f"{expected} messages", pump=lambda: _pump(*members))
    for _ in range(5):  # a duplicate would arrive right behind the last original
        _pump(*members)


def _described_owners(bootstrap: str, group_id: str) -> dict[str, set[int]]:
    return {m.client_id: {p for _, p in m.partitions}
            for m in describe(bootstrap, group_id).members}


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_java_group_consumes_once_and_rebalances_when_a_member_joins(
    start_kgroups_server, tmp_path: Path, strategy: str  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    bootstrap, group_id = server.bootstrap, f"java-{strategy}"
    create_topic(bootstrap, TOPIC, PARTITIONS)
    members = [JavaMember(tmp_path, bootstrap, group_id, TOPIC, f"java-{i}", strategy)
               for i in range(2)]
    try:
        wait_until(stable_with(bootstrap, group_id, 2), "a Stable group of 2",
                   pump=lambda: _pump(*members))
        wait_until(lambda: _owners_cover_partitions_once(members),
                   "every partition owned by exactly one member", pump=lambda: _pump(*members))
        # What the members believe they own is what the coordinator hands out.
        assert _described_owners(bootstrap, group_id) == {m.name: m.owned for m in members}
        assert sorted(len(m.owned) for m in members) == [3, 3]

        first = [f"first-{i}".encode() for i in range(300)]
        produce(bootstrap, TOPIC, first, PARTITIONS)
        _consume(members, len(first))
        assert sorted(v for m in members for v in m.received) == sorted(v.decode() for v in first)

        before = {m.name: set(m.owned) for m in members}
        seen = {m.name: len(m.events) for m in members}
        members.append(JavaMember(tmp_path, bootstrap, group_id, TOPIC, "java-2", strategy))
        wait_until(stable_with(bootstrap, group_id, 3), "a Stable group of 3",
                   pump=lambda: _pump(*members))
        wait_until(lambda: _owners_cover_partitions_once(members) and all(m.owned for m in members),
                   "the newcomer sharing the partitions", pump=lambda: _pump(*members))
        assert sorted(len(m.owned) for m in members) == [2, 2, 2]
        assert _described_owners(bootstrap, group_id) == {m.name: m.owned for m in members}
        if strategy in ("sticky", "cooperative-sticky"):
            # Sticky: each old member keeps two of its three partitions.
            for member in members[:2]:
                assert member.owned <= before[member.name], member.name
        if strategy == "cooperative-sticky":
            # Only what moved to the newcomer was revoked; nothing else was ever taken away.
            for member in members[:2]:
                revoked = {p for kind, ps in member.events[seen[member.name]:]
                           if kind != "assigned" for p in ps}
                assert revoked == before[member.name] - member.owned, member.events
                assert revoked <= members[2].owned

        second = [f"second-{i}".encode() for i in range(300)]
        produce(bootstrap, TOPIC, second, PARTITIONS)
        _consume(members, len(first) + len(second))
        assert sorted(v for m in members for v in m.received) == sorted(
            v.decode() for v in first + second)
        assert all(m.errors == [] for m in members), [m.errors for m in members]
    finally:
        for member in members:
            member.close()


@pytest.mark.parametrize("how", ["close", "SIGKILL"])
def test_static_member_restarting_within_its_session_keeps_partitions_without_rebalance(
    start_kgroups_server, tmp_path: Path, how: str  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    bootstrap, group_id = server.bootstrap, "java-static"
    create_topic(bootstrap, TOPIC, PARTITIONS)
    settings = {"session.timeout.ms": 15_000}
    first = JavaMember(tmp_path, bootstrap, group_id, TOPIC, "static-a",
                       **{"group.instance.id": "instance-a"}, **settings)
    other = JavaMember(tmp_path, bootstrap, group_id, TOPIC, "static-b",
                       **{"group.instance.id": "instance-b"}, **settings)
    restarted: JavaMember | None = None
    try:
        wait_until(stable_with(bootstrap, group_id, 2), "a Stable group of 2",
                   pump=lambda: _pump(first, other))
        wait_until(lambda: _owners_cover_partitions_once([first, other]),
                   "both members assigned", pump=lambda: _pump(first, other))
        partitions_before = set(first.owned)
        other_events = list(other.events)
        members_before = {m.group_instance_id: m.member_id
                          for m in describe(bootstrap, group_id).members}

        # A static member sends no LeaveGroup on close, and a killed one sends nothing.
        first.close() if how == "close" else first.kill()
        restarted_at = time.monotonic()
        restarted = JavaMember(tmp_path, bootstrap, group_id, TOPIC, "static-a-again",
                               **{"group.instance.id": "instance-a"}, **settings)
        wait_until(lambda: restarted is not None and bool(restarted.owned),
                   "the restarted member's assignment", pump=lambda: _pump(restarted, other))
        assert time.monotonic() - restarted_at < 15  # inside the session timeout
        for _ in range(20):
            _pump(restarted, other)

        assert restarted.owned == partitions_before
        assert other.events == other_events  # no revocation, no new assignment: no rebalance
        after = describe(bootstrap, group_id)
        assert after.state == "Stable"
        members_after = {m.group_instance_id: m.member_id for m in after.members}
        assert members_after["instance-b"] == members_before["instance-b"]
        assert members_after["instance-a"] != members_before["instance-a"]  # a fresh member id
    finally:
        other.close()
        if restarted is not None:
            restarted.close()


def test_java_member_commits_and_a_new_one_resumes_from_the_commit(
    start_kgroups_server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    bootstrap, group_id = server.bootstrap, "java-resume"
    create_topic(bootstrap, TOPIC, 3)
    first_batch = [f"before-{i}".encode() for i in range(90)]
    produce(bootstrap, TOPIC, first_batch, 3)
    member = JavaMember(tmp_path, bootstrap, group_id, TOPIC, "resume-1")
    try:
        _consume([member], len(first_batch))
    finally:
        member.close()
    assert sorted(member.received) == sorted(v.decode() for v in first_batch)
    described = describe(bootstrap, group_id)
    assert described.state == "Empty"  # a dynamic member leaves the group on close
    assert {(p.partition, p.committed_offset) for p in described.partitions} == {
        (partition, 30) for partition in range(3)}

    second_batch = [f"after-{i}".encode() for i in range(30)]
    produce(bootstrap, TOPIC, second_batch, 3)
    resumer = JavaMember(tmp_path, bootstrap, group_id, TOPIC, "resume-2")
    try:
        _consume([resumer], len(second_batch))
    finally:
        resumer.close()
    assert sorted(resumer.received) == sorted(v.decode() for v in second_batch)


def test_sigkilled_java_member_is_replaced_after_its_session_timeout(
    start_kgroups_server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    bootstrap, group_id = server.bootstrap, "java-kill"
    create_topic(bootstrap, TOPIC, PARTITIONS)
    session_timeout_ms = 3000
    settings = {"session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": 200}
    victim = JavaMember(tmp_path, bootstrap, group_id, TOPIC, "victim", **settings)
    survivor = JavaMember(tmp_path, bootstrap, group_id, TOPIC, "survivor", **settings)
    try:
        wait_until(stable_with(bootstrap, group_id, 2), "a Stable group of 2",
                   pump=lambda: _pump(victim, survivor))
        wait_until(lambda: _owners_cover_partitions_once([victim, survivor]),
                   "a shared assignment", pump=lambda: _pump(victim, survivor))
        values = [f"kill-{i}".encode() for i in range(120)]
        produce(bootstrap, TOPIC, values, PARTITIONS)
        _consume([victim, survivor], len(values))

        victim.kill()
        killed_at = time.monotonic()
        wait_until(lambda: survivor.owned == set(range(PARTITIONS)),
                   "the survivor owning every partition", pump=survivor.pump)
        # The coordinator waited for the session timeout before moving the partitions.
        assert time.monotonic() - killed_at >= session_timeout_ms / 1000 * 0.9
        after = describe(bootstrap, group_id)
        assert after.state == "Stable"
        assert [m.client_id for m in after.members] == ["survivor"]

        # Everything the victim committed stays consumed: the survivor reads only new data.
        more = [f"after-kill-{i}".encode() for i in range(60)]
        produce(bootstrap, TOPIC, more, PARTITIONS)
        _consume([survivor], len(survivor.received) + len(more))
        assert sorted(victim.received + survivor.received) == sorted(
            v.decode() for v in values + more)
    finally:
        victim.kill()
        survivor.close()


def test_group_mixing_java_librdkafka_and_kafka_python(
    start_kgroups_server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    bootstrap, group_id = server.bootstrap, "java-mixed"
    create_topic(bootstrap, TOPIC, PARTITIONS)
    java = JavaMember(tmp_path, bootstrap, group_id, TOPIC, "java-member", "roundrobin")
    librdkafka = TrackedConsumer(bootstrap, group_id, TOPIC, "librdkafka-member", "roundrobin")
    python = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group_id,
                           client_id="kafka-python-member", auto_offset_reset="earliest",
                           enable_auto_commit=False, session_timeout_ms=6000,
                           heartbeat_interval_ms=300,
                           partition_assignment_strategy=[RoundRobinPartitionAssignor])
    python_received: list[bytes] = []

    def pump() -> None:
        _pump(java, librdkafka)
        records = python.poll(timeout_ms=50)
        batch = [record.value for rs in records.values() for record in rs]
        if batch:
            python.commit()
            python_received.extend(batch)

    try:
        wait_until(stable_with(bootstrap, group_id, 3), "a Stable group of 3", pump=pump)

        def python_owned() -> set[int]:
            return {tp.partition for tp in python.assignment()}

        wait_until(lambda: sorted([*java.owned, *librdkafka.owned, *python_owned()])
                   == list(range(PARTITIONS)), "every partition owned once", pump=pump)
        owners = _described_owners(bootstrap, group_id)
        assert owners == {"java-member": java.owned, "librdkafka-member": librdkafka.owned,
                          "kafka-python-member": python_owned()}
        assert [len(p) for p in owners.values()] == [2, 2, 2]

        values = [f"mixed-{i}".encode() for i in range(150)]
        produce(bootstrap, TOPIC, values, PARTITIONS)
        wait_until(lambda: len(java.received) + len(librdkafka.received)
                   + len(python_received) >= len(values), "150 messages", pump=pump)
        for _ in range(5):
            pump()
        consumed = [v.encode() for v in java.received] + librdkafka.received + python_received
        assert sorted(consumed) == sorted(values)
        assert java.received and librdkafka.received and python_received
    finally:
        java.close()
        librdkafka.close()
        python.close()
