"""A store on PostgreSQL: topics, partitions with their leases, and record batches.

Leadership of a partition is a lease in the `partitions` row: a broker takes it when it is free
or expired, renews it while it lives, and the leader epoch goes up whenever the leader changes.
Every append runs in one transaction that locks the partition's row, checks that the writer is
the leader at the epoch it believes and that its lease has not run out, then writes the batch
and moves the next offset: a broker that was paused or cut off past its lease is refused, even
if it does not know yet that it lost it. Lease times are the database's clock, so the brokers'
clocks need not agree.

psycopg 3 is the driver: maintained by PostgreSQL's own community of driver authors, typed, with
both a blocking and an asyncio API over the same connection code (the broker's event loop and
the command-line tools share one way to talk to the store), and binary wheels on PyPI.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from kgroups.log.batch import check_batch, set_base_offset
from kgroups.log.txn_index import AbortedTransaction
from kgroups.storage.catalog import Catalog, bump_catalog_version
from kgroups.storage.columns import NOW_MS, Connection, as_bytes, as_int, as_str, as_uuid

# StorageUnavailableError and redacted are imported from here by the CLIs, the pipeline and
# the broker, as before they moved to database.py.
from kgroups.storage.database import Database
from kgroups.storage.database import StorageUnavailableError as StorageUnavailableError
from kgroups.storage.database import redacted as redacted
from kgroups.storage.registry import BROKER_SESSION_TIMEOUT_MS, BrokerRegistry
from kgroups.storage.schema import ensure_schema

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's
# Each committed append announces "<partition>:<next offset>:<topic>" here (Kafka's topic names
# hold no colon), so a Fetch long poll on any broker wakes when its partition grows.
APPEND_CHANNEL = "kgroups_append"
# A lease was released (hand-back, controlled shutdown): brokers run their lease step now.
LEASE_CHANNEL = "kgroups_leases"
_PARTITION_LEADER_EPOCH = struct.Struct(">i")
_PARTITION_LEADER_EPOCH_AT = 12


class FencedError(RuntimeError):
    """The writer is not the partition's leader at that epoch, or its lease ran out."""


class UnknownPartitionError(LookupError):
    """No such topic or partition in the store."""


class OffsetConflictError(ValueError):
    """A batch placed at an offset the partition has already passed."""


@dataclass(frozen=True, slots=True)
class Lease:
    topic: str
    partition: int
    leader: int
    epoch: int
    until_ms: int


@dataclass(frozen=True, slots=True)
class Leadership:
    """A partition's leader and leader epoch, and whether its lease is running now."""
    topic: str
    partition: int
    leader: int
    epoch: int
    current: bool


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int
    epoch: int
    log_start_offset: int
    next_offset: int


def is_store_url(text: str) -> bool:
    """Whether a command's argument names a store (libpq's two URL schemes) rather than a path."""
    return text.startswith(("postgresql://", "postgres://"))


class PostgresStore:
    """Every call is one short transaction on the store's connection (database.py: a lost
    connection is StorageUnavailableError, and the next call connects again)."""

    def __init__(self, database: Database,
                 session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS) -> None:
        self._db = database
        self.registry = BrokerRegistry(database, session_timeout_ms)
        self.catalog = Catalog(database)

    @classmethod
    def open(cls, url: str, session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
             idle_transaction_timeout_ms: int = 0) -> PostgresStore:
        """Connect and create the schema if the database has none; StorageUnavailableError
        naming the server (never its password) when that fails; a schema it refuses
        (SchemaVersionError) closes the connection before raising.

        A broker passes its lease as `idle_transaction_timeout_ms`: frozen inside an append
        (which locks the partition's row) or a lease change, it would keep every other broker
        from taking those partitions over for as long as it stays frozen; the server ends
        such a transaction once the leases it could hold have run out (database.py)."""
        database = Database(url, idle_transaction_timeout_ms=idle_transaction_timeout_ms)
        try:
            with database.use() as connection:
                ensure_schema(connection)
        except BaseException:
            database.close()
            raise
        return cls(database, session_timeout_ms)

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------------ topics

    def create_topic(self, name: str, topic_id: uuid.UUID, partitions: int,
                     configs: Mapping[str, str] | None = None) -> bool:
        """Create the topic, its partitions and its own settings in one transaction, so that
        no broker sees it without them; False (nothing written) if a topic of that name
        exists (another broker created it first)."""
        with self._db.use() as db, db.transaction():
            created = db.execute(
                "INSERT INTO topics (name, topic_id, partitions) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO NOTHING", (name, topic_id, partitions)).rowcount
            if not created:
                return False
            with db.cursor() as cursor:
                cursor.executemany("INSERT INTO partitions (topic, partition) VALUES (%s, %s)",
                                   [(name, index) for index in range(partitions)])
                if configs:
                    cursor.executemany(
                        "INSERT INTO topic_configs (topic, name, value) VALUES (%s, %s, %s)",
                        [(name, key, value) for key, value in configs.items()])
            bump_catalog_version(db)
        return True

    def add_partitions(self, name: str, total: int) -> bool:
        """Grow the topic to `total` partitions (new ones empty and unled); False if it is not
        there or already has as many."""
        with self._db.use() as db, db.transaction():
            row = db.execute(
                "SELECT partitions FROM topics WHERE name = %s FOR UPDATE", (name,)).fetchone()
            if row is None or as_int(row[0]) >= total:
                return False
            current = as_int(row[0])
            db.execute("UPDATE topics SET partitions = %s WHERE name = %s", (total, name))
            with db.cursor() as cursor:
                cursor.executemany("INSERT INTO partitions (topic, partition) VALUES (%s, %s)",
                                   [(name, index) for index in range(current, total)])
            bump_catalog_version(db)
        return True

    def delete_topic(self, name: str) -> bool:
        """Drop the topic with its partitions, records and settings; False if it was not
        there."""
        with self._db.use() as db, db.transaction():
            deleted = db.execute("DELETE FROM topics WHERE name = %s", (name,)).rowcount
            if deleted:
                bump_catalog_version(db)
        return deleted == 1

    def topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        rows = self._db.execute("SELECT name, topic_id, partitions FROM topics ORDER BY name")
        return {str(name): (as_uuid(topic_id), as_int(count))
                for name, topic_id, count in rows.fetchall()}

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        row = self._db.execute(
            "SELECT leader, leader_epoch, log_start_offset, next_offset FROM partitions "
            "WHERE topic = %s AND partition = %s", (topic, partition)).fetchone()
        if row is None:
            raise UnknownPartitionError(f"{topic}-{partition} is not in the store")
        return PartitionState(*(as_int(value) for value in row))

    def allocate_producer_ids(self, count: int = PRODUCER_ID_BLOCK_SIZE) -> range:
        """A block of producer ids no other broker gets (as Kafka's controller hands brokers
        blocks of 1000): InitProducerId draws from it and asks again when it runs out."""
        row = self._db.execute(
            "UPDATE producer_ids SET next_id = next_id + %s RETURNING next_id",
            (count,)).fetchone()
        assert row is not None  # the schema inserts the only row
        end = as_int(row[0])
        return range(end - count, end)

    # ------------------------------------------------------------------------ leases

    def take_lease(self, topic: str, partition: int, node: int, lease_ms: int) -> Lease | None:
        """Lead the partition for `lease_ms` from now if it is free, expired or already ours
        (a renewal); a new leader gets the next epoch. None while another node holds it."""
        row = self._db.execute(
            f"UPDATE partitions SET leader_epoch = CASE WHEN leader = %(node)s "
            f"THEN leader_epoch ELSE leader_epoch + 1 END, leader = %(node)s, "
            f"lease_until_ms = {NOW_MS} + %(lease)s "
            f"WHERE topic = %(topic)s AND partition = %(partition)s "
            f"AND (leader = %(node)s OR lease_until_ms <= {NOW_MS}) "
            f"RETURNING leader_epoch, lease_until_ms",
            {"node": node, "lease": lease_ms, "topic": topic, "partition": partition},
        ).fetchone()
        if row is None:
            self.partition_state(topic, partition)  # UnknownPartitionError if it is not there
            return None
        return Lease(topic, partition, node, as_int(row[0]), as_int(row[1]))

    def release_lease(self, lease: Lease) -> bool:
        """Give the partition up at once (a hand-back, a controlled shutdown); False if no
        longer ours."""
        return self._release(
            "UPDATE partitions SET lease_until_ms = 0 WHERE topic = %s AND partition = %s "
            "AND leader = %s AND leader_epoch = %s",
            (lease.topic, lease.partition, lease.leader, lease.epoch)) == 1

    def leadership(self) -> list[Leadership]:
        """Every partition's leader and epoch, and whether its lease is running (the database's
        clock): what placement, Metadata and FindCoordinator answer from."""
        rows = self._db.execute(
            f"SELECT topic, partition, leader, leader_epoch, lease_until_ms > {NOW_MS} "
            f"FROM partitions ORDER BY topic, partition").fetchall()
        return [Leadership(as_str(topic), as_int(partition), as_int(leader), as_int(epoch),
                           bool(current))
                for topic, partition, leader, epoch, current in rows]

    def acquire_leases(self, partitions: Sequence[tuple[str, int]], node: int, lease_ms: int
                       ) -> list[Lease]:
        """Lead those of `partitions` whose lease is free or expired, each at the next epoch,
        even where `node` led it before: a broker that did not hold the lease in memory (a
        restart, a pause) must not share an epoch with what it wrote earlier. One update;
        what it took is announced on LEASE_CHANNEL at commit, so that the other brokers'
        views name the new leader at once (FindCoordinator and Metadata answered there would
        otherwise say "no leader" until their next heartbeat)."""
        with self._db.use() as db, db.transaction():
            rows = db.execute(
                f"UPDATE partitions p SET leader = %(node)s, leader_epoch = p.leader_epoch + 1, "
                f"lease_until_ms = {NOW_MS} + %(lease)s "
                f"FROM unnest(%(topics)s::text[], %(indexes)s::integer[]) AS w (topic, partition) "
                f"WHERE p.topic = w.topic AND p.partition = w.partition "
                f"AND p.lease_until_ms <= {NOW_MS} "
                f"RETURNING p.topic, p.partition, p.leader_epoch, p.lease_until_ms",
                {"node": node, "lease": lease_ms, "topics": [t for t, _ in partitions],
                 "indexes": [i for _, i in partitions]}).fetchall()
            if rows:
                db.execute("SELECT pg_notify(%s, '')", (LEASE_CHANNEL,))
        return [Lease(as_str(topic), as_int(index), node, as_int(epoch), as_int(until))
                for topic, index, epoch, until in rows]

    def renew_leases(self, leases: Sequence[Lease], lease_ms: int) -> list[Lease]:
        """Extend those of `leases` still held at their epoch (lapsed ones too, while nobody
        took them over); the others are lost. One statement."""
        rows = self._db.execute(
            f"UPDATE partitions p SET lease_until_ms = {NOW_MS} + %(lease)s "
            f"FROM unnest(%(topics)s::text[], %(indexes)s::integer[], %(leaders)s::integer[], "
            f"%(epochs)s::integer[]) AS w (topic, partition, leader, epoch) "
            f"WHERE p.topic = w.topic AND p.partition = w.partition AND p.leader = w.leader "
            f"AND p.leader_epoch = w.epoch "
            f"RETURNING p.topic, p.partition, p.leader, p.leader_epoch, p.lease_until_ms",
            {"lease": lease_ms, "topics": [lease.topic for lease in leases],
             "indexes": [lease.partition for lease in leases],
             "leaders": [lease.leader for lease in leases],
             "epochs": [lease.epoch for lease in leases]}).fetchall()
        return [Lease(as_str(topic), as_int(index), as_int(leader), as_int(epoch),
                      as_int(until)) for topic, index, leader, epoch, until in rows]

    def release_leases(self, node: int) -> int:
        """End every lease `node` holds at once (a controlled shutdown); how many."""
        return self._release(f"UPDATE partitions SET lease_until_ms = 0 WHERE leader = %s "
                             f"AND lease_until_ms > {NOW_MS}", (node,))

    def _release(self, statement: str, params: tuple[object, ...]) -> int:
        """Run a releasing UPDATE and, when it released anything, announce it on
        LEASE_CHANNEL at commit, so the brokers waiting for those partitions step at once
        instead of at their next heartbeat."""
        with self._db.use() as db, db.transaction():
            released = db.execute(statement, params).rowcount
            if released:
                db.execute("SELECT pg_notify(%s, '')", (LEASE_CHANNEL,))
        return released

    # ------------------------------------------------------------------------ records

    def append(self, lease: Lease, batch: bytes, base_offset: int | None = None
               ) -> tuple[int, int]:
        """Append one RecordBatch v2 as `lease`'s holder: at the next offset, stamped with the
        leader epoch (Kafka's partitionLeaderEpoch, outside the CRC); or, with `base_offset`
        (moving a log between stores), byte for byte at its own offsets, which must not be
        below the next. FencedError, writing nothing, unless the lease is still current.
        StorageUnavailableError when the connection was lost: if it broke during the commit,
        the batch may be stored all the same (the caller must not count it as written, nor
        as not written: PostgresPartitionLog finds out on its next call)."""
        header, end = check_batch(batch, 0)
        if end != len(batch):
            raise ValueError(f"expected exactly one batch, found {len(batch) - end} more bytes")
        with self._db.use() as db, db.transaction():
            state = self._locked(db, lease)
            if base_offset is None:
                base = state.next_offset
                data = set_base_offset(batch, base)
                data = (data[:_PARTITION_LEADER_EPOCH_AT]
                        + _PARTITION_LEADER_EPOCH.pack(lease.epoch)
                        + data[_PARTITION_LEADER_EPOCH_AT + 4:])
            elif base_offset < state.next_offset:
                raise OffsetConflictError(
                    f"{lease.topic}-{lease.partition} is at offset {state.next_offset}, "
                    f"past {base_offset}")
            else:
                base, data = base_offset, set_base_offset(batch, base_offset)
            last = base + header.last_offset_delta
            db.execute(
                "INSERT INTO batches (topic, partition, base_offset, last_offset, data) "
                "VALUES (%s, %s, %s, %s, %s)", (lease.topic, lease.partition, base, last, data))
            db.execute(
                "UPDATE partitions SET next_offset = %s WHERE topic = %s AND partition = %s",
                (last + 1, lease.topic, lease.partition))
            db.execute("SELECT pg_notify(%s, %s)",
                       (APPEND_CHANNEL, f"{lease.partition}:{last + 1}:{lease.topic}"))
        return base, last

    def set_log_start_offset(self, lease: Lease, offset: int) -> None:
        """Move the log start offset forward (never back) as `lease`'s holder; batches wholly
        below it are deleted, and the next offset is at least it (an empty log starts there)."""
        with self._db.use() as db, db.transaction():
            state = self._locked(db, lease)
            if offset <= state.log_start_offset:
                return
            db.execute(
                "UPDATE partitions SET log_start_offset = %s, next_offset = greatest(next_offset,"
                " %s) WHERE topic = %s AND partition = %s",
                (offset, offset, lease.topic, lease.partition))
            db.execute(
                "DELETE FROM batches WHERE topic = %s AND partition = %s AND last_offset < %s",
                (lease.topic, lease.partition, offset))
            db.execute(
                "DELETE FROM aborted_transactions WHERE topic = %s AND partition = %s "
                "AND last_offset < %s", (lease.topic, lease.partition, offset))

    def add_aborted_transaction(self, lease: Lease, aborted: AbortedTransaction) -> None:
        """Keep a transaction that ended with ABORT (its marker already appended), as
        `lease`'s holder; once kept, kept (a second call for the same marker changes
        nothing)."""
        with self._db.use() as db, db.transaction():
            self._locked(db, lease)
            db.execute(
                "INSERT INTO aborted_transactions (topic, partition, producer_id, first_offset, "
                "last_offset, last_stable_offset) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (lease.topic, lease.partition, aborted.producer_id, aborted.first_offset,
                 aborted.last_offset, aborted.last_stable_offset))

    def aborted_transactions(self, topic: str, partition: int) -> list[AbortedTransaction]:
        """The partition's aborted transactions, in marker order."""
        with self._db.use() as db:
            rows = db.execute(
                "SELECT producer_id, first_offset, last_offset, last_stable_offset FROM "
                "aborted_transactions WHERE topic = %s AND partition = %s ORDER BY last_offset",
                (topic, partition)).fetchall()
        return [AbortedTransaction(as_int(a), as_int(b), as_int(c), as_int(d))
                for a, b, c, d in rows]

    def replace_batches(self, lease: Lease, cleaned: Mapping[int, bytes | None]) -> None:
        """Swap batches for their cleaned bytes (same base offset; None: the batch goes), as
        `lease`'s holder, all in one fenced transaction (compaction)."""
        with self._db.use() as db, db.transaction():
            self._locked(db, lease)
            for base, data in cleaned.items():
                if data is None:
                    db.execute("DELETE FROM batches WHERE topic = %s AND partition = %s "
                               "AND base_offset = %s", (lease.topic, lease.partition, base))
                else:
                    last = base + check_batch(data, 0)[0].last_offset_delta
                    db.execute("UPDATE batches SET data = %s, last_offset = %s WHERE topic = %s "
                               "AND partition = %s AND base_offset = %s",
                               (data, last, lease.topic, lease.partition, base))

    def partition_bytes(self, topic: str, partition: int) -> int:
        """The size of the partition's batches (retention.bytes)."""
        row = self._db.execute(
            "SELECT coalesce(sum(octet_length(data)), 0) FROM batches WHERE topic = %s "
            "AND partition = %s", (topic, partition)).fetchone()
        return 0 if row is None else as_int(row[0])

    @staticmethod
    def _locked(db: Connection, lease: Lease) -> PartitionState:
        """The partition's row, locked until the transaction ends; FencedError unless `lease`
        is its current, unexpired lease."""
        row = db.execute(
            f"SELECT leader, leader_epoch, log_start_offset, next_offset, "
            f"lease_until_ms > {NOW_MS} FROM partitions WHERE topic = %s AND partition = %s "
            f"FOR UPDATE", (lease.topic, lease.partition)).fetchone()
        if row is None:
            raise UnknownPartitionError(f"{lease.topic}-{lease.partition} is not in the store")
        leader, epoch, start, next_offset, current = row
        if leader != lease.leader or epoch != lease.epoch or not current:
            raise FencedError(
                f"{lease.topic}-{lease.partition}: node {lease.leader} at epoch {lease.epoch} "
                f"is not the leader (leader {leader}, epoch {epoch}"
                f"{'' if current else ', lease expired'})")
        return PartitionState(as_int(leader), as_int(epoch), as_int(start), as_int(next_offset))

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        """Whole batches holding `offset` and after, up to `max_bytes` but at least one."""
        out = bytearray()
        for data in self.batches_from(topic, partition, offset):
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)

    def epoch_first_offsets(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """(partitionLeaderEpoch, first offset) of each epoch stamped on the partition's
        batches, in offset order: the leader-epoch history OffsetForLeaderEpoch answers from,
        read from the stamps themselves (bytes 12-15 of each batch) in one statement."""
        rows = self._db.execute(
            "SELECT e.epoch, min(e.base_offset) FROM (SELECT base_offset, ('x' || encode("
            "substring(data FROM %s FOR 4), 'hex'))::bit(32)::integer AS epoch FROM batches "
            "WHERE topic = %s AND partition = %s) e GROUP BY e.epoch ORDER BY 2",
            (_PARTITION_LEADER_EPOCH_AT + 1, topic, partition)).fetchall()
        return [(as_int(epoch), as_int(first)) for epoch, first in rows]

    def batches(self, topic: str, partition: int) -> Iterator[bytes]:
        """Every batch of the partition from its log start, in offset order."""
        yield from self.batches_from(topic, partition, 0)

    def batches_from(self, topic: str, partition: int, offset: int) -> Iterator[bytes]:
        """Each batch whose last offset is at or past `offset`, in offset order, streamed
        through a server-side cursor (its transaction ends when the iteration does)."""
        with (self._db.use() as db, db.transaction(),
              db.cursor(name=f"read_{uuid.uuid4().hex}") as cursor):
            cursor.itersize = 256
            cursor.execute(
                "SELECT data FROM batches WHERE topic = %s AND partition = %s "
                "AND last_offset >= %s ORDER BY base_offset", (topic, partition, offset))
            for row in cursor:
                yield as_bytes(row[0])
