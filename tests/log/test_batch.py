"""RecordBatch v2: our batches, kafka-python's batches, every codec, and damaged bytes."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kgroups.log.batch import (
    HEADER,
    BatchCorruptError,
    Compression,
    Record,
    build_batch,
    decode_batch,
    encode_batch,
    iter_batches,
    iter_records_raw,
    peek_batch_header,
)

TIMESTAMPS = st.integers(0, 2**41)
RECORDS = st.lists(
    st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300), TIMESTAMPS),
    min_size=1,
    max_size=20,
)


@settings(max_examples=60)
@given(
    RECORDS,
    st.integers(0, 2**40),
    st.sampled_from(list(Compression)),
    st.booleans(),
    st.integers(-1, 2**40),
)
def test_batches_round_trip(
    records: list[tuple[bytes | None, bytes | None, int]],
    base_offset: int,
    compression: Compression,
    transactional: bool,
    producer_id: int,
) -> None:
    data = build_batch(
        records,
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=3,
        base_sequence=9,
        transactional=transactional,
    )
    batch, end = decode_batch(data)
    assert end == len(data)
    assert batch.compression is compression
    assert batch.is_transactional is transactional
    assert not batch.is_control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (producer_id, 3, 9)
    assert batch.last_offset == base_offset + len(records) - 1
    assert batch.max_timestamp == max(ts for _, _, ts in records)
    assert batch.records == [
        Record(base_offset + i, ts, key, value) for i, (key, value, ts) in enumerate(records)
    ]
    assert list(iter_records_raw(data + data)) == 2 * [
        (base_offset + i, ts, key, value) for i, (key, value, ts) in enumerate(records)
    ]
    assert encode_batch(batch) == data


def test_kafka_python_batches_decode() -> None:
    for codec in (Compression.NONE, Compression.GZIP):
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=int(codec), is_transactional=True,
            producer_id=77, producer_epoch=1, base_sequence=5, batch_size=1 << 20,
        )
        builder.append(0, 1_700_000_000_000, b"k0", b"v0" * 100, [("h", b"x"), ("n", None)])
        builder.append(1, 1_700_000_000_500, None, b"v1", [])
        builder.append(2, 1_699_999_999_000, b"k2", None, [])
        data = bytes(builder.build())
        batch, end = decode_batch(data)
        assert end == len(data)
        assert batch.compression is codec
        assert batch.is_transactional
        assert batch.producer_id == 77
        assert batch.records == [
            Record(0, 1_700_000_000_000, b"k0", b"v0" * 100, (("h", b"x"), ("n", None))),
            Record(1, 1_700_000_000_500, None, b"v1"),
            Record(2, 1_699_999_999_000, b"k2", None),
        ]
        if codec is Compression.NONE:
            assert encode_batch(batch) == data  # headers and negative deltas re-encode exactly


@given(RECORDS, st.sampled_from([Compression.NONE, Compression.GZIP]))
def test_kafka_python_reads_our_batches(
    records: list[tuple[bytes | None, bytes | None, int]], compression: Compression
) -> None:
    data = build_batch(records, base_offset=40, compression=compression)
    theirs = DefaultRecordBatch(bytearray(data))
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == [
        (40 + i, ts, key, value) for i, (key, value, ts) in enumerate(records)
    ]


def _rewrap(data: bytes, body: bytes, codec: Compression) -> bytes:
    """The batch `data` with its records section replaced by `body`, assembled independently."""
    fields = list(HEADER.unpack_from(data))
    fields[1] = HEADER.size - 12 + len(body)
    fields[5] = (fields[5] & ~0x07) | int(codec)
    header = bytearray(HEADER.pack(*fields))
    struct.pack_into(">I", header, 17, crc32c.crc32c(bytes(header[21:]) + body))
    return bytes(header) + body


def test_raw_and_xerial_snappy_both_decode() -> None:
    records = [(b"key", b"value" * 50, 10), (None, b"x", 11)]
    plain = build_batch(records)
    raw = _rewrap(plain, bytes(cramjam.snappy.compress_raw(plain[61:])), Compression.SNAPPY)
    xerial = build_batch(records, compression=Compression.SNAPPY)
    assert xerial[61:69] == b"\x82SNAPPY\x00"
    for data in (raw, xerial):
        batch, _ = decode_batch(data)
        assert [(r.key, r.value) for r in batch.records] == [(k, v) for k, v, _ in records]


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    data = bytearray(build_batch([(b"a", b"1", 5), (b"b", b"2", 6)]))
    fields = list(HEADER.unpack_from(data))
    fields[5] |= 0x08
    fields[8] = 999
    data = bytearray(HEADER.pack(*fields)) + data[61:]
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    assert [ts for _, ts, _, _ in iter_records_raw(bytes(data))] == [999, 999]


def test_control_batches_are_recognised_and_skipped_by_the_raw_iterator() -> None:
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", 1)], control=True,
                         transactional=True, base_offset=1)
    data = build_batch([(b"k", b"v", 1)]) + marker
    batches = list(iter_batches(data))
    assert [b.is_control for b in batches] == [False, True]
    assert list(iter_records_raw(data)) == [(0, 1, b"k", b"v")]


def test_the_base_offset_is_outside_the_crc() -> None:
    data = build_batch([(b"k", b"v", 1)])
    moved = struct.pack(">q", 1234) + data[8:]
    assert decode_batch(moved)[0].base_offset == 1234
    assert peek_batch_header(moved) == (1234, 1234, len(data))


def test_every_flipped_byte_after_the_crc_is_detected() -> None:
    data = build_batch([(b"key", b"value", 1), (b"k2", None, 2)], compression=Compression.GZIP)
    for position in range(21, len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        with pytest.raises(BatchCorruptError):
            decode_batch(bytes(damaged))


def test_a_cut_batch_reports_where_it_starts() -> None:
    first = build_batch([(b"k", b"v", 1)])
    second = build_batch([(b"k", b"v" * 30, 1)], base_offset=1)
    data = first + second
    for cut in range(len(first) + 1, len(data)):
        with pytest.raises(BatchCorruptError, match=f"at byte {len(first)}") as caught:
            list(iter_records_raw(data[:cut]))
        assert caught.value.position == len(first)


def test_a_record_count_that_lies_is_corruption() -> None:
    data = bytearray(build_batch([(b"k", b"v", 1)]))
    struct.pack_into(">i", data, 57, 2)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(BatchCorruptError, match="fewer records"):
        decode_batch(bytes(data))


def test_an_empty_batch_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])


def test_lz4_batches_use_independent_blocks_as_kafkas_java_reader_needs() -> None:
    big = [(b"k%d" % i, bytes(range(256)) * 4, i) for i in range(200)]  # > one 64 KiB block
    data = build_batch(big, compression=Compression.LZ4)
    frame = data[61:]
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20  # FLG: block independence
    assert [r.value for r in decode_batch(data)[0].records] == [v for _, v, _ in big]
