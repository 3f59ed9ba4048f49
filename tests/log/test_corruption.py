"""Damage inside a segment that is not the last: the log refuses to open, naming file and byte.

Unlike a torn tail (the active segment after a crash), a bad batch in an older segment was
acknowledged once and is followed by more that were: cutting there would lose them.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager, PartitionOfflineError
from kgroups.log.partition_log import PartitionLog
from kgroups.log.segment import SegmentCorruptError

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=100)
STRAY = bytes(range(200, 237))  # 37 bytes, none of them a plausible magic byte


def written_log(directory: Path, segments: int = 3) -> list[tuple[int, int, int, int]]:
    """Fill a log to `segments` segments; the batch positions of its first segment."""
    log = PartitionLog.open(directory, SMALL)
    while len(log.segments()) < segments:
        n = log.log_end_offset
        log.append_batch(build_batch([(b"k%d" % n, b"v" * 60, 1000 + n)]))
    log.flush()
    positions = log.segments()[0].batch_positions()
    log.close()
    return positions


def insert(path: Path, at: int, data: bytes) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[:at] + data + raw[at:])


@pytest.mark.parametrize("where", ["between batches", "inside a batch"])
def test_stray_bytes_in_an_older_segment_fail_the_open_with_file_and_byte(
    tmp_path: Path, where: str
) -> None:
    directory = tmp_path / "t-0"
    positions = written_log(directory)
    position, _base, _last, size = positions[3]
    first = directory / f"{0:020d}.log"
    at = position if where == "between batches" else position + 70  # past its header
    reported = position if where == "between batches" else position + size
    insert(first, at, STRAY)
    started = time.monotonic()
    with pytest.raises(SegmentCorruptError) as raised:
        PartitionLog.open(directory, SMALL)
    assert time.monotonic() - started < 5
    assert (raised.value.path, raised.value.position) == (first, reported)
    assert f"corrupt batch in {first} at byte {reported}" in str(raised.value)
    assert first.stat().st_size == positions[-1][0] + positions[-1][3] + len(STRAY)  # untouched


def test_a_damaged_older_segment_is_caught_with_or_without_its_index(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    positions = written_log(directory)
    (directory / f"{0:020d}.index").unlink()
    insert(directory / f"{0:020d}.log", positions[2][0], STRAY)
    with pytest.raises(SegmentCorruptError, match=f"at byte {positions[2][0]}"):
        PartitionLog.open(directory, SMALL)


def test_the_manager_keeps_a_damaged_partition_offline_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    positions = written_log(tmp_path / "events-0")
    written_log(tmp_path / "events-1")
    insert(tmp_path / "events-0" / f"{0:020d}.log", positions[1][0], STRAY)
    manager = LogManager(tmp_path, SMALL)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            with pytest.raises(PartitionOfflineError, match="events-0 is offline: corrupt batch"):
                manager.get("events", 0)
    lines = [r.getMessage() for r in caplog.records if "offline" in r.getMessage()]
    assert len(lines) == 1
    assert f"at byte {positions[1][0]}" in lines[0] and "00000000000000000000.log" in lines[0]
    assert set(manager.offline()) == {("events", 0)}
    healthy = manager.get("events", 1)  # the other partition is not affected
    assert healthy is not None and healthy.log_end_offset > 0
    manager.close()


def test_a_clean_log_still_opens_after_the_check(tmp_path: Path) -> None:
    positions = written_log(tmp_path / "t-0", segments=4)
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    assert log.segments()[0].batch_positions() == positions
    log.close()
