"""ConsumerProtocol payloads agree with kafka-python's independent implementation."""

from __future__ import annotations

import pytest
from hypothesis import given
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from kgroups.records.codec import RecordDecodeError
from kgroups.records.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kgroups.records.schema import ConsumerAssignment, ConsumerSubscription, TopicPartitions

from .strategies import assignments, subscriptions

SubTP = ConsumerProtocolSubscription.TopicPartition
AssignTP = ConsumerProtocolAssignment.TopicPartition


@given(subscriptions())
def test_subscriptions_round_trip(sub: ConsumerSubscription) -> None:
    assert decode_subscription(encode_subscription(sub)) == sub


@given(assignments)
def test_assignments_round_trip(assignment: ConsumerAssignment) -> None:
    assert decode_assignment(encode_assignment(assignment)) == assignment


@given(subscriptions())
def test_subscriptions_match_kafka_python_bytes(sub: ConsumerSubscription) -> None:
    theirs = ConsumerProtocolSubscription(
        topics=list(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[
            SubTP(topic=tp.topic, partitions=list(tp.partitions))
            for tp in sub.owned_partitions
        ],
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    ).encode(version=sub.version)
    assert encode_subscription(sub) == theirs
    assert decode_subscription(theirs) == sub


@given(assignments)
def test_assignments_match_kafka_python_bytes(assignment: ConsumerAssignment) -> None:
    theirs = ConsumerProtocolAssignment(
        assigned_partitions=[
            AssignTP(topic=tp.topic, partitions=list(tp.partitions))
            for tp in assignment.assigned_partitions
        ],
        user_data=assignment.user_data,
    ).encode(version=assignment.version)
    assert encode_assignment(assignment) == theirs
    assert decode_assignment(theirs) == assignment


def test_a_newer_version_is_read_as_v3_and_its_extra_fields_skipped() -> None:
    sub = ConsumerSubscription(("a",), None, (), 4, "rack", 3)
    newer = b"\x00\x05" + encode_subscription(sub)[2:] + b"\x00\x00\x00\x07"
    decoded = decode_subscription(newer)
    assert (decoded.topics, decoded.generation_id, decoded.rack_id) == (("a",), 4, "rack")


def test_garbage_after_a_known_version_is_an_error_naming_the_byte() -> None:
    data = encode_assignment(ConsumerAssignment((TopicPartitions("t", (1,)),)))
    with pytest.raises(RecordDecodeError, match=f"at byte {len(data)}"):
        decode_assignment(data + b"\x00")
    with pytest.raises(RecordDecodeError, match="partitions at byte 13"):
        decode_assignment(data[:14])
