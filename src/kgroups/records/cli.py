"""`kgroups records decode` and `kgroups offsets dump`: __consumer_offsets records as JSON.

Both print Kafka's field names (see `record_to_json`). Bad input ends the command with exit code
1 and one line on stderr naming what could not be read and at which byte; a dump prints every
record it could read before that point, so nothing readable is lost. A PATH that is not there,
or holds no segment, is a usage error: one line and exit code 2, before anything is printed.
`offsets dump` also reads a kgroups PostgreSQL store (kgroups.storage) given by its URL; one that
cannot be reached is a usage error too, named without its password.
"""

from __future__ import annotations

import argparse
import json
import mmap
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kgroups.log.batch import BatchCorruptError, iter_records_raw
from kgroups.records.codec import (
    RecordDecodeError,
    decode_key,
    decode_value,
    record_to_json,
    value_version,
)
from kgroups.records.schema import OffsetsRecord, UnknownKey
from kgroups.storage.postgresql import (
    PostgresStore,
    StorageUnavailableError,
    is_store_url,
    redacted,
)
from kgroups.storage.schema import SchemaVersionError

_PARTITION_DIR = re.compile(r"-(\d+)$")
# The partition directories a data dir (kgroups' or a Kafka broker's log dir) holds for the
# offsets topic; Kafka's `-delete` and `-future` directories do not match.
_OFFSETS_PARTITION_DIR = re.compile(r"^__consumer_offsets-(\d+)$")
_OFFSETS_TOPIC = "__consumer_offsets"


class _InputError(Exception):
    """One line for stderr: what could not be read, and where."""


class _PathError(_InputError):
    """A PATH argument names nothing to dump: the command was called wrongly (exit code 2)."""


def register(subparsers: Any) -> None:
    records = subparsers.add_parser("records", help="decode __consumer_offsets records")
    records_commands = records.add_subparsers(dest="records_command", required=True)
    decode = records_commands.add_parser(
        "decode",
        help="decode one record's key (and value) from hex to JSON",
        description="Prints {key: {type, data}, value: {version, data} | null} as one JSON line.",
    )
    decode.add_argument("--key", required=True, help="the record key, hex")
    decode.add_argument("--value", help="the record value, hex (omit for no value)")
    decode.set_defaults(run=run_decode)

    offsets = subparsers.add_parser("offsets", help="read __consumer_offsets segment files")
    offsets_commands = offsets.add_subparsers(dest="offsets_command", required=True)
    dump = offsets_commands.add_parser(
        "dump",
        help="print every record of __consumer_offsets segments as JSON lines",
        description="Reads segment files, partition directories or a whole data dir (kgroups' "
        "or a Kafka broker's log dir: its __consumer_offsets-<partition> directories, in "
        "partition order), or a kgroups PostgreSQL store by its URL, and prints one JSON object "
        "per record.",
    )
    dump.add_argument("paths", nargs="+", metavar="PATH",
                      help="segment .log file, __consumer_offsets partition directory or data "
                      "dir; or, alone, a kgroups store's URL, postgresql://USER[:PASSWORD]@HOST:"
                      "PORT/DATABASE")
    dump.set_defaults(run=run_dump)


def run_decode(args: argparse.Namespace) -> int:
    try:
        key_bytes = _hex("--key", args.key)
        value_bytes = None if args.value is None else _hex("--value", args.value)
        out = _record_json(key_bytes, value_bytes)
    except _InputError as error:
        return _fail("records decode", str(error))
    print(json.dumps(out))
    return 0


def run_dump(args: argparse.Namespace) -> int:
    if any(is_store_url(path) for path in args.paths):
        return _run_store_dump(args.paths)
    # Every PATH is listed before the first line is printed, so that a mistyped last PATH does
    # not end a long dump.
    try:
        segments = [segment for p in args.paths for segment in _segment_files(Path(p))]
    except _PathError as error:
        print(f"kgroups offsets dump: {error}", file=sys.stderr)
        return 2
    try:
        for path, partition in segments:
            for line in _dump_segment(path, partition):
                sys.stdout.write(line)
    except _InputError as error:
        sys.stdout.flush()
        return _fail("offsets dump", str(error))
    return 0


def _run_store_dump(paths: list[str]) -> int:
    """The dump of a kgroups PostgreSQL store's __consumer_offsets, partition by partition in
    offset order, as its segment files would print: the same batches, byte for byte."""
    if len(paths) != 1:
        print("kgroups offsets dump: a PostgreSQL URL is dumped alone, not with other PATHs: "
              + ", ".join(redacted(path) for path in paths), file=sys.stderr)
        return 2
    try:
        store = PostgresStore.open(paths[0])
    except (StorageUnavailableError, SchemaVersionError) as error:
        print(f"kgroups offsets dump: {error}", file=sys.stderr)
        return 2
    try:
        found = store.topics().get(_OFFSETS_TOPIC)
        if found is None:
            print(f"kgroups offsets dump: no {_OFFSETS_TOPIC} topic in the store at "
                  f"{redacted(paths[0])}", file=sys.stderr)
            return 2
        for partition in range(found[1]):
            name = f"{_OFFSETS_TOPIC}-{partition} (PostgreSQL)"
            for batch in store.batches(_OFFSETS_TOPIC, partition):
                for line in _dump_records(batch, name, partition):
                    sys.stdout.write(line)
    except _InputError as error:
        sys.stdout.flush()
        return _fail("offsets dump", str(error))
    finally:
        store.close()
    return 0


def _hex(option: str, text: str) -> bytes:
    cleaned = text.strip().removeprefix("0x")
    try:
        return bytes.fromhex(cleaned)
    except ValueError as error:
        raise _InputError(f"{option} is not hex: {error}") from None


def _record_json(key_bytes: bytes, value_bytes: bytes | None) -> dict[str, Any]:
    try:
        key = decode_key(key_bytes)
    except RecordDecodeError as error:
        raise _InputError(f"key: {error}") from None
    try:
        value = decode_value(key, value_bytes)
        version = None
        if value_bytes is not None and not isinstance(key, UnknownKey):
            version = value_version(value_bytes)
        return record_to_json(OffsetsRecord(key, value), version)
    except RecordDecodeError as error:
        raise _InputError(f"value: {error}") from None


def _segment_files(path: Path) -> list[tuple[Path, int | None]]:
    """The segments a PATH names, in log order: a file itself; a partition directory's .log
    files; a data dir's __consumer_offsets partitions, lowest partition first."""
    if path.is_file():
        return [(path, _partition_of(path.parent))]
    if not path.is_dir():
        raise _PathError(f"{path}: no such file or directory")
    files = sorted(path.glob("*.log"))
    if files:
        return [(file, _partition_of(path)) for file in files]
    partitions = sorted(
        (int(match.group(1)), child) for child in path.iterdir()
        if child.is_dir() and (match := _OFFSETS_PARTITION_DIR.match(child.name))
    )
    found: list[tuple[Path, int | None]] = [(file, number) for number, child in partitions
             for file in sorted(child.glob("*.log"))]
    if not found:
        raise _PathError(f"{path}: neither a segment (.log) file, a partition directory nor a "
                         "data dir with __consumer_offsets-<partition> segments")
    return found


def _partition_of(directory: Path) -> int | None:
    """Kafka names partition directories `<topic>-<partition>`; elsewhere it is unknown."""
    match = _PARTITION_DIR.search(directory.resolve().name)
    return int(match.group(1)) if match else None


def _dump_segment(path: Path, partition: int | None) -> Iterator[str]:
    with open(path, "rb") as handle:
        if not handle.seek(0, 2):
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield from _dump_records(data, str(path), partition)  # type: ignore[arg-type]


def _dump_records(data: bytes, name: str, partition: int | None) -> Iterator[str]:
    """One JSON line per record of the batches in `data`; errors say `name` and where."""
    try:
        for offset, timestamp, key, value in iter_records_raw(data):
            if key is None:
                raise _InputError(f"{name}: record at offset {offset} has no key")
            try:
                record = _record_json(key, value)
            except _InputError as error:
                raise _InputError(f"{name}: record at offset {offset}: {error}") from None
            record = {"partition": partition, "offset": offset, "timestamp": timestamp,
                      **record}
            yield json.dumps(record) + "\n"
    except BatchCorruptError as error:
        raise _InputError(f"{name}: {error}") from None


def _fail(command: str, message: str) -> int:
    print(f"kgroups {command}: {message}", file=sys.stderr)
    return 1
