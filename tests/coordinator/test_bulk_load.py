"""The replay fast path agrees with the log's general walker and refuses bad bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.coordinator import latest_values
from kgroups.log.batch import BatchCorruptError, Compression, build_batch
from kgroups.log.replay import LatestPerKey

keys = st.one_of(st.none(), st.binary(min_size=0, max_size=200))
values = st.one_of(st.none(), st.binary(max_size=20_000))  # multi-byte length varints too
batches = st.lists(
    st.lists(st.tuples(keys, values, st.integers(0, 10**6)), min_size=1, max_size=6),
    max_size=6,
)


def log_of(batch_list, compression=Compression.NONE) -> bytes:
    out = []
    offset = 0
    for records in batch_list:
        out.append(build_batch(records, base_offset=offset, compression=compression))
        offset += len(records)
    return b"".join(out)


def general(data: bytes) -> tuple[dict, int]:
    table = LatestPerKey()
    table.add(data)
    return {key: value for _, _, key, value in table.records()}, table.records_seen


@settings(max_examples=60, deadline=None)
@given(batches)
def test_fast_walk_equals_general_walker(batch_list):
    data = log_of(batch_list)
    assert latest_values(data) == general(data)


def test_compressed_batches_take_the_general_path():
    batch_list = [[(b"k", b"v1", 1), (b"j", None, 2)], [(b"k", b"v2", 3)]]
    data = log_of(batch_list[:1]) + build_batch(
        batch_list[1], base_offset=2, compression=Compression.GZIP
    )
    assert latest_values(data) == ({b"k": b"v2", b"j": None}, 3)


def test_corrupt_bytes_raise_with_position():
    data = bytearray(log_of([[(b"a", b"1", 1)], [(b"b", b"2", 2)]]))
    first_length = int.from_bytes(data[8:12], "big") + 12
    data[first_length + 63] ^= 0xFF  # inside the second batch's records: CRC mismatch
    with pytest.raises(BatchCorruptError) as caught:
        latest_values(bytes(data))
    assert caught.value.position == first_length
    with pytest.raises(BatchCorruptError, match="truncated header"):
        latest_values(bytes(data[:first_length + 10]))
    with pytest.raises(BatchCorruptError, match="bad magic or length"):
        latest_values(bytes(data[: first_length + 65]))


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30), st.integers(-(2**31), 2**31 - 1))
def test_raw_offset_keys_decode_like_the_codec(group, topic, partition):
    from kgroups.coordinator import PartitionImage
    from kgroups.records.codec import encode_key, encode_value
    from kgroups.records.schema import OffsetCommitKey, OffsetCommitValue

    value = OffsetCommitValue(5, "m", 77, 3)
    image = PartitionImage()
    image.apply_raw([(encode_key(OffsetCommitKey(group, topic, partition)), encode_value(value))])
    assert image.offsets == {(group, topic, partition): value}


def test_malformed_raw_key_is_reported_by_the_codec():
    from kgroups.coordinator import PartitionImage

    with pytest.raises(ValueError):
        PartitionImage().apply_raw([(b"\x00\x01\x00\x09short", None)])


@settings(max_examples=30, deadline=None)
@given(batches)
def test_keys_whose_hashes_collide_are_still_told_apart(batch_list):
    import numpy as np

    from kgroups.log import bulk_scan

    data = log_of(batch_list)
    saved = bulk_scan._MIX
    bulk_scan._MIX = np.uint64(0)  # every key hashes alike: only the word check separates them
    try:
        assert latest_values(data) == general(data)
    finally:
        bulk_scan._MIX = saved


def test_short_and_long_keys_alike():
    long_key = b"k" * 65  # past the word comparison: the dict path
    data = log_of([[(b"", b"1", 1), (b"a" * 64, b"2", 2), (b"", b"3", 3)],
                   [(b"a" * 64, None, 4), (b"a" * 63 + b"b", b"5", 5)]])
    assert latest_values(data) == general(data)
    assert latest_values(data)[0] == {b"": b"3", b"a" * 64: None, b"a" * 63 + b"b": b"5"}
    with_long = log_of([[(long_key, b"1", 1), (b"x", b"2", 2), (long_key, b"3", 3)]])
    assert latest_values(with_long) == ({long_key: b"3", b"x": b"2"}, 3)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([b"\x00\x00", b"\x00\x01", b"\x00\x02", b"\x00\x07", b"\xff\xff"]),
    st.binary(max_size=24),
)
def test_any_raw_key_is_read_as_the_codec_reads_it(key_type, rest):
    from kgroups.coordinator import PartitionImage
    from kgroups.records.codec import RecordDecodeError, decode_key
    from kgroups.records.schema import GroupMetadataKey, OffsetCommitKey

    raw = key_type + rest
    image = PartitionImage()
    try:
        key = decode_key(raw)
    except RecordDecodeError:
        with pytest.raises(RecordDecodeError):
            image.apply_raw([(raw, None)])
        return
    image.apply_raw([(raw, None)])  # a tombstone: the key alone decides where it lands
    if type(key) is OffsetCommitKey:
        where = (key.group, key.topic, key.partition)
        assert (image.offsets, image.group_values) == ({where: None}, {})
    elif type(key) is GroupMetadataKey:
        assert (image.offsets, image.group_values) == ({}, {key.group: None})
    else:
        assert (image.offsets, image.group_values) == ({}, {})
