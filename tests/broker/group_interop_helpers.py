"""Shared pieces of the consumer-group interop tests: broker overrides that keep them quick,
topic setup, and waiting for a group to settle as an operator would see it (over the wire)."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kgroups.tools import admin
from kgroups.tools.wire_client import KafkaWireClient

# No initial rebalance delay (one is only useful for real deployments) and short sessions allowed,
# so groups form and dead members expire within seconds.
FAST_GROUP_OVERRIDES = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=500",
)
SETTLE_TIMEOUT_S = 60.0


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin_client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)]
    )
    futures[name].result(timeout=30)


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """Produce with acks=all, spread round-robin over partitions; fail on any delivery error."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[str] = []

    def on_delivery(error, _message) -> None:  # type: ignore[no-untyped-def]
        if error is not None:
            failures.append(str(error))

    for index, value in enumerate(values):
        producer.produce(topic, value=value, partition=index % partitions,
                         on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []


def describe(bootstrap: str, group_id: str) -> admin.GroupDescription:
    """DescribeGroups, retried while the group's __consumer_offsets partition is still loading
    (a broker just started on a busy machine), as Kafka's tools and clients retry."""
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    with KafkaWireClient(host, int(port), client_id="kgroups-tests") as client:
        while True:
            try:
                return admin.describe_group(client, group_id)
            except admin.AdminError as exc:
                if ("COORDINATOR_LOAD_IN_PROGRESS" not in str(exc)
                        or time.monotonic() > deadline):
                    raise
            time.sleep(0.1)


def wait_until(condition: Callable[[], bool], what: str, *, pump: Callable[[], None] = lambda: None,
               timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Call `pump` (which polls the clients, so they keep their group membership) until
    `condition` holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pump()
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what}")


def stable_with(bootstrap: str, group_id: str, members: int) -> Callable[[], bool]:
    """True once the coordinator reports the group Stable with `members` members that together
    own partitions (an assignment has been delivered)."""

    def check() -> bool:
        try:
            description = describe(bootstrap, group_id)
        except admin.GroupNotFoundError:  # no member has joined yet
            return False
        return (
            description.state == "Stable"
            and len(description.members) == members
            and all(member.partitions for member in description.members)
        )

    return check


class TrackedConsumer:
    """A group member whose rebalance callbacks are recorded, consuming with manual commits."""

    def __init__(self, bootstrap: str, group_id: str, topic: str, name: str,
                 strategy: str = "range", **settings: object) -> None:
        self.name = name
        self.owned: set[int] = set()
        # ("assign" | "revoke", partitions) in the order the callbacks ran.
        self.events: list[tuple[str, frozenset[int]]] = []
        self.received: list[bytes] = []
        self.cooperative = strategy == "cooperative-sticky"
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "client.id": name,
            "partition.assignment.strategy": strategy,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            **settings,
        })
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assigned = frozenset(p.partition for p in partitions)
        self.events.append(("assign", assigned))
        self.owned = set(self.owned | assigned) if self.cooperative else set(assigned)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = frozenset(p.partition for p in partitions)
        self.events.append(("revoke", revoked))
        self.owned -= revoked

    def pump(self) -> None:
        """Poll once: serves rebalance callbacks, and consumes + commits what arrived."""
        messages = self.consumer.consume(num_messages=200, timeout=0.05)
        batch = [m.value() for m in messages if m.error() is None]
        if batch:
            self.consumer.commit(asynchronous=False)
            self.received.extend(batch)

    def close(self) -> None:
        self.consumer.close()
