"""Groups of real clients whose members commit synchronously, for failover tests: librdkafka
(classic or `group.protocol=consumer`), kafka-python and the Java KafkaConsumer.

Each member commits an offset of every partition it is assigned, over and over, and remembers
when each commit was sent and acknowledged. librdkafka and kafka-python members commit the next
offset each time and need no records; a Java member (which commits what it consumed, as
`commitSync()` does) commits the positions of the records it read. What is measured is the
coordinator (how long the group cannot commit, whether a commit is lost or goes back, whether
static members keep their partitions)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from tests.cluster.conftest import Cluster
from tests.java_harness import JavaConsumer

PARTITIONS = 6
# Records a librdkafka member takes from its queue at most per commit (kafka-python and the
# Java client return up to max.poll.records, 500, per poll).
READ_BATCH = 10_000


@dataclass(frozen=True)
class Commit:
    sent: float
    acknowledged: float
    offsets: dict[int, int]


def create_topic(cluster: Cluster, topic: str) -> None:
    """Create the topic through one broker (CreateTopics, written to the store's catalog) and
    wait until every partition has a leader (the brokers' next lease steps)."""
    first = next(iter(cluster.brokers.values()))
    subprocess.run([sys.executable, "-m", "kgroups.cli", "topics", "--bootstrap-server",
                    first.bootstrap, "--create", "--topic", topic, "--partitions",
                    str(PARTITIONS)], check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 30
    with closing(cluster.store()) as store:
        while sum(row.topic == topic and row.current for row in store.leadership()) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic} has partitions without a leader"
            time.sleep(0.2)


# Above a crash failover (a lease, 9 s, and a heartbeat, 2 s) as Kafka's default (45 s) is:
# a client gives its membership up after a session timeout without an answer, and a static
# member rejoining then fences its old member id (as it would with Kafka).
SESSION_TIMEOUT_MS = 30000


def _protocol_settings(protocol: str) -> dict[str, object]:
    """A classic member sets its session and heartbeat; a consumer-protocol member may not
    (the coordinator's group.consumer.* settings rule them, 45 s by default)."""
    if protocol == "classic":
        return {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000}
    return {"group.protocol": protocol}


class Librdkafka:
    """confluent_kafka's consumer (librdkafka), classic protocol unless told otherwise."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str,
                 protocol: str = "classic", debug: str | None = None) -> None:
        """`debug`: librdkafka's debug contexts, written to standard error with lines tagged
        `|<instance>#consumer-N|` (what a failing test shows of a member that stalled)."""
        self.topic = topic
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
            "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 0, **_protocol_settings(protocol),
            **({"debug": debug, "log_level": 7, "client.id": instance} if debug else {})})
        self.consumer.subscribe([topic])
        self.read_at: dict[int, float] = {}  # when it last received a record of a partition
        self.error: str | None = None  # the last fatal error librdkafka reported

    def assigned(self) -> tuple[int, ...]:
        # Everything fetched so far, as an application keeping up reads it. librdkafka hands
        # records out in the order it fetched them, a whole fetched batch of one partition at
        # a time; one record per commit round trip fell thousands behind once a partition was
        # read from an old committed offset, and hid the member's other partition for minutes.
        for message in self.consumer.consume(num_messages=READ_BATCH, timeout=0.05):
            error = message.error()
            if error is None:
                self.read_at[message.partition()] = time.monotonic()
            elif error.fatal():
                self.error = str(error)
        return tuple(sorted(tp.partition for tp in self.consumer.assignment()))

    def positions(self) -> dict[int, int] | None:
        return None

    def commit(self, offsets: dict[int, int]) -> bool:
        try:
            self.consumer.commit(offsets=[TopicPartition(self.topic, p, offset)
                                          for p, offset in offsets.items()],
                                 asynchronous=False)
        except KafkaException:
            return False
        return True

    def close(self) -> None:
        self.consumer.close()


class KafkaPython:
    """kafka-python's consumer, classic protocol."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str) -> None:
        from kafka import KafkaConsumer

        self.topic = topic
        self.consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap.split(","), group_id=group,
            group_instance_id=instance, enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=1000,
            metadata_max_age_ms=2000)
        self.read_at: dict[int, float] = {}

    def positions(self) -> dict[int, int] | None:
        return None

    def assigned(self) -> tuple[int, ...]:
        for partition, records in self.consumer.poll(timeout_ms=50).items():
            if records:
                self.read_at[partition.partition] = time.monotonic()
        return tuple(sorted(tp.partition for tp in self.consumer.assignment()))

    def commit(self, offsets: dict[int, int]) -> bool:
        from kafka import OffsetAndMetadata
        from kafka import TopicPartition as KafkaPythonPartition
        from kafka.errors import KafkaError

        try:
            self.consumer.commit({KafkaPythonPartition(self.topic, p): OffsetAndMetadata(
                offset, "", -1) for p, offset in offsets.items()})
        except KafkaError:
            return False
        return True

    def close(self) -> None:
        self.consumer.close()


class Java:
    """kafka-clients 4.3.1's KafkaConsumer in its own JVM (tests/java ConsumerDriver), classic
    protocol unless told otherwise. Its `commitSync()` commits the positions of what it polled,
    so `positions()` follows the records it read (a partition's first commit before any record
    is at a position this side does not know, and is not counted)."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str, logs: Path,
                 protocol: str = "classic") -> None:
        self.consumer = JavaConsumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
            "client.id": instance, "metadata.max.age.ms": 2000,
            **_protocol_settings(protocol)}, logs / f"java-{group}-{instance}.log")
        self.consumer.subscribe(topic)
        self.owned: set[int] = set()
        self.read_to: dict[int, int] = {}
        self.read_at: dict[int, float] = {}

    def assigned(self) -> tuple[int, ...]:
        answer = self.consumer.poll(50)
        for kind, partitions in answer["events"]:
            changed = {partition for _, partition in partitions}
            self.owned = self.owned | changed if kind == "assigned" else self.owned - changed
        for _, partition, offset, _ in answer["records"]:
            self.read_to[partition] = offset + 1
            self.read_at[partition] = time.monotonic()
        return tuple(sorted(self.owned))

    def positions(self) -> dict[int, int] | None:
        return self.read_to

    def commit(self, offsets: dict[int, int]) -> bool:
        """`commitSync()`: the positions of what was polled, which `offsets` (taken from
        `positions()` after that poll) name."""
        return bool(self.consumer.commit().get("ok"))

    def close(self) -> None:
        self.consumer.close()


Client = Librdkafka | KafkaPython | Java
# (bootstrap, group, topic, group.instance.id) -> a subscribed client
ClientFactory = Callable[[str, str, str, str], Client]


@dataclass(eq=False)
class Member(threading.Thread):
    client: Client
    group: str
    instance: str
    stop: threading.Event
    commits: list[Commit] = field(default_factory=list)
    assignment: tuple[int, ...] = ()
    failures: int = 0

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    @property
    def client_error(self) -> str | None:
        """The fatal error its client reported (librdkafka's; the others raise on commit)."""
        return self.client.error if isinstance(self.client, Librdkafka) else None

    def run(self) -> None:
        next_offset: dict[int, int] = {}
        while not self.stop.is_set():
            assigned = self.client.assigned()
            if not assigned:
                continue
            self.assignment = assigned
            read_to = self.client.positions()
            offsets = ({p: next_offset.get(p, 1) for p in assigned} if read_to is None
                       else {p: read_to[p] for p in assigned if p in read_to})
            if not offsets:
                continue
            sent = time.monotonic()
            if not self.client.commit(offsets):
                self.failures += 1
                continue
            self.commits.append(Commit(sent, time.monotonic(), offsets))
            for p, offset in offsets.items():
                next_offset[p] = offset + 1
        self.client.close()


def start_group(cluster: Cluster, topic: str,
                clients: tuple[ClientFactory, ...] = (Librdkafka,) * 3,
                name: str | None = None) -> tuple[list[Member], threading.Event]:
    """A static member per client, instance ids member-0, member-1...; the group is
    `name`, else `<topic>-group`."""
    stop = threading.Event()
    name = name or f"{topic}-group"
    group = [Member(client(cluster.bootstrap, name, topic, f"member-{index}"), name,
                    f"member-{index}", stop)
             for index, client in enumerate(clients)]
    for member in group:
        member.start()
    # Settled: every partition owned once and spread evenly (a consumer-protocol group moves a
    # partition in two steps, revoked by one member then assigned to another, so a count of
    # six can still be mid-move), and every member has committed.
    fair = {PARTITIONS // len(group), -(-PARTITIONS // len(group))}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        owned = sorted(p for member in group for p in member.assignment)
        if all(member.commits for member in group) and owned == list(range(PARTITIONS)) \
                and all(len(member.assignment) in fair for member in group):
            return group, stop
        time.sleep(0.2)
    raise AssertionError("the group did not settle and commit within 60 s")


def first_commit_after(group: list[Member], moment: float, timeout_s: float) -> float:
    """Seconds from `moment` to the first acknowledgement of a commit sent after it."""
    deadline = moment + timeout_s
    while time.monotonic() < deadline:
        after = [commit.acknowledged for member in group for commit in member.commits
                 if commit.sent > moment]
        if after:
            return min(after) - moment
        time.sleep(0.05)
    raise AssertionError(f"no commit acknowledged within {timeout_s} s")


def longest_wait(group: list[Member], moment: float, window_s: float) -> float:
    """The longest time, from `moment` over the next `window_s` seconds, that the group went
    without an acknowledged commit: what a client saw of the failover. The window's end is an
    edge too, so a window without any acknowledgement (the first came more than `window_s`
    after `moment`, as on a loaded machine) counts whole instead of having no gap at all."""
    acknowledged = sorted(commit.acknowledged for member in group for commit in member.commits
                          if moment <= commit.acknowledged <= moment + window_s)
    edges = [moment, *acknowledged, moment + window_s]
    return max(later - earlier for earlier, later in itertools.pairwise(edges))


def last_acknowledged(group: list[Member], before: float | None = None,
                      since: float = 0.0) -> dict[int, int]:
    """Each partition's highest offset whose commit was acknowledged (before `before`; of the
    commits sent after `since`)."""
    best: dict[int, int] = {}
    for member in group:
        for commit in member.commits:
            if (before is None or commit.acknowledged < before) and commit.sent > since:
                for p, offset in commit.offsets.items():
                    best[p] = max(best.get(p, 0), offset)
    return best


def committed(cluster: Cluster, group: str, topic: str) -> dict[int, int]:
    """What OffsetFetch answers now, through the group's coordinator."""
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "log_level": 0})
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                 timeout=30)
    finally:
        reader.close()
    return {tp.partition: tp.offset for tp in found}
