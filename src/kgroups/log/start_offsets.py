"""The log start offsets DeleteRecords moved, kept in Kafka's `log-start-offset-checkpoint`.

A partition's log start offset is normally the base offset of its first segment; DeleteRecords
moves it further, into or past that segment, and nothing in the segment files says so. Kafka
keeps those starts in one file per log directory, and so does kgroups, in Kafka's format (so a
copy of a Kafka log directory keeps its starts, and Kafka reads kgroups'):

    0                      version
    2                      number of entries
    <topic> <partition> <offset>
    ...

Only partitions whose start lies above their first segment's base are listed, as Kafka lists
them. The file is replaced whole (written beside, fsynced, renamed, directory fsynced), so a
crash leaves the old or the new file, never a mix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CHECKPOINT_FILE = "log-start-offset-checkpoint"
_VERSION = 0


class CheckpointError(ValueError):
    """The checkpoint file is not in Kafka's format; names the file and the line."""


def read_log_start_offsets(data_dir: Path) -> dict[tuple[str, int], int]:
    """(topic, partition) -> log start offset; empty when there is no file yet."""
    path = data_dir / CHECKPOINT_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}

    def bad(line_number: int, why: str) -> CheckpointError:
        return CheckpointError(f"{path} line {line_number}: {why}")

    if not lines:  # Kafka leaves the file empty at times (seen after a kill -9) and reads it so
        return {}
    if len(lines) < 2:
        raise bad(len(lines) + 1, "expected a version line and an entry count")
    if lines[0].strip() != str(_VERSION):
        raise bad(1, f"unsupported version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise bad(2, f"entry count {lines[1].strip()!r} is not a number") from None
    entries = lines[2:]
    if len(entries) != count:
        raise bad(2, f"says {count} entries, the file has {len(entries)}")
    starts: dict[tuple[str, int], int] = {}
    for number, line in enumerate(entries, start=3):
        fields = line.split(" ")
        if len(fields) != 3:
            raise bad(number, f"expected '<topic> <partition> <offset>', got {line!r}")
        topic, partition, offset = fields
        try:
            starts[(topic, int(partition))] = int(offset)
        except ValueError:
            raise bad(number, f"partition and offset must be numbers, got {line!r}") from None
    return starts


def write_log_start_offsets(data_dir: Path, starts: Mapping[tuple[str, int], int]) -> None:
    """Replace the checkpoint with `starts`, durably."""
    path = data_dir / CHECKPOINT_FILE
    side = path.with_name(CHECKPOINT_FILE + ".tmp")
    lines = [str(_VERSION), str(len(starts))]
    lines += [f"{topic} {partition} {offset}"
              for (topic, partition), offset in sorted(starts.items())]
    try:
        with open(side, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(side, path)
    except OSError:
        side.unlink(missing_ok=True)
        raise
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
