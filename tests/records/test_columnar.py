"""The columnar OffsetCommit decoder against the scalar one: on any log, the columnar rows plus
the scalar decode of the batches it hands back must be exactly the scalar decode of the whole
log, and plain batches must really be decoded columnar."""

from __future__ import annotations

from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.records.strategies import INT32, INT64, TEXT, group_metadata_values

from kgroups.log.batch import (
    BatchCorruptError,
    Compression,
    build_batch,
    check_batch,
    records_of,
)
from kgroups.records.codec import (
    decode_record,
    encode_key,
    encode_record,
    encode_value,
    value_version,
)
from kgroups.records.columnar import OFFSET_COMMIT_SCHEMA, decode_offset_commits
from kgroups.records.schema import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecord,
)

ASCII = st.text(st.characters(max_codepoint=0x7F), max_size=20)
NAME = ASCII | TEXT


@st.composite
def commit_records(draw: st.DrawFn, names: st.SearchStrategy[str]) -> tuple[bytes, bytes | None]:
    key = OffsetCommitKey(draw(names), draw(names), draw(INT32), draw(st.sampled_from([0, 1])))
    if draw(st.integers(0, 5)) == 0:
        return encode_record(OffsetsRecord(key, None))
    version = draw(st.integers(0, 4))
    value = OffsetCommitValue(
        offset=draw(INT64),
        metadata=draw(names),
        commit_timestamp=draw(INT64),
        leader_epoch=draw(INT32) if version >= 3 else -1,
        expire_timestamp=draw(INT64) if version == 1 else None,
    )
    raw_key, _ = encode_record(OffsetsRecord(key, None))
    return raw_key, encode_value(value, version)


@st.composite
def odd_records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    """Records the columnar path must leave alone: group metadata, unknown keys, keys or
    values that do not decode, null keys."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        value, version = draw(group_metadata_values())
        return encode_key(GroupMetadataKey(draw(NAME))), encode_value(value, version)
    if kind == 1:
        return draw(st.binary(max_size=30)), draw(st.none() | st.binary(max_size=30))
    if kind == 2:
        good_key, good_value = draw(commit_records(ASCII))
        return good_key, (good_value or b"") + draw(st.binary(min_size=1, max_size=3))
    return None, draw(st.none() | st.binary(max_size=10))


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    batches = []
    base = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(0, 6))):
        plain = draw(st.booleans())
        records = draw(
            st.lists(commit_records(ASCII) if plain else commit_records(NAME) | odd_records(),
                     min_size=1, max_size=8)
        )
        start_ts = draw(st.integers(0, 2**41))
        stamped = [(k, v, start_ts + draw(st.integers(-1000, 1000))) for k, v in records]
        options: dict[str, Any] = {}
        if not plain:
            options = draw(st.sampled_from([
                {}, {"compression": Compression.GZIP},
                {"transactional": True, "producer_id": 7, "producer_epoch": 0},
            ]))
        batches.append(build_batch(stamped, base_offset=base, **options))
        base += len(records) + draw(st.integers(0, 3))
    return b"".join(batches)


def scalar_rows(data: bytes, ranges: list[tuple[int, int]]) -> list[tuple[Any, ...]]:
    """What the ordinary decoder makes of the records in the byte ranges: one row per
    OffsetCommit record (as the columnar schema), an ("error", offset) row per record that
    does not decode, nothing for other records."""
    rows: list[tuple[Any, ...]] = []
    for start, end in ranges:
        header, batch_end = check_batch(data, start)
        assert batch_end == end
        for offset, timestamp, key, value in records_of(data, start, end, header, False):
            try:
                if key is None:
                    raise ValueError("no key")
                record = decode_record(key, value)
            except ValueError:
                rows.append(("error", offset))
                continue
            if not isinstance(record.key, OffsetCommitKey):
                continue
            commit = record.value
            fields: tuple[Any, ...] = (None,) * 7
            if isinstance(commit, OffsetCommitValue):
                assert value is not None
                fields = (value_version(value), commit.offset, commit.leader_epoch,
                          commit.metadata, commit.commit_timestamp, commit.expire_timestamp)
            rows.append((offset, timestamp, record.key.version, record.key.group,
                         record.key.topic, record.key.partition, commit is None, *fields[:6]))
    return rows


def all_batches(data: bytes) -> list[tuple[int, int]]:
    ranges = []
    pos = 0
    while pos < len(data):
        _header, end = check_batch(data, pos)
        ranges.append((pos, end))
        pos = end
    return ranges


@settings(max_examples=300, deadline=None)
@given(logs())
def test_columnar_plus_leftover_batches_equal_the_scalar_decode(data):
    decoded = decode_offset_commits(data)
    assert decoded.commits.schema == OFFSET_COMMIT_SCHEMA
    columnar = [tuple(row.values()) for row in decoded.commits.to_pylist()]
    leftover = scalar_rows(data, decoded.other_batches)
    expected = scalar_rows(data, all_batches(data))
    assert sorted(columnar + leftover, key=repr) == sorted(expected, key=repr)
    # leftovers are whole batches, in log order
    assert decoded.other_batches == sorted(decoded.other_batches)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(commit_records(ASCII), min_size=1, max_size=8), max_size=5))
def test_plain_commit_batches_are_all_decoded_columnar(batches):
    """v4 values are the codec's flexible layout: those batches stay scalar, every other
    batch of ASCII commits and tombstones must come out columnar, in log order."""
    data = b""
    base = 0
    for records in batches:
        data += build_batch([(k, v, 1000 + i) for i, (k, v) in enumerate(records)],
                            base_offset=base)
        base += len(records)
    decoded = decode_offset_commits(data)
    flexible = [any(v is not None and value_version(v) >= 4 for _, v in records)
                for records in batches]
    assert len(decoded.other_batches) == sum(flexible)
    offsets = decoded.commits.column("log_offset").to_pylist()
    assert offsets == sorted(offsets)
    assert len(offsets) == sum(len(r) for r, f in zip(batches, flexible, strict=True) if not f)


def test_damaged_log_raises_for_the_scalar_reader_to_report():
    key, value = encode_record(OffsetsRecord(OffsetCommitKey("g", "t", 0),
                                             OffsetCommitValue(5, "", 1)))
    batch = bytearray(build_batch([(key, value, 1)]))
    batch[-1] ^= 0xFF
    with pytest.raises(BatchCorruptError):
        decode_offset_commits(bytes(batch))


def test_empty_segment_decodes_to_no_rows():
    decoded = decode_offset_commits(b"")
    assert decoded.commits.num_rows == 0
    assert decoded.other_batches == []


def test_batch_claiming_no_records_over_record_bytes_is_left_to_the_scalar_reader():
    key, value = encode_record(OffsetsRecord(OffsetCommitKey("g", "t", 0),
                                             OffsetCommitValue(5, "", 1)))
    batch = bytearray(build_batch([(key, value, 1)]))
    batch[57:61] = (0).to_bytes(4, "big")  # record count
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    decoded = decode_offset_commits(bytes(batch))
    assert decoded.commits.num_rows == 0
    assert decoded.other_batches == [(0, len(batch))]
