"""The bulk replay path (latest_values -> PartitionImage.apply_raw -> load_image) builds exactly
the state that the ordinary path builds (decode every record that counts, load_partition), for
logs of offset commits, group metadata, tombstones, transactions and compressed batches."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.coordinator import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    PartitionImage,
    latest_values,
)
from kgroups.log.batch import BatchCorruptError, Compression, build_batch, iter_batches
from kgroups.records.codec import decode_record, encode_key, encode_value
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecord,
)

from .harness import counting_uuids

# The parallel fold is the bench's (forked workers are I/O the coordinator may not do); its
# results must still be the coordinator's own fold, partition by partition.
_SPEC = importlib.util.spec_from_file_location(
    "parallel_fold", Path(__file__).resolve().parents[2] / "bench" / "parallel_fold.py")
assert _SPEC is not None and _SPEC.loader is not None
parallel_fold = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = parallel_fold  # its workers find their functions by module name
_SPEC.loader.exec_module(parallel_fold)
fold_partitions = parallel_fold.fold_partitions

NOW = 1_700_000_000_000
GROUPS = ("g0", "g1", "g2")
COMMIT, ABORT = 1, 0

offset_values = st.builds(
    OffsetCommitValue,
    offset=st.integers(0, 2**40),
    metadata=st.text(max_size=3) | st.just("m" * 9000),  # 1-, 2- and 3-byte record lengths
    commit_timestamp=st.integers(0, 2**41),
    leader_epoch=st.integers(-1, 9),
)
members = st.builds(
    MemberMetadata,
    member_id=st.sampled_from(("a", "b", "c")),
    client_id=st.just("client"),
    client_host=st.just("/10.0.0.1"),
    session_timeout=st.just(45_000),
    rebalance_timeout=st.just(60_000),
    subscription=st.binary(max_size=300),
    assignment=st.binary(max_size=300),
)
group_values = st.builds(
    GroupMetadataValue,
    protocol_type=st.just("blob"),  # an opaque protocol: any subscription bytes are valid
    generation=st.integers(0, 50),
    protocol=st.just("range"),
    leader=st.just("a"),
    current_state_timestamp=st.integers(0, 2**41),
    members=st.lists(members, max_size=3, unique_by=lambda m: m.member_id).map(tuple),
)
offset_records = st.builds(
    OffsetsRecord,
    st.builds(OffsetCommitKey, st.sampled_from(GROUPS), st.sampled_from(("t", "u")),
              st.integers(0, 2)),
    st.none() | offset_values,
)
group_records = st.builds(
    OffsetsRecord, st.builds(GroupMetadataKey, st.sampled_from(GROUPS)), st.none() | group_values
)
records = st.lists(offset_records | group_records, min_size=1, max_size=5)
timestamps = st.integers(0, 2**40)  # far apart: multi-byte timestamp deltas

plain_batch = st.tuples(st.just("plain"), st.none(), records, timestamps)
transactional_batch = st.tuples(st.just("txn"), st.sampled_from((7, 8)), records, timestamps)
marker = st.tuples(st.sampled_from(("commit", "abort")), st.sampled_from((7, 8)), st.none(),
                   timestamps)
compressed_batch = st.tuples(st.just("gzip"), st.none(), records, timestamps)


def encode_log(entries) -> bytes:
    out = []
    offset = 0
    for kind, producer, batch_records, timestamp in entries:
        if kind in ("commit", "abort"):
            marker_key = (COMMIT if kind == "commit" else ABORT).to_bytes(4, "big")
            rows = [(marker_key, b"\x00\x00\x00\x00\x00\x00", timestamp)]
            out.append(build_batch(rows, base_offset=offset, producer_id=producer,
                                   transactional=True, control=True))
            offset += 1
            continue
        rows = [
            (encode_key(r.key), None if r.value is None else encode_value(r.value), timestamp + i)
            for i, r in enumerate(batch_records)
        ]
        out.append(build_batch(
            rows,
            base_offset=offset,
            compression=Compression.GZIP if kind == "gzip" else Compression.NONE,
            producer_id=producer if producer is not None else -1,
            transactional=kind == "txn",
        ))
        offset += len(rows)
    return b"".join(out)


def records_that_count(data: bytes) -> tuple[list[OffsetsRecord], int]:
    """The ordinary reading of a log, as Kafka's loader does it: every non-transactional record,
    plus a transaction's records once its COMMIT marker arrives (none at an ABORT marker),
    ordered by offset so that a newer record of a key wins. Also the data records walked."""
    counted: list[tuple[int, OffsetsRecord]] = []
    pending: dict[int, list[tuple[int, OffsetsRecord]]] = {}
    walked = 0
    for batch in iter_batches(data):
        if batch.is_control:
            marker_type = int.from_bytes(batch.records[0].key[2:4], "big")
            held = pending.pop(batch.producer_id, [])
            if marker_type == COMMIT:
                counted.extend(held)
            continue
        walked += len(batch.records)
        decoded = [(r.offset, decode_record(r.key, r.value)) for r in batch.records]
        if batch.is_transactional:
            pending.setdefault(batch.producer_id, []).extend(decoded)
        else:
            counted.extend(decoded)
    counted.sort(key=lambda pair: pair[0])
    return [record for _, record in counted], walked


def coordinator() -> GroupCoordinator:
    return GroupCoordinator(
        GroupCoordinatorConfig(offsets_topic_num_partitions=1), new_uuid=counting_uuids())


def assert_bulk_equals_ordinary(data: bytes) -> None:
    ordinary_records, walked = records_that_count(data)
    ordinary_image = PartitionImage()
    ordinary_image.apply(ordinary_records)
    ordinary = coordinator()
    ordinary.load_partition(0, ordinary_records, NOW)

    latest, bulk_walked = latest_values(data)
    bulk_image = PartitionImage()
    assert bulk_image.apply_raw(latest.items()) == 0
    bulk = coordinator()
    bulk.load_image(0, bulk_image, NOW)

    assert bulk_walked == walked
    assert bulk_image == ordinary_image  # tombstoned keys included
    assert bulk.group_views() == ordinary.group_views()


@settings(max_examples=150, deadline=None)
@given(st.lists(plain_batch, max_size=12))
def test_plain_logs_replay_to_the_ordinary_state(entries):
    assert_bulk_equals_ordinary(encode_log(entries))


@settings(max_examples=150, deadline=None)
@given(st.lists(plain_batch | transactional_batch | marker | compressed_batch, max_size=12))
def test_logs_with_transactions_and_compression_replay_to_the_ordinary_state(entries):
    assert_bulk_equals_ordinary(encode_log(entries))


def test_aborted_and_open_transactions_leave_no_state():
    commit = OffsetsRecord(OffsetCommitKey("g0", "t", 0), OffsetCommitValue(5, "", 1))
    aborted = OffsetsRecord(OffsetCommitKey("g0", "t", 0), OffsetCommitValue(99, "", 2))
    group = OffsetsRecord(GroupMetadataKey("g1"), GroupMetadataValue("blob", 3, "r", None, 4))
    data = encode_log([
        ("plain", None, [commit], 1),
        ("txn", 7, [aborted], 2),
        ("abort", 7, None, 3),
        ("txn", 8, [group], 4),  # never committed
    ])
    assert_bulk_equals_ordinary(data)
    bulk = coordinator()
    image = PartitionImage()
    image.apply_raw(latest_values(data)[0].items())
    bulk.load_image(0, image, NOW)
    assert {group_id: view.offsets for group_id, view in bulk.group_views().items()} == {
        "g0": (("t", 0, commit.value),)
    }


def test_a_group_tombstone_removes_the_group_but_not_its_offsets():
    offset = OffsetsRecord(OffsetCommitKey("g0", "t", 1), OffsetCommitValue(5, "", 1))
    group = OffsetsRecord(GroupMetadataKey("g0"), GroupMetadataValue("blob", 3, "r", None, 4))
    data = encode_log([
        ("plain", None, [group, offset], 1),
        ("plain", None, [OffsetsRecord(GroupMetadataKey("g0"), None)], 2),
    ])
    assert_bulk_equals_ordinary(data)
    bulk = coordinator()
    image = PartitionImage()
    image.apply_raw(latest_values(data)[0].items())
    bulk.load_image(0, image, NOW)
    (view,) = bulk.group_views().values()
    assert (view.state, view.generation, view.offsets) == ("Empty", 0, (("t", 1, offset.value),))


def test_undecodable_survivors_are_skipped_and_counted_when_asked():
    good = (encode_key(OffsetCommitKey("g0", "t", 0)), encode_value(OffsetCommitValue(5, "", 1)))
    bad_value = (encode_key(OffsetCommitKey("g0", "t", 1)), b"\x00\x03\x00")
    bad_key = (b"\x00\x02\x00\x09g0", None)
    image = PartitionImage()
    assert image.apply_raw([good, bad_value, bad_key], skip_undecodable=True) == 2
    assert image.offsets == {("g0", "t", 0): OffsetCommitValue(5, "", 1)}
    with pytest.raises(ValueError, match="byte"):
        PartitionImage().apply_raw([good, bad_value])


def partition_logs() -> list[bytes]:
    logs = []
    for partition in range(4):
        key = encode_key(OffsetCommitKey(f"g{partition}", "t", 0))
        logs.append(b"".join(
            build_batch([(key, encode_value(OffsetCommitValue(n, "", n)), n)], base_offset=n)
            for n in range(partition + 1)
        ))
    return logs


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_folding_in_workers_gives_each_partition_its_own_fold(workers):
    logs = partition_logs()
    folded = list(fold_partitions(logs.__getitem__, range(4), workers))
    assert folded == [(p, *latest_values(logs[p])) for p in range(4)]
    assert [walked for _, _, walked in folded] == [1, 2, 3, 4]


def test_a_corrupt_partition_fails_the_fold_in_the_caller():
    logs = partition_logs()
    corrupt = bytearray(logs[2])
    corrupt[-1] ^= 0xFF
    logs[2] = bytes(corrupt)
    with pytest.raises(BatchCorruptError, match="batch at byte"):
        list(fold_partitions(logs.__getitem__, range(4), 2))
