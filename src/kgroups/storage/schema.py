"""The tables a store keeps, created on first use and versioned: a store written by a newer
kgroups is refused rather than misread, and an older one is migrated in place.

Version 1 (records and leases):
- `topics`: name, Kafka topic id, partition count.
- `partitions`: per partition, the leader (a node id, -1 for none), its leader epoch (bumped at
  every change of leader), when its lease ends (epoch milliseconds), the log start offset and
  the next offset to assign.
- `batches`: each RecordBatch v2 whole, keyed by its base offset, with its last offset for
  range reads.

Version 2 (a cluster of brokers) adds, leaving version 1's tables as they were:
- `brokers`: the registry, one row per node id with its listener, rack, incarnation and last
  heartbeat (database clock).
- `topic_configs`, `acls`, `scram_credentials`, `broker_configs`: the catalog every broker
  serves, in the forms the broker keeps on disk.
- `catalog_version`: one counter bumped by every catalog write, announced with NOTIFY.
- `producer_ids`: the next producer id no broker has been handed, starting at the clock in
  milliseconds (above what a single broker's wall-clock allocator handed out before).

Version 3 (transactions) adds:
- `aborted_transactions`: per partition, each transaction that ended with ABORT (producer id,
  first offset, the ABORT marker's offset, the last stable offset then): the facts a file log
  keeps in its `.txnindex` files, for read_committed Fetch's aborted_transactions list. Rows
  go with their partition, and with DeleteRecords once their marker is below the log start.
"""

from __future__ import annotations

import psycopg

SCHEMA_VERSION = 3

_VERSION_1 = """
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

_VERSION_2 = """
CREATE TABLE IF NOT EXISTS brokers (
    node_id integer PRIMARY KEY,
    host text NOT NULL,
    port integer NOT NULL,
    rack text,
    incarnation uuid NOT NULL,
    epoch bigint NOT NULL,
    heartbeat_ms bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS topic_configs (
    topic text NOT NULL REFERENCES topics (name) ON DELETE CASCADE,
    name text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (topic, name)
);
CREATE TABLE IF NOT EXISTS acls (
    resource_type integer NOT NULL,
    resource_name text NOT NULL,
    pattern_type integer NOT NULL,
    principal text NOT NULL,
    host text NOT NULL,
    operation integer NOT NULL,
    permission integer NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                 permission)
);
CREATE TABLE IF NOT EXISTS scram_credentials (
    username text NOT NULL,
    mechanism text NOT NULL,
    salt bytea NOT NULL,
    stored_key bytea NOT NULL,
    server_key bytea NOT NULL,
    iterations integer NOT NULL,
    PRIMARY KEY (username, mechanism)
);
CREATE TABLE IF NOT EXISTS broker_configs (
    resource text NOT NULL,
    name text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (resource, name)
);
CREATE TABLE IF NOT EXISTS catalog_version (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version bigint NOT NULL
);
INSERT INTO catalog_version (version) VALUES (0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS producer_ids (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    next_id bigint NOT NULL
);
INSERT INTO producer_ids (next_id)
    VALUES ((extract(epoch from clock_timestamp()) * 1000)::bigint) ON CONFLICT DO NOTHING;
"""

_VERSION_3 = """
CREATE TABLE IF NOT EXISTS aborted_transactions (
    topic text NOT NULL,
    partition integer NOT NULL,
    producer_id bigint NOT NULL,
    first_offset bigint NOT NULL,
    last_offset bigint NOT NULL,
    last_stable_offset bigint NOT NULL,
    PRIMARY KEY (topic, partition, last_offset),
    FOREIGN KEY (topic, partition) REFERENCES partitions (topic, partition) ON DELETE CASCADE
);
"""

# What each version adds over the one before (version 1's tables are created whenever missing);
# a store at version N runs the steps after N.
_STEPS = {2: _VERSION_2, 3: _VERSION_3}


class SchemaVersionError(RuntimeError):
    """The store was written by a kgroups with a newer schema."""


def ensure_schema(connection: psycopg.Connection[tuple[object, ...]]) -> None:
    """Bring the store to SCHEMA_VERSION (create it, or run the steps it lacks); refuse a newer
    store. Serialized by an advisory lock, so brokers starting together migrate it once."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(7215001)")
        connection.execute(_VERSION_1)
        row = connection.execute("SELECT max(version) FROM kgroups_schema").fetchone()
        version = row[0] if row is not None else None
        if version is not None and (not isinstance(version, int) or version > SCHEMA_VERSION):
            raise SchemaVersionError(
                f"the store has schema version {version}; this kgroups reads up to "
                f"{SCHEMA_VERSION}: upgrade kgroups")
        if version == SCHEMA_VERSION:
            return
        for step in range((version or 1) + 1, SCHEMA_VERSION + 1):
            connection.execute(_STEPS[step])
        connection.execute("DELETE FROM kgroups_schema")
        connection.execute("INSERT INTO kgroups_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
