"""Real consumers against kgroups' read_committed answers: librdkafka (confluent-kafka) and
kafka-python drop the records of aborted transactions using the aborted_transactions list, and
stop at the last stable offset, so they see committed and non-transactional records only."""

from __future__ import annotations

import time

from broker_wire_helpers import connect
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition
from test_read_committed import _history
from tests.broker.servers import InProcessBroker

COMMITTED_VALUES = [b"p0", b"b3", b"p5"]  # a1, a2 aborted; a7 still open


def test_librdkafka_read_committed_sees_committed_records_only(
        inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        _history(client, "rdkafka")
    seen: dict[str, list[bytes]] = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{inprocess_broker.port}",
                             "group.id": f"rc-{isolation}", "isolation.level": isolation,
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("rdkafka", 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(values) < 6:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.close()
        seen[isolation] = values
    assert seen["read_committed"] == COMMITTED_VALUES
    assert seen["read_uncommitted"] == [b"p0", b"a1", b"a2", b"b3", b"p5", b"a7"]


def test_kafka_python_read_committed_sees_committed_records_only(
        inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        _history(client, "kafkapython")
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{inprocess_broker.port}",
                             isolation_level="read_committed", enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    partition = KafkaPythonPartition("kafkapython", 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    values = [message.value for message in consumer]
    assert values == COMMITTED_VALUES
    assert consumer.end_offsets([partition])[partition] == 7  # ListOffsets read_committed
    consumer.close()
