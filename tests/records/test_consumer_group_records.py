"""KIP-848 consumer-group records: the bytes Kafka 4.3.1's own classes write for the same
values (generated once with kafka-group-coordinator-4.3.1's message classes), both ways."""

from __future__ import annotations

import uuid

import pytest

from kgroups.records.codec import decode_record, encode_record, record_to_json
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from kgroups.records.schema import OffsetsRecord
from kgroups.records.wire import RecordDecodeError

TOPIC = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
# The message bodies as Kafka writes them (value version 0 in front, as its serde does).
CASES = [
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7, 0x1234),
     "0003000167", "0000" "000000070100080000000000001234"),
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7),
     "0003000167", "0000" "0000000700"),
    (ConsumerGroupMemberMetadataKey("g", "m"), ConsumerGroupMemberMetadataValue(
        "i1", None, "c", "/127.0.0.1", ("a", "b"), None, 300000, "uniform"),
     "00050001670001" "6d",
     "0000" "0369310002630b2f3132372e302e302e31030261026200000493e008756e69666f726d00"),
    (ConsumerGroupTargetAssignmentMetadataKey("g"),
     ConsumerGroupTargetAssignmentMetadataValue(7, 99),
     "0006000167", "0000" "000000070100080000000000000063"),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"),
     ConsumerGroupTargetAssignmentMemberValue(((TOPIC, (0, 2)),)),
     "00070001670001" "6d",
     "0000" "020102030405060708090a0b0c0d0e0f100300000000000000020000"),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
     ConsumerGroupCurrentMemberAssignmentValue(7, 6, 1, ((TOPIC, (1,)),), ((TOPIC, (3, 4)),)),
     "00080001670001" "6d",
     "0000" "000000070000000601020102030405060708090a0b0c0d0e0f1002000000010002010203040506"
     "0708090a0b0c0d0e0f100300000003000000040000"),
]


@pytest.mark.parametrize(("key", "value", "key_hex", "value_hex"), CASES)
def test_bytes_match_kafka_both_ways(key, value, key_hex, value_hex) -> None:
    encoded_key, encoded_value = encode_record(OffsetsRecord(key, value))
    assert (encoded_key.hex(), encoded_value.hex()) == (key_hex, value_hex)
    assert decode_record(bytes.fromhex(key_hex), bytes.fromhex(value_hex)) == OffsetsRecord(
        key, value)


def test_tombstones_and_classic_member_metadata_round_trip() -> None:
    key = ConsumerGroupMemberMetadataKey("g", "m")
    assert decode_record(*encode_record(OffsetsRecord(key, None))) == OffsetsRecord(key, None)
    migrated = ConsumerGroupMemberMetadataValue(None, "r", "c", "h", (), None, -1, None,
                                                classic_member_metadata=b"\x00\x00\x75\x30\x01\x00")
    raw = encode_record(OffsetsRecord(key, migrated))
    assert encode_record(decode_record(*raw)) == raw


def test_json_names_follow_kafka() -> None:
    key, value, _, _ = CASES[-1]
    printed = record_to_json(OffsetsRecord(key, value))
    assert printed["key"] == {"type": 8, "data": {"groupId": "g", "memberId": "m"}}
    assert printed["value"]["data"]["assignedPartitions"] == [
        {"topicId": "AQIDBAUGBwgJCgsMDQ4PEA", "partitions": [1]}]


def test_truncated_value_names_the_field() -> None:
    with pytest.raises(RecordDecodeError, match="previousMemberEpoch"):
        decode_record(bytes.fromhex("00080001670001" "6d"), bytes.fromhex("000000000007"))


def test_kafka_43_per_partition_assignment_epochs_round_trip() -> None:
    """A current assignment as a Kafka 4.3.1 broker wrote it: each topic entry carries the
    partitions' assignment epochs in its tag 0."""
    key = ConsumerGroupCurrentMemberAssignmentKey("g", "m")
    raw = bytes.fromhex(
        "0000" "00000002" "00000001" "00" "02" "3654a50c0062437bbd68986f3bf52964"
        "04" "00000000" "00000001" "00000002" "01" "00" "0d" "04" "00000002" "00000002"
        "00000002" "01" "00")
    value = decode_record(encode_record(OffsetsRecord(key, None))[0], raw).value
    assert value.assigned_partitions == ((uuid.UUID("3654a50c-0062-437b-bd68-986f3bf52964"),
                                          (0, 1, 2)),)
    assert value.assigned_epochs == ((2, 2, 2),)
    assert encode_record(OffsetsRecord(key, value))[1] == raw
