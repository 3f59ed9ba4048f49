"""The PostgreSQL log keeps a partition's transactions as the file log does: the aborted ones
in the `aborted_transactions` table (schema version 3), the open ones and the last stable
offset rebuilt by the next leader from the log's tail."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.transactions import control_batch
from kgroups.log.txn_index import AbortedTransaction
from kgroups.storage.postgres_log import PostgresPartitionLog
from kgroups.storage.postgresql import Lease, PostgresStore

pytestmark = pytest.mark.postgresql

A, B = 31, 32
ABORTED_A = AbortedTransaction(A, 1, 4, 3)


def _data(producer_id: int, *values: bytes, sequence: int = 0) -> bytes:
    return build_batch([(b"k", value, 1_000) for value in values], producer_id=producer_id,
                       producer_epoch=0, base_sequence=sequence, transactional=True)


def _history(log: PostgresPartitionLog) -> None:
    """0 plain; 1-2 A; 3 B; 4 A's ABORT; 5 plain; 6 B's COMMIT; 7 A again (open)."""
    log.append_batch(build_batch([(b"k", b"p0", 1_000)]))
    log.append_batch(_data(A, b"a1", b"a2"))
    log.append_batch(_data(B, b"b3"))
    log.append_batch(control_batch(A, 0, False, 5, 2_000))
    log.append_batch(build_batch([(b"k", b"p5", 1_000)]))
    log.append_batch(control_batch(B, 0, True, 5, 2_000))
    log.append_batch(_data(A, b"a7", sequence=2))


@pytest.fixture
def store(postgres_url: str) -> PostgresStore:
    opened = PostgresStore.open(postgres_url)
    opened.create_topic("orders", uuid.uuid4(), 1)
    return opened


def _lease(store: PostgresStore, node: int) -> Lease:
    lease = store.take_lease("orders", 0, node=node, lease_ms=60_000)
    assert lease is not None
    return lease


def test_aborts_are_stored_and_the_next_leader_rebuilds_the_rest(store: PostgresStore) -> None:
    first = _lease(store, 1)
    log = PostgresPartitionLog(store, first, LogConfig())
    _history(log)
    assert log.transactions.aborted == [ABORTED_A]
    assert log.transactions.last_stable_offset(log.log_end_offset) == 7
    assert store.aborted_transactions("orders", 0) == [ABORTED_A]
    producers = dict(log.transactions.producers)
    assert store.release_lease(first)
    successor = PostgresPartitionLog(store, _lease(store, 2), LogConfig())
    assert successor.transactions.aborted == [ABORTED_A]
    assert successor.transactions.last_stable_offset(successor.log_end_offset) == 7
    assert successor.transactions.producers == producers
    assert store.aborted_transactions("orders", 0) == [ABORTED_A]  # not stored twice


def test_an_abort_lost_before_its_row_is_stored_again(store: PostgresStore,
                                                      postgres_url: str) -> None:
    log = PostgresPartitionLog(store, _lease(store, 1), LogConfig())
    _history(log)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("DELETE FROM aborted_transactions")
    reopened = PostgresPartitionLog(store, log.lease, LogConfig())
    assert reopened.transactions.aborted == [ABORTED_A]
    assert store.aborted_transactions("orders", 0) == [ABORTED_A]


def test_delete_records_drops_the_aborts_below_the_start(store: PostgresStore) -> None:
    log = PostgresPartitionLog(store, _lease(store, 1), LogConfig())
    _history(log)
    assert log.advance_log_start(5)
    assert store.aborted_transactions("orders", 0) == []
    assert log.transactions.aborted == []


def test_a_version_2_store_gets_the_aborted_transactions_table(postgres_url: str) -> None:
    PostgresStore.open(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("DROP TABLE aborted_transactions")
        connection.execute("UPDATE kgroups_schema SET version = 2")
    migrated = PostgresStore.open(postgres_url)
    migrated.create_topic("orders", uuid.uuid4(), 1)
    log = PostgresPartitionLog(migrated, _lease(migrated, 1), LogConfig())
    _history(log)
    assert migrated.aborted_transactions("orders", 0) == [ABORTED_A]
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        row = connection.execute("SELECT version FROM kgroups_schema").fetchone()
    assert row == (3,)
