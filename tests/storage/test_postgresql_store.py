"""The PostgreSQL store against a real server: offsets as Kafka assigns them, leases that fence
a former leader out in the same transaction as its append, and one-line errors."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from kgroups.log.batch import build_batch, check_batch, iter_batches
from kgroups.storage import postgresql
from kgroups.storage.postgresql import (
    FencedError,
    OffsetConflictError,
    PostgresStore,
    StorageUnavailableError,
)
from kgroups.storage.schema import SchemaVersionError

pytestmark = pytest.mark.postgresql

@pytest.fixture
def store(postgres_url: str) -> PostgresStore:
    opened = PostgresStore.open(postgres_url)
    opened.create_topic("orders", uuid.uuid4(), 2)
    return opened


def _batch(*values: bytes) -> bytes:
    return build_batch([(b"k", value, 1_700_000_000_000) for value in values])


def test_appends_get_consecutive_offsets_and_the_leader_epoch(store: PostgresStore) -> None:
    lease = store.take_lease("orders", 0, node=1, lease_ms=60_000)
    assert lease is not None and lease.epoch == 1
    assert store.append(lease, _batch(b"a", b"b")) == (0, 1)
    assert store.append(lease, _batch(b"c")) == (2, 2)
    batches = list(iter_batches(store.read("orders", 0, 1, 1 << 20)))
    assert [(b.base_offset, b.partition_leader_epoch) for b in batches] == [(0, 1), (2, 1)]
    assert [r.value for b in batches for r in b.records] == [b"a", b"b", b"c"]
    # At least one batch, however small max_bytes is; then only what fits.
    assert len(list(iter_batches(store.read("orders", 0, 0, 1)))) == 1
    state = store.partition_state("orders", 0)
    assert (state.leader, state.epoch, state.log_start_offset, state.next_offset) == (1, 1, 0, 3)


def test_a_former_leader_cannot_write_after_losing_its_lease(store: PostgresStore,
                                                            postgres_url: str) -> None:
    other = PostgresStore.open(postgres_url)  # another broker, its own connection
    first = store.take_lease("orders", 1, node=1, lease_ms=400)
    assert first is not None
    assert other.take_lease("orders", 1, node=2, lease_ms=60_000) is None  # still held
    store.append(first, _batch(b"before"))
    time.sleep(0.5)  # node 1 pauses past its lease
    second = other.take_lease("orders", 1, node=2, lease_ms=60_000)
    assert second is not None and second.epoch == first.epoch + 1
    with pytest.raises(FencedError, match="not the leader"):
        store.append(first, _batch(b"zombie"))
    with pytest.raises(FencedError):
        store.set_log_start_offset(first, 1)
    assert other.append(second, _batch(b"after")) == (1, 1)
    values = [r.value for b in iter_batches(other.read("orders", 1, 0, 1 << 20))
              for r in b.records]
    assert values == [b"before", b"after"]
    other.close()


def test_a_leader_frozen_inside_an_append_holds_its_partition_only_until_its_lease_ends(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker stopped between its append's statements (SIGSTOP, a paused VM) holds the
    partition row's lock: PostgreSQL ends that transaction once the lease has run out, so
    another broker takes the partition over instead of waiting as long as the frozen one
    sleeps, and the frozen append fails when its broker wakes, having written nothing."""
    lease_ms = 1000
    frozen = PostgresStore.open(postgres_url, idle_transaction_timeout_ms=lease_ms)
    frozen.create_topic("orders", uuid.uuid4(), 1)
    lease = frozen.take_lease("orders", 0, node=1, lease_ms=lease_ms)
    assert lease is not None
    inside, wake = threading.Event(), threading.Event()
    stamp = postgresql.set_base_offset

    def freeze(batch: bytes, base: int) -> bytes:  # after the row is locked, before the insert
        inside.set()
        wake.wait(30)
        return stamp(batch, base)

    monkeypatch.setattr(postgresql, "set_base_offset", freeze)
    outcome: list[object] = []

    def append() -> None:
        try:
            outcome.append(frozen.append(lease, _batch(b"zombie")))
        except StorageUnavailableError as exc:
            outcome.append(exc)

    appending = threading.Thread(target=append)
    appending.start()
    try:
        assert inside.wait(10)
        other = PostgresStore.open(postgres_url)  # another broker
        time.sleep(lease_ms / 1000)  # the lease has run out
        taken: list[postgresql.Lease] = []
        taking = threading.Thread(target=lambda: taken.extend(other.acquire_leases(
            [("orders", 0)], node=2, lease_ms=60_000)), daemon=True)
        taking.start()
        taking.join(lease_ms / 1000 + 10)
        assert [(t.leader, t.epoch) for t in taken] == [(2, lease.epoch + 1)]
    finally:
        wake.set()
        appending.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], StorageUnavailableError), outcome
    monkeypatch.undo()
    assert other.append(taken[0], _batch(b"after")) == (0, 0)
    assert [r.value for b in iter_batches(other.read("orders", 0, 0, 1 << 20))
            for r in b.records] == [b"after"]


def test_an_expired_lease_is_refused_even_before_anyone_takes_over(
        store: PostgresStore) -> None:
    lease = store.take_lease("orders", 0, node=1, lease_ms=200)
    assert lease is not None
    time.sleep(0.3)
    with pytest.raises(FencedError, match="lease expired"):
        store.append(lease, _batch(b"late"))
    renewed = store.take_lease("orders", 0, node=1, lease_ms=60_000)
    assert renewed is not None and renewed.epoch == lease.epoch  # the same leader renews
    assert store.append(renewed, _batch(b"on time")) == (0, 0)


def test_a_released_lease_passes_at_once(store: PostgresStore) -> None:
    lease = store.take_lease("orders", 0, node=1, lease_ms=60_000)
    assert lease is not None and store.release_lease(lease)
    taken = store.take_lease("orders", 0, node=2, lease_ms=60_000)
    assert taken is not None and taken.epoch == lease.epoch + 1


def test_batches_keep_their_bytes_at_their_own_offsets_when_moved(store: PostgresStore) -> None:
    lease = store.take_lease("orders", 0, node=-2, lease_ms=60_000)
    assert lease is not None
    batch = build_batch([(b"k", b"v", 1)], base_offset=40, partition_leader_epoch=7)
    assert store.append(lease, batch, base_offset=40) == (40, 40)
    with pytest.raises(OffsetConflictError):
        store.append(lease, build_batch([(b"k", b"w", 1)]), base_offset=12)
    assert store.read("orders", 0, 0, 1 << 20) == batch
    check_batch(store.read("orders", 0, 40, 1 << 20))


def test_the_log_start_offset_drops_whole_batches_below_it(store: PostgresStore) -> None:
    lease = store.take_lease("orders", 0, node=1, lease_ms=60_000)
    assert lease is not None
    for value in (b"a", b"b", b"c"):
        store.append(lease, _batch(value))
    store.set_log_start_offset(lease, 2)
    store.set_log_start_offset(lease, 1)  # never backwards
    assert store.partition_state("orders", 0).log_start_offset == 2
    assert [b.base_offset for b in iter_batches(store.read("orders", 0, 0, 1 << 20))] == [2]
    store.set_log_start_offset(lease, 10)  # past the end: an empty log that starts there
    state = store.partition_state("orders", 0)
    assert (state.log_start_offset, state.next_offset) == (10, 10)
    assert store.append(lease, _batch(b"d")) == (10, 10)


def test_an_unreachable_store_is_one_line_without_the_password() -> None:
    with pytest.raises(StorageUnavailableError) as raised:
        PostgresStore.open("postgresql://alice:s3cret@127.0.0.1:1/db")
    message = str(raised.value)
    assert "\n" not in message and "s3cret" not in message
    assert message.startswith("PostgreSQL at postgresql://alice:***@127.0.0.1:1/db is "
                              "unreachable: ")


def test_a_store_of_a_newer_kgroups_is_refused(postgres_url: str) -> None:
    PostgresStore.open(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("UPDATE kgroups_schema SET version = 99")
    with pytest.raises(SchemaVersionError) as refused:
        PostgresStore.open(postgres_url)
    # The refusal left no connection open on the server (only this check's own), though its
    # traceback, which holds the store's frames, is still alive.
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()").fetchone()
    assert row == (0,)
    assert "schema version 99" in str(refused.value)
