"""What every broker of a cluster serves alike besides records: topic settings, ACLs, SCRAM
credentials and dynamic broker settings, in the forms the broker keeps on disk, so that a
broker can swap its files for these tables without converting anything:

- topic settings: per topic, the overrides as name -> value strings (`__topic_configs/*.cfg`);
- ACLs: rows in the field order of the broker's AclBinding (resource type, resource name,
  pattern type, principal, host, operation, permission; Kafka's wire codes), a set as
  Kafka's bindings are;
- SCRAM credentials: per user and mechanism, salt, StoredKey, ServerKey and iterations (the
  broker's ScramCredential fields): never a password;
- dynamic broker settings: per resource, name -> value, the resource being Kafka's: "" for the
  cluster default, the node id for one broker.

Every write bumps `catalog_version` in its own transaction and announces the new version with
NOTIFY on CATALOG_CHANNEL when it commits: a broker that LISTENs reloads at once, and one that
missed a notification (its listening connection dropped) still sees the counter move when it
polls (notifications.py). Topics themselves (names, ids, partition counts) are in the store's
`topics` table and announced the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kgroups.storage.columns import Connection, as_bytes, as_int, as_str
from kgroups.storage.database import Database

CATALOG_CHANNEL = "kgroups_catalog"

# resource type, resource name, pattern type, principal, host, operation, permission
AclRow = tuple[int, str, int, str, str, int, int]
# salt, StoredKey, ServerKey, iterations
ScramRow = tuple[bytes, bytes, bytes, int]
CLUSTER_DEFAULT_RESOURCE = ""

_ACL_COLUMNS = "resource_type, resource_name, pattern_type, principal, host, operation, permission"


def bump_catalog_version(connection: Connection) -> int:
    """Within the caller's transaction: the next catalog version, announced at commit."""
    row = connection.execute(
        "UPDATE catalog_version SET version = version + 1 RETURNING version").fetchone()
    assert row is not None  # the schema inserts the only row
    version = as_int(row[0])
    connection.execute("SELECT pg_notify(%s, %s)", (CATALOG_CHANNEL, str(version)))
    return version


class Catalog:
    def __init__(self, database: Database) -> None:
        self._db = database

    def version(self) -> int:
        """The catalog's version now: a poller compares it with the one it last loaded."""
        row = self._db.execute("SELECT version FROM catalog_version").fetchone()
        assert row is not None
        return as_int(row[0])

    # ------------------------------------------------------------------ topic settings

    def topic_configs(self) -> dict[str, dict[str, str]]:
        """Each topic's overrides (topics without any are absent)."""
        return self._settings("topic_configs", "topic")

    def set_topic_configs(self, topic: str, overrides: Mapping[str, str]) -> int:
        """Replace the topic's overrides with `overrides`; the new catalog version."""
        return self._replace_settings("topic_configs", "topic", topic, overrides)

    # ------------------------------------------------------------------ ACLs

    def acls(self) -> list[AclRow]:
        rows = self._db.execute(f"SELECT {_ACL_COLUMNS} FROM acls ORDER BY {_ACL_COLUMNS}")
        return [(as_int(rt), as_str(rn), as_int(pt), as_str(pr), as_str(h), as_int(op),
                 as_int(pe)) for rt, rn, pt, pr, h, op, pe in rows.fetchall()]

    def add_acls(self, bindings: Iterable[AclRow]) -> int:
        """Add the bindings (ones already there stay once); the new catalog version."""
        with self._db.use() as db, db.transaction():
            _execute_many(db, f"INSERT INTO acls ({_ACL_COLUMNS}) VALUES "
                          f"(%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                          list(bindings))
            return bump_catalog_version(db)

    def remove_acls(self, bindings: Iterable[AclRow]) -> int:
        """Remove exactly these bindings (the broker matched DeleteAcls' filters against
        `acls()`); the new catalog version."""
        with self._db.use() as db, db.transaction():
            _execute_many(db, f"DELETE FROM acls WHERE ({_ACL_COLUMNS}) = "
                          f"(%s, %s, %s, %s, %s, %s, %s)", list(bindings))
            return bump_catalog_version(db)

    # ------------------------------------------------------------------ SCRAM

    def scram_credentials(self) -> dict[str, dict[str, ScramRow]]:
        """user -> mechanism (SCRAM-SHA-256, SCRAM-SHA-512) -> credential."""
        out: dict[str, dict[str, ScramRow]] = {}
        for user, mechanism, salt, stored, server, iterations in self._db.execute(
                "SELECT username, mechanism, salt, stored_key, server_key, iterations "
                "FROM scram_credentials ORDER BY username, mechanism"):
            out.setdefault(as_str(user), {})[as_str(mechanism)] = (
                as_bytes(salt), as_bytes(stored), as_bytes(server), as_int(iterations))
        return out

    def apply_scram(self, upserts: Iterable[tuple[str, str, ScramRow]],
                    deletions: Iterable[tuple[str, str]]) -> int:
        """AlterUserScramCredentials' changes in one transaction, deletions first (as the
        broker's CredentialStore.apply); the new catalog version."""
        with self._db.use() as db, db.transaction():
            _execute_many(
                db, "DELETE FROM scram_credentials WHERE username = %s AND mechanism = %s",
                list(deletions))
            _execute_many(
                db, "INSERT INTO scram_credentials (username, mechanism, salt, stored_key, "
                "server_key, iterations) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (username, mechanism) DO UPDATE SET salt = excluded.salt, "
                "stored_key = excluded.stored_key, server_key = excluded.server_key, "
                "iterations = excluded.iterations",
                [(user, mechanism, *credential) for user, mechanism, credential in upserts])
            return bump_catalog_version(db)

    # ------------------------------------------------------------------ dynamic broker settings

    def broker_configs(self) -> dict[str, dict[str, str]]:
        """resource ("" the cluster default, else a node id) -> its dynamic settings."""
        return self._settings("broker_configs", "resource")

    def set_broker_configs(self, resource: str, layer: Mapping[str, str]) -> int:
        """Replace one resource's dynamic settings with `layer`; the new catalog version."""
        return self._replace_settings("broker_configs", "resource", resource, layer)

    # `table` and `owner` are this module's constants, never a caller's text.
    def _settings(self, table: str, owner: str) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for key, name, value in self._db.execute(
                f"SELECT {owner}, name, value FROM {table} ORDER BY {owner}, name"):
            out.setdefault(as_str(key), {})[as_str(name)] = as_str(value)
        return out

    def _replace_settings(self, table: str, owner: str, key: str,
                          settings: Mapping[str, str]) -> int:
        with self._db.use() as db, db.transaction():
            db.execute(f"DELETE FROM {table} WHERE {owner} = %s", (key,))
            _execute_many(db, f"INSERT INTO {table} ({owner}, name, value) VALUES (%s, %s, %s)",
                          [(key, name, value) for name, value in settings.items()])
            return bump_catalog_version(db)


def _execute_many(connection: Connection, statement: str,
                  rows: Sequence[tuple[object, ...]]) -> None:
    if rows:
        with connection.cursor() as cursor:
            cursor.executemany(statement, rows)
