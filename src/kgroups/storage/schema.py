"""The tables a store keeps, created on first use and versioned: a store written by a newer
kgroups is refused rather than misread.

- `topics`: name, Kafka topic id, partition count.
- `partitions`: per partition, the leader (a node id, -1 for none), its leader epoch (bumped at
  every change of leader), when its lease ends (epoch milliseconds), the log start offset and
  the next offset to assign.
- `batches`: each RecordBatch v2 whole, keyed by its base offset, with its last offset for
  range reads.
"""

from __future__ import annotations

import psycopg

SCHEMA_VERSION = 1

_TABLES = """
CREATE TABLE IF NOT EXISTS kgroups_schema (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    name text PRIMARY KEY,
    topic_id uuid NOT NULL UNIQUE,
    partitions integer NOT NULL CHECK (partitions > 0)
);
CREATE TABLE IF NOT EXISTS partitions (
    topic text NOT NULL REFERENCES topics (name) ON DELETE CASCADE,
    partition integer NOT NULL,
    leader integer NOT NULL DEFAULT -1,
    leader_epoch integer NOT NULL DEFAULT 0,
    lease_until_ms bigint NOT NULL DEFAULT 0,
    log_start_offset bigint NOT NULL DEFAULT 0,
    next_offset bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS batches (
    topic text NOT NULL,
    partition integer NOT NULL,
    base_offset bigint NOT NULL,
    last_offset bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (topic, partition, base_offset),
    FOREIGN KEY (topic, partition) REFERENCES partitions (topic, partition) ON DELETE CASCADE
);
"""


class SchemaVersionError(RuntimeError):
    """The store was written by a kgroups with a newer schema."""


def ensure_schema(connection: psycopg.Connection[tuple[object, ...]]) -> None:
    """Create the tables of SCHEMA_VERSION unless they exist; refuse a newer store. Serialized
    by an advisory lock, so brokers starting together create them once."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(7215001)")
        connection.execute(_TABLES)
        row = connection.execute("SELECT max(version) FROM kgroups_schema").fetchone()
        version = row[0] if row is not None else None
        if version is None:
            connection.execute("INSERT INTO kgroups_schema (version) VALUES (%s)",
                               (SCHEMA_VERSION,))
        elif not isinstance(version, int) or version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the store has schema version {version}; this kgroups reads up to "
                f"{SCHEMA_VERSION}: upgrade kgroups")
