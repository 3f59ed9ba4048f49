"""kafka-python and aiokafka accept kgroups assignors: each client's own consumer/coordinator
objects, metadata types and wire encodings, without a broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiokafka.cluster import ClusterMetadata as AIOClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.protocol.metadata import MetadataResponse_v0
from kafka import KafkaConsumer
from kafka.coordinator.assignors.abstract import RebalanceProtocol as KafkaRebalanceProtocol
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.protocol.consumer.group import JoinGroupResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment
from kafka.protocol.metadata import MetadataResponse
from kafka.structs import TopicPartition

from kgroups.assignors import (
    AssignmentInputError,
    CooperativeStickyAssignor,
    RebalanceProtocol,
    interface,
    register_assignor,
)
from kgroups.assignors.aiokafka_adapter import AIOKafkaAssignor
from kgroups.assignors.kafka_python_adapter import KafkaPythonAssignor

Member = JoinGroupResponse.JoinGroupResponseMember


def _kafka_python_metadata(partitions: dict[str, int]) -> MetadataResponse:
    topic_type = MetadataResponse.MetadataResponseTopic
    partition_type = topic_type.MetadataResponsePartition
    response = MetadataResponse(
        version=1,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=0, host="h", port=1, rack=None)],
        controller_id=0,
        topics=[
            topic_type(
                error_code=0,
                name=topic,
                is_internal=False,
                partitions=[
                    partition_type(
                        error_code=0,
                        partition_index=p,
                        leader_id=0,
                        replica_nodes=[0],
                        isr_nodes=[0],
                    )
                    for p in range(count)
                ],
            )
            for topic, count in partitions.items()
        ],
    )
    # Round-trip through the wire form, as a real response arrives.
    return MetadataResponse.decode(
        response.encode(version=1, header=False), version=1, header=False
    )


@pytest.fixture
def kafka_python_leader() -> Iterator[KafkaConsumer]:
    consumer = KafkaConsumer(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        api_version=(3, 7, 0),
        partition_assignment_strategy=[KafkaPythonAssignor("cooperative-sticky")],
    )
    consumer._client.cluster.update_metadata(_kafka_python_metadata({"t1": 4}))
    consumer.subscribe(["t1"])
    yield consumer
    consumer.close()


def _assignment_round(leader: KafkaConsumer, members: list) -> dict[str, list[int]]:
    results = leader._coordinator._perform_assignment(
        members[0].member_id, "cooperative-sticky", members
    )
    decoded = {
        member_id: ConsumerProtocolAssignment.decode(assignment.encode())
        for member_id, assignment in results.items()
    }
    return {m: dict(a.assigned_partitions).get("t1", []) for m, a in decoded.items()}


def test_kafka_python_coordinator_runs_cooperative_sticky_over_two_rebalances(
    kafka_python_leader: KafkaConsumer,
) -> None:
    coordinator = kafka_python_leader._coordinator
    assert coordinator._rebalance_protocol == KafkaRebalanceProtocol.COOPERATIVE
    peers = {m: KafkaPythonAssignor("cooperative-sticky") for m in ("a", "b")}
    join = [
        Member(member_id=m, group_instance_id=None, metadata=p.metadata({"t1"}).encode())
        for m, p in peers.items()
    ]
    first = _assignment_round(kafka_python_leader, join)
    assert first == {"a": [0, 2], "b": [1, 3]}

    for member_id, peer in peers.items():
        given = ConsumerProtocolAssignment(
            version=0, assigned_partitions=[("t1", first[member_id])], user_data=b""
        )
        peer.on_assignment(ConsumerProtocolAssignment.decode(given.encode()), 7)
    peers["c"] = KafkaPythonAssignor("cooperative-sticky")
    rejoin = [
        Member(member_id=m, group_instance_id=None, metadata=p.metadata({"t1"}).encode())
        for m, p in peers.items()
    ]
    second = _assignment_round(kafka_python_leader, rejoin)
    # 4 partitions over 3 members: a keeps two, b must give one up for c. It is only revoked
    # this round (nobody holds it twice); c gets it in the follow-up rebalance.
    assert second == {"a": [0, 2], "b": [1], "c": []}


def test_kafka_python_sticky_members_history_is_read_by_a_kgroups_leader(
    kafka_python_leader: KafkaConsumer,
) -> None:
    theirs = StickyPartitionAssignor()
    theirs.on_assignment(
        ConsumerProtocolAssignment(version=0, assigned_partitions=[("t1", [1, 2])], user_data=b""),
        5,
    )
    assert theirs.member_assignment == [TopicPartition("t1", 1), TopicPartition("t1", 2)]
    ours = KafkaPythonAssignor("sticky")
    cluster = kafka_python_leader._client.cluster
    members = [
        Member(member_id="a-new", group_instance_id=None, metadata=ours.metadata({"t1"})),
        Member(member_id="b-old", group_instance_id=None, metadata=theirs.metadata({"t1"})),
    ]
    for member in members:
        member.metadata = type(member.metadata).decode(member.metadata.encode())
    result = ours.assign(cluster, members)
    assert dict(result["b-old"].assigned_partitions) == {"t1": [1, 2]}
    assert dict(result["a-new"].assigned_partitions) == {"t1": [0, 3]}


def test_aiokafka_leader_path_with_aiokafka_types() -> None:
    cluster = AIOClusterMetadata()
    cluster.update_metadata(
        MetadataResponse_v0([(0, "h", 1)], [(0, "t1", [(0, p, 0, [0], [0]) for p in range(4)])])
    )
    leader = AIOKafkaAssignor("sticky")
    follower = AIOKafkaAssignor("sticky")
    assert leader.name == "sticky"  # how aiokafka's coordinator finds the chosen strategy
    members = {
        m: ConsumerProtocol.METADATA.decode(a.metadata({"t1"}).encode())
        for m, a in (("x", leader), ("y", follower))
    }
    result = leader.assign(cluster, members)
    wire = {m: ConsumerProtocol.ASSIGNMENT.decode(a.encode()) for m, a in result.items()}
    assert {m: a.partitions() for m, a in wire.items()} == {
        "x": [("t1", 0), ("t1", 2)],
        "y": [("t1", 1), ("t1", 3)],
    }

    # The follower remembers its partitions in its user data, so when x leaves it keeps them.
    follower.on_assignment(wire["y"])
    alone_with_newcomer = {
        "a-new": ConsumerProtocol.METADATA.decode(
            AIOKafkaAssignor("sticky").metadata({"t1"}).encode()
        ),
        "y": ConsumerProtocol.METADATA.decode(follower.metadata({"t1"}).encode()),
    }
    after = leader.assign(cluster, alone_with_newcomer)
    assert after["y"].partitions() == [("t1", 1), ("t1", 3)]


class _CooperativeOnly(CooperativeStickyAssignor):
    name = "cooperative-only"
    supported_protocols = (RebalanceProtocol.COOPERATIVE,)


def test_aiokafka_refuses_strategies_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiokafka only rebalances eagerly, so a cooperative-only strategy would be unsafe."""
    monkeypatch.setattr(interface, "_REGISTRY", dict(interface._REGISTRY))
    register_assignor(_CooperativeOnly.name, _CooperativeOnly)
    with pytest.raises(AssignmentInputError, match="needs the cooperative protocol"):
        AIOKafkaAssignor("cooperative-only")
    with pytest.raises(AssignmentInputError, match="unknown"):
        AIOKafkaAssignor("nonexistent")
