"""The leader step on real ConsumerProtocol bytes, as other clients write and read them."""

from __future__ import annotations

import pytest
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from kgroups.assignors import AssignmentInputError, ClusterMetadata
from kgroups.assignors.leader import JoinedMember, lead_assignment
from kgroups.assignors.user_data import encode_sticky_user_data


def _java_style_subscription(topics: list[str], user_data: bytes | None) -> bytes:
    """A v3 subscription with Java-layout sticky user data, encoded by kafka-python's schema."""
    return ConsumerProtocolSubscription(
        version=3,
        topics=topics,
        user_data=user_data,
        owned_partitions=[],
        generation_id=-1,
        rack_id=None,
    ).encode()


def test_leader_keeps_each_clients_history_and_answers_in_bytes_they_read() -> None:
    kafka_python_member = StickyPartitionAssignor()
    kafka_python_member.on_assignment(
        ConsumerProtocolAssignment(version=0, assigned_partitions=[("t", [2, 3])], user_data=b""),
        6,
    )
    members = [
        JoinedMember(
            "java", None, _java_style_subscription(["t"], encode_sticky_user_data({"t": [0, 1]}, 6))
        ),
        JoinedMember("kafka-python", None, kafka_python_member.metadata({"t"}).encode()),
        JoinedMember("newcomer", "static-1", _java_style_subscription(["t"], None)),
    ]
    answers = lead_assignment("sticky", ClusterMetadata({"t": 6}), members)
    decoded = {
        m: dict(ConsumerProtocolAssignment.decode(raw).assigned_partitions)
        for m, raw in answers.items()
    }
    # Both histories survive (each keeps its two), the free partitions go to the newcomer.
    assert decoded == {
        "java": {"t": [0, 1]},
        "kafka-python": {"t": [2, 3]},
        "newcomer": {"t": [4, 5]},
    }


def test_an_unreadable_subscription_names_the_member() -> None:
    members = [
        JoinedMember("ok", None, _java_style_subscription(["t"], None)),
        JoinedMember("broken", None, b"\x00\x00\x00"),
    ]
    with pytest.raises(AssignmentInputError, match="'broken' sent an unreadable subscription"):
        lead_assignment("range", ClusterMetadata({"t": 1}), members)
