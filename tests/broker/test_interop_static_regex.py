"""librdkafka's static members with a regex subscription on a broker with many topics (the start
of its test 0102_static_group_rebalance): two consumers with group.instance.id subscribing to
`^t_<id>.*` within a moment of each other land in one generation and keep their partitions at the
next heartbeat. A regex subscription makes librdkafka ask for every topic before it joins, so a
slow ~100 KB Metadata answer delayed the second JoinGroup past the first generation and the first
member was revoked at its next heartbeat. The same scenario runs against Kafka 4.3.1."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from group_interop_helpers import create_topic
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker, kgroups_overrides

from conftest import ServerProcess

pytestmark = pytest.mark.interop

CROWD_TOPICS, CROWD_PARTITIONS = 1000, 3  # an all-topics Metadata answer of ~100 KB
PARTITIONS = 3
CREATE_BATCH = 100
HEARTBEAT_MS = 3000  # librdkafka's default, as in 0102
AFTER_ASSIGNMENT_S = 2.5 * HEARTBEAT_MS / 1000  # past each member's next heartbeats


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka),
                                        "kgroups"])
def crowded_bootstrap(request: pytest.FixtureRequest,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of either kind (the shared test settings: no initial rebalance delay) holding
    a thousand topics that no test subscribes to; its own, so the shared brokers stay small."""
    workdir: Path = tmp_path_factory.mktemp(f"crowded-{request.param}")
    if request.param == "kafka":
        kafka = KafkaBroker(workdir)
        kafka.start()
        stop = kafka.close
        bootstrap = kafka.bootstrap
    else:
        server = ServerProcess(workdir / "data", workdir / "server.log",
                               kgroups_overrides(KAFKA_TEST_SETTINGS))
        server.start()
        stop = server.close
        bootstrap = server.bootstrap
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        names = [f"crowd_{index:04d}" for index in range(CROWD_TOPICS)]
        for start in range(0, len(names), CREATE_BATCH):
            futures = admin.create_topics(
                [NewTopic(name, num_partitions=CROWD_PARTITIONS, replication_factor=1)
                 for name in names[start:start + CREATE_BATCH]], operation_timeout=60)
            for future in futures.values():
                future.result(timeout=120)
        yield bootstrap
    finally:
        stop()


class StaticMember:
    """One librdkafka consumer with a group.instance.id, recording its rebalance callbacks."""

    def __init__(self, bootstrap: str, group_id: str, instance_id: str) -> None:
        self.events: list[tuple[str, frozenset[int]]] = []
        self.owned: set[int] = set()
        # 0102's settings.
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group_id,
            "group.instance.id": instance_id, "client.id": instance_id,
            "session.timeout.ms": 6000, "max.poll.interval.ms": 10000,
            "heartbeat.interval.ms": HEARTBEAT_MS, "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 500, "metadata.max.age.ms": 5000,
            "enable.partition.eof": True,
        })

    def subscribe(self, pattern: str) -> None:
        self.consumer.subscribe([pattern], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assigned = frozenset(p.partition for p in partitions)
        self.events.append(("assign", assigned))
        self.owned = set(assigned)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", frozenset(p.partition for p in partitions)))
        self.owned = set()

    def poll(self) -> None:
        self.consumer.poll(0.05)

    def close(self) -> None:
        self.consumer.close()


def test_static_members_with_a_regex_join_one_generation_and_are_not_revoked(
    crowded_bootstrap: str,
) -> None:
    token = uuid.uuid4().hex[:8]
    topic = f"t_{token}"
    create_topic(crowded_bootstrap, topic, PARTITIONS)
    members = [StaticMember(crowded_bootstrap, f"static-regex-{token}", f"consumer{index}")
               for index in (1, 2)]
    try:
        for member in members:  # connected and the topic known, as 0102 waits for it
            assert topic in member.consumer.list_topics(topic, timeout=30).topics
        for member in members:
            member.subscribe(f"^{topic}.*")
        deadline = time.monotonic() + 60
        while not all(member.events for member in members):
            assert time.monotonic() < deadline, [member.events for member in members]
            for member in members:
                member.poll()
        settle = time.monotonic() + AFTER_ASSIGNMENT_S
        while time.monotonic() < settle:
            for member in members:
                member.poll()
        # One generation with both: each was assigned once, nothing revoked, and together
        # they hold every partition.
        for member in members:
            assert [kind for kind, _ in member.events] == ["assign"], member.events
        owned = [member.owned for member in members]
        assert all(owned) and not owned[0] & owned[1]
        assert owned[0] | owned[1] == set(range(PARTITIONS))
    finally:
        for member in members:
            member.close()
