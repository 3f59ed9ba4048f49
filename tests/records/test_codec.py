"""__consumer_offsets keys and values: every version round-trips, and known bytes decode."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroups.records.codec import (
    RecordDecodeError,
    decode_key,
    decode_offset_commit_fields,
    decode_record,
    decode_value,
    encode_key,
    encode_record,
    encode_value,
    record_to_json,
    value_version,
)
from kgroups.records.consumer_group import ConsumerGroupMetadataKey, ConsumerGroupMetadataValue
from kgroups.records.consumer_protocol import encode_assignment, encode_subscription
from kgroups.records.schema import (
    ConsumerAssignment,
    ConsumerSubscription,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecord,
    TopicPartitions,
    UnknownKey,
)

from .strategies import (
    group_metadata_keys,
    group_metadata_values,
    offset_commit_keys,
    offset_commit_values,
)


@given(offset_commit_keys | group_metadata_keys)
def test_keys_round_trip(key: OffsetCommitKey | GroupMetadataKey) -> None:
    assert decode_key(encode_key(key)) == key


@given(offset_commit_values())
def test_offset_commit_values_round_trip_in_every_version(
    case: tuple[OffsetCommitValue, int],
) -> None:
    value, version = case
    data = encode_value(value, version)
    assert value_version(data) == version
    assert decode_value(OffsetCommitKey("g", "t", 0), data) == value


@given(group_metadata_values())
def test_group_metadata_values_round_trip_in_every_version(
    case: tuple[GroupMetadataValue, int],
) -> None:
    value, version = case
    data = encode_value(value, version)
    assert value_version(data) == version
    assert decode_value(GroupMetadataKey("g"), data) == value


def test_offset_commit_key_bytes_match_kafkas_layout() -> None:
    # type 1, "g" , "t", partition 3
    expected = bytes.fromhex("0001" "000167" "000174" "00000003")
    assert encode_key(OffsetCommitKey("g", "t", 3)) == expected
    assert encode_key(GroupMetadataKey("g")) == bytes.fromhex("0002000167")


def test_default_versions_are_what_kafka_writes() -> None:
    plain = OffsetCommitValue(offset=5, metadata="m", commit_timestamp=7, leader_epoch=2)
    assert encode_value(plain) == bytes.fromhex(
        "0003" "0000000000000005" "00000002" "00016d" "0000000000000007"
    )
    expiring = OffsetCommitValue(offset=5, metadata="", commit_timestamp=7, expire_timestamp=9)
    assert value_version(encode_value(expiring)) == 1
    group = GroupMetadataValue("consumer", 1, "range", "m", 10)
    assert value_version(encode_value(group)) == 3


def test_flexible_v4_uses_compact_strings_and_tagged_fields() -> None:
    value = OffsetCommitValue(offset=1, metadata="ab", commit_timestamp=2, leader_epoch=-1)
    assert encode_value(value, 4) == bytes.fromhex(
        "0004" "0000000000000001" "ffffffff" "03" "6162" "0000000000000002" "00"
    )


def test_unknown_tagged_fields_in_v4_are_skipped() -> None:
    value = OffsetCommitValue(offset=1, metadata="ab", commit_timestamp=2)
    plain = encode_value(value, 4)
    # one tagged field kgroups has no name for: tag 5, 2 bytes
    tagged = plain[:-1] + b"\x01\x05\x02\xaa\xbb"
    assert decode_value(OffsetCommitKey("g", "t", 0), tagged) == value
    group = GroupMetadataValue("consumer", 1, None, None, 3)
    tagged_group = encode_value(group, 4)[:-1] + b"\x02\x05\x01\xaa\x07\x00"
    assert decode_value(GroupMetadataKey("g"), tagged_group) == group


def test_v4_topic_id_reads_back_and_prints_as_kafka_does() -> None:
    """Kafka 4.x writes every OffsetCommitValue as v4 with the topic's id in tag 0: it is kept
    (a dump shows it as DumpLogSegments does) and written back byte for byte."""
    topic_id = bytes(range(16))
    value = OffsetCommitValue(offset=7, metadata="", commit_timestamp=9, topic_id=topic_id)
    data = encode_value(value, 4)
    assert data.endswith(b"\x01\x00\x10" + topic_id)
    key = OffsetCommitKey("g", "t", 0)
    assert decode_value(key, data) == value
    shown = record_to_json(OffsetsRecord(key, value), 4)["value"]["data"]
    assert shown["topicId"] == "AAECAwQFBgcICQoLDA0ODw"
    with pytest.raises(ValueError, match="topicId"):
        encode_value(value, 3)


def test_v0_group_metadata_takes_the_session_timeout_as_rebalance_timeout() -> None:
    member = MemberMetadata("m", "c", "h", 3000, 3000, b"s", b"a")
    value = GroupMetadataValue("consumer", 4, "range", "m", -1, (member,))
    data = encode_value(value, 0)
    assert decode_value(GroupMetadataKey("g"), data) == value


def test_fields_a_version_cannot_hold_are_refused_not_dropped() -> None:
    with pytest.raises(ValueError, match="expireTimestamp"):
        encode_value(OffsetCommitValue(1, "", 2, expire_timestamp=3), 3)
    with pytest.raises(ValueError, match="leaderEpoch"):
        encode_value(OffsetCommitValue(1, "", 2, leader_epoch=3), 2)
    member = MemberMetadata("m", "c", "h", 1, 1, b"", b"", group_instance_id="i")
    with pytest.raises(ValueError, match="groupInstanceId"):
        encode_value(GroupMetadataValue("consumer", 1, None, None, 1, (member,)), 2)


def test_new_protocol_keys_are_recognised_not_decoded() -> None:
    key = decode_key(bytes.fromhex("0011") + b"rest")  # a streams group's (17)
    assert key == UnknownKey(17, b"rest")
    assert decode_value(key, b"\x00\x00anything") is None
    assert record_to_json(OffsetsRecord(key, None))["key"] == {
        "type": 17,
        "data": None,
        "note": "not a classic-protocol record",
    }


@pytest.mark.parametrize(
    ("data", "position", "words"),
    [
        (b"\x00", 0, "key type"),
        (bytes.fromhex("0001000567"), 4, "OffsetCommitKey group"),
        (bytes.fromhex("00010001670001"), 7, "OffsetCommitKey topic"),
        (bytes.fromhex("0002000167ff"), 5, "trailing"),
        (bytes.fromhex("fffe"), 0, "negative"),
    ],
)
def test_malformed_keys_name_the_field_and_byte(data: bytes, position: int, words: str) -> None:
    with pytest.raises(RecordDecodeError, match=words) as caught:
        decode_key(data)
    assert caught.value.position == position
    assert f"at byte {position}" in str(caught.value)


def test_malformed_values_name_the_field_and_byte() -> None:
    data = encode_value(OffsetCommitValue(1, "meta", 2))
    with pytest.raises(RecordDecodeError, match="metadata at byte 16") as caught:
        decode_value(OffsetCommitKey("g", "t", 0), data[:17])
    assert caught.value.position == 16
    with pytest.raises(RecordDecodeError, match="version -2"):
        decode_value(OffsetCommitKey("g", "t", 0), b"\xff\xfe" + data[2:])
    bad_utf8 = data[:16] + b"\xff\xfe" + data[18:]
    with pytest.raises(RecordDecodeError, match="UTF-8"):
        decode_value(OffsetCommitKey("g", "t", 0), bad_utf8)


@given(offset_commit_keys, offset_commit_values())
def test_records_round_trip(key: OffsetCommitKey, case: tuple[OffsetCommitValue, int]) -> None:
    value = case[0] if case[1] in (1, 3) else OffsetCommitValue(1, "", 2)
    record = OffsetsRecord(key, value)
    raw_key, raw_value = encode_record(record)
    assert decode_record(raw_key, raw_value) == record
    assert decode_record(raw_key, None) == OffsetsRecord(key, None)


@given(st.integers(0, 4))
def test_json_shows_only_the_fields_of_the_version(version: int) -> None:
    value = OffsetCommitValue(
        9, "m", 10, leader_epoch=4 if version >= 3 else -1,
        expire_timestamp=11 if version == 1 else None,
    )
    out = record_to_json(OffsetsRecord(OffsetCommitKey("g", "t", 2), value), version)
    assert out["key"] == {"type": 1, "data": {"group": "g", "topic": "t", "partition": 2}}
    expected_fields = {"offset", "metadata", "commitTimestamp"}
    expected_fields |= {"leaderEpoch"} if version >= 3 else set()
    expected_fields |= {"expireTimestamp"} if version == 1 else set()
    assert out["value"]["version"] == version
    assert set(out["value"]["data"]) == expected_fields


def test_json_decodes_consumer_subscriptions_and_assignments() -> None:
    subscription = encode_subscription(
        ConsumerSubscription(("t",), b"\x01", (TopicPartitions("t", (0,)),), 3, "r", 3)
    )
    assignment = encode_assignment(ConsumerAssignment((TopicPartitions("t", (0, 1)),), None, 0))
    member = MemberMetadata("m", "c", "/1.2.3.4", 10, 20, subscription, assignment)
    record = OffsetsRecord(
        GroupMetadataKey("g"), GroupMetadataValue("consumer", 2, "range", "m", 99, (member,))
    )
    out = record_to_json(record)
    assert out["value"]["version"] == 3
    (entry,) = out["value"]["data"]["members"]
    assert entry == {
        "memberId": "m",
        "groupInstanceId": None,
        "clientId": "c",
        "clientHost": "/1.2.3.4",
        "rebalanceTimeout": 20,
        "sessionTimeout": 10,
        "subscription": {
            "topics": ["t"],
            "userData": "AQ==",
            "ownedPartitions": [{"topic": "t", "partitions": [0]}],
            "generationId": 3,
            "rackId": "r",
        },
        "assignment": {"assignedPartitions": [{"topic": "t", "partitions": [0, 1]}],
                       "userData": None},
    }


def test_json_keeps_other_protocol_types_as_base64() -> None:
    member = MemberMetadata("m", "c", "h", 10, 20, b"\x00\x01", b"")
    record = OffsetsRecord(
        GroupMetadataKey("g"), GroupMetadataValue("connect", 2, "default", "m", 99, (member,))
    )
    (entry,) = record_to_json(record, 1)["value"]["data"]["members"]
    assert entry["subscription"] == "AAE="
    assert entry["assignment"] == ""
    assert "groupInstanceId" not in entry


def test_json_names_the_member_whose_subscription_is_malformed() -> None:
    member = MemberMetadata("m", "c", "h", 10, 20, b"\x00\x00\x00", b"")
    record = OffsetsRecord(GroupMetadataKey("g"), GroupMetadataValue("consumer", 2, "r", "m", 9,
                                                                     (member,)))
    with pytest.raises(RecordDecodeError, match=r"members\[0\].subscription"):
        record_to_json(record)


@given(offset_commit_values())
def test_offset_commit_fields_match_the_model(case: tuple[OffsetCommitValue, int]) -> None:
    value, version = case
    fields = decode_offset_commit_fields(encode_value(value, version))
    assert fields == (
        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
        value.expire_timestamp,
    )


def test_offset_commit_fields_reject_what_decode_value_rejects() -> None:
    data = encode_value(OffsetCommitValue(1, "meta", 2))
    with pytest.raises(RecordDecodeError, match="metadata at byte 16"):
        decode_offset_commit_fields(data[:18])


def test_keys_decode_the_same_from_any_buffer_and_repeatedly() -> None:
    raw = encode_key(OffsetCommitKey("g", "t", 9))
    assert decode_key(bytearray(raw)) == decode_key(memoryview(raw)) == decode_key(raw)
    assert decode_key(raw) is decode_key(raw)


def test_versions_after_4_are_read_with_the_flexible_layout() -> None:
    """KIP-915: a newer Kafka may bump the version but only adds tagged fields."""
    value = OffsetCommitValue(offset=3, metadata="m", commit_timestamp=4, leader_epoch=1)
    newer = b"\x00\x05" + encode_value(value, 4)[2:-1] + b"\x01\x07\x02\xab\xcd"
    assert decode_value(OffsetCommitKey("g", "t", 0), newer) == value
    out = record_to_json(OffsetsRecord(OffsetCommitKey("g", "t", 0), value), 5)
    assert out["value"] == {
        "version": 5,
        "data": {"offset": 3, "leaderEpoch": 1, "metadata": "m", "commitTimestamp": 4},
    }
    group = GroupMetadataValue("consumer", 1, None, None, 3)
    assert decode_value(GroupMetadataKey("g"), b"\x00\x06" + encode_value(group, 4)[2:]) == group


def test_malformed_group_metadata_names_the_member_field() -> None:
    member = MemberMetadata("m", "c", "h", 10, 20, b"sub", b"asg")
    data = encode_value(GroupMetadataValue("consumer", 1, "range", "m", 5, (member, member)))
    with pytest.raises(RecordDecodeError, match=r"v3 members\[1\]\.assignment at byte") as caught:
        decode_value(GroupMetadataKey("g"), data[:-2])
    assert caught.value.position == len(data) - 3


@pytest.mark.parametrize("record", [
    OffsetsRecord(GroupMetadataKey("g"), ConsumerGroupMetadataValue(3)),
    OffsetsRecord(ConsumerGroupMetadataKey("g"), GroupMetadataValue("consumer", 1, "range",
                                                                   "m", 99, ())),
])
def test_json_of_a_record_whose_value_is_another_types_names_both(record: OffsetsRecord) -> None:
    with pytest.raises(TypeError, match=f"{type(record.key).__name__} record cannot hold a "
                                        f"{type(record.value).__name__}"):
        record_to_json(record)
