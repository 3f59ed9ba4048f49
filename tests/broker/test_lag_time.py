"""Lag in seconds from record bytes: the first data record at or after the committed offset,
past transaction markers, with the documented answers when there is none."""

from __future__ import annotations

from pathlib import Path

from kgroups.broker.lag_time import RecordTimes, first_timestamp, lag_seconds
from kgroups.log.batch import Compression, build_batch
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import PartitionLog

MARKER = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", 500)], base_offset=0,
                     control=True, transactional=True, producer_id=7, producer_epoch=0)
DATA = build_batch([(None, b"a", 1_000), (None, b"b", 2_000), (None, b"c", 3_000)],
                   base_offset=1, compression=Compression.GZIP)


def test_the_record_at_the_committed_offset_inside_a_compressed_batch() -> None:
    assert first_timestamp(DATA, 2) == (2_000, 2)
    assert first_timestamp(MARKER + DATA, 0) == (1_000, 1)  # the marker is stepped over


def test_a_batch_cut_short_at_the_end_and_nothing_after_the_offset() -> None:
    later = build_batch([(None, b"d", 4_000)], base_offset=4)
    assert first_timestamp(DATA + later[:-3], 4) == (None, 3)  # a Fetch may cut the last one
    assert first_timestamp(MARKER, 0) == (None, 0)
    assert first_timestamp(b"", 0) == (None, None)


def test_lag_seconds_rules() -> None:
    assert lag_seconds(10, 10, None, 99_000) == 0.0  # caught up
    assert lag_seconds(12, 10, None, 99_000) == 0.0  # ahead of a truncated log
    assert lag_seconds(5, 10, 90_000, 99_500) == 9.5
    assert lag_seconds(5, 10, 100_000, 99_000) == 0.0  # a producer clock ahead of ours
    assert lag_seconds(5, 10, None, 99_000) is None  # no record to tell
    assert lag_seconds(5, 10, -1, 99_000) is None  # a record written without a timestamp


def test_record_times_read_from_a_log_with_markers(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    log.append_batch(MARKER)  # offset 0
    log.append_batch(DATA)  # offsets 1-3
    log.append_batch(MARKER)  # offset 4
    times = RecordTimes(log)
    assert [times.first_unconsumed(offset) for offset in range(6)] == [
        1_000, 1_000, 2_000, 3_000, None, None]  # only a marker after 3; 5 is the log end
    log.append_batch(build_batch([(None, b"e", 5_000)], base_offset=5))
    assert RecordTimes(log).first_unconsumed(4) == 5_000  # a fresh reader sees the new batch
    log.close()
