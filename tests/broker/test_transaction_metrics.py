"""The transaction coordinator's Prometheus figures after real transactions (confluent-kafka's
transactional producer): ids by state, aborts by cause (the client's EndTxn, a timeout, a new
producer fencing the old), and the time-to-commit histograms."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families
from tests.broker.broker_wire_helpers import connect, create_topic
from tests.broker.servers import InProcessBroker

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
TOPIC = "payments"


def _scrape(broker: InProcessBroker) -> Samples:
    port = broker.broker.coordinator.metrics_server.port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _producer(broker: InProcessBroker, transactional_id: str, **settings: Any) -> Producer:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}",
                         "transactional.id": transactional_id, **settings})
    producer.init_transactions(30)
    return producer


def _until(broker: InProcessBroker, check: Any) -> Samples:
    """Markers and Complete records follow EndTxn's answer: scrape until `check` holds."""
    deadline = time.monotonic() + 20
    while True:
        samples = _scrape(broker)
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)


def test_states_abort_causes_and_commit_time(make_inprocess_broker: Any) -> None:
    broker: InProcessBroker = make_inprocess_broker(
        "kgroups.metrics.port=0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=100")
    broker.call(broker.broker.coordinator.wait_loaded)
    with connect(broker.port) as client:
        create_topic(client, TOPIC, partitions=2)
    before = _scrape(broker)
    assert [_value(before, "kafka_transaction_coordinator_aborts_total", cause=c)
            for c in ("client", "timeout", "fenced")] == [0, 0, 0]

    committer = _producer(broker, "pay-commit")
    committer.begin_transaction()
    committer.produce(TOPIC, b"kept", partition=0)
    committer.flush(30)  # its partition added (the transaction's start) before the wait
    time.sleep(0.2)  # the transaction is open at least this long before its commit
    committer.commit_transaction(30)
    aborter = _producer(broker, "pay-abort")
    aborter.begin_transaction()
    aborter.produce(TOPIC, b"dropped", partition=1)
    aborter.flush(30)
    aborter.abort_transaction(30)
    zombie = _producer(broker, "pay-fenced")
    zombie.begin_transaction()
    zombie.produce(TOPIC, b"zombie", partition=0)
    zombie.flush(30)
    _producer(broker, "pay-fenced")  # the new instance fences the zombie's transaction
    slow = _producer(broker, "pay-slow", **{"transaction.timeout.ms": 1000})
    slow.begin_transaction()
    slow.produce(TOPIC, b"late", partition=1)
    slow.flush(30)
    open_one = _producer(broker, "pay-open")
    open_one.begin_transaction()
    open_one.produce(TOPIC, b"open", partition=0)
    open_one.flush(30)

    samples = _until(broker, lambda s: _value(
        s, "kafka_transaction_coordinator_aborts_total", cause="timeout") >= 1 and _value(
        s, "kafka_transaction_coordinator_markers_time_seconds_count", result="abort") >= 3)
    aborts = {cause: _value(samples, "kafka_transaction_coordinator_aborts_total", cause=cause)
              for cause in ("client", "timeout", "fenced")}
    assert aborts == {"client": 1, "timeout": 1, "fenced": 1}
    states = {dict(labels)["state"]: value for (name, labels), value in samples.items()
              if name == "kafka_transaction_coordinator_transactions"}
    # pay-fenced: once the zombie's transaction is aborted, its new producer starts (Empty).
    assert states == {"CompleteCommit": 1, "CompleteAbort": 2, "Empty": 1, "Ongoing": 1}
    assert _value(samples, "kafka_transaction_coordinator_commit_time_seconds_count") == 1
    commit_seconds = _value(samples, "kafka_transaction_coordinator_commit_time_seconds_sum")
    assert 0.19 <= commit_seconds < 10  # start and end are whole milliseconds
    assert _value(samples, "kafka_transaction_coordinator_commit_time_seconds_bucket",
                  le="0.1") == 0
    assert _value(samples, "kafka_transaction_coordinator_markers_time_seconds_count",
                  result="commit") == 1
    del committer, aborter, zombie, slow, open_one
