"""PostgreSQL lost while serving: every call fails fast with StorageUnavailableError, the
store, the listener and the membership come back by themselves when the database does,
nothing acknowledged is lost, and leases survive an outage shorter than them.

These tests stop and start a PostgreSQL server of their own (the other storage tests share
theirs), or end one connection's session from another (a lost connection, server up)."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from tests.storage.conftest import every_store_closed, new_database
from tests.storage.postgres_server import PostgresServer
from tests.storage.test_cluster_data_plane import _fetch, _node, _produce, _records

from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, read_header
from kgroups.log.config import LogConfig
from kgroups.storage.database import (
    CONNECT_TIMEOUT_S,
    FIRST_RETRY_BACKOFF_S,
    MAX_RETRY_BACKOFF_S,
    RECONNECT_TIMEOUT_S,
    Database,
)
from kgroups.storage.membership import ClusterMember
from kgroups.storage.notifications import ChangeListener
from kgroups.storage.postgres_log import PostgresPartitionLog
from kgroups.storage.postgresql import (
    FencedError,
    Lease,
    PostgresStore,
    StorageUnavailableError,
)

pytestmark = pytest.mark.postgresql

TOPIC = "orders"
AT_ONCE_S = 0.2  # no connection attempt: no network wait (generous for a loaded machine)
T = TypeVar("T")


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A server of this module's own: the others must not see it stop."""
    own = PostgresServer.start()
    try:
        yield own
    finally:
        if not _listening(own):  # a test failed during an outage: stop needs it running
            own.resume()
        own.stop()


@pytest.fixture
def url(server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if not _listening(server):  # an earlier test failed during an outage
        server.resume()
    with every_store_closed(monkeypatch):
        yield new_database(server)


def _listening(server: PostgresServer) -> bool:
    try:
        psycopg.connect(server.url, connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


def _batch(value: bytes, producer_id: int = -1, sequence: int = -1) -> bytes:
    return build_batch([(b"k", value, 1_700_000_000_000)], producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence)


def _values(store: PostgresStore, partition: int = 0) -> list[int]:
    """The base offset of every stored batch, in order."""
    return [read_header(data).base_offset for data in store.batches(TOPIC, partition)]


def _led_store(url: str, lease_ms: int = 60_000) -> tuple[PostgresStore, Lease]:
    store = PostgresStore.open(url)
    store.create_topic(TOPIC, uuid.uuid4(), 1)
    lease = store.take_lease(TOPIC, 0, 1, lease_ms)
    assert lease is not None
    return store, lease


def _unavailable_within(seconds: float, call: Callable[[], object]) -> None:
    began = time.monotonic()
    with pytest.raises(StorageUnavailableError):
        call()
    assert time.monotonic() - began < seconds


def _eventually(call: Callable[[], T], within_s: float = MAX_RETRY_BACKOFF_S + 5) -> T:
    """The first answer of `call` that is not StorageUnavailableError (what a client's retry
    gets), failing after `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return call()
        except StorageUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _end_sessions(server: PostgresServer, url: str) -> int:
    """End every session on the test's database from outside, as a failover or an
    administrator would; how many."""
    with psycopg.connect(server.url, autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = %s", (url.rsplit("/", 1)[1],)).fetchall()
    return len(rows)


def test_a_lost_session_fails_one_call_and_the_next_reconnects(
        server: PostgresServer, url: str) -> None:
    # The test server trusts every login: the password is there to be kept out of messages.
    store, lease = _led_store(url.replace("postgres@", "postgres:s3cret@"))
    assert store.append(lease, _batch(b"a")) == (0, 0)
    assert _end_sessions(server, url) == 1
    with pytest.raises(StorageUnavailableError) as lost:
        store.append(lease, _batch(b"b"))
    assert "lost the connection to PostgreSQL at postgresql://postgres:***@127.0.0.1" in str(
        lost.value)
    assert "s3cret" not in str(lost.value)
    assert store.append(lease, _batch(b"c")) == (1, 1)  # the same store, connected again
    assert _values(store) == [0, 1]
    store.close()
    with pytest.raises(StorageUnavailableError, match="was closed"):  # closed for good
        store.topics()


def test_during_an_outage_calls_fail_fast_and_after_it_nothing_acknowledged_is_lost(
        server: PostgresServer, url: str) -> None:
    store, lease = _led_store(url)
    acknowledged = [store.append(lease, _batch(f"v{i}".encode()))[0] for i in range(3)]
    server.halt()
    try:
        _unavailable_within(RECONNECT_TIMEOUT_S, lambda: store.append(lease, _batch(b"x")))
        _unavailable_within(RECONNECT_TIMEOUT_S, lambda: store.append(lease, _batch(b"x")))
        # A failed reconnection: the calls that follow fail at once, without trying again.
        for call in (lambda: store.append(lease, _batch(b"x")), store.topics,
                     store.catalog.acls, store.catalog.version, store.leadership,
                     store.registry.live_brokers, lambda: _values(store)):
            _unavailable_within(AT_ONCE_S, call)
    finally:
        server.resume()
    assert _eventually(lambda: store.append(lease, _batch(b"after")))[0] == 3
    assert _values(store) == [*acknowledged, 3]


def test_a_server_that_never_answers_costs_one_connect_timeout_then_calls_fail_at_once(
        ) -> None:
    with socket.socket() as silent:  # takes connections (the kernel's backlog), says nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        database = Database(f"postgresql://postgres@127.0.0.1:{silent.getsockname()[1]}/x")
        began = time.monotonic()
        with pytest.raises(StorageUnavailableError, match="is unreachable"):
            database.execute("SELECT 1")
        assert CONNECT_TIMEOUT_S - 0.5 < time.monotonic() - began < CONNECT_TIMEOUT_S + 1.5
        _unavailable_within(AT_ONCE_S, lambda: database.execute("SELECT 1"))  # no new attempt
        time.sleep(FIRST_RETRY_BACKOFF_S)
        began = time.monotonic()
        with pytest.raises(StorageUnavailableError):
            database.execute("SELECT 1")  # a reconnection: the short timeout
        assert RECONNECT_TIMEOUT_S - 0.5 < time.monotonic() - began < RECONNECT_TIMEOUT_S + 1.5
        _unavailable_within(AT_ONCE_S, lambda: database.execute("SELECT 1"))


def test_a_listener_listens_again_and_reports_what_it_may_have_missed(
        server: PostgresServer, url: str) -> None:
    store = PostgresStore.open(url)
    listener = ChangeListener.open(url, poll_interval_ms=60_000)  # no fallback reads
    try:
        assert _end_sessions(server, url) == 2
        # Written while nobody listened: its notification is lost.
        version = _eventually(lambda: store.catalog.set_broker_configs("", {"a": "1"}))
        with pytest.raises(StorageUnavailableError):
            listener.poll(1.0)
        missed = listener.poll(1.0)
        assert (missed.catalog_version, missed.leases_moved) == (version, True)
        server.halt()
        try:
            _unavailable_within(RECONNECT_TIMEOUT_S, lambda: listener.poll(1.0))
        finally:
            server.resume()
        assert _eventually(lambda: listener.poll(1.0)).catalog_version == version
        # Listening again: a change is heard by notification, not by the (minute-long) poll.
        newer = _eventually(lambda: store.catalog.set_broker_configs("", {"a": "2"}))
        assert listener.poll(5.0).catalog_version == newer
    finally:
        listener.close()
        store.close()


def test_leases_outlive_an_outage_shorter_than_them(server: PostgresServer, url: str) -> None:
    store = PostgresStore.open(url, session_timeout_ms=6000)
    store.create_topic(TOPIC, uuid.uuid4(), 2)
    member = ClusterMember.join(store, 1, "127.0.0.1", 9092, lease_ms=6000)
    assert len(member.step().gained) == 2
    held, safe_until = dict(member.held), member.safe_until
    server.halt()
    try:
        with pytest.raises(StorageUnavailableError):
            member.step()
        assert (member.held, member.safe_until) == (held, safe_until)
        time.sleep(0.5)
    finally:
        server.resume()
    changes = _eventually(member.step)
    assert (changes.gained, changes.lost) == ([], [])
    assert {key: lease.epoch for key, lease in member.held.items()} == {
        key: lease.epoch for key, lease in held.items()}
    assert member.safe_until > safe_until
    assert store.append(member.held[(TOPIC, 0)], _batch(b"still the leader")) == (0, 0)


def test_leases_are_taken_over_after_an_outage_longer_than_them(
        server: PostgresServer, url: str) -> None:
    lease_ms = 2000
    store = PostgresStore.open(url, session_timeout_ms=lease_ms)
    store.create_topic(TOPIC, uuid.uuid4(), 2)
    first = ClusterMember.join(store, 1, "127.0.0.1", 9092, lease_ms=lease_ms)
    assert len(first.step().gained) == 2
    old = dict(first.held)
    other = PostgresStore.open(url, session_timeout_ms=lease_ms)
    second = ClusterMember.join(other, 2, "127.0.0.1", 9093, lease_ms=lease_ms)
    server.halt()
    try:
        with pytest.raises(StorageUnavailableError):
            first.step()
        time.sleep(lease_ms / 1000 + 0.5)
    finally:
        server.resume()
    assert time.monotonic() > first.safe_until  # the leases may have run out: stop serving
    taken = _eventually(second.step).gained  # 1 missed its heartbeats: 2 is the only live one
    assert sorted((lease.topic, lease.partition, lease.epoch) for lease in taken) == sorted(
        (lease.topic, lease.partition, lease.epoch + 1) for lease in old.values())
    with pytest.raises(FencedError):
        _eventually(lambda: store.append(old[(TOPIC, 0)], _batch(b"stale")))
    assert sorted(first.step().lost) == sorted(old)
    assert _values(other) == []


class _CommitThenLose:
    """The store, but each append's connection breaks right after its commit (the outcome
    the writer cannot know), or right before it when `commits` is False."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.commits = True
        self.lose = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def append(self, lease: Lease, batch: bytes) -> tuple[int, int]:
        if not self.lose:
            return self.store.append(lease, batch)
        if self.commits:
            self.store.append(lease, batch)
        raise StorageUnavailableError("lost the connection to PostgreSQL during COMMIT")


def test_a_retried_idempotent_batch_whose_commit_was_in_doubt_is_stored_once(url: str) -> None:
    store, lease = _led_store(url)
    flaky = _CommitThenLose(store)
    log = PostgresPartitionLog(flaky, lease, LogConfig())  # type: ignore[arg-type]
    assert log.append_batch(_batch(b"a", producer_id=7, sequence=0)) == (0, 0)
    flaky.lose = True
    with pytest.raises(StorageUnavailableError):  # stored, but never reported as written
        log.append_batch(_batch(b"b", producer_id=7, sequence=1))
    flaky.lose = False
    assert log.append_batch(_batch(b"b", producer_id=7, sequence=1)) == (1, 1)  # its retry
    assert log.append_batch(_batch(b"c", producer_id=7, sequence=2)) == (2, 2)
    assert (log.log_end_offset, _values(store)) == (3, [0, 1, 2])
    flaky.lose, flaky.commits = True, False  # lost before the commit: nothing stored
    with pytest.raises(StorageUnavailableError):
        log.append_batch(_batch(b"d", producer_id=7, sequence=3))
    flaky.lose = False
    assert log.append_batch(_batch(b"d", producer_id=7, sequence=3)) == (3, 3)
    flaky.lose, flaky.commits = True, True  # a plain producer's retry is stored again
    with pytest.raises(StorageUnavailableError):
        log.append_batch(_batch(b"e"))
    flaky.lose = False
    assert log.append_batch(_batch(b"e")) == (5, 5)
    assert (log.log_end_offset, _values(store)) == (6, [0, 1, 2, 3, 4, 5])


def test_a_broker_answers_produce_with_a_retriable_error_during_an_outage_and_serves_after(
        server: PostgresServer, url: str, tmp_path: Path) -> None:
    node = _node(url, 1, tmp_path)
    try:
        assert node.topics.create(TOPIC, 1) == ErrorCode.NONE
        node.lead(0)
        assert int(_produce(node, 0, _records(2))[1].error_code) == ErrorCode.NONE
        server.halt()
        try:
            began = time.monotonic()
            _, refused = _produce(node, 0, _records(1))
            assert int(refused.error_code) == ErrorCode.KAFKA_STORAGE_ERROR  # retriable
            assert time.monotonic() - began < RECONNECT_TIMEOUT_S
        finally:
            server.resume()
        answer = _eventually(lambda: _storage_error_as_unavailable(_produce(node, 0, _records(1))))
        assert (int(answer.error_code), int(answer.base_offset)) == (ErrorCode.NONE, 2)
        read = _fetch(node, 0, 0)
        assert (int(read.error_code), int(read.high_watermark)) == (ErrorCode.NONE, 3)
    finally:
        node.store.close()


def _storage_error_as_unavailable(produced: tuple[Any, Any]) -> Any:
    """A Produce answer as a client's retry loop sees it: KAFKA_STORAGE_ERROR means again."""
    answer = produced[1]
    if int(answer.error_code) == ErrorCode.KAFKA_STORAGE_ERROR:
        raise StorageUnavailableError(str(answer.error_message))
    return answer
