"""Type 4, ConsumerGroupPartitionMetadata (the subscribed topics' metadata Kafka 3.7-4.0 wrote,
which Kafka 4.1+ only tombstones): decoded and re-encoded byte for byte for the dump tools
(Kafka's DumpLogSegments reads kgroups' encoding the same way: tests/tools/test_log_files.py),
and never turned into group state when a log is loaded."""

from __future__ import annotations

import uuid

import pytest

from kgroups.coordinator.persistence import PartitionImage, rebuild_groups
from kgroups.records.codec import decode_record, encode_record, record_to_json
from kgroups.records.consumer_group import (
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    SubscribedTopicMetadata,
)
from kgroups.records.schema import OffsetsRecord
from kgroups.records.wire import RecordDecodeError

TOPIC = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
VALUE = ConsumerGroupPartitionMetadataValue((
    SubscribedTopicMetadata(TOPIC, "orders", 2, ((0, ("a", "b")), (1, ()))),
))


def test_round_trip_and_json() -> None:
    record = OffsetsRecord(ConsumerGroupPartitionMetadataKey("g"), VALUE)
    key, value = encode_record(record)
    assert key == bytes.fromhex("0004" "0001" "67")
    assert decode_record(key, value) == record
    assert encode_record(decode_record(key, value)) == (key, value)
    shown = record_to_json(record)
    assert shown["key"] == {"type": 4, "data": {"groupId": "g"}}
    assert shown["value"]["data"]["topics"] == [{
        "topicId": "AQIDBAUGBwgJCgsMDQ4PEA", "topicName": "orders", "numPartitions": 2,
        "partitionMetadata": [{"partition": 0, "racks": ["a", "b"]},
                              {"partition": 1, "racks": []}]}]


def test_a_cut_value_names_the_field_and_position() -> None:
    key, value = encode_record(OffsetsRecord(ConsumerGroupPartitionMetadataKey("g"), VALUE))
    assert value is not None
    with pytest.raises(RecordDecodeError, match="numPartitions"):
        decode_record(key, value[:28])


def test_loading_a_log_with_it_builds_no_group() -> None:
    image = PartitionImage()
    image.apply([OffsetsRecord(ConsumerGroupPartitionMetadataKey("g"), VALUE)])
    assert "g" not in rebuild_groups(image, 0)
