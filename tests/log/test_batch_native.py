"""The compiled batch and offset commit records (native/record_batch, built by `make install`)
give exactly the bytes of their Python references, so what the broker appends to
`__consumer_offsets` does not depend on whether the compiled module was built."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroups.log import batch_native
from kgroups.log.batch import TRANSACTIONAL, build_batch, iter_batches
from kgroups.records.codec import decode_record, encode_key, encode_value
from kgroups.records.schema import OffsetCommitKey, OffsetCommitValue, OffsetsRecord

T = TypeVar("T")

int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
# Timestamps within half of int64 of each other: a batch's deltas are int64s.
timestamps = st.integers(-(2**61), 2**61)
blobs = st.none() | st.binary(max_size=300)
records = st.lists(st.tuples(blobs, blobs, timestamps), min_size=1, max_size=20)


@contextmanager
def python_only() -> Iterator[None]:
    """The Python reference runs: the compiled module is set aside for the block."""
    compiled = batch_native.compiled
    batch_native.compiled = None
    try:
        yield
    finally:
        batch_native.compiled = compiled


def both(encode: Callable[[], T]) -> tuple[T, T]:
    """What `encode` gives with the compiled module, and with the Python reference."""
    compiled = encode()
    with python_only():
        return compiled, encode()


def test_make_install_built_the_compiled_module() -> None:
    assert batch_native.compiled is not None


@given(records, int64s, int32s, int64s, int16s, int32s, st.booleans(), st.booleans())
def test_a_batch_is_the_python_reference_byte_for_byte(
        batch_records: list[tuple[bytes | None, bytes | None, int]], base_offset: int,
        leader_epoch: int, producer_id: int, producer_epoch: int, base_sequence: int,
        transactional: bool, control: bool) -> None:
    compiled, python = both(lambda: build_batch(
        batch_records, base_offset=base_offset, partition_leader_epoch=leader_epoch,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        transactional=transactional, control=control))
    assert compiled == python
    (batch,) = iter_batches(compiled)
    assert [(r.key, r.value, r.timestamp) for r in batch.records] == batch_records


def test_keys_and_values_from_buffers_are_written_as_their_bytes() -> None:
    # A produced batch's records reach the builder as views of the request's bytes.
    payload = bytearray(b"key-and-value")
    batch_records = [(memoryview(payload)[:3], bytearray(b"value"), 7), (None, b"", 9)]
    compiled, python = both(lambda: build_batch(batch_records, producer_id=4,
                                                transactional=True))
    assert compiled == python
    (batch,) = iter_batches(compiled)
    assert batch.attributes & TRANSACTIONAL
    assert [(r.key, r.value) for r in batch.records] == [(b"key", b"value"), (None, b"")]


def test_records_given_as_lists_are_read_as_tuples_are() -> None:
    # The Python path unpacks any (key, value, timestamp) sequence, so the compiled one does.
    as_lists = [[b"k", b"v", 7], [None, b"w", 8]]
    compiled, python = both(lambda: build_batch(as_lists))
    assert compiled == python == build_batch([tuple(r) for r in as_lists])


names = st.text(max_size=40)


@given(names, names, int32s, st.sampled_from([0, 1]), int64s, st.text(max_size=60), int64s,
       int32s, st.sampled_from([0, 1, 2, 3]), int64s)
def test_an_offset_commit_record_is_the_python_reference_byte_for_byte(
        group: str, topic: str, partition: int, key_version: int, offset: int, metadata: str,
        commit_timestamp: int, leader_epoch: int, value_version: int,
        expire_timestamp: int) -> None:
    key = OffsetCommitKey(group, topic, partition, key_version)
    value = OffsetCommitValue(
        offset, metadata, commit_timestamp,
        leader_epoch=leader_epoch if value_version == 3 else -1,
        expire_timestamp=expire_timestamp if value_version == 1 else None)
    compiled, python = both(lambda: (encode_key(key), encode_value(value, value_version)))
    assert compiled == python
    assert decode_record(*compiled) == OffsetsRecord(key, value)


@pytest.mark.parametrize("encode", [
    lambda: encode_key(OffsetCommitKey("g" * 40_000, "topic", 0)),
    lambda: encode_key(OffsetCommitKey("group", "topic", 2**31)),
    lambda: encode_value(OffsetCommitValue(1, "m" * 40_000, 0)),
    lambda: build_batch([(b"k", b"v", 0)], producer_epoch=2**15),
], ids=["group-too-long", "partition-beyond-int32", "metadata-too-long", "epoch-beyond-int16"])
def test_what_a_field_cannot_hold_is_a_struct_error_either_way(
        encode: Callable[[], bytes]) -> None:
    with pytest.raises(struct.error):
        encode()
    with python_only(), pytest.raises(struct.error):
        encode()
