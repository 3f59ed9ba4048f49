"""`kgroups analyze` on transactions: the transactional offset commits of a group (committed,
aborted, pending, resolved by their markers) and the `transactions` table read from
__transaction_state, on logs written by kgroups and by Kafka 4.3.1 (confluent-kafka's
transactional producer with send_offsets_to_transaction), one Spark run each."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.broker_wire_helpers import connect, create_topic
from tests.broker.servers import InProcessBroker, make_inprocess_broker
from tests.pipeline.logdata import OffsetsLogBuilder

from kgroups.log.transactions import TransactionMarker
from kgroups.pipeline.job import run_analysis
from kgroups.pipeline.transaction_tables import transactional_commits
from kgroups.pipeline.window import TimeWindow

__all__ = ["make_inprocess_broker"]

T = 1_700_000_000_000


def _table(out: Path, name: str) -> list[dict[str, Any]]:
    return pq.read_table(out / name).to_pylist()


def _outcomes(rows: list[dict[str, Any]], group: str) -> dict[str, tuple[int, int]]:
    return {r["outcome"]: (r["transactions"], r["offsets"]) for r in rows if r["group"] == group}


def test_each_commit_takes_its_producers_next_marker() -> None:
    """Producer 7 commits two offsets, aborts one, then commits again; producer 8 has one
    pending; a commit outside the window is resolved but not counted."""
    rows = [(0, 7, "g", T), (1, 7, "g", T + 1), (3, 7, "g", T + 3), (5, 8, "g", T + 5),
            (6, 7, "h", T + 6), (8, 7, "g", T - 60_000)]
    commits = pa.table({
        "log_offset": [r[0] for r in rows], "producer_id": [r[1] for r in rows],
        "group": [r[2] for r in rows], "record_ts": [r[3] for r in rows],
        "transactional": [True] * len(rows)})
    markers = [TransactionMarker(2, 7, True), TransactionMarker(4, 7, False),
               TransactionMarker(7, 7, True), TransactionMarker(9, 7, False)]
    found = transactional_commits(commits, markers, TimeWindow(since_ms=T)).to_pylist()
    assert _outcomes(found, "g") == {"committed": (1, 2), "aborted": (1, 1), "pending": (1, 1)}
    assert _outcomes(found, "h") == {"committed": (1, 1)}
    first = next(r for r in found if r["group"] == "g" and r["outcome"] == "committed")
    assert (first["first_ts"].timestamp() * 1000, first["last_ts"].timestamp() * 1000) == (
        T, T + 1)


# ------------------------------------------------------------------- transactions by clients


def _transactions(bootstrap: str, topic: str, group: str, tail: str) -> list[Any]:
    """A committed and an aborted consume-transform-produce step of `group`, and one left open
    (its producer is returned with the others, to be kept alive until the log is read)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()
    producers = []
    for name, offset, end in (("done", 10, "commit"), ("dropped", 20, "abort"),
                              ("open", 30, None)):
        producer = Producer({"bootstrap.servers": bootstrap,
                             "transactional.id": f"{name}-{tail}",
                             "transaction.timeout.ms": 600_000})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, f"{name}".encode(), partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], metadata, 30)
        if end == "commit":
            producer.commit_transaction(30)
        elif end == "abort":
            producer.abort_transaction(30)
        else:
            producer.flush(30)
        producers.append(producer)
    return [consumer, *producers]


def _copy_logs(data_dir: Path, into: Path) -> Path:
    """__consumer_offsets and __transaction_state, without the topics other tests wrote."""
    for found in data_dir.iterdir():
        if found.name.startswith(("__consumer_offsets-", "__transaction_state-")):
            shutil.copytree(found, into / found.name,
                            ignore=shutil.ignore_patterns("*.index", "*.timeindex", "*.lock"))
    return into


def _states(out: Path, tail: str) -> dict[str, dict[str, Any]]:
    rows = [r for r in _table(out, "transactions") if r["transactional_id"].endswith(tail)]
    return {r["transactional_id"].removesuffix(f"-{tail}"): r for r in rows}


def _check_transactions(out: Path, tail: str, topic: str) -> None:
    states = _states(out, tail)
    assert {name: row["state"] for name, row in states.items()} == {
        "done": "CompleteCommit", "dropped": "CompleteAbort", "open": "Ongoing"}
    offsets_partition = "__consumer_offsets-0"
    for row in states.values():
        assert row["partitions"] == sorted([f"{topic}-0", offsets_partition])
        assert row["timeout_ms"] == 600_000 and row["duration_ms"] >= 0
        assert abs(row["start_ts"].timestamp() - time.time()) < 600


@pytest.mark.interop
@pytest.mark.spark
def test_a_log_written_by_kgroups(spark: Any, make_inprocess_broker: Any,
                                  tmp_path: Path) -> None:
    """kgroups' broker writes __transaction_state; its offsets topic here is written by
    kgroups' encoders (transactional commits and markers, tests/pipeline/logdata.py)."""
    broker: InProcessBroker = make_inprocess_broker("offsets.topic.num.partitions=1")
    broker.call(broker.broker.coordinator.wait_loaded)
    tail = uuid.uuid4().hex[:6]
    with connect(broker.port) as client:
        create_topic(client, "made")
    bootstrap = f"127.0.0.1:{broker.port}"
    states = []
    for name, end in (("done", "commit"), ("dropped", "abort"), ("open", None)):
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-{tail}",
                             "transaction.timeout.ms": 600_000})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("made", name.encode(), partition=0)
        producer.flush(30)  # an abort purges what is not sent yet: this one must start
        if end == "commit":
            producer.commit_transaction(30)
        elif end == "abort":
            producer.abort_transaction(30)
        states.append(producer)
    deadline = time.monotonic() + 20
    while broker.broker.transactions.coordinator.prepared() and time.monotonic() < deadline:
        time.sleep(0.05)
    logs = _copy_logs(broker.broker.config.data_dir, tmp_path / "logs")
    for found in logs.glob("__consumer_offsets-*"):
        shutil.rmtree(found)
    offsets = OffsetsLogBuilder()
    offsets.commit("mover", {("made", 0): 1}, T, transactional=True, producer_id=5,
                   producer_epoch=0)
    offsets.transaction_marker("mover", 5, commit=True, ts=T + 1)
    offsets.commit("mover", {("made", 0): 2}, T + 2, transactional=True, producer_id=6,
                   producer_epoch=0)
    offsets.write(logs)
    out = tmp_path / "out"
    result = run_analysis(spark, [str(logs)], str(out))
    assert {"transactional_commits", "transactions"} <= set(result.tables)
    assert _outcomes(_table(out, "transactional_commits"), "mover") == {
        "committed": (1, 1), "pending": (1, 1)}
    named = _states(out, tail)
    assert {name: row["state"] for name, row in named.items()} == {
        "done": "CompleteCommit", "dropped": "CompleteAbort", "open": "Ongoing"}
    assert all(row["partitions"] == ["made-0"] for row in named.values())
    report = (out / "report.html").read_text()
    assert "Transactional offset commits per group" in report and f"open-{tail}" in report
    del states


@pytest.fixture
def kafka_logs(kafka_broker: Any, tmp_path: Path) -> Iterator[tuple[Path, str, str, str]]:
    tail = uuid.uuid4().hex[:6]
    topic, group = f"pipe-tx-{tail}", f"pipe-tx-group-{tail}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    clients = _transactions(kafka_broker.bootstrap, topic, group, tail)
    # Kafka writes the Complete records after answering EndTxn: wait for them on disk.
    time.sleep(1.0)
    yield _copy_logs(kafka_broker.data_dir, tmp_path / "logs"), topic, group, tail
    clients[0].close()


@pytest.mark.kafka
@pytest.mark.spark
def test_a_log_written_by_kafka(spark: Any, kafka_logs: tuple[Path, str, str, str],
                                tmp_path: Path) -> None:
    logs, topic, group, tail = kafka_logs
    out = tmp_path / "out"
    run_analysis(spark, [str(logs)], str(out))
    assert _outcomes(_table(out, "transactional_commits"), group) == {
        "committed": (1, 1), "aborted": (1, 1), "pending": (1, 1)}
    _check_transactions(out, tail, topic)
    committed = {(r["topic"], r["partition"]): r["offset"]
                 for r in _table(out, "committed_offsets") if r["group"] == group}
    assert committed == {(topic, 0): 10}
