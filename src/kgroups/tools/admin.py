"""Consumer-group administration over the Kafka wire, the operations behind `kgroups groups`.

These mirror kafka-consumer-groups.sh: they ask the broker (any Kafka-compatible one) through the
public group APIs, never by reading kgroups' files, so what an operator sees is what clients see.
Each function returns plain data; `groups_cli` only formats it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest as ListGroupsRequestV5
from kio.schema.list_offsets.v5 import request as list_offsets_v5
from kio.schema.metadata.v9 import request as metadata
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.rebalance_field import extended_response, rebalance_of
from kgroups.broker.wire import build, request_type, sibling
from kgroups.coordinator.rebalance_cause import RebalanceNote
from kgroups.errors import ErrorCode
from kgroups.records.consumer_protocol import decode_assignment
from kgroups.tools.wire_client import KafkaWireClient, WireError

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
INACTIVE_STATES = frozenset({"Empty", "Dead"})


class AdminError(RuntimeError):
    """An operation the broker refused or that makes no sense for the group's state."""


def check(error_code: int, what: str, message: str | None = None) -> None:
    if int(error_code) != ErrorCode.NONE:
        detail = f" ({message})" if message else ""
        raise AdminError(f"{what}: {ErrorCode(int(error_code)).name}{detail}")


class GroupNotFoundError(AdminError):
    """The group does not exist (DescribeGroups answers Dead or GROUP_ID_NOT_FOUND)."""

    def __init__(self, group_id: str) -> None:
        super().__init__(f"Consumer group '{group_id}' does not exist.")
        self.group_id = group_id


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str  # "classic" or "consumer" (KIP-848); "" from a broker before ListGroups v5


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    partitions: tuple[tuple[str, int], ...]
    # Consumer groups (KIP-848) only: the member's epoch and the target assignment the
    # coordinator computed for it, which `partitions` (its current assignment) moves towards.
    member_epoch: int | None = None
    target: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    member_id: str | None
    # Age of the first unconsumed record (kgroups.broker.lag_time; filled by lag_reader).
    lag_seconds: float | None = None

    @property
    def lag(self) -> int | None:
        if self.committed_offset is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.committed_offset, 0)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    partitions: tuple[PartitionLag, ...]
    coordinator: tuple[str, int, int]  # host, port, node id
    # Consumer groups (KIP-848) only: the group epoch and the target assignment's epoch.
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    # Why the last rebalance began: only a kgroups broker says (kgroups.broker.rebalance_field).
    last_rebalance: RebalanceNote | None = None

    @property
    def reconciling(self) -> tuple[MemberDescription, ...]:
        """Members of a consumer group not yet at its target assignment: behind its epoch, or
        holding other partitions than their target (still revoking, or waiting for partitions
        another member has not released yet)."""
        if self.assignment_epoch is None:
            return ()
        return tuple(m for m in self.members
                     if m.member_epoch != self.assignment_epoch
                     or sorted(m.partitions) != sorted(m.target or ()))


@dataclass(frozen=True, slots=True)
class OffsetReset:
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int


def connect_to_coordinator(bootstrap: KafkaWireClient, group_id: str) -> KafkaWireClient:
    """Find the group's coordinator; reuse the bootstrap connection when it is that broker."""
    host, port, _ = find_coordinator(bootstrap, group_id)
    if (host, port) == (bootstrap.host, bootstrap.port):
        return bootstrap
    return bootstrap.open_another(host, port)


def find_coordinator(client: KafkaWireClient, group_id: str) -> tuple[str, int, int]:
    """Host, port and node id of the group's coordinator."""
    client.require(10, 4, "FindCoordinator")
    response = client.call(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group_id,)))
    (coordinator,) = response.coordinators
    check(coordinator.error_code, f"FindCoordinator({group_id})", coordinator.error_message)
    return coordinator.host, int(coordinator.port), int(coordinator.node_id)


def list_groups(
    client: KafkaWireClient, states: tuple[str, ...] = (), types: tuple[str, ...] = ()
) -> list[GroupListing]:
    """Groups in any of `states` (all when empty) and of any of `types` ("classic",
    "consumer"); the type filter needs ListGroups v5, which Kafka 3.8+ brokers have."""
    if client.supports(ApiKey.LIST_GROUPS, 5):
        response = client.call(ListGroupsRequestV5(states_filter=states, types_filter=types))
    else:
        if types:
            client.require(16, 5, "ListGroups")
        client.require(16, 4, "ListGroups")
        response = client.call(ListGroupsRequest(states_filter=states))
    check(response.error_code, "ListGroups")
    return sorted(
        (
            GroupListing(group.group_id, group.protocol_type, group.group_state,
                         getattr(group, "group_type", ""))
            for group in response.groups
        ),
        key=lambda listing: listing.group_id,
    )


def _member_partitions(protocol_type: str, assignment: bytes) -> tuple[tuple[str, int], ...]:
    """Only "consumer" groups carry ConsumerProtocol assignments; others are opaque bytes, and
    so is an assignment some client encoded wrongly (describe still shows the member)."""
    if protocol_type != "consumer" or not assignment:
        return ()
    try:
        decoded = decode_assignment(assignment)
    except ValueError:
        return ()
    return tuple(
        (topic_partitions.topic, partition)
        for topic_partitions in decoded.assigned_partitions
        for partition in topic_partitions.partitions
    )


def describe_state(client: KafkaWireClient, group_id: str) -> str:
    """The group's state as DescribeGroups gives it (Dead for a group that does not exist)."""
    return str(_describe_raw(client, group_id).group_state)


def _describe_raw(client: KafkaWireClient, group_id: str) -> Any:
    client.require(15, 5, "DescribeGroups")
    response = client.call(
        DescribeGroupsRequest(groups=(GroupId(group_id),), include_authorized_operations=False),
        extended_response(5)[0],  # a kgroups broker adds the last rebalance's cause
    )
    (group,) = response.groups
    check(group.error_code, f"DescribeGroups({group_id})")
    return group


def last_rebalance(client: KafkaWireClient, group_id: str) -> RebalanceNote | None:
    """Why the group's last rebalance began, if the broker is kgroups and knows it."""
    return rebalance_of(_describe_raw(client, group_id))


def committed_offsets(client: KafkaWireClient, group_id: str) -> dict[tuple[str, int], int]:
    """Every committed offset of the group (OffsetFetch with no topic list = all of them)."""
    client.require(9, 7, "OffsetFetch")
    response = client.call(OffsetFetchRequest(group_id=GroupId(group_id), topics=None,
                                              require_stable=False))
    check(response.error_code, f"OffsetFetch({group_id})")
    offsets: dict[tuple[str, int], int] = {}
    for topic in response.topics:
        for partition in topic.partitions:
            check(partition.error_code, f"OffsetFetch({topic.name}-{partition.partition_index})")
            if int(partition.committed_offset) >= 0:
                offsets[(topic.name, int(partition.partition_index))] = int(
                    partition.committed_offset
                )
    return offsets


def list_offsets(
    client: KafkaWireClient, partitions: list[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int | None]:
    """Offsets for a timestamp (-1 latest, -2 earliest); None where the broker has none."""
    client.require(2, 5, "ListOffsets")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    request = list_offsets_v5.ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=tuple(
            list_offsets_v5.ListOffsetsTopic(
                name=TopicName(topic),
                partitions=tuple(
                    list_offsets_v5.ListOffsetsPartition(
                        partition_index=i32(partition), timestamp=i64(timestamp)
                    )
                    for partition in sorted(indexes)
                ),
            )
            for topic, indexes in by_topic.items()
        ),
    )
    result: dict[tuple[str, int], int | None] = {}
    for topic in client.call(request).topics:
        for partition in topic.partitions:
            found = int(partition.error_code) == ErrorCode.NONE and int(partition.offset) >= 0
            result[(topic.name, int(partition.partition_index))] = (
                int(partition.offset) if found else None
            )
    return result


def describe_group(client: KafkaWireClient, group_id: str) -> GroupDescription:
    """State, members with their partitions, and committed offset / log end / lag per partition.
    A group the coordinator does not know (state Dead) raises GroupNotFoundError, as Kafka's
    tool says such a group does not exist."""
    group = _describe_raw(client, group_id)
    if group.group_state != "Dead":
        members = tuple(
            MemberDescription(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                partitions=_member_partitions(group.protocol_type, member.member_assignment),
            )
            for member in group.members
        )
        return _with_offsets(client, GroupDescription(
            group_id, group.group_state, group.protocol_type, group.protocol_data, members, (),
            (client.host, client.port, node_id(client))))
    # DescribeGroups answers Dead for a consumer-protocol group too: ask ConsumerGroupDescribe,
    # as Kafka's admin client does, before saying the group does not exist.
    consumer = _describe_consumer_group(client, group_id)
    if consumer is None:
        raise GroupNotFoundError(group_id)
    return _with_offsets(client, consumer)


def _with_offsets(client: KafkaWireClient, group: GroupDescription) -> GroupDescription:
    """The group with committed offset, log end and owner of every partition it has offsets
    for or a member holds."""
    owner = {tp: member.member_id for member in group.members for tp in member.partitions}
    committed = committed_offsets(client, group.group_id)
    all_partitions = sorted(set(committed) | set(owner))
    log_ends = list_offsets(client, all_partitions, LATEST_TIMESTAMP) if all_partitions else {}
    return replace(group, partitions=tuple(
        PartitionLag(topic, partition, committed.get((topic, partition)),
                     log_ends.get((topic, partition)), owner.get((topic, partition)))
        for topic, partition in all_partitions
    ))


def _describe_consumer_group(client: KafkaWireClient, group_id: str) -> GroupDescription | None:
    """A KIP-848 consumer group through ConsumerGroupDescribe (None if the broker has no such
    API or no such group): epochs, and each member's current and target assignment."""
    version = next((v for v in (1, 0) if client.supports(ApiKey.CONSUMER_GROUP_DESCRIBE, v)), None)
    if version is None:
        return None
    response = client.call(build(request_type(ApiKey.CONSUMER_GROUP_DESCRIBE, version),
                                 group_ids=(group_id,), include_authorized_operations=False))
    (group,) = response.groups
    if int(group.error_code) == ErrorCode.GROUP_ID_NOT_FOUND or group.group_state == "Dead":
        return None
    check(group.error_code, f"ConsumerGroupDescribe({group_id})", group.error_message)

    def named(assignment: Any) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((t.topic_name, int(p)) for t in assignment.topic_partitions
                            for p in t.partitions))

    members = tuple(
        MemberDescription(
            member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
            client_host=m.client_host, partitions=named(m.assignment),
            member_epoch=int(m.member_epoch), target=named(m.target_assignment))
        for m in group.members
    )
    return GroupDescription(
        group_id, group.group_state, "consumer", group.assignor_name, members, (),
        (client.host, client.port, node_id(client)), int(group.group_epoch),
        int(group.assignment_epoch))


def node_id(client: KafkaWireClient) -> int:
    """The node id of the broker `client` is connected to (the coordinator it was sent to)."""
    client.require(3, 9, "Metadata")
    response = client.call(metadata.MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False))
    for broker in response.brokers:
        if (broker.host, int(broker.port)) == (client.host, client.port):
            return int(broker.node_id)
    return int(response.controller_id)


def delete_group(client: KafkaWireClient, group_id: str) -> None:
    client.require(42, 2, "DeleteGroups")
    (result,) = client.call(DeleteGroupsRequest(groups_names=(GroupId(group_id),))).results
    check(result.error_code, f"DeleteGroups({group_id})")


@dataclass(frozen=True, slots=True)
class OffsetDeletion:
    topic: str
    partition: int | None  # None: the topic itself was refused (e.g. it does not exist)
    error: str | None  # Kafka's error name, None when the offset was deleted


def delete_offsets(
    client: KafkaWireClient, group_id: str, topics: list[tuple[str, tuple[int, ...] | None]]
) -> list[OffsetDeletion]:
    """OffsetDelete for the given topics (all of a topic's partitions when none are named);
    a refusal of the whole request (group not found, group still subscribed) raises."""
    client.require(47, 0, "OffsetDelete")
    outcome: list[OffsetDeletion] = []
    wanted: dict[str, tuple[int, ...]] = {}
    for topic, partitions in topics:
        if partitions is None:
            try:
                partitions = tuple(topic_partitions(client, topic))
            except AdminError:
                outcome.append(OffsetDeletion(topic, None, "UNKNOWN_TOPIC_OR_PARTITION"))
                continue
        wanted[topic] = tuple(sorted({*wanted.get(topic, ()), *partitions}))
    if wanted:
        request = request_type(ApiKey.OFFSET_DELETE, 0)
        response = client.call(build(request, group_id=group_id, topics=tuple(
            build(sibling(request, "OffsetDeleteRequestTopic"), name=topic, partitions=tuple(
                build(sibling(request, "OffsetDeleteRequestPartition"), partition_index=p)
                for p in partitions))
            for topic, partitions in wanted.items())))
        check(response.error_code, f"OffsetDelete({group_id})")
        for topic in response.topics:
            for partition in topic.partitions:
                code = int(partition.error_code)
                outcome.append(OffsetDeletion(topic.name, int(partition.partition_index),
                                              None if code == 0 else ErrorCode(code).name))
    return sorted(outcome, key=lambda d: (d.topic, -1 if d.partition is None else d.partition))


def topic_partitions(client: KafkaWireClient, topic: str) -> list[int]:
    client.require(3, 9, "Metadata")
    response = client.call(
        metadata.MetadataRequest(
            topics=(metadata.MetadataRequestTopic(name=TopicName(topic)),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )
    (described,) = response.topics
    check(described.error_code, f"Metadata({topic})")
    return sorted(int(partition.partition_index) for partition in described.partitions)


def execute_reset(client: KafkaWireClient, group_id: str, plan: list[OffsetReset]) -> None:
    """Commit the planned offsets as an admin: generation -1 and no member id."""
    client.require(8, 8, "OffsetCommit")
    by_topic: dict[str, list[OffsetReset]] = {}
    for reset in plan:
        by_topic.setdefault(reset.topic, []).append(reset)
    request = offset_commit.OffsetCommitRequest(
        group_id=GroupId(group_id),
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=tuple(
            offset_commit.OffsetCommitRequestTopic(
                name=TopicName(topic),
                partitions=tuple(
                    offset_commit.OffsetCommitRequestPartition(
                        partition_index=i32(reset.partition),
                        committed_offset=i64(reset.new_offset),
                        committed_metadata="",
                    )
                    for reset in resets
                ),
            )
            for topic, resets in by_topic.items()
        ),
    )
    for topic in client.call(request).topics:
        for partition in topic.partitions:
            check(partition.error_code, f"OffsetCommit({topic.name}-{partition.partition_index})")


__all__ = [
    "AdminError",
    "GroupDescription",
    "GroupListing",
    "GroupNotFoundError",
    "MemberDescription",
    "OffsetDeletion",
    "OffsetReset",
    "PartitionLag",
    "WireError",
    "check",
    "committed_offsets",
    "connect_to_coordinator",
    "delete_group",
    "delete_offsets",
    "describe_group",
    "describe_state",
    "execute_reset",
    "find_coordinator",
    "last_rebalance",
    "list_groups",
    "list_offsets",
    "node_id",
    "topic_partitions",
]
