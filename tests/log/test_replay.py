"""The latest record per key equals replaying the whole log in order, transactions included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroups.log.batch import BatchCorruptError, Compression, build_batch, iter_records_raw
from kgroups.log.replay import LatestPerKey, latest_per_key

COMMIT_MARKER = (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", 0)
ABORT_MARKER = (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", 0)


@given(st.lists(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=4),
                min_size=1, max_size=30))
def test_latest_per_key_is_the_state_a_full_replay_reaches(
    batches: list[list[tuple[int, bool]]],
) -> None:
    chunks = []
    offset = 0
    for batch in batches:
        records = [(b"k%d" % key, None if delete else b"v%d" % (offset + i), offset + i)
                   for i, (key, delete) in enumerate(batch)]
        chunks.append(build_batch(records, base_offset=offset))
        offset += len(batch)
    full: dict[bytes, tuple[int, bytes | None]] = {}
    for chunk in chunks:
        for record_offset, _ts, key, value in iter_records_raw(chunk):
            assert key is not None
            full[key] = (record_offset, value)
    half = len(chunks) // 2
    latest = latest_per_key([b"".join(chunks[:half]), b"".join(chunks[half:])])
    assert {key: (off, value) for off, _ts, key, value in latest} == full
    assert [row[0] for row in latest] == sorted(row[0] for row in latest)


def test_transactional_records_count_only_when_committed() -> None:
    log = b"".join([
        build_batch([(b"a", b"plain", 1)], base_offset=0),
        build_batch([(b"a", b"aborted", 2)], base_offset=1, producer_id=7, transactional=True),
        build_batch([(b"b", b"committed", 3)], base_offset=2, producer_id=8, transactional=True),
        build_batch([ABORT_MARKER], base_offset=3, producer_id=7, transactional=True,
                    control=True),
        build_batch([COMMIT_MARKER], base_offset=4, producer_id=8, transactional=True,
                    control=True),
        build_batch([(b"c", b"still open", 5)], base_offset=5, producer_id=9, transactional=True),
    ])
    assert latest_per_key([log]) == [(0, 1, b"a", b"plain"), (2, 3, b"b", b"committed")]


def test_a_commit_marker_does_not_undo_a_newer_plain_record() -> None:
    log = b"".join([
        build_batch([(b"a", b"in txn", 1)], base_offset=0, producer_id=7, transactional=True),
        build_batch([(b"a", b"newer plain", 2)], base_offset=1),
        build_batch([COMMIT_MARKER], base_offset=2, producer_id=7, transactional=True,
                    control=True),
    ])
    assert latest_per_key([log]) == [(1, 2, b"a", b"newer plain")]


def test_every_batch_kind_mixes_in_offset_order() -> None:
    """Plain, compressed, transactional and log-append-time batches in one chunk."""
    log = b"".join([
        build_batch([(b"a", b"1", 1), (b"b", b"2", 2)], base_offset=0),
        build_batch([(b"a", b"3", 3)], base_offset=2, compression=Compression.GZIP),
        build_batch([(b"b", None, 4)], base_offset=3),
        build_batch([(b"c", b"5", 5)], base_offset=4, producer_id=1, transactional=True),
        build_batch([(b"a", b"6", 6)], base_offset=5),
        build_batch([COMMIT_MARKER], base_offset=6, producer_id=1, transactional=True,
                    control=True),
    ])
    assert latest_per_key([log]) == [
        (3, 4, b"b", None), (4, 5, b"c", b"5"), (5, 6, b"a", b"6"),
    ]


def test_a_corrupt_batch_keeps_what_came_before_and_reports_where() -> None:
    good = build_batch([(b"a", b"1", 1)], base_offset=0)
    bad = bytearray(build_batch([(b"b", b"2", 2)], base_offset=1))
    bad[-1] ^= 0xFF
    table = LatestPerKey()
    with pytest.raises(BatchCorruptError, match=f"at byte {len(good)}"):
        table.add(good + bytes(bad))
    assert table.records() == [(0, 1, b"a", b"1")]


@given(
    st.lists(
        st.tuples(
            st.lists(
                st.tuples(st.integers(0, 6), st.none() | st.binary(max_size=400),
                          st.integers(0, 2**42)),
                min_size=1, max_size=5,
            ),
            st.sampled_from([Compression.NONE, Compression.NONE, Compression.SNAPPY]),
        ),
        min_size=1, max_size=20,
    )
)
def test_fast_and_general_paths_agree_on_any_sizes_and_timestamps(
    batches: list[tuple[list[tuple[int, bytes | None, int]], Compression]],
) -> None:
    chunks = []
    offset = 0
    for records, compression in batches:
        chunks.append(build_batch([(b"key-%d" % k, v, ts) for k, v, ts in records],
                                  base_offset=offset, compression=compression))
        offset += len(records)
    data = b"".join(chunks)
    expected: dict[bytes, tuple[int, int, bytes, bytes | None]] = {}
    for record_offset, ts, key, value in iter_records_raw(data):
        assert key is not None
        expected[key] = (record_offset, ts, key, value)
    assert latest_per_key([data]) == sorted(expected.values())
