"""Real clients (librdkafka via confluent-kafka, kcat, kafka-python) against `kgroups serve`,
partition-level (no consumer group), plus broker restarts and kill -9 keeping acked data."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.servers import ServerProcess

pytestmark = pytest.mark.interop

KCAT_TIMEOUT_S = 60


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)])
    futures[name].result(timeout=30)


def _produce_acked(
    bootstrap: str, topic: str, count: int, partitions: int, compression: str = "none"
) -> dict[int, list[bytes]]:
    """Produce with acks=all and idempotence; return per partition what the broker acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "compression.type": compression})
    acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    failures: list[str] = []

    def on_delivery(error, message) -> None:  # type: ignore[no-untyped-def]
        if error is not None:
            failures.append(str(error))
        else:
            acked[message.partition()].append(message.value())

    for index in range(count):
        producer.produce(topic, value=f"m{index}".encode(), partition=index % partitions,
                         on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []
    return acked


def _consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "assign-only",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    received: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    at_eof: set[int] = set()
    try:
        for _ in range(2000):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == -191:  # _PARTITION_EOF
                    at_eof.add(message.partition())
                    if len(at_eof) == partitions and sum(map(len, received.values())) >= expected:
                        break
                    continue
                raise AssertionError(str(message.error()))
            received[message.partition()].append(message.value())
            at_eof.discard(message.partition())
    finally:
        consumer.close()
    return received


def test_confluent_kafka_produce_and_assign_consume(kgroups_server: ServerProcess) -> None:
    _create_topic(kgroups_server.bootstrap, "events", 3)
    acked = _produce_acked(kgroups_server.bootstrap, "events", 300, 3)
    assert _consume_all(kgroups_server.bootstrap, "events", 3, 300) == acked


def test_confluent_kafka_admin_lists_every_topic(kgroups_server: ServerProcess) -> None:
    """librdkafka 2.13+ asks for all topics with a Metadata v12 carrying three bytes after its
    last field (librdkafka issue #5049); Kafka ignores them, so must kgroups."""
    _create_topic(kgroups_server.bootstrap, "listed-a", 2)
    _create_topic(kgroups_server.bootstrap, "listed-b", 1)
    admin = AdminClient({"bootstrap.servers": kgroups_server.bootstrap})
    listed = admin.list_topics(timeout=30)
    assert {"listed-a", "listed-b"} <= set(listed.topics)
    assert len(listed.topics["listed-a"].partitions) == 2


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(kgroups_server: ServerProcess, codec: str) -> None:
    _create_topic(kgroups_server.bootstrap, f"packed-{codec}", 2)
    acked = _produce_acked(kgroups_server.bootstrap, f"packed-{codec}", 100, 2, codec)
    assert _consume_all(kgroups_server.bootstrap, f"packed-{codec}", 2, 100) == acked


def test_kcat_round_trip(kgroups_server: ServerProcess) -> None:
    lines = [f"line-{i}" for i in range(50)]
    subprocess.run(["kcat", "-b", kgroups_server.bootstrap, "-P", "-t", "kcat-topic", "-p", "0"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=KCAT_TIMEOUT_S)
    consumed = subprocess.run(
        ["kcat", "-b", kgroups_server.bootstrap, "-C", "-t", "kcat-topic", "-p", "0",
         "-o", "beginning", "-e", "-q"],
        capture_output=True, text=True, check=True, timeout=KCAT_TIMEOUT_S)
    assert consumed.stdout.splitlines() == lines
    listing = subprocess.run(["kcat", "-b", kgroups_server.bootstrap, "-L", "-t", "kcat-topic"],
                             capture_output=True, text=True, check=True, timeout=KCAT_TIMEOUT_S)
    assert 'topic "kcat-topic" with 1 partitions' in listing.stdout


def test_kafka_python_produce_and_consume(kgroups_server: ServerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    producer = KafkaProducer(bootstrap_servers=kgroups_server.bootstrap, acks="all")
    for index in range(20):
        producer.send("kp", value=f"v{index}".encode(), partition=0)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kgroups_server.bootstrap,
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    partition = KafkaTopicPartition("kp", 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    values = [message.value for message in consumer]
    consumer.close()
    assert values == [f"v{index}".encode() for index in range(20)]


FLUSH_MODES = {
    "acknowledged in the log file (Kafka's default)": (),
    "fsync before acknowledging": ("log.flush.interval.messages=1",),
}


@pytest.mark.parametrize("flush_mode", FLUSH_MODES)
@pytest.mark.parametrize("how", ["graceful", "kill -9"])
def test_acknowledged_data_survives_broker_restart(
    start_kgroups_server, how: str, flush_mode: str  # type: ignore[no-untyped-def]
) -> None:
    kgroups_server: ServerProcess = start_kgroups_server(*FLUSH_MODES[flush_mode])
    _create_topic(kgroups_server.bootstrap, "durable", 2)
    acked = _produce_acked(kgroups_server.bootstrap, "durable", 200, 2)
    if how == "kill -9":
        kgroups_server.kill()
    else:
        assert kgroups_server.stop() == 0
    kgroups_server.start()
    assert _consume_all(kgroups_server.bootstrap, "durable", 2, 200) == acked
    more = _produce_acked(kgroups_server.bootstrap, "durable", 10, 2)
    after = _consume_all(kgroups_server.bootstrap, "durable", 2, 210)
    assert after == {p: acked[p] + more[p] for p in acked}
