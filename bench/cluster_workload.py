"""The clients a cluster is judged by, the same for a Kafka cluster and a kgroups cluster.

`failover(...)`: a group of librdkafka consumers commit every message they read while a
producer writes with acks=all; the group's coordinator is killed with SIGKILL; the figures are
the seconds until the group's first commit after the kill and until the group is Stable again
on another coordinator, with checks that no acknowledged record and no commit was lost and that
no committed offset went back. `throughput(...)`: produce and consume rates with acks=all and
synchronous OffsetCommits per second, with no failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from broker_data import produce_messages

PARTITIONS = 6
VALUE = b"v" * 100


@dataclass
class FailoverFigures:
    killed_node: int
    first_commit_s: float
    stable_s: float
    produced: int
    consumed_distinct: int
    commits: int
    offsets_went_back: list[str] = field(default_factory=list)
    lost_records: int = 0


@dataclass(frozen=True)
class ThroughputFigures:
    produce_msgs_per_s: float
    consume_msgs_per_s: float
    commits_per_s: float


def create_topic(bootstrap: str, topic: str, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                  replication_factor=replication)])[topic].result(60)


def coordinator_of(bootstrap: str, group: str) -> tuple[int, str, int]:
    """(coordinator node id, group state, member count) as Kafka's admin API reports them."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    described = admin.describe_consumer_groups([group], request_timeout=5)[group].result(10)
    return described.coordinator.id, str(described.state), len(described.members)


class _CommittingConsumer(threading.Thread):
    """Reads, and commits each record's offset synchronously; remembers every commit."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str | None,
                 stop: threading.Event) -> None:
        super().__init__(daemon=True)
        settings: dict[str, object] = {
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 30000,
            "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 100, "log_level": 2}
        if instance is not None:
            settings["group.instance.id"] = instance
        self.consumer = Consumer(settings)
        self.topic = topic
        self.stop = stop
        self.commit_times: list[float] = []  # when each commit was acknowledged
        self.issue_times: list[float] = []  # when each of those was sent
        self.committed: dict[int, list[int]] = {}
        self.seen: set[tuple[int, int]] = set()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stop.is_set():
            message = self.consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            self.seen.add((partition, offset))
            issued = time.monotonic()
            try:
                self.consumer.commit(offsets=[TopicPartition(self.topic, partition, offset + 1)],
                                     asynchronous=False)
            except KafkaException:
                continue
            self.commit_times.append(time.monotonic())
            self.issue_times.append(issued)
            self.committed.setdefault(partition, []).append(offset + 1)
        self.consumer.close()


def failover(bootstrap: str, topic: str, kill: Callable[[int], None],
             members: int = 3, static: bool = True, settle_s: float = 5.0,
             deadline_s: float = 120.0) -> FailoverFigures:
    """Run the group, kill its coordinator's node with `kill(node_id)`, measure the recovery."""
    group = f"{topic}-group"
    stop = threading.Event()
    consumers = [_CommittingConsumer(bootstrap, group, topic,
                                     f"member-{index}" if static else None, stop)
                 for index in range(members)]
    acknowledged: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "log_level": 2})

    def delivered(error: object, message: object) -> None:
        if error is None:
            acknowledged.append((message.partition(), message.offset()))  # type: ignore[attr-defined]

    def produce() -> None:
        while not stop.is_set():
            producer.produce(topic, value=VALUE, on_delivery=delivered)
            producer.poll(0.005)
        producer.flush(60)

    writer = threading.Thread(target=produce, daemon=True)
    for consumer in consumers:
        consumer.start()
    writer.start()
    began = time.monotonic()
    while time.monotonic() - began < deadline_s:
        node, state, count = coordinator_of(bootstrap, group)
        if state.endswith("STABLE") and count == members and any(c.commit_times
                                                                  for c in consumers):
            break
        time.sleep(0.2)
    time.sleep(settle_s)
    node, _, _ = coordinator_of(bootstrap, group)
    killed_at = time.monotonic()
    kill(node)
    first_commit = stable = float("nan")
    while time.monotonic() - killed_at < deadline_s and (first_commit != first_commit
                                                          or stable != stable):
        # A commit answered just after the kill may have been sent before it: count only those
        # sent afterwards, which the new coordinator answered.
        after = [done for c in consumers
                 for sent, done in zip(c.issue_times, c.commit_times, strict=False)
                 if sent > killed_at]
        if after and first_commit != first_commit:
            first_commit = min(after) - killed_at
        if stable != stable:
            try:
                now_node, state, count = coordinator_of(bootstrap, group)
            except KafkaException:
                now_node, state, count = node, "", 0
            if now_node != node and state == str(ConsumerGroupState.STABLE) and count == members:
                stable = time.monotonic() - killed_at
        time.sleep(0.05)
    time.sleep(settle_s)
    stop.set()
    writer.join(90)
    for consumer in consumers:
        consumer.join(60)
    went_back = [f"partition {p}: {offsets}" for c in consumers
                 for p, offsets in c.committed.items() if offsets != sorted(offsets)]
    seen = {record for c in consumers for record in c.seen}
    lost = _records_missing(bootstrap, topic, acknowledged)
    return FailoverFigures(node, first_commit, stable, len(acknowledged), len(seen),
                           sum(len(c.commit_times) for c in consumers), went_back, lost)


def _records_missing(bootstrap: str, topic: str, acknowledged: list[tuple[int, int]]) -> int:
    """How many acknowledged (partition, offset) pairs a fresh read from the start lacks."""
    wanted = set(acknowledged)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-audit",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    found: set[tuple[int, int]] = set()
    quiet_since = time.monotonic()
    while wanted - found and time.monotonic() - quiet_since < 15:
        batch = reader.consume(num_messages=10000, timeout=1.0)
        for message in batch:
            if message.error() is None:
                found.add((message.partition(), message.offset()))
        if batch:
            quiet_since = time.monotonic()
    reader.close()
    return len(wanted - found)


def throughput(bootstrap: str, topic: str, messages: int = 50_000,
               commit_seconds: float = 5.0) -> ThroughputFigures:
    produce_rate = produce_messages(bootstrap, topic, messages, PARTITIONS, VALUE)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 50})
    consumer.subscribe([topic])
    received = 0
    started = 0.0  # from the first record: the group's join is not reading
    deadline = time.perf_counter() + 120
    while received < messages and time.perf_counter() < deadline:
        for message in consumer.consume(num_messages=10000, timeout=1.0):
            if message.error() is None:
                started = started or time.perf_counter()
                received += 1
    consume_rate = received / (time.perf_counter() - started)

    commits = 0
    started = time.perf_counter()
    while time.perf_counter() - started < commit_seconds:
        consumer.commit(offsets=[TopicPartition(topic, commits % PARTITIONS, commits + 1)],
                        asynchronous=False)
        commits += 1
    commit_rate = commits / (time.perf_counter() - started)
    consumer.close()
    return ThroughputFigures(produce_rate, consume_rate, commit_rate)
