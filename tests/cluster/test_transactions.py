"""Transactions on a three-broker cluster: the transaction coordinator is the leader of the
id's `__transaction_state` partition, its markers reach partitions led by the other brokers
(WriteTxnMarkers between brokers), and a read_committed consumer sees exactly the committed
records, across a SIGKILL of the coordinator's broker too; a coordinator paused past its lease
writes nothing to `__transaction_state` once another broker took the partition over."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cluster.conftest import Cluster

from kgroups.coordinator.placement import partition_for
from kgroups.log.batch import read_header

pytestmark = pytest.mark.alone

TOPIC = "payments"
PARTITIONS = 6
TRANSACTION_KEY_TYPE = 1


def _leaders(cluster: Cluster, topic: str) -> dict[int, int]:
    """Partition -> its leader's node id, as the store has them."""
    return {row.partition: row.leader for row in _leadership_rows(cluster)
            if row.topic == topic and row.current}


def _create_topic(cluster: Cluster) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        leaders = _leaders(cluster, TOPIC)
        if len(leaders) == PARTITIONS and len(set(leaders.values())) == 3:
            return leaders
        time.sleep(0.2)
    raise AssertionError(f"{TOPIC}'s partitions not shared by the three brokers: {leaders}")


def _producer(cluster: Cluster, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    return producer


def _transaction(producer: Producer, tag: str, commit: bool) -> set[bytes]:
    """One record in every partition; the values written."""
    producer.begin_transaction()
    values = {f"{tag}-{p}".encode() for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        producer.produce(TOPIC, f"{tag}-{p}".encode(), partition=p)
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)
    return values


def _read_committed(cluster: Cluster, until: set[bytes], settle_s: float = 3.0) -> list[bytes]:
    """Every value a read_committed consumer reads from the start: until `until` is seen,
    then `settle_s` more (anything further would be a record it must not see)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    settled_at: float | None = None
    try:
        while time.monotonic() < (settled_at or deadline):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value())
            if settled_at is None and until <= set(seen):
                settled_at = time.monotonic() + settle_s
    finally:
        consumer.close()
    assert until <= set(seen), f"committed records not read: {sorted(until - set(seen))}"
    return seen


def test_commit_and_abort_across_brokers(cluster: Cluster) -> None:
    leaders = _create_topic(cluster)
    transactional_id = "payments-tx"
    coordinator = cluster.wait_coordinator(transactional_id, 1, key_type=TRANSACTION_KEY_TYPE)
    # Every broker names the same coordinator: the leader of the id's partition.
    state_leaders = _leaders(cluster, "__transaction_state")
    assert coordinator == state_leaders[partition_for(transactional_id, 50)]
    assert {cluster.wait_coordinator(transactional_id, node, key_type=TRANSACTION_KEY_TYPE)
            for node in (1, 2, 3)} == {coordinator}
    # Partitions led elsewhere than the coordinator get their markers over the wire.
    assert any(leader != coordinator for leader in leaders.values())
    producer = _producer(cluster, transactional_id)
    committed = _transaction(producer, "first", commit=True)
    _transaction(producer, "aborted", commit=False)
    committed |= _transaction(producer, "second", commit=True)
    seen = _read_committed(cluster, committed)
    assert sorted(seen) == sorted(committed)


def test_coordinator_killed_during_a_commit(cluster: Cluster) -> None:
    """SIGKILL of the coordinator's broker just after the producer sent its commit (whichever
    phase it reached: not yet prepared, prepared with markers missing, or complete): the commit
    ends on the new coordinator, or the producer aborts; the next transaction completes there;
    a read_committed consumer sees every transaction whole or not at all."""
    _create_topic(cluster)
    transactional_id = "killed-tx"
    coordinator = cluster.wait_coordinator(transactional_id, 1, key_type=TRANSACTION_KEY_TYPE)
    producer = _producer(cluster, transactional_id)
    committed = _transaction(producer, "before", commit=True)
    _transaction(producer, "aborted", commit=False)
    producer.begin_transaction()
    in_flight = {f"in-flight-{p}".encode() for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        producer.produce(TOPIC, f"in-flight-{p}".encode(), partition=p)
    producer.flush(30)
    with ThreadPoolExecutor(1) as committer:
        commit = committer.submit(producer.commit_transaction, 90)
        time.sleep(0.02)
        cluster.signal(coordinator, signal.SIGKILL)
        try:
            commit.result()
            committed |= in_flight
        except KafkaException as exc:  # the commit was lost with the coordinator
            assert exc.args[0].txn_requires_abort(), exc
            producer.abort_transaction(90)
    survivor = next(node for node in (1, 2, 3) if node != coordinator)
    new = cluster.wait_coordinator(transactional_id, survivor, other_than=coordinator,
                                   key_type=TRANSACTION_KEY_TYPE, timeout_s=60)
    assert new != coordinator
    committed |= _transaction(producer, "after", commit=True)
    seen = _read_committed(cluster, committed)
    assert sorted(seen) == sorted(committed)


def _state_batch_epochs(cluster: Cluster, partition: int) -> list[int]:
    """The leader epoch the store stamped on each batch of `__transaction_state-<partition>`,
    in offset order."""
    store = cluster.store()
    try:
        return [read_header(batch).partition_leader_epoch
                for batch in store.batches("__transaction_state", partition)]
    finally:
        store.close()


def test_a_paused_coordinator_writes_nothing_after_the_takeover(cluster: Cluster) -> None:
    """SIGSTOP of the coordinator's broker past its lease, then SIGCONT while its producer
    ends the transaction: every `__transaction_state` record from the takeover on is written
    at the new lease's epoch or a later one, and the records read are exactly the committed."""
    _create_topic(cluster)
    transactional_id = "paused-tx"
    partition = partition_for(transactional_id, 50)
    coordinator = cluster.wait_coordinator(transactional_id, 1, key_type=TRANSACTION_KEY_TYPE)
    producer = _producer(cluster, transactional_id)
    committed = _transaction(producer, "before", commit=True)
    producer.begin_transaction()
    open_values = {f"open-{p}".encode() for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        producer.produce(TOPIC, f"open-{p}".encode(), partition=p)
    producer.flush(30)
    cluster.signal(coordinator, signal.SIGSTOP)
    survivor = next(node for node in (1, 2, 3) if node != coordinator)
    cluster.wait_coordinator(transactional_id, survivor, other_than=coordinator,
                             key_type=TRANSACTION_KEY_TYPE, timeout_s=60)
    new_epoch = next(row.epoch for row in _leadership_rows(cluster)
                     if row.topic == "__transaction_state" and row.partition == partition)
    written_before = len(_state_batch_epochs(cluster, partition))
    cluster.signal(coordinator, signal.SIGCONT)
    try:
        producer.commit_transaction(60)
        committed |= open_values
    except Exception:  # fenced or lost with the pause: the producer aborts instead
        producer.abort_transaction(60)
    committed |= _transaction(producer, "after", commit=True)
    seen = _read_committed(cluster, committed)
    assert sorted(seen) == sorted(committed)
    # The store stamps each batch with its writer's lease epoch: none from the paused broker's
    # old lease follows the takeover (the partition may move on again, at a newer epoch, when
    # the placement hands it back to the broker that came back).
    after = _state_batch_epochs(cluster, partition)[written_before:]
    assert after, "the new coordinator wrote nothing"
    assert after[0] == new_epoch and after == sorted(after), f"epochs after the takeover: {after}"


def _leadership_rows(cluster: Cluster) -> list:  # type: ignore[type-arg]
    store = cluster.store()
    try:
        return list(store.leadership())
    finally:
        store.close()
