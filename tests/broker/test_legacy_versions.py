"""Versions Kafka 4 removed that kgroups still serves for tools in wide use: ListOffsets v0 and
Fetch v0-v3 (Burrow 1.2), answered as Kafka 3.9 did."""

from __future__ import annotations

import time

import pytest
from broker_wire_helpers import connect, create_topic, produce_request
from kafka import KafkaConsumer, TopicPartition
from kio.schema.api_versions.v3 import request as api_versions
from tests.broker.servers import InProcessBroker

from kgroups.broker import legacy_schemas as v0
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch


def _list_offsets_v0(client, *asks: tuple[str, int, int, int]):  # type: ignore[no-untyped-def]
    """(topic, partition, timestamp, max offsets) -> (error, offsets) per ask."""
    response = client.call(v0.ListOffsetsRequest(replica_id=-1, topics=tuple(
        v0.ListOffsetsTopic(name=topic, partitions=(v0.ListOffsetsPartition(
            partition_index=partition, timestamp=timestamp, max_num_offsets=count),))
        for topic, partition, timestamp, count in asks)))
    return [(int(p.error_code), list(p.old_style_offsets))
            for t in response.topics for p in t.partitions]


def test_list_offsets_v0_answers_as_kafka_3_9(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "old", 2)
        for _ in range(3):
            batch = build_batch([(None, b"v", 1000), (None, b"w", 1001)])
            assert client.call(produce_request("old", 0, batch)).responses[0] \
                .partition_responses[0].error_code == ErrorCode.NONE
        answers = _list_offsets_v0(
            client, ("old", 0, -1, 1), ("old", 0, -1, 5), ("old", 0, -2, 5),
            ("old", 1, -1, 1), ("old", 0, 0, 5), ("missing", 0, -1, 1), ("old", 0, -1, -1))
    assert answers == [
        (0, [6]),  # Burrow's question: the log end offset
        (0, [6, 0]),  # every candidate newest first: log end, then the one segment's base
        (0, [0]),
        (0, [0]),  # an empty partition: its segment's base only
        (0, []),  # nothing was modified at or before 1970
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
        (ErrorCode.UNKNOWN_SERVER_ERROR, []),
    ]


def test_api_versions_advertise_the_old_versions(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        response = client.call(api_versions.ApiVersionsRequest(
            client_software_name="t", client_software_version="1"))
    served = {int(k.api_key): (k.min_version, k.max_version) for k in response.api_keys}
    assert served[1] == (0, 12)  # Fetch
    assert served[2] == (0, 11)  # ListOffsets


@pytest.mark.parametrize(("api_version", "fetch_version"), [((0, 10, 0), 2), ((0, 9), 0)])
def test_a_pre_0_11_client_reads_down_converted_messages(
        inprocess_broker: InProcessBroker, api_version: tuple[int, ...],
        fetch_version: int) -> None:
    """kafka-python told it talks to Kafka 0.10 (Fetch v2, magic 1 messages with timestamps)
    or 0.9 (Fetch v0, magic 0): it reads every record from the fetch offset on, keys, values
    and (magic 1) timestamps as produced, a LogAppendTime topic's records at the broker's
    stamp; control batches and headers do not reach it."""
    with connect(inprocess_broker.port) as client:
        create_topic(client, "old-format", 1)
        create_topic(client, "old-stamped", 1, configs={"message.timestamp.type": "LogAppendTime"})
        for topic in ("old-format", "old-stamped"):
            for first in (0, 3):
                batch = build_batch([(b"k%d" % i, b"v%d" % i, 1000 + i)
                                     for i in range(first, first + 3)])
                client.call(produce_request(topic, 0, batch))
        stamped = client.call(produce_request("old-stamped", 0, build_batch(
            [(None, b"late", 1)]))).responses[0].partition_responses[0]
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{inprocess_broker.port}",
                             api_version=api_version, enable_auto_commit=False)
    seen: list[tuple[object, ...]] = []
    try:
        consumer.assign([TopicPartition("old-format", 0), TopicPartition("old-stamped", 0)])
        consumer.seek(TopicPartition("old-format", 0), 2)  # inside the first batch
        consumer.seek(TopicPartition("old-stamped", 0), 6)
        deadline = time.monotonic() + 15
        while len(seen) < 5 and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                seen += [(m.topic, m.offset, m.key, m.value, m.timestamp, m.timestamp_type)
                         for m in messages]
    finally:
        consumer.close()
    stamp = int(stamped.log_append_time.timestamp() * 1000)
    if fetch_version == 0:  # magic 0 messages carry no timestamp
        expected_format = [("old-format", i, b"k%d" % i, b"v%d" % i, None, None)
                           for i in range(2, 6)]
        expected_stamped = [("old-stamped", 6, None, b"late", None, None)]
    else:
        expected_format = [("old-format", i, b"k%d" % i, b"v%d" % i, 1000 + i, 0)
                           for i in range(2, 6)]
        expected_stamped = [("old-stamped", 6, None, b"late", stamp, 1)]
    assert sorted(seen) == sorted(expected_format + expected_stamped)
