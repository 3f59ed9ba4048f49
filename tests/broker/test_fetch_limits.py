"""A Fetch answer stays within the request's max_bytes and each partition's
partition_max_bytes, except that the first batch of the first partition with data goes whole
however large, so a consumer always progresses (librdkafka's 0082_fetch_max_bytes received
1.8 MB against a 1 MB limit). Run on Kafka and kgroups (`any_broker`)."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from broker_wire_helpers import create_topic, produce_request
from kio.schema.fetch.v12 import request as fetch

from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch
from kgroups.tools.wire_client import KafkaWireClient

PARTITIONS = 3
BATCH_VALUE = 300_000  # each partition holds two batches of a little over this


def _filled_topic(client: KafkaWireClient) -> str:
    name = f"fetch-limits-{uuid.uuid4().hex[:10]}"
    create_topic(client, name, PARTITIONS)
    now = int(time.time() * 1000)
    for partition in range(PARTITIONS):
        for n in range(2):
            batch = build_batch([(b"k", bytes([65 + n]) * BATCH_VALUE, now)])
            deadline = time.monotonic() + 15  # Kafka elects leaders just after CreateTopics
            while True:
                answer = client.call(produce_request(name, partition, batch, acks=1)) \
                    .responses[0].partition_responses[0]
                if answer.error_code == ErrorCode.NONE or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert answer.error_code == ErrorCode.NONE
    return name


def _fetch(client: KafkaWireClient, topic: str, max_bytes: int,
           partition_max_bytes: int) -> list[int]:
    """Bytes answered per partition."""
    response = client.call(fetch.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=(fetch.FetchTopic(topic=topic, partitions=tuple(
            fetch.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                 last_fetched_epoch=-1, log_start_offset=-1,
                                 partition_max_bytes=partition_max_bytes)
            for p in range(PARTITIONS))),),
        forgotten_topics_data=(), rack_id=""))
    (answer,) = response.responses
    return [len(p.records or b"") for p in sorted(answer.partitions,
                                                   key=lambda p: p.partition_index)]


def test_answer_within_max_bytes_and_partition_max_bytes(any_broker: Any) -> None:
    with KafkaWireClient(any_broker.host, any_broker.port) as client:
        topic = _filled_topic(client)
        sizes = _fetch(client, topic, max_bytes=1_000_000, partition_max_bytes=1_000_000)
        assert sum(sizes) <= 1_000_000
        assert sizes[0] > 2 * BATCH_VALUE  # both of the first partition's batches
        sizes = _fetch(client, topic, max_bytes=10_000_000, partition_max_bytes=400_000)
        assert all(size <= 400_000 for size in sizes)
        assert all(size > BATCH_VALUE for size in sizes)


def test_first_batch_goes_whole_and_alone(any_broker: Any) -> None:
    with KafkaWireClient(any_broker.host, any_broker.port) as client:
        topic = _filled_topic(client)
        sizes = _fetch(client, topic, max_bytes=1000, partition_max_bytes=1000)
        assert BATCH_VALUE < sizes[0] < 2 * BATCH_VALUE
        assert sizes[1:] == [0] * (PARTITIONS - 1)
