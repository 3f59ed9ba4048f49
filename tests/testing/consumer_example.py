"""The example of docs/testing.md: a confluent-kafka consumer tested against the `kafka_broker`
fixture kgroups' pytest plugin provides (tests/testing/test_pytest_plugin.py runs it as a user's
project would, in a directory of its own)."""

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition


@pytest.mark.kafka_broker(num_partitions=1)
def test_consumer_reads_and_commits(kafka_broker):
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for n in range(3):
        producer.produce("orders", value=f"order-{n}".encode(), timestamp=1_700_000_000_000 + n)
    assert producer.flush(10) == 0

    consumer = Consumer({
        "bootstrap.servers": kafka_broker.bootstrap,
        "group.id": "billing",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe(["orders"])
    values = []
    while len(values) < 3:
        message = consumer.poll(10)
        assert message is not None, "no message within 10 s"
        assert message.error() is None
        values.append(message.value())
    consumer.commit(asynchronous=False)

    assert values == [b"order-0", b"order-1", b"order-2"]
    [committed] = consumer.committed([TopicPartition("orders", 0)], timeout=10)
    assert committed.offset == 3
    consumer.close()
