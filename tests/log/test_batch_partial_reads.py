"""Reading part of a batch: the keys alone (a compacted topic's check on produce) and the first
records alone (down-conversion for old Fetch versions). Both must agree with the full parse
and refuse damaged bytes as it does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.log.batch import (
    BatchCorruptError,
    Compression,
    build_batch,
    check_batch,
    keyless_records,
    records_of,
)

RECORDS = st.lists(
    st.tuples(st.none() | st.binary(max_size=200), st.none() | st.binary(max_size=200),
              st.integers(0, 2**41)),
    min_size=1, max_size=300)


@settings(max_examples=80)
@given(RECORDS, st.sampled_from(list(Compression)), st.integers(0, 5))
def test_keyless_records_counts_and_names_what_the_full_parse_sees(
        records: list[tuple[bytes | None, bytes | None, int]], codec: Compression,
        quoted: int) -> None:
    batch = build_batch(records, compression=codec)
    header, end = check_batch(batch)
    parsed = records_of(batch, 0, end, header, False)
    keyless = [index for index, row in enumerate(parsed) if row[2] is None]
    assert keyless_records(batch, 0, end, header, quoted) == (len(keyless), keyless[:quoted])


@settings(max_examples=80)
@given(RECORDS, st.sampled_from([Compression.NONE, Compression.ZSTD]), st.integers(0, 400))
def test_the_first_records_are_the_full_parse_cut_short(
        records: list[tuple[bytes | None, bytes | None, int]], codec: Compression,
        limit: int) -> None:
    batch = build_batch(records, base_offset=100, compression=codec)
    header, end = check_batch(batch)
    assert records_of(batch, 0, end, header, False, limit=limit) == \
        records_of(batch, 0, end, header, False)[:limit]


@settings(max_examples=200)
@given(st.data())
def test_the_key_scan_refuses_what_the_full_parse_refuses(data: st.DataObject) -> None:
    records = data.draw(RECORDS)
    batch = bytearray(build_batch(records))
    header, end = check_batch(bytes(batch))
    start = 61  # the first record
    position = data.draw(st.integers(start, len(batch) - 1))
    batch[position] = data.draw(st.integers(0, 255))
    damaged = bytes(batch)
    try:
        expected = records_of(damaged, 0, end, header, True)
    except BatchCorruptError:
        with pytest.raises(BatchCorruptError):
            keyless_records(damaged, 0, end, header, 3)
        return
    keyless = [index for index, row in enumerate(expected) if row[2] is None]
    assert keyless_records(damaged, 0, end, header, 3) == (len(keyless), keyless[:3])
