"""read_committed answers of kgroups beside Kafka 4.3.1's for the same written history.

Kafka takes markers from its own coordinator only, so its history is written by real
transactional producers (librdkafka), waiting for each marker to land so the offsets match;
kgroups' is written with raw transactional batches and WriteTxnMarkers. Then both answer Fetch
(read_committed and read_uncommitted, three fetch offsets), ListOffsets LATEST and
DescribeProducers, compared field by field with producer ids named by first appearance."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_wire_helpers import connect, create_topic, nested_of, request_of
from confluent_kafka import Producer
from read_committed_helpers import READ_COMMITTED, READ_UNCOMMITTED, fetch_partition, list_latest
from test_read_committed import _history
from tests.broker.servers import InProcessBroker
from tests.kafka_harness import KafkaBroker

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.log.batch import iter_batches
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka
TOPIC = "rc"


def _wait_end(client: KafkaWireClient, end: int) -> None:
    """Kafka writes markers after EndTxn answers: wait until this one is in the log."""
    deadline = time.monotonic() + 30
    while list_latest(client, TOPIC, READ_UNCOMMITTED) < end:
        assert time.monotonic() < deadline, f"the log never reached offset {end}"
        time.sleep(0.05)


def _kafka_history(bootstrap: str, client: KafkaWireClient) -> list[Producer]:
    """The history of test_read_committed._history, through Kafka's own coordinator."""
    create_topic(client, TOPIC)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    transactional = []
    for name in ("A", "B"):
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": name,
                             "linger.ms": 50})
        producer.init_transactions(60)
        transactional.append(producer)
    a, b = transactional
    plain.produce(TOPIC, key=b"k", value=b"p0", partition=0)
    plain.flush()
    a.begin_transaction()
    a.produce(TOPIC, key=b"k", value=b"a1", partition=0)
    a.produce(TOPIC, key=b"k", value=b"a2", partition=0)
    a.flush()
    b.begin_transaction()
    b.produce(TOPIC, key=b"k", value=b"b3", partition=0)
    b.flush()
    a.abort_transaction(60)
    _wait_end(client, 5)
    plain.produce(TOPIC, key=b"k", value=b"p5", partition=0)
    plain.flush()
    b.commit_transaction(60)
    _wait_end(client, 7)
    a.begin_transaction()
    a.produce(TOPIC, key=b"k", value=b"a7", partition=0)
    a.flush()
    _wait_end(client, 8)
    return transactional


def _answers(client: KafkaWireClient) -> dict[str, Any]:
    """What both brokers are compared on, producer ids named by first appearance."""
    names: dict[int, str] = {}

    def name(producer_id: int) -> str:
        return "-" if producer_id < 0 else names.setdefault(producer_id, f"P{len(names)}")

    fetched = {}
    for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
        for offset in (0, 5, 7):
            read = fetch_partition(client, TOPIC, offset, isolation)
            batches = [(b.base_offset, name(b.producer_id), b.producer_epoch, b.attributes,
                        [r.offset for r in b.records]) for b in iter_batches(read.records or b"")]
            aborted = (None if read.aborted_transactions is None else
                       [(name(a.producer_id), a.first_offset) for a in read.aborted_transactions])
            fetched[(isolation, offset)] = (int(read.error_code), read.high_watermark,
                                            read.last_stable_offset, batches, aborted)
    api = ApiKey.DESCRIBE_PRODUCERS
    described = client.call(request_of(api, 0, topics=(
        nested_of(api, 0, "TopicRequest", name=TOPIC, partition_indexes=(0, 3)),)))
    producers = [(int(p.error_code), sorted(
        (name(s.producer_id), s.producer_epoch, s.last_sequence, s.coordinator_epoch,
         s.current_txn_start_offset) for s in p.active_producers))
        for p in described.topics[0].partitions]
    return {"fetch": fetched, "producers": producers,
            "latest": [list_latest(client, TOPIC, i) for i in (READ_UNCOMMITTED, READ_COMMITTED)]}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(Path(tmp_path_factory.mktemp("kafka-read-committed")))
    broker.start()
    yield broker
    broker.close()


def test_read_committed_answers_match_kafka(kafka: KafkaBroker,
                                            inprocess_broker: InProcessBroker) -> None:
    with connect(kafka.port) as client:
        _kafka_history(kafka.bootstrap, client)
        expected = _answers(client)
    with connect(inprocess_broker.port) as client:
        _history(client, TOPIC)
        answered = _answers(client)
    assert answered["latest"] == expected["latest"] == [8, 7]
    assert expected["fetch"][(READ_COMMITTED, 0)][4] == [("P0", 1)]  # A's abort is listed
    assert answered["fetch"] == expected["fetch"]
    assert answered["producers"] == expected["producers"]
