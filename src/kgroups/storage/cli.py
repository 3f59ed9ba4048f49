"""`kgroups storage import DATA_DIR --to URL` and `kgroups storage export URL --to DATA_DIR`:
a data directory's topics and records into a PostgreSQL store and back (transfer.py). A
store that cannot be reached, a directory that is not there or not empty, a topic already in
the store: one line and exit code 2, with nothing moved."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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
        "storage", help="move topics and records between a data directory and PostgreSQL")
    commands = storage.add_subparsers(dest="storage_command", required=True)
    into = commands.add_parser(
        "import", help="copy a data directory's topics and records into a PostgreSQL store",
        description="Every topic of DATA_DIR (kgroups' or a Kafka broker's log directory) with "
                    "its id, partitions and record batches byte for byte; the store must not "
                    "hold any of those topics yet.")
    into.add_argument("data_dir", type=Path, metavar="DATA_DIR", help="the data directory")
    into.add_argument("--to", required=True, metavar="URL",
                      help="the store, postgresql://USER[:PASSWORD]@HOST:PORT/DATABASE")
    into.set_defaults(run=run_import)
    out = commands.add_parser(
        "export", help="write a PostgreSQL store's topics and records as a data directory",
        description="Kafka's segment files, which `kgroups serve --data-dir` and Kafka's "
                    "DumpLogSegments read; DATA_DIR must be new or empty.")
    out.add_argument("url", metavar="URL", help="the store, postgresql://...")
    out.add_argument("--to", required=True, type=Path, metavar="DATA_DIR",
                     help="the directory to write")
    out.set_defaults(run=run_export)


def run_import(args: Any) -> int:
    return _run(args.to, lambda store: import_data_dir(args.data_dir, store), "imported",
                f"from {args.data_dir} into {redacted(args.to)}")


def run_export(args: Any) -> int:
    return _run(args.url, lambda store: export_data_dir(store, args.to), "exported",
                f"from {redacted(args.url)} into {args.to}")


def _run(url: str, move: Any, verb: str, where: str) -> int:
    try:
        store = PostgresStore.open(url)
    except (StorageUnavailableError, SchemaVersionError) as exc:
        print(f"kgroups storage: {exc}", file=sys.stderr)
        return 2
    try:
        summary: TransferSummary = move(store)
    except TransferError as exc:
        print(f"kgroups storage: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(f"{verb} {summary.topics} topics, {summary.partitions} partitions, {summary.batches} "
          f"batches ({summary.bytes:,} bytes) {where}")
    if summary.left_behind:
        print("not moved (kgroups storage moves topics and their records only): "
              + ", ".join(summary.left_behind), file=sys.stderr)
    return 0
