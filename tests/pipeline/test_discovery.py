"""Finding segments in Kafka's directory layout, and refusing paths with nothing to analyse."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.pipeline.logdata import OffsetsLogBuilder, write_topic_log

from kgroups.pipeline.discovery import InputNotFoundError, find_inputs


def build(tmp_path: Path) -> Path:
    builder = OffsetsLogBuilder()
    builder.commit("g", {("orders", 0): 1}, ts=1000)
    builder.roll("g")
    builder.commit("g", {("orders", 0): 2}, ts=2000)
    builder.write(tmp_path)
    write_topic_log(tmp_path, "orders", 0, [(3, 1000)])
    write_topic_log(tmp_path, "my-topic-with-dashes", 12, [(1, 1000)])
    # Files Kafka keeps next to segments, and strays: none of them is a segment.
    (tmp_path / "orders-0" / "00000000000000000000.index").write_bytes(b"\0" * 8)
    (tmp_path / "orders-0" / "leader-epoch-checkpoint").write_text("0\n")
    (tmp_path / "meta.properties").write_text("broker.id=0\n")
    (tmp_path / "not-a-partition").mkdir()
    (tmp_path / "not-a-partition" / "00000000000000000000.log").write_bytes(b"")
    return tmp_path


def test_finds_offsets_and_topic_segments_in_order(tmp_path):
    inputs = find_inputs([str(build(tmp_path))])
    offsets = [(s.topic, s.partition, s.base_offset) for s in inputs.offsets_segments]
    partition = offsets[0][1]
    assert offsets == [("__consumer_offsets", partition, 0), ("__consumer_offsets", partition, 1)]
    assert [(s.topic, s.partition) for s in inputs.topic_segments] == [
        ("my-topic-with-dashes", 12), ("orders", 0)
    ]
    assert all(s.size > 0 for s in inputs.offsets_segments)


def test_a_partition_dir_or_single_segment_is_an_input_too(tmp_path):
    build(tmp_path)
    [partition_dir] = tmp_path.glob("__consumer_offsets-*")
    assert len(find_inputs([str(partition_dir)]).offsets_segments) == 2
    one = sorted(partition_dir.glob("*.log"))[0]
    assert [s.uri for s in find_inputs([str(one)]).offsets_segments] == [str(one)]


def test_the_same_file_reached_twice_is_read_once(tmp_path):
    build(tmp_path)
    assert len(find_inputs([str(tmp_path), str(tmp_path)]).offsets_segments) == 2


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(InputNotFoundError, match="no such file"):
        find_inputs([str(tmp_path / "nope")])


def test_directory_without_offsets_segments_is_refused(tmp_path):
    write_topic_log(tmp_path, "orders", 0, [(1, 1000)])
    with pytest.raises(InputNotFoundError, match="__consumer_offsets"):
        find_inputs([str(tmp_path)])
