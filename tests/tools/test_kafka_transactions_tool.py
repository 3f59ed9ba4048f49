"""Kafka's kafka-transactions (TransactionsCommand) against kgroups and against Kafka 4.3.1: the
same transactions on both (confluent-kafka's transactional producer), each command's table
compared column for column; the values that cannot match (producer ids, times) are checked
for their kind. A hanging transaction (a transactional batch its coordinator never heard of)
is made on kgroups only: Kafka 4.3.1 verifies a transactional write with its coordinator
(KIP-890) and refuses it, so it cannot be made there from a client."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_tools import TRANSACTIONS, Side, on_both, run_tool
from tests.broker.broker_wire_helpers import produce_request

from kgroups.cli import main
from kgroups.log.batch import build_batch
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka

LIST_HEADER = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADER = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                   "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                   "TransactionDurationMs", "TopicPartitions"]
PRODUCERS_HEADER = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                    "LastTimestamp", "CurrentTransactionStartOffset"]
HANGING_HEADER = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                  "StartOffset", "LastTimestamp", "Duration(min)"]
OPEN_TIMEOUT_MS = 600_000


class Names:
    def __init__(self) -> None:
        tail = uuid.uuid4().hex[:6]
        self.topic = f"txtool-{tail}"
        self.open_id = f"txtool-open-{tail}"
        self.done_id = f"txtool-done-{tail}"


@pytest.fixture(scope="module")
def names() -> Names:
    return Names()


@pytest.fixture(scope="module")
def sides(kafka_broker: object, kgroups_broker: object, names: Names
          ) -> Iterator[list[Side]]:
    """On each broker: a topic of two partitions, a transaction left open on partition 0 and a
    committed one on partition 1 (the producers live as long as the module)."""
    both = [Side("kafka", kafka_broker), Side("kgroups", kgroups_broker)]
    producers = []
    for side in both:
        admin = AdminClient({"bootstrap.servers": side.bootstrap})
        admin.create_topics([NewTopic(names.topic, 2)])[names.topic].result(30)
        opened = Producer({"bootstrap.servers": side.bootstrap,
                           "transactional.id": names.open_id,
                           "transaction.timeout.ms": OPEN_TIMEOUT_MS})
        opened.init_transactions(30)
        opened.begin_transaction()
        opened.produce(names.topic, b"open", partition=0)
        opened.flush(30)
        done = Producer({"bootstrap.servers": side.bootstrap, "transactional.id": names.done_id})
        done.init_transactions(30)
        done.begin_transaction()
        done.produce(names.topic, b"done", partition=1)
        done.commit_transaction(30)
        producers += [opened, done]
    yield both
    producers.clear()


def _table(result: subprocess.CompletedProcess[str]) -> list[list[str]]:
    assert result.returncode == 0, result.stderr[-3000:]
    return [line.split() for line in result.stdout.splitlines() if line.strip()]


def _tables(sides: list[Side], args: list[str]) -> dict[str, list[list[str]]]:
    return {name: _table(result) for name, result in on_both(sides, TRANSACTIONS, args).items()}


def test_list_shows_both_transactions_with_their_states(sides: list[Side], names: Names) -> None:
    for name, table in _tables(sides, ["list"]).items():
        assert table[0] == LIST_HEADER, name
        ours = {row[0]: row for row in table[1:] if row[0] in (names.open_id, names.done_id)}
        assert {tid: row[3] for tid, row in ours.items()} == {
            names.open_id: "Ongoing", names.done_id: "CompleteCommit"}, name
        assert all(row[1].isdigit() and row[2].isdigit() for row in ours.values())


def test_describe_an_open_transaction(sides: list[Side], names: Names) -> None:
    tables = _tables(sides, ["describe", "--transactional-id", names.open_id])
    for name, table in tables.items():
        assert table[0] == DESCRIBE_HEADER, name
        _, tid, producer_id, epoch, state, timeout, start, duration, partitions = table[1]
        assert (tid, state, timeout, partitions) == (
            names.open_id, "Ongoing", str(OPEN_TIMEOUT_MS), f"{names.topic}-0"), name
        assert producer_id.isdigit() and epoch == "0" and int(duration) >= 0
        assert abs(int(start) - time.time() * 1000) < 120_000
    assert len(tables["kafka"]) == len(tables["kgroups"]) == 2


def test_kgroups_transactions_reads_both_brokers_alike(sides: list[Side], names: Names,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """`kgroups transactions` speaks to any Kafka-compatible broker: the committed
    transaction's description and its partition's producers read the same from both (but the
    producer ids and times)."""
    seen: dict[str, tuple[object, ...]] = {}
    for side in sides:
        common = ["transactions", "--bootstrap-server", side.bootstrap]
        assert main([*common, "describe", names.done_id, "--output", "json"]) == 0
        (described,) = json.loads(capsys.readouterr().out)
        assert main([*common, "describe-producers", "--topic", names.topic, "--partition", "1",
                     "--output", "json"]) == 0
        (producer,) = json.loads(capsys.readouterr().out)
        assert main([*common, "list", "--state", "Ongoing", "--output", "json"]) == 0
        ongoing = [t["transactional_id"] for t in json.loads(capsys.readouterr().out)]
        assert names.open_id in ongoing and names.done_id not in ongoing
        seen[side.name] = (
            described["state"], described["partitions"], described["producer_epoch"],
            producer["producer_epoch"], producer["last_sequence"],
            producer["coordinator_epoch"], producer["txn_start_offset"])
    assert seen["kafka"] == seen["kgroups"] == ("CompleteCommit", [], 0, 0, 0, 0, None)


def test_describe_an_unknown_id_fails_alike(sides: list[Side], names: Names) -> None:
    results = on_both(sides, TRANSACTIONS, ["describe", "--transactional-id", "txtool-none"])
    for result in results.values():
        assert result.returncode == 1
        assert "the ID could not be found" in result.stdout + result.stderr


def test_describe_producers_then_abort_the_open_transaction(sides: list[Side],
                                                            names: Names) -> None:
    """The open transaction's producer at offset 0; the abort (WriteTxnMarkers sent by the tool
    to the partition's leader) closes it on both: no open transaction is left."""
    where = ["--topic", names.topic, "--partition", "0"]
    before = _tables(sides, ["describe-producers", *where])
    for name, table in before.items():
        assert table[0] == PRODUCERS_HEADER, name
        assert len(table) == 2, name
        producer_id, epoch, coordinator_epoch, sequence, stamp, start = table[1]
        assert (epoch, sequence, start) == ("0", "0", "0"), name
        assert coordinator_epoch == "-1" and producer_id.isdigit() and stamp.isdigit(), name
    hanging = _tables(sides, ["find-hanging", "--topic", names.topic,
                              "--max-transaction-timeout", "0"])
    # The coordinator has the partition in the ongoing transaction: not hanging.
    assert hanging["kafka"] == hanging["kgroups"] == [HANGING_HEADER]
    aborted = on_both(sides, TRANSACTIONS, ["abort", *where, "--start-offset", "0"])
    assert {name: r.returncode for name, r in aborted.items()} == {"kafka": 0, "kgroups": 0}
    after = _tables(sides, ["describe-producers", *where])
    assert [row[5] for row in after["kafka"][1:]] == [row[5] for row in after["kgroups"][1:]] \
        == ["None"]
    again = on_both(sides, TRANSACTIONS, ["abort", *where, "--start-offset", "0"])
    for result in again.values():
        assert result.returncode == 1
        assert f"Could not find any open transactions starting at offset 0 on partition " \
               f"{names.topic}-0" in result.stdout + result.stderr


def test_find_and_abort_a_hanging_transaction_on_kgroups(sides: list[Side],
                                                         names: Names) -> None:
    """A transactional batch 30 minutes old whose coordinator knows nothing of it: hanging (the
    default --max-transaction-timeout is 15 minutes); the abort by its start offset clears it."""
    kgroups = sides[1]
    host, port = kgroups.bootstrap.rsplit(":", 1)
    stamp = int(time.time() * 1000) - 30 * 60_000
    with KafkaWireClient(host, int(port), client_id="txtool-setup") as client:
        response = client.call(produce_request(names.topic, 1, build_batch(
            [(b"k", b"hanging", stamp)], producer_id=77_000_001, producer_epoch=3,
            base_sequence=0, transactional=True)))
    answer = response.responses[0].partition_responses[0]
    assert int(answer.error_code) == 0
    offset = str(int(answer.base_offset))
    for scope in (["--topic", names.topic], ["--topic", names.topic, "--partition", "1"],
                  ["--broker-id", "0"]):
        table = _table(run_tool(kgroups, TRANSACTIONS, ["find-hanging", *scope]))
        assert table[0] == HANGING_HEADER
        assert [row[:6] for row in table[1:] if row[0] == names.topic] == [
            [names.topic, "1", "77000001", "3", "-1", offset]], scope
        assert table[1][7] in ("29", "30", "31")
    aborted = run_tool(kgroups, TRANSACTIONS, ["abort", "--topic", names.topic, "--partition",
                                               "1", "--start-offset", offset])
    assert aborted.returncode == 0, aborted.stderr
    table = _table(run_tool(kgroups, TRANSACTIONS, ["find-hanging", "--topic", names.topic]))
    assert table == [HANGING_HEADER]
