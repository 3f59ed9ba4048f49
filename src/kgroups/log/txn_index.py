"""A segment's aborted transactions, in the `.txnindex` file Kafka keeps beside it.

Each entry is 34 bytes, Kafka's TransactionIndex layout: version (int16, 0), producer id
(int64), first offset (int64), last offset (int64: the ABORT marker's offset) and the last
stable offset once that transaction ended (int64). An entry belongs to the segment holding its
marker and is appended (and fsynced) when the marker is, so the file reads in marker order and
Kafka's DumpLogSegments reads kgroups' files. A crash can tear only the last entry: `load`
cuts a tail that is not a whole entry, and drops entries past the log's end (a marker cut off
with a torn log tail).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """A transaction that ended with ABORT in this partition: read_committed consumers drop
    `producer_id`'s records between `first_offset` and `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def append_entry(path: Path, entry: AbortedTransaction) -> None:
    """Add one entry at the end of the file (created on the first abort), durably."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, ENTRY.pack(VERSION, entry.producer_id, entry.first_offset,
                                entry.last_offset, entry.last_stable_offset))
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path: Path, end_offset: int) -> list[AbortedTransaction]:
    """The file's entries whose marker is below `end_offset`; a torn tail or entries past the
    end are cut from the file (said in one log line)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    entries: list[AbortedTransaction] = []
    keep = 0
    for position in range(0, len(raw) - ENTRY.size + 1, ENTRY.size):
        version, producer_id, first, last, stable = ENTRY.unpack_from(raw, position)
        if version != VERSION or last >= end_offset:
            break
        entries.append(AbortedTransaction(producer_id, first, last, stable))
        keep = position + ENTRY.size
    if keep < len(raw):
        logger.warning("cut %s back to byte %d (%d bytes of torn or cut-off entries dropped)",
                       path, keep, len(raw) - keep)
        os.truncate(path, keep)
    return entries
