"""How a broker learns, within a bounded time, what other brokers changed: the catalog (topics,
settings, ACLs, SCRAM users), the ends of partition logs (to wake Fetch long polls) and
released and taken leases (to take a handed-back or abandoned partition, and to name its new
leader, without waiting for the next heartbeat).

A listener holds a connection of its own that LISTENs on the catalog and append channels;
PostgreSQL delivers a NOTIFY to every listener when the writing transaction commits, usually
within milliseconds. Notifications are not stored, though: one sent while the listener's
connection was down is lost. So each `poll` also reads the catalog's version counter once its
poll interval has passed without a catalog notification (`kgroups.catalog.poll.interval.ms`,
default 1000): a catalog change is seen within that interval even with no notification at
all. Appends and releases need no such fallback: a long poll ends at its max.wait.ms and
re-reads the log anyway, and the lease step runs every heartbeat regardless.

The listener's connection comes back by itself (database.py): `poll` raises
StorageUnavailableError while PostgreSQL is away, and the first `poll` on a new connection
LISTENs again and reports the catalog version and moved leases at once, as if both had
changed, since anything may have happened while nobody listened: the broker re-reads its
catalog and runs its lease step.

Blocking (psycopg's notifies generator): the broker runs `poll` on a thread of its own and
hands the changes to its event loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import psycopg

from kgroups.storage.catalog import CATALOG_CHANNEL, Catalog
from kgroups.storage.columns import Connection
from kgroups.storage.database import Database
from kgroups.storage.postgresql import APPEND_CHANNEL, LEASE_CHANNEL

CATALOG_POLL_INTERVAL_MS = 1000  # kgroups.catalog.poll.interval.ms


@dataclass
class Changes:
    """What moved since the last poll: the catalog version when it changed, each partition's
    newest announced next offset, and whether some broker released or took leases (run the
    lease step now: a partition may be waiting for this broker, and the view of who leads
    what is stale)."""
    catalog_version: int | None = None
    log_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    leases_moved: bool = False


def _listen(connection: Connection) -> None:
    for channel in (CATALOG_CHANNEL, APPEND_CHANNEL, LEASE_CHANNEL):
        connection.execute(f"LISTEN {channel}")


class ChangeListener:
    def __init__(self, database: Database,
                 poll_interval_ms: int = CATALOG_POLL_INTERVAL_MS) -> None:
        """Starts from the catalog's version now (StorageUnavailableError if unreachable)."""
        self._db = database
        self._catalog = Catalog(database)
        self._known = self._catalog.version()
        self._connection_seen = database.connections_opened
        self._poll_interval_s = poll_interval_ms / 1000
        self._last_check = time.monotonic()

    @classmethod
    def open(cls, url: str, poll_interval_ms: int = CATALOG_POLL_INTERVAL_MS
             ) -> ChangeListener:
        """Listen on a connection of its own."""
        return cls(Database(url, on_connect=_listen), poll_interval_ms)

    def poll(self, timeout_s: float) -> Changes:
        """Wait up to `timeout_s` (at most the poll interval) for changes, returning early at
        the first notification; the catalog counter is read when the interval ran out without
        one, so a lost notification delays a change by one interval at most. On a new
        connection (the last one was lost) everything counts as changed, at once."""
        changes = Changes()
        wait = max(0.0, min(timeout_s, self._poll_interval_s))
        with self._db.use() as connection:
            if self._db.connections_opened != self._connection_seen:
                self._connection_seen = self._db.connections_opened
                changes.catalog_version = self._known = self._catalog.version()
                changes.leases_moved = True
                self._last_check = time.monotonic()
                return changes
            for notice in connection.notifies(timeout=wait, stop_after=1):
                self._note(notice, changes)
            for notice in connection.notifies(timeout=0):  # whatever else already arrived
                self._note(notice, changes)
        now = time.monotonic()
        if changes.catalog_version is None and now - self._last_check >= self._poll_interval_s:
            version = self._catalog.version()
            if version != self._known:
                changes.catalog_version = self._known = version
        if changes.catalog_version is not None or now - self._last_check >= self._poll_interval_s:
            self._last_check = now
        return changes

    def _note(self, notice: psycopg.Notify, changes: Changes) -> None:
        if notice.channel == CATALOG_CHANNEL:
            version = int(notice.payload)
            if version > self._known:
                changes.catalog_version = self._known = version
        elif notice.channel == APPEND_CHANNEL:
            partition, end, topic = notice.payload.split(":", 2)
            key = (topic, int(partition))
            changes.log_ends[key] = max(int(end), changes.log_ends.get(key, 0))
        elif notice.channel == LEASE_CHANNEL:
            changes.leases_moved = True

    def close(self) -> None:
        self._db.close()
