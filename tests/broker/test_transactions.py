"""Transactions end to end on a kgroups broker: confluent-kafka's transactional Producer commits
and aborts; the COMMIT and ABORT markers land in the partitions' logs, __transaction_state
holds each state the transaction went through, and a restart replays it (a transaction left
prepared is completed, its markers written, after the restart)."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kgroups
from kgroups.coordinator.placement import partition_for
from kgroups.log.batch import build_batch, iter_batches
from kgroups.log.transactions import marker_commits
from kgroups.records.transaction_log import (
    TransactionLogKey,
    TransactionLogValue,
    decode_transaction_log_value,
    encode_transaction_log_key,
    encode_transaction_log_value,
)
from kgroups.transactions.state import TxnState

TOPIC = "orders"
TX = "orders-tx"


def _batches(data_dir: Path, topic: str, partition: int) -> list:  # type: ignore[type-arg]
    data = b"".join(p.read_bytes()
                    for p in sorted((data_dir / f"{topic}-{partition}").glob("*.log")))
    return list(iter_batches(data))


def _kinds(data_dir: Path, partition: int) -> list[str]:
    """The partition's batches in order: data, COMMIT or ABORT."""
    kinds = []
    for batch in _batches(data_dir, TOPIC, partition):
        if batch.is_control:
            kinds.append("COMMIT" if marker_commits(batch.records[0].key) else "ABORT")
        else:
            kinds.append("data")
    return kinds


def _states(data_dir: Path, transactional_id: str) -> list[TransactionLogValue]:
    partition = partition_for(transactional_id, 50)
    key = encode_transaction_log_key(TransactionLogKey(transactional_id))
    return [value for batch in _batches(data_dir, "__transaction_state", partition)
            for record in batch.records if record.key == key
            for value in [decode_transaction_log_value(record.value)] if value is not None]


def _wait_for(data_dir: Path, state: TxnState) -> None:
    """The markers and the Complete record follow the answer to EndTxn: wait for the record."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        states = _states(data_dir, TX)
        if states and TxnState(states[-1].transaction_status) is state:
            return
        time.sleep(0.05)
    raise AssertionError(f"{TX} never reached {state.name}: {_states(data_dir, TX)}")


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)


def test_a_transactional_producer_commits_and_aborts(tmp_path: Path) -> None:
    with kgroups.serve_in_background(data_dir=tmp_path) as broker:
        _create_topic(broker.bootstrap)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TX})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(TOPIC, b"kept-0", partition=0)
        producer.produce(TOPIC, b"kept-1", partition=1)
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce(TOPIC, b"dropped", partition=0)
        producer.flush(30)
        producer.abort_transaction(30)
        _wait_for(tmp_path, TxnState.COMPLETE_ABORT)
    assert _kinds(tmp_path, 0) == ["data", "COMMIT", "data", "ABORT"]
    assert _kinds(tmp_path, 1) == ["data", "COMMIT"]
    states = _states(tmp_path, TX)
    assert [TxnState(v.transaction_status) for v in states] == [
        TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT,
        TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]
    assert states[2].partitions == ((TOPIC, (0, 1)),)
    marker = _batches(tmp_path, TOPIC, 0)[1]
    assert (marker.producer_id, marker.producer_epoch) == (states[0].producer_id, 0)

    # A restart replays __transaction_state: the same producer id, its epoch bumped.
    with kgroups.serve_in_background(data_dir=tmp_path) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TX})
        producer.init_transactions(30)
    after = _states(tmp_path, TX)[-1]
    assert (after.producer_id, after.producer_epoch) == (states[0].producer_id, 1)
    assert TxnState(after.transaction_status) is TxnState.EMPTY


def test_a_transaction_left_prepared_is_completed_after_a_restart(tmp_path: Path) -> None:
    """As after a kill -9 between the PrepareCommit record and the markers: the record alone is
    in __transaction_state, and the next start writes the markers and CompleteCommit."""
    with kgroups.serve_in_background(data_dir=tmp_path) as broker:
        _create_topic(broker.bootstrap)
        Producer({"bootstrap.servers": broker.bootstrap,
                  "transactional.id": TX}).init_transactions(30)
    [started] = _states(tmp_path, TX)
    partition = partition_for(TX, 50)
    segment = tmp_path / f"__transaction_state-{partition}" / "00000000000000000000.log"
    now = int(time.time() * 1000)
    prepared = TransactionLogValue(started.producer_id, 0, 60_000, int(TxnState.PREPARE_COMMIT),
                                   ((TOPIC, (0, 1)),), now, now - 10)
    segment.write_bytes(segment.read_bytes() + build_batch([(
        encode_transaction_log_key(TransactionLogKey(TX)),
        encode_transaction_log_value(prepared), now)], base_offset=1))
    with kgroups.serve_in_background(data_dir=tmp_path):
        _wait_for(tmp_path, TxnState.COMPLETE_COMMIT)
    assert [TxnState(v.transaction_status) for v in _states(tmp_path, TX)] == [
        TxnState.EMPTY, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    for index in (0, 1):
        [marker] = _batches(tmp_path, TOPIC, index)
        assert marker.is_control and marker_commits(marker.records[0].key) is True
        assert (marker.producer_id, marker.producer_epoch) == (started.producer_id, 0)
