"""`kgroups storage import DATA_DIR --to URL` and `kgroups storage export URL --to DATA_DIR`:
a data directory's topics and records into a PostgreSQL store and back (storage.transfer),
with the catalog (topic settings, ACLs, SCRAM users, dynamic broker settings:
catalog_transfer). A store that cannot be reached, a directory that is not there or not
empty, a topic already in the store: one line and exit code 2, with nothing moved. The
command lives with the broker because the catalog's files are the broker's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kgroups.broker.cluster.catalog_transfer import (
    CATALOG_ENTRIES,
    CatalogSummary,
    export_catalog,
    import_catalog,
)
from kgroups.storage.postgresql import (
    PostgresStore,
    StorageUnavailableError,
    redacted,
)
from kgroups.storage.schema import SchemaVersionError
from kgroups.storage.transfer import (
    TransferError,
    TransferSummary,
    export_data_dir,
    import_data_dir,
)


def register(subparsers: Any) -> None:
    storage = subparsers.add_parser(
        "storage",
        help="move topics, records and the catalog between a data directory and PostgreSQL")
    commands = storage.add_subparsers(dest="storage_command", required=True)
    into = commands.add_parser(
        "import",
        help="copy a data directory's topics, records and catalog into a PostgreSQL store",
        description="Every topic of DATA_DIR (kgroups' or a Kafka broker's log directory) with "
                    "its id, partitions and record batches byte for byte, its settings, and the "
                    "ACLs, SCRAM users and dynamic broker settings; the store must not hold any "
                    "of those topics yet.")
    into.add_argument("data_dir", type=Path, metavar="DATA_DIR", help="the data directory")
    into.add_argument("--to", required=True, metavar="URL",
                      help="the store, postgresql://USER[:PASSWORD]@HOST:PORT/DATABASE")
    into.add_argument("--node-id", type=int, default=0, metavar="N",
                      help="the node whose dynamic broker settings DATA_DIR's are (default 0)")
    into.set_defaults(run=run_import)
    out = commands.add_parser(
        "export",
        help="write a PostgreSQL store's topics, records and catalog as a data directory",
        description="Kafka's segment files, which `kgroups serve --data-dir` and Kafka's "
                    "DumpLogSegments read; DATA_DIR must be new or empty.")
    out.add_argument("url", metavar="URL", help="the store, postgresql://...")
    out.add_argument("--to", required=True, type=Path, metavar="DATA_DIR",
                     help="the directory to write")
    out.add_argument("--node-id", type=int, default=0, metavar="N",
                     help="the node whose dynamic broker settings DATA_DIR gets (default 0)")
    out.set_defaults(run=run_export)


def run_import(args: Any) -> int:
    def move(store: PostgresStore) -> tuple[TransferSummary, CatalogSummary]:
        summary = import_data_dir(args.data_dir, store)
        summary.left_behind = [name for name in summary.left_behind
                               if name not in CATALOG_ENTRIES]
        return summary, import_catalog(args.data_dir, store.catalog, set(store.topics()),
                                       args.node_id)

    return _run(args.to, move, "imported", f"from {args.data_dir} into {redacted(args.to)}")


def run_export(args: Any) -> int:
    def move(store: PostgresStore) -> tuple[TransferSummary, CatalogSummary]:
        summary = export_data_dir(store, args.to)
        return summary, export_catalog(store.catalog, args.to, set(store.topics()),
                                       args.node_id)

    return _run(args.url, move, "exported", f"from {redacted(args.url)} into {args.to}")


def _run(url: str, move: Callable[[PostgresStore], tuple[TransferSummary, CatalogSummary]],
         verb: str, where: str) -> int:
    try:
        store = PostgresStore.open(url)
    except (StorageUnavailableError, SchemaVersionError) as exc:
        print(f"kgroups storage: {exc}", file=sys.stderr)
        return 2
    try:
        summary, catalog = move(store)
    except TransferError as exc:
        print(f"kgroups storage: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(f"{verb} {summary.topics} topics, {summary.partitions} partitions, {summary.batches} "
          f"batches ({summary.bytes:,} bytes) and {catalog} {where}")
    left_behind = summary.left_behind + catalog.left_behind
    if left_behind:
        print("not moved: " + ", ".join(left_behind), file=sys.stderr)
    return 0
