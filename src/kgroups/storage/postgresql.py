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
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg

from kgroups.log.batch import check_batch, set_base_offset
from kgroups.storage.schema import ensure_schema

CONNECT_TIMEOUT_S = 5
_NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint"
_PARTITION_LEADER_EPOCH = struct.Struct(">i")
_PARTITION_LEADER_EPOCH_AT = 12


class StorageUnavailableError(OSError):
    """The store cannot be reached or refused the connection."""


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
class PartitionState:
    leader: int
    epoch: int
    log_start_offset: int
    next_offset: int


def is_store_url(text: str) -> bool:
    """Whether a command's argument names a store (libpq's two URL schemes) rather than a path."""
    return text.startswith(("postgresql://", "postgres://"))


def redacted(url: str) -> str:
    """The URL without its password (after the user name, or a `password=` option), for
    messages and logs; taken apart as text, so that a malformed URL is shown too."""
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    netloc = f"{user.split(':', 1)[0]}:***@{host}" if at and ":" in user else parts.netloc
    query = "&".join(
        f"{pair.split('=', 1)[0]}=***" if pair.split("=", 1)[0].lower() == "password" else pair
        for pair in parts.query.split("&")) if parts.query else ""
    return urlunsplit(parts._replace(netloc=netloc, query=query))


class PostgresStore:
    def __init__(self, connection: psycopg.Connection[tuple[object, ...]]) -> None:
        self._db = connection

    @classmethod
    def open(cls, url: str) -> PostgresStore:
        """Connect and create the schema if the database has none; StorageUnavailableError
        naming the server (never its password) when that fails."""
        try:
            connection = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except (psycopg.Error, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StorageUnavailableError(
                f"PostgreSQL at {redacted(url)} is unreachable: {reason}") from exc
        ensure_schema(connection)
        return cls(connection)

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------------ topics

    def create_topic(self, name: str, topic_id: uuid.UUID, partitions: int) -> None:
        with self._db.transaction():
            self._db.execute("INSERT INTO topics (name, topic_id, partitions) VALUES (%s, %s, %s)",
                             (name, topic_id, partitions))
            with self._db.cursor() as cursor:
                cursor.executemany("INSERT INTO partitions (topic, partition) VALUES (%s, %s)",
                                   [(name, index) for index in range(partitions)])

    def topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        rows = self._db.execute("SELECT name, topic_id, partitions FROM topics ORDER BY name")
        return {str(name): (_uuid(topic_id), _int(count))
                for name, topic_id, count in rows.fetchall()}

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        row = self._db.execute(
            "SELECT leader, leader_epoch, log_start_offset, next_offset FROM partitions "
            "WHERE topic = %s AND partition = %s", (topic, partition)).fetchone()
        if row is None:
            raise UnknownPartitionError(f"{topic}-{partition} is not in the store")
        return PartitionState(*(_int(value) for value in row))

    # ------------------------------------------------------------------------ leases

    def take_lease(self, topic: str, partition: int, node: int, lease_ms: int) -> Lease | None:
        """Lead the partition for `lease_ms` from now if it is free, expired or already ours
        (a renewal); a new leader gets the next epoch. None while another node holds it."""
        row = self._db.execute(
            f"UPDATE partitions SET leader_epoch = CASE WHEN leader = %(node)s "
            f"THEN leader_epoch ELSE leader_epoch + 1 END, leader = %(node)s, "
            f"lease_until_ms = {_NOW_MS} + %(lease)s "
            f"WHERE topic = %(topic)s AND partition = %(partition)s "
            f"AND (leader = %(node)s OR lease_until_ms <= {_NOW_MS}) "
            f"RETURNING leader_epoch, lease_until_ms",
            {"node": node, "lease": lease_ms, "topic": topic, "partition": partition},
        ).fetchone()
        if row is None:
            self.partition_state(topic, partition)  # UnknownPartitionError if it is not there
            return None
        return Lease(topic, partition, node, _int(row[0]), _int(row[1]))

    def release_lease(self, lease: Lease) -> bool:
        """Give the partition up at once (a controlled shutdown); False if no longer ours."""
        result = self._db.execute(
            "UPDATE partitions SET lease_until_ms = 0 WHERE topic = %s AND partition = %s "
            "AND leader = %s AND leader_epoch = %s",
            (lease.topic, lease.partition, lease.leader, lease.epoch))
        return result.rowcount == 1

    # ------------------------------------------------------------------------ records

    def append(self, lease: Lease, batch: bytes, base_offset: int | None = None
               ) -> tuple[int, int]:
        """Append one RecordBatch v2 as `lease`'s holder: at the next offset, stamped with the
        leader epoch (Kafka's partitionLeaderEpoch, outside the CRC); or, with `base_offset`
        (moving a log between stores), byte for byte at its own offsets, which must not be
        below the next. FencedError, writing nothing, unless the lease is still current."""
        header, end = check_batch(batch, 0)
        if end != len(batch):
            raise ValueError(f"expected exactly one batch, found {len(batch) - end} more bytes")
        with self._db.transaction():
            state = self._locked(lease)
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
            self._db.execute(
                "INSERT INTO batches (topic, partition, base_offset, last_offset, data) "
                "VALUES (%s, %s, %s, %s, %s)", (lease.topic, lease.partition, base, last, data))
            self._db.execute(
                "UPDATE partitions SET next_offset = %s WHERE topic = %s AND partition = %s",
                (last + 1, lease.topic, lease.partition))
        return base, last

    def set_log_start_offset(self, lease: Lease, offset: int) -> None:
        """Move the log start offset forward (never back) as `lease`'s holder; batches wholly
        below it are deleted, and the next offset is at least it (an empty log starts there)."""
        with self._db.transaction():
            state = self._locked(lease)
            if offset <= state.log_start_offset:
                return
            self._db.execute(
                "UPDATE partitions SET log_start_offset = %s, next_offset = greatest(next_offset,"
                " %s) WHERE topic = %s AND partition = %s",
                (offset, offset, lease.topic, lease.partition))
            self._db.execute(
                "DELETE FROM batches WHERE topic = %s AND partition = %s AND last_offset < %s",
                (lease.topic, lease.partition, offset))

    def _locked(self, lease: Lease) -> PartitionState:
        """The partition's row, locked until the transaction ends; FencedError unless `lease`
        is its current, unexpired lease."""
        row = self._db.execute(
            f"SELECT leader, leader_epoch, log_start_offset, next_offset, "
            f"lease_until_ms > {_NOW_MS} FROM partitions WHERE topic = %s AND partition = %s "
            f"FOR UPDATE", (lease.topic, lease.partition)).fetchone()
        if row is None:
            raise UnknownPartitionError(f"{lease.topic}-{lease.partition} is not in the store")
        leader, epoch, start, next_offset, current = row
        if leader != lease.leader or epoch != lease.epoch or not current:
            raise FencedError(
                f"{lease.topic}-{lease.partition}: node {lease.leader} at epoch {lease.epoch} "
                f"is not the leader (leader {leader}, epoch {epoch}"
                f"{'' if current else ', lease expired'})")
        return PartitionState(_int(leader), _int(epoch), _int(start), _int(next_offset))

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        """Whole batches holding `offset` and after, up to `max_bytes` but at least one."""
        out = bytearray()
        for data in self._batches_from(topic, partition, offset):
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)

    def batches(self, topic: str, partition: int) -> Iterator[bytes]:
        """Every batch of the partition from its log start, in offset order."""
        yield from self._batches_from(topic, partition, 0)

    def _batches_from(self, topic: str, partition: int, offset: int) -> Iterator[bytes]:
        with self._db.transaction(), self._db.cursor(name=f"read_{uuid.uuid4().hex}") as cursor:
            cursor.itersize = 256
            cursor.execute(
                "SELECT data FROM batches WHERE topic = %s AND partition = %s "
                "AND last_offset >= %s ORDER BY base_offset", (topic, partition, offset))
            for row in cursor:
                yield _bytes(row[0])


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"expected an integer column, got {value!r}")
    return value


def _uuid(value: object) -> uuid.UUID:
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"expected a uuid column, got {value!r}")
    return value


def _bytes(value: object) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"expected a bytea column, got {type(value).__name__}")
    return bytes(value)
