"""The decoding run inside Spark's workers, called directly: rows per record kind, and damage
turned into error rows with file and byte position instead of failures."""

from __future__ import annotations

from pathlib import Path

from tests.pipeline.logdata import OffsetsLogBuilder, coordinator_partition, write_topic_log

from kgroups.log.batch import build_batch, peek_batch_header
from kgroups.pipeline.decode import (
    COMMIT_ROW_SCHEMA,
    GROUP_ROW_SCHEMA,
    decode_offsets_segment,
    decode_topic_segment,
)


def rows(path: Path, log_partition: int = 7) -> list[dict]:
    """A segment's decode as dicts tagged by kind (commit, group, marker, error)."""
    segment = decode_offsets_segment(str(path), log_partition)
    assert segment.commits.schema == COMMIT_ROW_SCHEMA
    assert segment.groups.schema == GROUP_ROW_SCHEMA
    found = [{"kind": "commit", **row} for row in segment.commits.to_pylist()]
    found += [{"kind": "group", **row} for row in segment.groups.to_pylist()]
    found += [{"kind": "marker", "log_offset": m.log_offset, "producer_id": m.producer_id,
               "marker_commits": m.commits} for m in segment.markers]
    found += [{"kind": "error", "log_offset": None, "file": e.file,
               "error_position": e.position, "error": e.message} for e in segment.errors]
    return sorted(found, key=lambda r: (r["kind"], r["log_offset"] or -1))


def one_segment(builder: OffsetsLogBuilder, tmp_path: Path) -> Path:
    [segment] = builder.write(tmp_path)
    return segment


def test_commits_groups_and_tombstones_become_rows(tmp_path):
    builder = OffsetsLogBuilder()
    builder.generation("g", 3, {"m1": [("t", 0), ("t", 2)]}, ts=5000, protocol="roundrobin",
                       instance_ids={"m1": "static-1"})
    builder.commit("g", {("t", 0): 41, ("t", 2): 99}, ts=6000, metadata="meta", leader_epoch=4)
    builder.delete_offsets("g", [("t", 2)], ts=7000)
    builder.delete_group("g", ts=8000)
    found = rows(one_segment(builder, tmp_path))
    commits = [r for r in found if r["kind"] == "commit"]
    assert [(r["topic"], r["partition"], r["offset"], r["tombstone"], r["log_offset"])
            for r in commits] == [("t", 0, 41, False, 1), ("t", 2, 99, False, 2),
                                  ("t", 2, None, True, 3)]
    assert commits[0]["metadata"] == "meta" and commits[0]["leader_epoch"] == 4
    assert commits[0]["commit_ts"] == 6000 and commits[0]["record_ts"] == 6000
    assert {r["log_partition"] for r in found if r["kind"] in ("commit", "group")} == {7}
    generation, deletion = [r for r in found if r["kind"] == "group"]
    assert (generation["generation"], generation["protocol"], generation["leader"]) == (
        3, "roundrobin", "m1")
    [m1] = generation["members"]
    assert m1["member_id"] == "m1" and m1["instance_id"] == "static-1"
    assert m1["topics"] == ["t"]
    assert m1["partitions"] == [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 2}]
    assert deletion["tombstone"] is True and deletion["members"] is None


def test_transaction_markers_are_rows_with_their_producer(tmp_path):
    builder = OffsetsLogBuilder()
    builder.commit("g", {("t", 0): 1}, ts=1, transactional=True, producer_id=11,
                   producer_epoch=0)
    builder.transaction_marker("g", producer_id=11, commit=False, ts=2)
    found = rows(one_segment(builder, tmp_path))
    commit = next(r for r in found if r["kind"] == "commit")
    marker = next(r for r in found if r["kind"] == "marker")
    assert commit["transactional"] is True and commit["producer_id"] == 11
    assert (marker["producer_id"], marker["marker_commits"], marker["log_offset"]) == (11, False, 1)


def test_corrupt_batch_keeps_the_records_before_it_and_reports_its_position(tmp_path):
    builder = OffsetsLogBuilder()
    builder.commit("g", {("t", 0): 1}, ts=1)
    builder.commit("g", {("t", 0): 2}, ts=2)
    builder.commit("g", {("t", 0): 3}, ts=3)
    segment = one_segment(builder, tmp_path)
    data = bytearray(segment.read_bytes())
    second = peek_batch_header(bytes(data), 0)[2]
    data[second + 70] ^= 0xFF  # inside the second batch's records: its CRC no longer matches
    segment.write_bytes(bytes(data))
    found = rows(segment)
    assert [r["offset"] for r in found if r["kind"] == "commit"] == [1]
    [error] = [r for r in found if r["kind"] == "error"]
    assert error["file"] == str(segment)
    assert error["error_position"] == second
    assert "CRC" in error["error"]


def test_torn_tail_is_reported_not_raised(tmp_path):
    builder = OffsetsLogBuilder()
    builder.commit("g", {("t", 0): 1}, ts=1)
    builder.commit("g", {("t", 0): 2}, ts=2)
    segment = one_segment(builder, tmp_path)
    data = segment.read_bytes()
    segment.write_bytes(data[:-5])
    found = rows(segment)
    assert [r["offset"] for r in found if r["kind"] == "commit"] == [1]
    [error] = [r for r in found if r["kind"] == "error"]
    assert error["error_position"] == peek_batch_header(data, 0)[2]


def test_undecodable_record_is_skipped_and_reported(tmp_path):
    directory = tmp_path / "__consumer_offsets-0"
    directory.mkdir()
    segment = directory / "00000000000000000000.log"
    good = OffsetsLogBuilder()
    good.commit("g", {("t", 0): 5}, ts=1)
    [written] = good.write(tmp_path / "other")
    first = written.read_bytes()
    bad = build_batch([(b"\x00\x01\x00", b"\x00\x03", 2)], base_offset=1)  # key cut short
    segment.write_bytes(first + bad)
    found = rows(segment)
    assert [r["offset"] for r in found if r["kind"] == "commit"] == [5]
    [error] = [r for r in found if r["kind"] == "error"]
    assert error["error_position"] == len(first)
    assert "offset 1" in error["error"]


def test_unreadable_file_is_an_error_row(tmp_path):
    found = rows(tmp_path / "__consumer_offsets-0" / "00000000000000000000.log")
    assert [r["kind"] for r in found] == ["error"]
    assert "unreadable" in found[0]["error"]


def test_topic_segment_gives_offsets_and_times_per_batch(tmp_path):
    path = write_topic_log(tmp_path, "orders", 3, [(4, 100), (6, 250)])
    table = decode_topic_segment(str(path), "orders", 3).to_pylist()
    assert [(r["base_offset"], r["last_offset"], r["max_timestamp"]) for r in table] == [
        (0, 3, 100), (4, 9, 250)
    ]
    assert all(r["error"] is None for r in table)


def test_coordinator_partition_matches_kafka():
    assert [coordinator_partition(g) for g in ("testgroup", "my-group", "test-my-group")] == [
        27, 12, 33
    ]
