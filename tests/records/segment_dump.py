"""Kafka's DumpLogSegments over records kgroups encoded: one segment of an internal topic's
partition 0, printed with a decoder option, read back as (offset, key JSON, payload) lines."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from kafka_harness import run_kafka_tool
from kgroups.log.batch import build_batch

_DUMP = re.compile(r"^\| offset: (\d+) .*? key: (.*) payload: (.*)$")
TIMESTAMP = 1_700_000_000_000


def dump_segment(tmp_path: Path, topic: str, decoder_option: str,
                 records: Sequence[tuple[bytes, bytes | None]]) -> list[tuple[str, str, str]]:
    """The records, in one batch of a segment of `<topic>-0`, as DumpLogSegments prints them
    (a tombstone's payload is "<DELETE>")."""
    directory = tmp_path / f"{topic}-0"
    directory.mkdir()
    segment = directory / "00000000000000000000.log"
    segment.write_bytes(build_batch([(key, value, TIMESTAMP) for key, value in records]))
    result = run_kafka_tool("org.apache.kafka.tools.DumpLogSegments", [
        decoder_option, "--print-data-log", "--files", str(segment)])
    assert result.returncode == 0, result.stderr[-3000:]
    return [_DUMP.match(line).groups()  # type: ignore[misc, union-attr]
            for line in result.stdout.splitlines() if line.startswith("| offset:")]
