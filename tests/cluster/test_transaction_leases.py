"""The transaction coordinator's side of a `__transaction_state` lease, without PostgreSQL: its
ids answer COORDINATOR_LOAD_IN_PROGRESS while the partition is read back, are served once it is
replayed, and NOT_COORDINATOR once it is lost; a transaction the replay finds prepared is
completed with the lease's epoch as the coordinator epoch; a fenced write answers
NOT_COORDINATOR, unloads the partition and gives its lease up. And the marker router: markers
of partitions led here are written here, those led by a broker it cannot reach come back
NETWORK_EXCEPTION (retried by the runtime)."""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest

from kgroups.broker.appends import AppendNotifier
from kgroups.broker.background import TaskCounts
from kgroups.broker.cluster.leadership import BrokerEndpoint, Leader, LeadershipView
from kgroups.broker.cluster.marker_sender import MarkerRouter
from kgroups.broker.cluster.offsets_reader import OffsetsReader
from kgroups.broker.config import BrokerConfig
from kgroups.broker.topics import TRANSACTION_STATE_TOPIC, TopicCatalog
from kgroups.broker.transaction_runtime import TransactionRuntime
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, iter_batches
from kgroups.log.config import LogConfig
from kgroups.log.durability import GroupCommit
from kgroups.log.manager import LogManager
from kgroups.records.transaction_log import decode_transaction_log_value
from kgroups.storage.postgresql import FencedError
from kgroups.transactions.coordinator import TransactionCoordinator, TxnConfig
from kgroups.transactions.messages import Decision, MarkerWrite
from kgroups.transactions.state import TxnState

TX = "tx"
LEASE_EPOCH = 7


class KeptLog:
    """A leased `__transaction_state-0` keeping its appends, or refusing them with `error`."""

    flush_due = False

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.kept: list[bytes] = []

    def append_batch(self, batch: bytes) -> tuple[int, int]:
        if self.error is not None:
            raise self.error
        self.kept.append(batch)
        return len(self.kept) - 1, len(self.kept) - 1

    def states(self) -> list[TxnState]:
        return [TxnState(value.transaction_status) for batch in self.kept
                for record in next(iter_batches(batch)).records
                for value in [decode_transaction_log_value(record.value)] if value is not None]


class Markers:
    """The runtime's marker path: records what it is asked to write, and writes it."""

    def __init__(self) -> None:
        self.sent: list[MarkerWrite] = []

    async def __call__(self, markers: Sequence[MarkerWrite]) -> list[ErrorCode]:
        self.sent.extend(markers)
        return [ErrorCode.NONE] * len(markers)


def _runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: KeptLog,
             stored: bytes, read_gate: asyncio.Event, markers: Markers) -> TransactionRuntime:
    config = BrokerConfig.build(data_dir=tmp_path, overrides=[
        "kgroups.storage=postgresql://kgroups@127.0.0.1:1/unused",
        "transaction.state.log.num.partitions=1"])
    logs = LogManager(tmp_path, LogConfig.from_properties(config.properties))
    topics = TopicCatalog(logs)

    async def read(_self: OffsetsReader, topic: str, partition: int) -> bytes:
        assert (topic, partition) == (TRANSACTION_STATE_TOPIC, 0)
        await read_gate.wait()
        return stored

    monkeypatch.setattr(OffsetsReader, "read", read)
    monkeypatch.setattr(topics, "log", lambda topic, partition: log)
    monkeypatch.setattr(topics, "leader_epoch", lambda topic, partition: LEASE_EPOCH)
    return TransactionRuntime(config, topics, logs, GroupCommit(), AppendNotifier(),
                              TaskCounts(), itertools.count(1000).__next__, markers)


def _prepared_commit_records() -> bytes:
    """`__transaction_state` batches of a transaction left in PrepareCommit on two partitions
    (its former coordinator died between the phases)."""
    former = TransactionCoordinator(
        TxnConfig(max_timeout_ms=900000, id_expiration_ms=604800000, num_partitions=1,
                  offsets_partitions=50), itertools.count(500).__next__)
    batches = []

    def durable(decision: Decision) -> Decision:
        assert decision.error is ErrorCode.NONE and decision.write is not None
        former.apply(decision.write)
        batches.append(build_batch([(decision.write.key(), decision.write.value(1), 0)]))
        return decision

    began = durable(former.init_producer_id(TX, 60000, 1))
    durable(former.add_partitions(TX, began.producer_id, began.producer_epoch,
                                  [("t", 0), ("t", 1)], 2))
    durable(former.end_transaction(TX, began.producer_id, began.producer_epoch, True, 3))
    return b"".join(batches)


def test_a_gained_partition_loads_then_serves_and_completes_what_was_prepared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> tuple[list[ErrorCode | None], list[MarkerWrite], list[TxnState]]:
        log, gate, markers = KeptLog(), asyncio.Event(), Markers()
        runtime = _runtime(tmp_path, monkeypatch, log, _prepared_commit_records(), gate,
                           markers)
        answers = [runtime.refusal(TX)]
        runtime.partition_gained(0)
        answers.append(runtime.refusal(TX))
        gate.set()
        while runtime.refusal(TX) is not None:
            await asyncio.sleep(0.01)
        answers.append(runtime.refusal(TX))
        while not log.kept:  # the Complete record follows the markers
            await asyncio.sleep(0.01)
        runtime.partition_lost(0)
        answers.append(runtime.refusal(TX))
        await runtime.stop()
        return answers, markers.sent, log.states()

    answers, sent, states = asyncio.run(run())
    assert answers == [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None,
                       ErrorCode.NOT_COORDINATOR]
    assert [(m.topic, m.partition, m.commits) for m in sent] == [("t", 0, True), ("t", 1, True)]
    assert {m.coordinator_epoch for m in sent} == {LEASE_EPOCH}
    assert states == [TxnState.COMPLETE_COMMIT]


def test_a_fenced_write_answers_not_coordinator_and_gives_the_partition_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> tuple[ErrorCode, ErrorCode | None, list[int]]:
        gate = asyncio.Event()
        gate.set()
        runtime = _runtime(tmp_path, monkeypatch,
                           KeptLog(FencedError("__transaction_state-0: not the leader")),
                           b"", gate, Markers())
        given_up: list[int] = []
        runtime.give_up = given_up.append
        runtime.partition_gained(0)
        while runtime.refusal(TX) is not None:
            await asyncio.sleep(0.01)
        decision = await runtime.run(runtime.coordinator.init_producer_id(TX, 60000, 1))
        await asyncio.sleep(0.05)  # the partition is unloaded on the next loop turn
        refusal = runtime.refusal(TX)
        await runtime.stop()
        return decision.error, refusal, given_up

    error, refusal, given_up = asyncio.run(run())
    assert error is ErrorCode.NOT_COORDINATOR
    assert refusal is ErrorCode.NOT_COORDINATOR and given_up == [0]


def test_markers_go_to_their_partitions_leader(tmp_path: Path) -> None:
    """Partition 0 is led here, partition 1 by node 2, whose registered port refuses
    connections: the first is written locally, the second comes back NETWORK_EXCEPTION."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    view = LeadershipView(local_node=1)
    view.update({("t", 0): Leader(1, 3), ("t", 1): Leader(2, 3)},
                [BrokerEndpoint(1, "127.0.0.1", 1), BrokerEndpoint(2, "127.0.0.1", port)])
    local = Markers()
    markers = [MarkerWrite("t", p, 9, 0, True, LEASE_EPOCH) for p in (1, 0)]
    errors = asyncio.run(MarkerRouter(view, local).send(markers))
    assert errors == [ErrorCode.NETWORK_EXCEPTION, ErrorCode.NONE]
    assert local.sent == [markers[1]]
