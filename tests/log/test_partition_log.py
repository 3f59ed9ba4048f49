"""Partition logs on disk: offsets, segments, index, fetches, retention, torn tails."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import struct
from pathlib import Path

import crc32c
import pytest

from kgroups.log.batch import BatchCorruptError, build_batch, iter_records_raw
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import OffsetOutOfRangeError, PartitionLog
from kgroups.log.segment import INDEX_ENTRY

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=150)


def fill(log: PartitionLog, count: int, start_ts: int = 1000) -> None:
    for _i in range(count):
        n = log.log_end_offset
        log.append_batch(build_batch([(b"k%d" % n, b"value-%d" % n, start_ts + n)]))


def all_records(log: PartitionLog) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        if not chunk:
            break
        records = list(iter_records_raw(chunk))
        out.extend(records)
        offset = records[-1][0] + 1
    return out


def test_offsets_are_assigned_in_order_and_survive_reopening(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.append_batch(build_batch([(b"a", b"1", 1), (b"b", b"2", 2)], base_offset=77)) == (
        0, 1,
    )
    fill(log, 40)
    log.flush()
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", SMALL)
    assert reopened.log_end_offset == 42
    records = all_records(reopened)
    assert [r[0] for r in records] == list(range(42))
    assert records[5] == (5, 1005, b"k5", b"value-5")


def test_segments_roll_by_size_with_kafka_names(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    fill(log, 60)
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    logs = [n for n in names if n.endswith(".log")]
    assert len(logs) > 3
    assert logs[0] == "00000000000000000000.log"
    assert all(len(n) == len("00000000000000000000.log") for n in logs)
    assert {n.replace(".log", ".index") for n in logs} <= set(names)
    segments = log.segments()
    assert all(s.size <= SMALL.segment_bytes for s in segments)
    for segment, following in itertools.pairwise(segments):
        first = next(iter_records_raw(following.pread(following.size, 0)))[0]
        assert following.base_offset == first
        assert int(following.log_path.stem) == following.base_offset
        assert segment.base_offset < following.base_offset


def test_index_entries_point_at_batches_holding_their_offsets(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=200))
    fill(log, 50)
    (segment,) = log.segments()
    log.close()  # the active segment's index goes to its file at a roll or a close
    raw, data = segment.index_path.read_bytes(), segment.log_path.read_bytes()
    assert len(raw) >= 8 * 5
    for relative, position in INDEX_ENTRY.iter_unpack(raw):
        first = next(iter_records_raw(data[position:]))
        assert first[0] == relative


def test_fetch_returns_whole_batches_from_the_one_holding_the_offset(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    log.append_batch(build_batch([(b"a", b"1", 1), (b"b", b"2", 2), (b"c", b"3", 3)]))
    fill(log, 30)
    assert [r[0] for r in iter_records_raw(log.read(1, 1))] == [0, 1, 2]
    for offset in range(3, 33):
        records = list(iter_records_raw(log.read(offset, 1)))
        assert [r[0] for r in records] == [offset]
    assert len(list(iter_records_raw(log.read(3, 500)))) > 1
    assert log.read(33, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(34, 100)


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    fill(log, 30, start_ts=10_000)
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(10_017) == 17
    assert log.offset_for_timestamp(10_030) is None


def test_retention_deletes_old_and_excess_segments_but_never_the_active(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=600, retention_ms=1000, retention_bytes=-1)
    log = PartitionLog.open(tmp_path / "t-0", config)
    fill(log, 40, start_ts=0)
    count = len(log.segments())
    assert log.apply_retention(now_ms=500) == 0
    assert log.apply_retention(now_ms=10**9) == count - 1
    assert log.log_start_offset == log.segments()[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    forever = PartitionLog.open(tmp_path / "f-0", LogConfig(segment_bytes=600, retention_ms=-1))
    fill(forever, 40, start_ts=0)
    assert forever.apply_retention(now_ms=10**12) == 0
    sized = PartitionLog.open(tmp_path / "u-0", LogConfig(segment_bytes=600, retention_bytes=1200))
    fill(sized, 60)
    sized.apply_retention(now_ms=0)
    assert sized.size_bytes - sized.segments()[0].size < 1200 <= sized.size_bytes


def test_a_batch_that_is_not_exactly_one_intact_batch_is_refused(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    batch = build_batch([(b"k", b"v", 1)])
    with pytest.raises(BatchCorruptError, match="exactly one batch"):
        log.append_batch(batch + batch)
    damaged = batch[:-1] + bytes([batch[-1] ^ 1])
    with pytest.raises(BatchCorruptError, match="CRC"):
        log.append_batch(damaged)
    backwards = bytearray(batch)
    struct.pack_into(">i", backwards, 23, -1)
    struct.pack_into(">I", backwards, 17, crc32c.crc32c(bytes(backwards[21:])))
    with pytest.raises(BatchCorruptError, match="lastOffsetDelta -1"):
        log.append_batch(bytes(backwards))
    assert log.log_end_offset == 0


def _build_torn_fixture(directory: Path) -> tuple[int, int, int]:
    """A log whose last segment ends in a multi-record batch; returns (its start byte, its
    base offset, the file size)."""
    log = PartitionLog.open(directory, SMALL)
    fill(log, 25)
    base, _ = log.append_batch(build_batch([(b"x", b"y" * 40, 5), (b"z", None, 6)]))
    log.flush()
    active = log.segments()[-1]
    size = active.size
    log.close()
    return size - len(build_batch([(b"x", b"y" * 40, 5), (b"z", None, 6)])), base, size


def test_every_torn_position_in_the_last_batch_keeps_every_whole_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pristine = tmp_path / "pristine" / "t-0"
    start, base, size = _build_torn_fixture(pristine)
    expected = all_records(PartitionLog.open(pristine, SMALL))[:-2]
    for cut in range(start, size):
        work = tmp_path / f"cut{cut}" / "t-0"
        shutil.copytree(pristine, work)
        last_file = sorted(work.glob("*.log"))[-1]
        os.truncate(last_file, cut)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kgroups.log.partition_log"):
            log = PartitionLog.open(work, SMALL)
        assert log.log_end_offset == base
        assert all_records(log) == expected
        if cut > start:
            (line,) = [r.getMessage() for r in caplog.records]
            assert str(last_file) in line
            assert f"at byte {start}" in line
        else:
            assert not caplog.records
        log.append_batch(build_batch([(b"after", b"repair", 9)]))
        assert all_records(log)[-1] == (base, 9, b"after", b"repair")
        log.close()
        shutil.rmtree(work.parent)


def test_a_corrupt_last_batch_is_cut_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start, base, _size = _build_torn_fixture(tmp_path / "t-0")
    last_file = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    data = bytearray(last_file.read_bytes())
    data[start + 70] ^= 0xFF
    last_file.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        log = PartitionLog.open(tmp_path / "t-0", SMALL)
    assert log.log_end_offset == base
    assert "CRC" in caplog.records[0].getMessage()
    assert last_file.stat().st_size == start


def test_a_damaged_index_is_rebuilt(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2000, index_interval_bytes=100)
    log = PartitionLog.open(tmp_path / "t-0", config)
    fill(log, 80)
    log.flush()
    first = log.segments()[0]
    good = first.index_path.read_bytes()
    log.close()
    first.index_path.write_bytes(b"\x00\x00\x00\x09\x7f\xff\xff\xff")
    reopened = PartitionLog.open(tmp_path / "t-0", config)
    assert reopened.segments()[0].index_path.read_bytes() == good
    assert [r[0] for r in all_records(reopened)] == list(range(80))
