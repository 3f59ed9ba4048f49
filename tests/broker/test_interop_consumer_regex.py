"""A librdkafka (confluent-kafka) member with group.protocol=consumer subscribed by regex: the
broker resolves `^orders-.*` (RE2) and the member is assigned the matching topic; a topic
created afterwards joins its assignment without a client round trip (at the first heartbeat
after Kafka's 10 s regex refresh interval, as with Kafka) and its records are consumed;
a topic that does not match stays out."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from group_interop_helpers import create_topic, produce, wait_until
from tests.broker.servers import ServerProcess

pytestmark = pytest.mark.interop

OVERRIDES = (
    "group.consumer.min.heartbeat.interval.ms=500",
    "group.consumer.heartbeat.interval.ms=500",
)


def test_regex_subscription_picks_up_a_topic_created_afterwards(
    start_kgroups_server,  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*OVERRIDES)
    bootstrap = server.bootstrap
    create_topic(bootstrap, "orders-eu", 2)
    create_topic(bootstrap, "payments", 1)
    owned: set[tuple[str, int]] = set()
    received: dict[str, list[bytes]] = {}

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        owned.update((p.topic, p.partition) for p in partitions)
        consumer.incremental_assign(partitions)

    def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        owned.difference_update((p.topic, p.partition) for p in partitions)
        consumer.incremental_unassign(partitions)

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "regex-orders", "group.protocol": "consumer",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    consumer.subscribe(["^orders-.*"], on_assign=on_assign, on_revoke=on_revoke)

    def pump() -> None:
        for message in consumer.consume(num_messages=100, timeout=0.05):
            if message.error() is None:
                received.setdefault(message.topic(), []).append(message.value())

    try:
        wait_until(lambda: owned == {("orders-eu", 0), ("orders-eu", 1)},
                   "orders-eu assigned through the regex", pump=pump)
        create_topic(bootstrap, "orders-us", 3)
        wait_until(lambda: {t for t, _ in owned} == {"orders-eu", "orders-us"},
                   "orders-us joining the assignment", pump=pump, timeout_s=30)
        assert len(owned) == 5
        produce(bootstrap, "orders-us", [f"us-{i}".encode() for i in range(30)], 3)
        produce(bootstrap, "payments", [b"not for this group"], 1)
        wait_until(lambda: len(received.get("orders-us", [])) == 30, "orders-us records",
                   pump=pump)
        assert sorted(received["orders-us"]) == sorted(f"us-{i}".encode() for i in range(30))
        assert "payments" not in received
    finally:
        consumer.close()
