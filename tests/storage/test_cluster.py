"""Several brokers on one PostgreSQL: the registry on the database clock, leases spread and
handed back, controlled shutdown, fencing, the catalog's notifications, the log seam."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from kgroups.log.batch import build_batch, iter_batches
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import OffsetOutOfRangeError, PartitionLog
from kgroups.storage.log_seam import PartitionLogSeam
from kgroups.storage.membership import ClusterMember, NodeIdTakenError
from kgroups.storage.notifications import ChangeListener
from kgroups.storage.postgres_log import PostgresPartitionLog
from kgroups.storage.postgresql import FencedError, PostgresStore
from kgroups.storage.registry import DuplicateNodeIdError
from kgroups.storage.schema import SCHEMA_VERSION

pytestmark = pytest.mark.postgresql

SESSION_MS = 800


def _open(url: str) -> PostgresStore:
    return PostgresStore.open(url, session_timeout_ms=SESSION_MS)


def _batch(value: bytes, timestamp: int = 1_700_000_000_000) -> bytes:
    return build_batch([(b"k", value, timestamp)])


def test_registry_expires_on_the_database_clock_and_refuses_a_live_duplicate(
        postgres_url: str) -> None:
    store, other = _open(postgres_url), _open(postgres_url)
    first = store.registry.register(1, "127.0.0.1", 9092, rack="a")
    other.registry.register(2, "127.0.0.1", 9093)
    assert [(b.node_id, b.port, b.rack) for b in other.registry.live_brokers()] == [
        (1, 9092, "a"), (2, 9093, None)]
    with pytest.raises(DuplicateNodeIdError, match=r"node\.id 1"):
        other.registry.register(1, "127.0.0.1", 9094)
    assert store.registry.heartbeat(first)
    time.sleep(SESSION_MS / 1000 + 0.2)
    assert other.registry.live_brokers() == []
    second = other.registry.register(1, "127.0.0.1", 9094)  # the old one expired: taken over
    assert second.epoch == first.epoch + 1
    assert not store.registry.heartbeat(first)  # the old incarnation learns it lost the id
    assert [b.port for b in store.registry.live_brokers()] == [9094]
    assert other.registry.deregister(second)
    assert store.registry.live_brokers() == []


def _cluster_store(url: str) -> PostgresStore:
    store = _open(url)
    store.create_topic("orders", uuid.uuid4(), 6)
    store.create_topic("__consumer_offsets", uuid.uuid4(), 6)
    return store


def _leaders(store: PostgresStore) -> dict[tuple[str, int], int]:
    return {(r.topic, r.partition): r.leader for r in store.leadership() if r.current}


def test_leases_spread_come_back_on_join_and_move_on_death(postgres_url: str) -> None:
    store = _cluster_store(postgres_url)
    one = ClusterMember.join(store, 1, "127.0.0.1", 9092, lease_ms=SESSION_MS)
    assert len(one.step().gained) == 12
    two = ClusterMember.join(_open(postgres_url), 2, "127.0.0.1", 9093, lease_ms=SESSION_MS)
    assert two.step().gained == []  # all held by 1 until it hands back
    handed = one.step()
    assert len(handed.lost) == 6 and handed.gained == []
    gained = two.step().gained
    assert sorted((g.topic, g.partition) for g in gained) == handed.lost
    assert all(g.epoch == 2 for g in gained)  # a new leader: the epoch went up by one
    leaders = _leaders(store)
    assert len(leaders) == 12 and sorted(leaders.values()).count(1) == 6
    assert one.step().lost == [] and two.step().gained == []  # stable
    time.sleep(SESSION_MS / 1000 + 0.2)  # 1 dies: no heartbeat, its leases run out
    taken = two.step()
    assert len(taken.gained) == 6 and set(_leaders(store).values()) == {2}
    restarted = ClusterMember.join(_open(postgres_url), 1, "127.0.0.1", 9094,
                                   lease_ms=SESSION_MS)  # 1 restarted: a new incarnation
    with pytest.raises(NodeIdTakenError):  # the old process, resumed, must stop
        one.step()
    assert one.held == {}
    assert len(two.step().lost) == 6  # two hands the restarted 1 its share back
    assert len(restarted.step().gained) == 6


def test_controlled_shutdown_hands_over_at_once(postgres_url: str) -> None:
    store = _cluster_store(postgres_url)
    one = ClusterMember.join(store, 1, "127.0.0.1", 9092)  # leases of 9 s
    two = ClusterMember.join(_open(postgres_url), 2, "127.0.0.1", 9093)
    one.step()
    two.step()
    one.step()
    two.step()
    assert len(one.held) == len(two.held) == 6
    given_up = one.leave()
    assert len(given_up) == 6
    started = time.monotonic()
    gained = two.step().gained
    assert sorted((g.topic, g.partition) for g in gained) == given_up
    assert time.monotonic() - started < 2  # no lease had to run out
    assert [b.node_id for b in store.registry.live_brokers()] == [2]


def test_a_broker_that_lost_its_lease_cannot_append_even_when_it_resumes(
        postgres_url: str) -> None:
    store = _cluster_store(postgres_url)
    one = ClusterMember.join(store, 1, "127.0.0.1", 9092, lease_ms=SESSION_MS)
    one.step()
    log = PostgresPartitionLog(store, one.held[("orders", 0)], LogConfig())
    assert log.append_batch(_batch(b"before")) == (0, 0)
    time.sleep(SESSION_MS / 1000 + 0.2)  # 1 is paused past its lease
    two = ClusterMember.join(_open(postgres_url), 2, "127.0.0.1", 9093, lease_ms=SESSION_MS)
    assert len(two.step().gained) == 12
    with pytest.raises(FencedError):  # 1 resumes and tries to write
        log.append_batch(_batch(b"zombie"))
    lost = one.step().lost  # it heartbeats again (its id is still its own): leases gone
    assert ("orders", 0) in lost and ("orders", 0) not in one.held
    with pytest.raises(FencedError):
        log.append_batch(_batch(b"still zombie"))
    new_log = PostgresPartitionLog(store, two.held[("orders", 0)], LogConfig())
    assert new_log.append_batch(_batch(b"after")) == (1, 1)
    values = [r.value for b in iter_batches(new_log.read(0, 1 << 20)) for r in b.records]
    assert values == [b"before", b"after"]


def test_two_connections_racing_to_append_at_the_same_offset_never_collide(
        postgres_url: str) -> None:
    store = _cluster_store(postgres_url)
    lease = store.take_lease("orders", 0, node=1, lease_ms=60_000)
    assert lease is not None
    stores = [_open(postgres_url) for _ in range(2)]
    results: list[tuple[int, int]] = []
    barrier = threading.Barrier(2)

    def writer(own: PostgresStore) -> None:
        barrier.wait()
        for _ in range(20):
            results.append(own.append(lease, _batch(b"x")))

    threads = [threading.Thread(target=writer, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(base for base, _ in results) == list(range(40))
    assert store.partition_state("orders", 0).next_offset == 40


def test_a_catalog_change_reaches_another_connection_by_notify(postgres_url: str) -> None:
    store = _open(postgres_url)
    listener = ChangeListener.open(postgres_url, poll_interval_ms=60_000)
    started = time.monotonic()
    threading.Timer(0.2, lambda: store.catalog.add_acls(
        [(2, "orders", 3, "User:alice", "*", 3, 3)])).start()
    changes = listener.poll(5.0)
    assert changes.catalog_version == 1
    assert time.monotonic() - started < 2  # woken by the notification, not the 60 s poll
    assert _open(postgres_url).catalog.acls() == [(2, "orders", 3, "User:alice", "*", 3, 3)]
    listener.close()


def test_a_missed_notification_is_caught_by_the_poll(postgres_url: str) -> None:
    store = _open(postgres_url)
    listener = ChangeListener.open(postgres_url, poll_interval_ms=300)
    with psycopg.connect(postgres_url, autocommit=True) as silent:
        silent.execute("UPDATE catalog_version SET version = version + 1")  # no NOTIFY
    deadline = time.monotonic() + 1.0
    seen = None
    while seen is None and time.monotonic() < deadline:
        seen = listener.poll(0.3).catalog_version
    assert seen == 1
    assert store.catalog.version() == 1
    listener.close()


def test_the_catalog_keeps_the_brokers_forms(postgres_url: str) -> None:
    store = _open(postgres_url)
    store.create_topic("orders", uuid.uuid4(), 1)
    store.catalog.set_topic_configs("orders", {"cleanup.policy": "compact"})
    store.catalog.apply_scram([("alice", "SCRAM-SHA-256", (b"s", b"k1", b"k2", 4096))], [])
    store.catalog.apply_scram([("alice", "SCRAM-SHA-512", (b"t", b"k3", b"k4", 8192))],
                              [("alice", "SCRAM-SHA-256")])
    store.catalog.set_broker_configs("", {"log.retention.ms": "1000"})
    store.catalog.set_broker_configs("1", {"compression.type": "lz4"})
    acl = (2, "orders", 3, "User:bob", "*", 3, 3)
    store.catalog.add_acls([acl, acl])
    other = _open(postgres_url).catalog
    assert other.topic_configs() == {"orders": {"cleanup.policy": "compact"}}
    assert other.scram_credentials() == {"alice": {"SCRAM-SHA-512": (b"t", b"k3", b"k4", 8192)}}
    assert other.broker_configs() == {"": {"log.retention.ms": "1000"},
                                      "1": {"compression.type": "lz4"}}
    assert other.acls() == [acl]
    store.catalog.remove_acls([acl])
    assert other.acls() == []
    assert store.delete_topic("orders") and other.topic_configs() == {}
    assert other.version() == 9


def test_appends_are_announced_to_listeners(postgres_url: str) -> None:
    store = _cluster_store(postgres_url)
    listener = ChangeListener.open(postgres_url)
    lease = store.take_lease("orders", 3, node=1, lease_ms=60_000)
    assert lease is not None
    store.append(lease, build_batch([(b"k", b"a", 1), (b"k", b"b", 2)]))
    assert listener.poll(2.0).log_ends == {("orders", 3): 2}
    listener.close()


def test_the_postgresql_log_answers_as_the_file_log(postgres_url: str, tmp_path: Path) -> None:
    store = _cluster_store(postgres_url)
    lease = store.take_lease("orders", 0, node=1, lease_ms=60_000)
    assert lease is not None
    file_log = PartitionLog.open(tmp_path / "orders-0", LogConfig())
    logs: list[PartitionLogSeam] = [PostgresPartitionLog(store, lease, LogConfig()), file_log]
    answers = []
    for log in logs:
        for index in range(3):
            log.append_batch(_batch(bytes([97 + index]), 1000 * (index + 1)))
        moved = log.advance_log_start(1)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 1 << 20)
        with pytest.raises(OffsetOutOfRangeError):
            log.advance_log_start(9)
        answers.append((moved, log.log_start_offset, log.log_end_offset,
                        log.offset_for_timestamp(1500), log.offset_for_timestamp(9999),
                        [b.base_offset for b in iter_batches(log.read(1, 1 << 20))],
                        log.read(3, 1 << 20), log.read(1, 1, min_one=False)))
    file_log.close()
    assert answers[0] == answers[1] == (True, 1, 3, 1, None, [1, 2], b"", b"")


def test_a_version_1_store_is_migrated_keeping_its_data(postgres_url: str) -> None:
    store = _cluster_store(postgres_url)
    lease = store.take_lease("orders", 0, node=1, lease_ms=60_000)
    assert lease is not None
    store.append(lease, _batch(b"kept"))
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        for table in ("brokers", "topic_configs", "acls", "scram_credentials",
                      "broker_configs", "catalog_version", "aborted_transactions"):
            connection.execute(f"DROP TABLE {table}")
        connection.execute("UPDATE kgroups_schema SET version = 1")
    migrated = _open(postgres_url)
    assert migrated.catalog.version() == 0
    assert [r.value for b in iter_batches(migrated.read("orders", 0, 0, 1 << 20))
            for r in b.records] == [b"kept"]
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        row = connection.execute("SELECT version FROM kgroups_schema").fetchone()
    assert row is not None and row[0] == SCHEMA_VERSION == 3


def test_a_take_and_a_release_wake_the_other_brokers_listeners(postgres_url: str) -> None:
    store = _cluster_store(postgres_url)
    listener = ChangeListener.open(postgres_url, poll_interval_ms=60_000)
    one = ClusterMember.join(store, 1, "127.0.0.1", 9092)
    one.step()  # takes every partition
    assert listener.poll(5.0).leases_moved
    one.step()  # renews them: nothing moved
    assert not listener.poll(0.1).leases_moved
    one.leave()
    started = time.monotonic()
    assert listener.poll(5.0).leases_moved
    assert time.monotonic() - started < 2
    listener.close()


def test_producer_id_blocks_never_overlap(postgres_url: str) -> None:
    first, second = _open(postgres_url), _open(postgres_url)
    blocks = [first.allocate_producer_ids(), second.allocate_producer_ids(),
              first.allocate_producer_ids(10)]
    ids = [pid for block in blocks for pid in block]
    assert len(ids) == len(set(ids)) == 2010
    assert min(ids) > 1_700_000_000_000  # above any id a single broker's clock handed out


def test_the_postgresql_log_finds_headers_and_the_largest_timestamp(
        postgres_url: str) -> None:
    store = _cluster_store(postgres_url)
    lease = store.take_lease("orders", 0, node=1, lease_ms=60_000)
    assert lease is not None
    log = PostgresPartitionLog(store, lease, LogConfig())
    assert log.max_timestamp_offset() is None
    log.append_batch(build_batch([(b"k", b"a", 10), (b"k", b"b", 50)]))
    log.append_batch(build_batch([(b"k", b"c", 30), (b"k", b"d", 50)],
                                 producer_id=7, producer_epoch=0, base_sequence=0))
    assert log.max_timestamp_offset() == (50, 1)  # the first record with it
    headers = list(log.batch_headers(2))
    assert [(h.base_offset, h.producer_id, h.records_count) for h in headers] == [(2, 7, 2)]
