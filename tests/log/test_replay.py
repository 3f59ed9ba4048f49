"""The latest record per key equals replaying the whole log in order, transactions included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kgroups.log.batch import build_batch, iter_records_raw
from kgroups.log.replay import latest_per_key

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
