"""Compaction keeps the latest record per key and retires tombstones after delete.retention.ms."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgroups.log.batch import build_batch, decode_batch, iter_batches, iter_records_raw
from kgroups.log.compaction import compact
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import PartitionLog

CONFIG = LogConfig(segment_bytes=400, cleanup_policy="compact", delete_retention_ms=1000)


def contents(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (offset, key, value)
        for segment in log.segments()
        for offset, _ts, key, value in iter_records_raw(segment.pread(segment.size, 0))
    ]


def write(log: PartitionLog, entries: list[tuple[bytes, bytes | None]]) -> None:
    for key, value in entries:
        log.append_batch(build_batch([(key, value, 1)]))


def test_only_the_latest_value_per_key_remains_in_cleaned_segments(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", CONFIG)
    write(log, [(b"k%d" % (i % 3), b"v%d" % i) for i in range(30)])
    active_base = log.segments()[-1].base_offset
    before = contents(log)
    result = compact(log, now_ms=0)
    after = contents(log)
    latest = {key: offset for offset, key, _ in before}
    expected = [
        (offset, key, value)
        for offset, key, value in before
        if offset >= active_base or latest[key] == offset
    ]
    assert after == expected
    assert result.records_removed == len(before) - len(after)
    assert log.log_end_offset == 30
    reopened = PartitionLog.open(tmp_path / "__consumer_offsets-0", CONFIG)
    assert contents(reopened) == after


def test_tombstones_stay_for_delete_retention_then_go(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", CONFIG)
    write(log, [(b"gone", b"v"), (b"gone", None)])
    write(log, [(b"filler%d" % i, b"x" * 30) for i in range(12)])
    compact(log, now_ms=5000)
    kept = contents(log)
    assert (1, b"gone", None) in kept
    assert all(key != b"gone" or value is None for _, key, value in kept)
    stamped = [
        batch
        for segment in log.segments()[:-1]
        for batch in iter_batches(segment.pread(segment.size, 0))
        if any(r.key == b"gone" for r in batch.records)
    ]
    assert [b.has_delete_horizon for b in stamped] == [True]
    assert stamped[0].base_timestamp == 5000 + CONFIG.delete_retention_ms
    assert stamped[0].records[0].timestamp == 1
    compact(log, now_ms=5999)
    assert (1, b"gone", None) in contents(log)
    compact(log, now_ms=6000)
    assert all(key != b"gone" for _, key, _ in contents(log))


def test_untouched_batches_keep_their_bytes_and_control_batches_stay(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", CONFIG)
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00" * 6, 1)], control=True, transactional=True)
    log.append_batch(marker)
    write(log, [(b"a%d" % i, b"x" * 30) for i in range(12)])
    first = log.segments()[0]
    original = first.pread(first.size, 0)
    compact(log, now_ms=0)
    assert log.segments()[0].pread(log.segments()[0].size, 0) == original
    assert decode_batch(original)[0].is_control


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=60))
def test_compacted_log_replays_to_the_same_state(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, bool]]
) -> None:
    directory = tmp_path_factory.mktemp("c") / "__consumer_offsets-0"
    log = PartitionLog.open(directory, CONFIG)
    write(log, [(b"k%d" % key, None if delete else b"v%d" % i)
                for i, (key, delete) in enumerate(ops)])

    def state() -> dict[bytes, bytes]:
        table: dict[bytes, bytes] = {}
        for _, key, value in contents(log):
            assert key is not None
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        return table

    before = state()
    compact(log, now_ms=0)
    assert state() == before
    compact(log, now_ms=10**6)
    assert state() == before
    cleaned_keys = [
        key
        for segment in log.segments()[:-1]
        for _, _, key, _ in iter_records_raw(segment.pread(segment.size, 0))
    ]
    log.close()
    assert len(cleaned_keys) == len(set(cleaned_keys))


def test_a_compaction_cut_short_leaves_the_original_segment(tmp_path: Path) -> None:
    directory = tmp_path / "__consumer_offsets-0"
    log = PartitionLog.open(directory, CONFIG)
    write(log, [(b"k%d" % (i % 2), b"v%d" % i) for i in range(20)])
    log.flush()
    before = contents(log)
    first = log.segments()[0]
    log.close()
    half_written = first.log_path.with_name(first.log_path.name + ".cleaned")
    half_written.write_bytes(first.log_path.read_bytes()[:30])
    reopened = PartitionLog.open(directory, CONFIG)
    assert not half_written.exists()
    assert contents(reopened) == before


def test_compaction_never_moves_the_log_start(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", CONFIG)
    write(log, [(b"same", b"v%d" % i) for i in range(30)])
    compact(log, now_ms=0)
    assert log.log_start_offset == 0
    first, *_, active = log.segments()
    assert first.base_offset == 0 and first.size == 0
    fetched = list(iter_records_raw(log.read(0, 1 << 20)))
    assert fetched[0][0] == active.base_offset  # the fetch skips to the next record left
    assert all(segment.size == 0 for segment in log.segments()[:-1])
