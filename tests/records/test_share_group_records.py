"""Share-group records (types 10-15) byte for byte with Kafka 4.3.1: records Kafka wrote for a
real share group (taken from its __consumer_offsets log: a member joining, its partitions
initializing then initialized, a target and current assignment, a member leaving) decode and
re-encode to the very same bytes, and decode to the values DumpLogSegments printed for them."""

from __future__ import annotations

import uuid

import pytest

from kgroups.records.codec import decode_record, encode_record, record_to_json
from kgroups.records.share_group import (
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMetadataValue,
    ShareTopicPartitions,
)

TOPIC = uuid.UUID("941075bb-f588-4203-953b-09b9313bb9fd")  # "lBB1u_WIQgOVOwm5MTu5_Q"

KAFKA_RECORDS = [
    ("000a0002673100026d31",
     "0000000e6b67726f7570732d61646d696e0b2f3132372e302e302e31020473743100"),
    ("000b00026731", "0000000000027f9c74c017a6896600"),
    ("000d0002673100026d31", "00000100"),
    ("000c00026731", "000000000002010008000001a21ed73621"),
    ("000e0002673100026d31", "00000000000200000000000100"),
    ("000f00026731", "000002941075bbf5884203953b09b9313bb9fd0473743104000000000000000100000002"
                     "00010100"),
    ("000e0002673100026d32", None),
    ("000d0002673100026d32", None),
    ("000a0002673100026d32", None),
    ("000f00026732", "00000102941075bbf5884203953b09b9313bb9fd0473743104000000000000000100000002"
                     "000100"),
    ("000d00026732000161", "000002941075bbf5884203953b09b9313bb9fd040000000000000001000000020000"),
    ("000e00026732000161", "000000000003000000020002941075bbf5884203953b09b9313bb9fd04000000000000"
                           "0001000000020000"),
]


@pytest.mark.parametrize(("key", "value"), KAFKA_RECORDS)
def test_kafka_records_reencode_to_the_same_bytes(key: str, value: str | None) -> None:
    raw_value = None if value is None else bytes.fromhex(value)
    record = decode_record(bytes.fromhex(key), raw_value)
    assert encode_record(record) == (bytes.fromhex(key), raw_value)


def _value(index: int) -> object:
    key, value = KAFKA_RECORDS[index]
    return decode_record(bytes.fromhex(key), None if value is None else bytes.fromhex(value)).value


def test_values_are_what_dump_log_segments_printed() -> None:
    assert _value(0) == ShareGroupMemberMetadataValue(None, "kgroups-admin", "/127.0.0.1",
                                                      ("st1",))
    assert _value(1) == ShareGroupMetadataValue(2, 9195352907563043174)
    assert _value(3) == ShareGroupTargetAssignmentMetadataValue(2, 1795813750305)
    assert _value(4) == ShareGroupCurrentMemberAssignmentValue(2, 0, 0, ())
    assert _value(5) == ShareGroupStatePartitionMetadataValue(
        (ShareTopicPartitions(TOPIC, "st1", (0, 1, 2)),), (), ())
    assert _value(9) == ShareGroupStatePartitionMetadataValue(
        (), (ShareTopicPartitions(TOPIC, "st1", (0, 1, 2)),), ())
    assert _value(11) == ShareGroupCurrentMemberAssignmentValue(3, 2, 0, ((TOPIC, (0, 1, 2)),))


def test_json_has_kafkas_field_names() -> None:
    key, value = KAFKA_RECORDS[5]
    shown = record_to_json(decode_record(bytes.fromhex(key), bytes.fromhex(value)))
    data = {"initializingTopics": [{"topicId": "lBB1u_WIQgOVOwm5MTu5_Q", "topicName": "st1",
                                    "partitions": [0, 1, 2]}],
            "initializedTopics": [], "deletingTopics": []}
    assert shown == {"key": {"type": 15, "data": {"groupId": "g1"}},
                     "value": {"version": 0, "data": data}}
