"""`kgroups records decode` and `kgroups offsets dump`: __consumer_offsets records as JSON.

Both print Kafka's field names (see `record_to_json`). Bad input ends the command with exit code
1 and one line on stderr naming what could not be read and at which byte; a dump prints every
record it could read before that point, so nothing readable is lost.
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

_PARTITION_DIR = re.compile(r"-(\d+)$")


class _InputError(Exception):
    """One line for stderr: what could not be read, and where."""


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
    decode.set_defaults(handler=run_decode)

    offsets = subparsers.add_parser("offsets", help="read __consumer_offsets segment files")
    offsets_commands = offsets.add_subparsers(dest="offsets_command", required=True)
    dump = offsets_commands.add_parser(
        "dump",
        help="print every record of __consumer_offsets segments as JSON lines",
        description="Reads segment files or partition directories (kgroups' or a Kafka "
        "broker's) and prints one JSON object per record.",
    )
    dump.add_argument("paths", nargs="+", metavar="PATH", help="segment .log file or directory")
    dump.set_defaults(handler=run_dump)


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
    try:
        for path, partition in _segment_files([Path(p) for p in args.paths]):
            for line in _dump_segment(path, partition):
                sys.stdout.write(line)
    except _InputError as error:
        sys.stdout.flush()
        return _fail("offsets dump", str(error))
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


def _segment_files(paths: list[Path]) -> Iterator[tuple[Path, int | None]]:
    for path in paths:
        if path.is_dir():
            files = sorted(path.glob("*.log"))
            if not files:
                raise _InputError(f"{path}: no segment (.log) files in this directory")
            yield from ((file, _partition_of(path)) for file in files)
        elif path.is_file():
            yield path, _partition_of(path.parent)
        else:
            raise _InputError(f"{path}: no such file or directory")


def _partition_of(directory: Path) -> int | None:
    """Kafka names partition directories `<topic>-<partition>`; elsewhere it is unknown."""
    match = _PARTITION_DIR.search(directory.resolve().name)
    return int(match.group(1)) if match else None


def _dump_segment(path: Path, partition: int | None) -> Iterator[str]:
    with open(path, "rb") as handle:
        if not handle.seek(0, 2):
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                for offset, timestamp, key, value in iter_records_raw(data):  # type: ignore[arg-type]
                    if key is None:
                        raise _InputError(f"{path}: record at offset {offset} has no key")
                    try:
                        record = _record_json(key, value)
                    except _InputError as error:
                        raise _InputError(f"{path}: record at offset {offset}: {error}") from None
                    record = {"partition": partition, "offset": offset, "timestamp": timestamp,
                              **record}
                    yield json.dumps(record) + "\n"
            except BatchCorruptError as error:
                raise _InputError(f"{path}: {error}") from None


def _fail(command: str, message: str) -> int:
    print(f"kgroups {command}: {message}", file=sys.stderr)
    return 1
