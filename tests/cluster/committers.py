"""A classic-protocol librdkafka group whose members commit synchronously, for failover tests.

Each member commits the next offset of every partition it is assigned, over and over, and
remembers when each commit was sent and acknowledged. The commits need no records: what is
measured is the coordinator (how long the group cannot commit, whether a commit is lost or
goes back, whether static members keep their partitions)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
import uuid
from contextlib import closing
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition
from tests.cluster.conftest import Cluster

PARTITIONS = 6


@dataclass(frozen=True)
class Commit:
    sent: float
    acknowledged: float
    offsets: dict[int, int]


def create_topic(cluster: Cluster, topic: str) -> None:
    """Create the topic through every broker (CreateTopics; a broker that sees it already
    answers TOPIC_ALREADY_EXISTS, --if-not-exists) and make sure the store has it, so that its
    partitions get leaders."""
    for broker in cluster.brokers.values():
        subprocess.run([sys.executable, "-m", "kgroups.cli", "topics", "--bootstrap-server",
                        broker.bootstrap, "--create", "--if-not-exists", "--topic", topic,
                        "--partitions", str(PARTITIONS)], check=True, capture_output=True,
                       timeout=60)
    with closing(cluster.store()) as store:
        if topic not in store.topics():
            store.create_topic(topic, uuid.uuid4(), PARTITIONS)


@dataclass(eq=False)
class Member(threading.Thread):
    bootstrap: str
    group: str
    topic: str
    instance: str
    stop: threading.Event
    commits: list[Commit] = field(default_factory=list)
    assignment: tuple[int, ...] = ()
    failures: int = 0

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "group.instance.id": self.instance, "enable.auto.commit": False,
            # Above a crash failover (a lease, 9 s, and a heartbeat, 2 s) as Kafka's default
            # (45 s) is: librdkafka gives its membership up after a session timeout without
            # an answer, and a static member rejoining then fences its old member id.
            "session.timeout.ms": 30000, "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 2000, "log_level": 0})

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        next_offset: dict[int, int] = {}
        while not self.stop.is_set():
            self.consumer.poll(0.05)
            assigned = tuple(sorted(tp.partition for tp in self.consumer.assignment()))
            if not assigned:
                continue
            self.assignment = assigned
            offsets = {p: next_offset.get(p, 1) for p in assigned}
            sent = time.monotonic()
            try:
                self.consumer.commit(offsets=[TopicPartition(self.topic, p, offset)
                                              for p, offset in offsets.items()],
                                     asynchronous=False)
            except KafkaException:
                self.failures += 1
                continue
            self.commits.append(Commit(sent, time.monotonic(), offsets))
            for p, offset in offsets.items():
                next_offset[p] = offset + 1
        self.consumer.close()


def start_group(cluster: Cluster, topic: str, members: int = 3) -> tuple[list[Member],
                                                                        threading.Event]:
    stop = threading.Event()
    group = [Member(cluster.bootstrap, f"{topic}-group", topic, f"member-{index}", stop)
             for index in range(members)]
    for member in group:
        member.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all(member.commits for member in group) and \
                sum(len(member.assignment) for member in group) == PARTITIONS:
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
    without an acknowledged commit: what a client saw of the failover."""
    acknowledged = sorted(commit.acknowledged for member in group for commit in member.commits
                          if moment <= commit.acknowledged <= moment + window_s)
    edges = [moment, *acknowledged]
    return max(later - earlier for earlier, later in itertools.pairwise(edges))


def last_acknowledged(group: list[Member], before: float | None = None) -> dict[int, int]:
    """Each partition's highest offset whose commit was acknowledged (before `before`)."""
    best: dict[int, int] = {}
    for member in group:
        for commit in member.commits:
            if before is None or commit.acknowledged < before:
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
