"""`kgroups transactions` (list, describe, describe-producers, find-hanging, abort) against an
in-process broker holding a transaction left open, a committed one and a hanging one (a
transactional batch its coordinator never heard of)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.broker.broker_wire_helpers import connect, create_topic, produce_request
from tests.broker.servers import InProcessBroker

from kgroups.cli import main
from kgroups.log.batch import build_batch

TOPIC = "orders"
OPEN_ID = "orders-open"
DONE_ID = "orders-done"
HANGING_PRODUCER = 88_000_001


@dataclass
class Scene:
    broker: InProcessBroker
    hanging_offset: int


@pytest.fixture
def scene(make_inprocess_broker: Any) -> Iterator[Scene]:
    broker: InProcessBroker = make_inprocess_broker()
    broker.call(broker.broker.coordinator.wait_loaded)
    with connect(broker.port) as client:
        create_topic(client, TOPIC, partitions=2)
    bootstrap = f"127.0.0.1:{broker.port}"
    opened = Producer({"bootstrap.servers": bootstrap, "transactional.id": OPEN_ID,
                       "transaction.timeout.ms": 600_000})
    opened.init_transactions(30)
    opened.begin_transaction()
    opened.produce(TOPIC, b"open", partition=0)
    opened.flush(30)
    done = Producer({"bootstrap.servers": bootstrap, "transactional.id": DONE_ID})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce(TOPIC, b"done", partition=1)
    done.commit_transaction(30)
    with connect(broker.port) as client:
        response = client.call(produce_request(TOPIC, 1, build_batch(
            [(b"k", b"hanging", int(time.time() * 1000) - 30 * 60_000)],
            producer_id=HANGING_PRODUCER, producer_epoch=2, base_sequence=0,
            transactional=True)))
    answer = response.responses[0].partition_responses[0]
    assert int(answer.error_code) == 0
    yield Scene(broker, int(answer.base_offset))
    del opened, done


def _run(scene: Scene, capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(["transactions", "--bootstrap-server", f"127.0.0.1:{scene.broker.port}", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


def test_list_and_describe(scene: Scene, capsys: Any) -> None:
    code, out, _ = _run(scene, capsys, "list")
    assert code == 0
    rows = _rows(out)
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [(r[0], r[1], r[3]) for r in rows[1:]] == [(DONE_ID, "0", "CompleteCommit"),
                                                     (OPEN_ID, "0", "Ongoing")]
    code, out, _ = _run(scene, capsys, "list", "--state", "Ongoing", "--output", "json")
    assert [t["transactional_id"] for t in json.loads(out)] == [OPEN_ID]

    code, out, _ = _run(scene, capsys, "describe", OPEN_ID)
    assert code == 0
    header, row = _rows(out)
    described = dict(zip(header, row, strict=True))
    assert described["TransactionState"] == "Ongoing"
    assert described["TopicPartitions"] == f"{TOPIC}-0"
    assert described["TransactionTimeoutMs"] == "600000"
    assert 0 <= int(described["TransactionDurationMs"]) < 120_000
    code, out, _ = _run(scene, capsys, "describe", "--transactional-id", DONE_ID,
                        "--output", "json")
    (done,) = json.loads(out)
    assert (done["state"], done["partitions"]) == ("CompleteCommit", [])


def test_an_unknown_id_is_one_line_and_exit_1(scene: Scene, capsys: Any) -> None:
    code, out, err = _run(scene, capsys, "describe", "nobody")
    assert (code, out) == (1, "")
    assert err == "Error: Transactional id 'nobody' does not exist.\n"
    code, _, err = _run(scene, capsys, "describe-producers", "--topic", "missing",
                        "--partition", "0")
    assert code == 1 and err == "Error: Topic 'missing' does not exist.\n"


def test_describe_producers(scene: Scene, capsys: Any) -> None:
    code, out, _ = _run(scene, capsys, "describe-producers", "--topic", TOPIC,
                        "--partition", "0")
    assert code == 0
    header, row = _rows(out)
    assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                      "LastTimestamp", "CurrentTransactionStartOffset"]
    assert row[1:4] == ["0", "-1", "0"] and row[5] == "0"
    code, out, _ = _run(scene, capsys, "describe-producers", "--topic", TOPIC,
                        "--partition", "1", "--output", "json")
    producers = {p["producer_id"]: p for p in json.loads(out)}
    assert producers[HANGING_PRODUCER]["txn_start_offset"] == scene.hanging_offset
    committed = [p for pid, p in producers.items() if pid != HANGING_PRODUCER]
    assert [(p["txn_start_offset"], p["coordinator_epoch"]) for p in committed] == [(None, 0)]


def test_find_hanging_then_abort(scene: Scene, capsys: Any) -> None:
    """Only the batch its coordinator does not know is hanging (the open transaction on
    partition 0 is its coordinator's, however old the limit); the abort clears it and the
    partition's read_committed readers can pass it."""
    for scope in (["--topic", TOPIC], ["--broker-id", "0"],
                  ["--topic", TOPIC, "--partition", "1", "--max-transaction-timeout", "0"]):
        code, out, _ = _run(scene, capsys, "find-hanging", *scope)
        assert code == 0
        rows = _rows(out)
        assert rows[0][:6] == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                               "CoordinatorEpoch", "StartOffset"]
        assert [r[:6] for r in rows[1:]] == [[TOPIC, "1", str(HANGING_PRODUCER), "2", "-1",
                                              str(scene.hanging_offset)]], scope
        assert rows[1][7] in ("29", "30", "31")
    code, _, err = _run(scene, capsys, "abort", "--topic", TOPIC, "--partition", "1",
                        "--start-offset", str(scene.hanging_offset + 5))
    assert code == 1
    assert err == (f"Error: Could not find any open transactions starting at offset "
                   f"{scene.hanging_offset + 5} on partition {TOPIC}-1\n")
    code, out, _ = _run(scene, capsys, "abort", "--topic", TOPIC, "--partition", "1",
                        "--start-offset", str(scene.hanging_offset))
    assert code == 0
    assert out == (f"Aborted the transaction of producer {HANGING_PRODUCER} (epoch 2) on "
                   f"{TOPIC}-1\n")
    code, out, _ = _run(scene, capsys, "find-hanging", "--topic", TOPIC, "--output", "json")
    assert (code, json.loads(out)) == (0, [])
    log = scene.broker.broker.logs.get(TOPIC, 1)
    assert log is not None and log.transactions.last_stable_offset(log.log_end_offset) \
        == log.log_end_offset


def test_abort_by_producer_then_usage_errors(scene: Scene, capsys: Any) -> None:
    code, _, _ = _run(scene, capsys, "abort", "--topic", TOPIC, "--partition", "1",
                      "--producer-id", str(HANGING_PRODUCER), "--producer-epoch", "2",
                      "--coordinator-epoch", "0")
    assert code == 0
    code, out, _ = _run(scene, capsys, "find-hanging", "--topic", TOPIC)
    assert len(_rows(out)) == 1
    for args in (["find-hanging"], ["find-hanging", "--partition", "1", "--broker-id", "0"],
                 ["abort", "--topic", TOPIC, "--partition", "1"],
                 ["abort", "--topic", TOPIC, "--partition", "1", "--producer-id", "5"]):
        code, out, err = _run(scene, capsys, *args)
        assert (code, out) == (2, ""), args
        assert err.startswith("kgroups transactions: error: ") and err.count("\n") == 1
