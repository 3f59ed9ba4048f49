"""KIP-1071 streams-group records (types 17, 19-23): every field through the codec and back, the
tagged fields written as Kafka 4.3.1 writes them, and Kafka's own DumpLogSegments reading a
segment kgroups wrote with them (the records Kafka writes are read by kgroups byte for byte in
tests/differential/test_diff_streams.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.kafka_harness import run_kafka_tool

from kgroups.log.batch import build_batch
from kgroups.records.codec import decode_record, encode_record, record_to_json
from kgroups.records.schema import OffsetsRecord
from kgroups.records.streams_group import (
    CopartitionGroup,
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMemberMetadataValue,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    Subtopology,
    TaskIds,
    TopicInfo,
)
from kgroups.records.wire import RecordDecodeError

G = "app"
RECORDS = [
    OffsetsRecord(StreamsGroupMetadataKey(G), StreamsGroupMetadataValue(
        7, -1234567890123, 0, (("num.standby.replicas", "1"),))),
    OffsetsRecord(StreamsGroupMetadataKey(G), StreamsGroupMetadataValue(2, 0)),
    OffsetsRecord(StreamsGroupTopologyKey(G), StreamsGroupTopologyValue(3, (
        Subtopology("0", ("words", "more"), state_changelog_topics=(
            TopicInfo("app-counts-changelog", 0, 0, (("cleanup.policy", "compact"),)),),
            repartition_sink_topics=("app-rep",),
            copartition_groups=(CopartitionGroup((0, 1), (), ()),)),
        Subtopology("1", repartition_source_topics=(TopicInfo("app-rep", 4, 3, ()),))))),
    OffsetsRecord(StreamsGroupMemberMetadataKey(G, "m-1"), StreamsGroupMemberMetadataValue(
        None, "rack-1", "client", "/127.0.0.1", 30000, 3, "process-ü", ("host", 65535),
        (("zone", "a"), ("az", "b")))),
    OffsetsRecord(StreamsGroupMemberMetadataKey(G, "m-2"), StreamsGroupMemberMetadataValue(
        "instance", None, "", "", -1, 0, "", None, ())),
    OffsetsRecord(StreamsGroupTargetAssignmentMetadataKey(G),
                  StreamsGroupTargetAssignmentMetadataValue(7, 1795813956059)),
    OffsetsRecord(StreamsGroupTargetAssignmentMetadataKey(G),
                  StreamsGroupTargetAssignmentMetadataValue(0)),
    OffsetsRecord(StreamsGroupTargetAssignmentMemberKey(G, "m-1"),
                  StreamsGroupTargetAssignmentMemberValue(
                      (TaskIds("0", (0, 2)), TaskIds("1", (1,))), (TaskIds("0", (1,)),), ())),
    OffsetsRecord(StreamsGroupCurrentMemberAssignmentKey(G, "m-1"),
                  StreamsGroupCurrentMemberAssignmentValue(
                      7, 6, 2, (TaskIds("0", (0, 2), (5, 7)),), (TaskIds("0", (1,)),), (),
                      (TaskIds("1", (3,)),), (), ())),
    OffsetsRecord(StreamsGroupCurrentMemberAssignmentKey(G, "m-2"), None),
    OffsetsRecord(StreamsGroupTopologyKey(G), None),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r.key).__name__)
def test_every_field_round_trips(record: OffsetsRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record
    assert encode_record(decode_record(key, value)) == (key, value)


def test_tagged_fields_are_left_out_at_their_defaults() -> None:
    """Kafka writes no tag for ValidatedTopologyEpoch -1, empty LastAssignmentConfigs, an
    AssignmentTimestamp of 0 or a task entry without epochs: an empty tag section each."""
    bare = encode_record(RECORDS[1])[1]
    assert bare == bytes.fromhex("0000" "00000002" "0000000000000000" "00")
    assert encode_record(RECORDS[6])[1] == bytes.fromhex("0000" "00000000" "00")


def test_truncated_values_name_the_field() -> None:
    key, value = encode_record(RECORDS[3])
    assert value is not None
    with pytest.raises(RecordDecodeError, match="StreamsGroupMemberMetadataValue"):
        decode_record(key, value[:-3])


@pytest.mark.kafka
def test_kafkas_dump_log_segments_reads_a_segment_kgroups_wrote(tmp_path: Path) -> None:
    """Kafka's --offsets-decoder prints every record kgroups wrote, field for field as
    `kgroups records` prints it."""
    segment = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    encoded = [encode_record(record) for record in RECORDS]
    segment.write_bytes(build_batch([(key, value, 1_000) for key, value in encoded]))
    result = run_kafka_tool("org.apache.kafka.tools.DumpLogSegments", [
        "--offsets-decoder", "--print-data-log", "--files", str(segment)])
    assert result.returncode == 0, result.stderr[-3000:]
    printed = [line for line in result.stdout.splitlines() if line.startswith("| offset:")]
    assert len(printed) == len(RECORDS)
    for line, record in zip(printed, RECORDS, strict=True):
        key_text, _, payload = line.partition(" key: ")[2].partition(" payload: ")
        ours = record_to_json(record)
        assert _typed(json.loads(key_text)) == ours["key"]
        if record.value is None:
            assert payload == "<DELETE>"
        else:
            assert _typed(json.loads(payload)) == ours["value"]


def _typed(printed: dict[str, Any]) -> dict[str, Any]:
    """Kafka prints the key type and value version as strings."""
    key = "type" if "type" in printed else "version"
    return {**printed, key: int(printed[key])}
