"""A share group (KIP-932) on a three-broker cluster: the share state of each share-partition is
kept by the leader of its `__share_group_state` partition, which the partition's leader (another
broker) reaches over the wire; every record is delivered and acknowledged, and once the broker
keeping some share-partition's state is SIGKILLed and another takes its partition over, no
acknowledged record is delivered again."""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.static.primitive import i8
from tests.broker.share_members import DeliveryLog, LibrdkafkaShareMember
from tests.cluster.conftest import Cluster
from tests.cluster.test_transactions import PARTITIONS, TOPIC, _create_topic, _leaders

from kgroups.errors import ErrorCode
from kgroups.share_coordinator.placement import coordinator_key, state_partition
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.alone]

GROUP = "queue"
SHARE_KEY_TYPE = 2
STATE_TOPIC = "__share_group_state"
TIMEOUT_S = 90.0
POLL_MS = 300


class Queue:
    """Two members of the share group, each record accepted as it is delivered; `accepted`
    maps each value whose acknowledgement the broker answered without error to how many
    deliveries there had been by then (a later delivery of it breaks the promise; one whose
    acknowledgement failed, say on a share session the kill lost, may be delivered again)."""

    def __init__(self, bootstrap: str, logs: Path) -> None:
        self.members = [LibrdkafkaShareMember(name, bootstrap, GROUP, TOPIC, logs)
                        for name in ("member-1", "member-2")]
        self.log = DeliveryLog()
        self.accepted: dict[str, int] = {}

    def pump(self) -> None:
        for member in self.members:
            deliveries = member.poll(POLL_MS)
            self.log.deliveries.extend(deliveries)
            if not deliveries:
                continue
            member.acknowledge([(d, "ACCEPT") for d in deliveries])
            results = member.commit()
            for delivery in deliveries:
                if results.get(delivery.partition) is None:
                    self.accepted.setdefault(delivery.value, len(self.log.deliveries))

    def wait(self, condition: Callable[[], bool], what: str,
             produce: Callable[[], None] | None = None) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            if produce is not None:
                produce()
            self.pump()

    def close(self) -> None:
        for member in self.members:
            member.close()


def _produce(cluster: Cluster, values: list[str]) -> None:
    """One record per value, round the partitions, through the live brokers."""
    bootstrap = ",".join(broker.bootstrap for broker in cluster.running().values())
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for index, value in enumerate(values):
        producer.produce(TOPIC, value.encode(), partition=index % PARTITIONS)
    assert producer.flush(30) == 0


def _topic_id(cluster: Cluster) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    (description,) = admin.describe_topics(
        TopicCollection([TOPIC])).values()
    found = description.result(30).topic_id
    mask = (1 << 64) - 1
    return uuid.UUID(int=((found.get_most_significant_bits() & mask) << 64)
                     | (found.get_least_significant_bits() & mask))


def _share_coordinator(cluster: Cluster, key: str, asked: int) -> int | None:
    broker = cluster.brokers[asked]
    with KafkaWireClient(broker.host, broker.port, timeout=5) as client:
        (found,) = client.call(FindCoordinatorRequest(
            key_type=i8(SHARE_KEY_TYPE), coordinator_keys=(key,))).coordinators
    return int(found.node_id) if ErrorCode(found.error_code) == ErrorCode.NONE else None


def test_acknowledged_records_survive_the_share_coordinators_sigkill(
        cluster: Cluster, tmp_path: Path) -> None:
    topic_leaders = _create_topic(cluster)
    queue = Queue(cluster.bootstrap, tmp_path)
    try:
        # The share partitions start at the log end when the group first reads them
        # (share.auto.offset.reset=latest): records until every partition delivered one.
        counter = itertools.count()

        def warm_up() -> None:
            _produce(cluster, [f"warmup-{next(counter)}" for _ in range(PARTITIONS)])

        queue.wait(lambda: {d.partition for d in queue.log.deliveries} == set(range(PARTITIONS)),
                   "a record of every partition delivered", warm_up)
        topic_id = _topic_id(cluster)
        state_leaders = _leaders(cluster, STATE_TOPIC)
        keeper = {p: state_leaders[state_partition(coordinator_key(GROUP, topic_id, p))]
                  for p in range(PARTITIONS)}
        # Every broker names the same share coordinator: the leader of the key's partition.
        for p in range(PARTITIONS):
            key = coordinator_key(GROUP, topic_id, p)
            assert {_share_coordinator(cluster, key, node) for node in (1, 2, 3)} == {keeper[p]}
        remote = [p for p in range(PARTITIONS) if keeper[p] != topic_leaders[p]]
        if not remote:  # placement follows the random topic id: this run has no remote state
            pytest.skip(f"every share-partition's state is led by its partition's leader "
                        f"({keeper}): nothing to kill that is kept over the wire")

        first = [f"first-{i}" for i in range(60)]
        _produce(cluster, first)
        queue.wait(lambda: queue.accepted.keys() >= set(first), "every record accepted")
        assert all(len(queue.log.of(value)) == 1 for value in first)

        victim = keeper[remote[0]]
        cluster.signal(victim, signal.SIGKILL)
        survivor = next(node for node in (1, 2, 3) if node != victim)
        key = coordinator_key(GROUP, topic_id, remote[0])
        deadline = time.monotonic() + 60
        while _share_coordinator(cluster, key, survivor) in (None, victim):
            assert time.monotonic() < deadline, "no broker took the share state over"
            time.sleep(0.2)

        accepted_before = set(queue.accepted)
        seen_before = len(queue.log.deliveries)
        second = [f"second-{i}" for i in range(60)]
        _produce(cluster, second)
        queue.wait(lambda: queue.accepted.keys() >= set(second),
                   "every record after the kill accepted")
        again = [d for d in queue.log.deliveries[seen_before:] if d.value in accepted_before]
        assert again == [], f"acknowledged records delivered again: {again[:5]}"
        again = [d for value, seen in queue.accepted.items()
                 for d in queue.log.deliveries[seen:] if d.value == value]
        assert again == [], f"acknowledged records delivered again: {again[:5]}"
    finally:
        queue.close()
