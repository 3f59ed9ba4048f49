"""KIP-848 records printed as Kafka 4.3.1's DumpLogSegments prints them (the shapes
tests/tools/test_log_files.py saw it print): tagged fields left at their default are omitted,
per-partition assignment epochs are shown, and a member's absent classic metadata is null."""

from __future__ import annotations

import uuid

from kgroups.records.classic_member import ClassicMemberMetadata, encode_classic_member_metadata
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    consumer_group_value_json,
)

TOPIC = uuid.UUID(int=1)


def test_default_tagged_int64s_are_omitted_as_kafka_does() -> None:
    assert consumer_group_value_json(ConsumerGroupMetadataValue(3), str) == {"epoch": 3}
    assert consumer_group_value_json(ConsumerGroupMetadataValue(3, 77), str) == {
        "epoch": 3, "metadataHash": 77}
    assert consumer_group_value_json(ConsumerGroupTargetAssignmentMetadataValue(2), str) == {
        "assignmentEpoch": 2}


def test_assignment_epochs_are_shown_where_an_entry_has_them() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        2, 0, 0, ((TOPIC, (0, 1)),), ((TOPIC, (2,)),), ((2, 2),), (None,))
    shown = consumer_group_value_json(value, str)
    assert shown["assignedPartitions"] == [
        {"topicId": str(TOPIC), "partitions": [0, 1], "assignmentEpochs": [2, 2]}]
    assert shown["partitionsPendingRevocation"] == [{"topicId": str(TOPIC), "partitions": [2]}]


def test_a_member_without_classic_metadata_prints_null() -> None:
    """Kafka writes tag 0 = 00 for a member that never was a classic one, and DumpLogSegments
    prints null; kgroups writes no tag 0, and DumpLogSegments prints no field at all."""
    def member(raw: bytes | None) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), "", 1, None, raw)

    assert "classicMemberMetadata" not in consumer_group_value_json(member(None), str)
    assert consumer_group_value_json(member(b"\x00"), str)["classicMemberMetadata"] is None
    assert consumer_group_value_json(member(b"\x01\x02"), str)["classicMemberMetadata"] == "0102"


def test_a_migrated_members_classic_metadata_prints_as_dump_log_segments_does() -> None:
    """The shape DumpLogSegments printed for a member Kafka 4.3.1 converted from a classic
    group (tests/differential/test_diff_migration.py's broker log)."""
    raw = encode_classic_member_metadata(ClassicMemberMetadata(
        30000, (("cooperative-sticky", b"\x00\x01"), ("range", b"\x00\x01"))))
    value = ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), "", 1, None, raw)
    assert consumer_group_value_json(value, str)["classicMemberMetadata"] == {
        "sessionTimeoutMs": 30000,
        "supportedProtocols": [{"name": "cooperative-sticky", "metadata": "AAE="},
                               {"name": "range", "metadata": "AAE="}]}
