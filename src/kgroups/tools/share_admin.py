"""Share groups (KIP-932) over the wire, for `kgroups groups --type share`: a group's state,
epochs and members (ShareGroupDescribe), and its share-partition start offsets with their lag
(DescribeShareGroupOffsets), the two answers Kafka's `kafka-share-groups --describe` prints.

A share group has no committed offsets: each share-partition has a start offset (the first record
not yet acknowledged or archived) and a lag (records from there to the log end not yet
acknowledged). Its members do not own partitions; several members share each one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.wire import build, request_type, sibling
from kgroups.errors import ErrorCode
from kgroups.tools.admin import AdminError, node_id
from kgroups.tools.wire_client import KafkaWireClient

# An answer's "not known" for a lag or leader epoch.
UNKNOWN = -1


class ShareGroupNotFoundError(AdminError):
    """No share group of that id (GROUP_ID_NOT_FOUND, or a group of another type)."""

    def __init__(self, group_id: str, detail: str | None = None) -> None:
        super().__init__(f"Share group '{group_id}' does not exist"
                         + (f" ({detail})." if detail else "."))
        self.group_id = group_id


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    partitions: tuple[tuple[str, int], ...]  # sorted (topic, partition); shared with others


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    topic: str
    partition: int
    start_offset: int
    leader_epoch: int | None
    lag: int | None  # None from a broker that does not say (DescribeShareGroupOffsets v0)


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMember, ...]
    offsets: tuple[SharePartitionOffset, ...]
    coordinator: tuple[str, int, int]  # host, port, node id


def describe_share_group(client: KafkaWireClient, group_id: str,
                         with_offsets: bool = True) -> ShareGroupDescription:
    """The group as its coordinator (`client`) describes it, with its start offsets unless
    told not to ask for them (a table of members or state does not show them)."""
    client.require(ApiKey.SHARE_GROUP_DESCRIBE, 1, "ShareGroupDescribe")
    (group,) = client.call(ShareGroupDescribeRequest(
        group_ids=(GroupId(group_id),), include_authorized_operations=False)).groups
    error = int(group.error_code)
    if error == ErrorCode.GROUP_ID_NOT_FOUND or group.group_state == "Dead":
        raise ShareGroupNotFoundError(group_id, group.error_message)
    if error != ErrorCode.NONE:
        raise AdminError(f"ShareGroupDescribe({group_id}): {ErrorCode(error).name}"
                         + (f" ({group.error_message})" if group.error_message else ""))
    members = tuple(sorted(
        (ShareMember(m.member_id, m.client_id, m.client_host, int(m.member_epoch),
                     _partitions(m.assignment)) for m in group.members),
        key=lambda member: (member.client_id, member.member_id)))
    return ShareGroupDescription(
        group_id, group.group_state, int(group.group_epoch), int(group.assignment_epoch),
        group.assignor_name, members, share_offsets(client, group_id) if with_offsets else (),
        (client.host, client.port, node_id(client)))


def _partitions(assignment: Any) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((t.topic_name, int(p)) for t in assignment.topic_partitions
                        for p in t.partitions))


def share_offsets(client: KafkaWireClient, group_id: str) -> tuple[SharePartitionOffset, ...]:
    """Every share-partition's start offset and lag (v1 answers the lag, v0 does not)."""
    version = 1 if client.supports(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1) else 0
    client.require(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, "DescribeShareGroupOffsets")
    request = request_type(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version)
    (group,) = client.call(build(request, groups=(build(
        sibling(request, "DescribeShareGroupOffsetsRequestGroup"), group_id=GroupId(group_id),
        topics=None),))).groups
    if int(group.error_code) != ErrorCode.NONE:
        raise AdminError(f"DescribeShareGroupOffsets({group_id}): "
                         f"{ErrorCode(int(group.error_code)).name}"
                         + (f" ({group.error_message})" if group.error_message else ""))
    return tuple(sorted(
        (SharePartitionOffset(
            topic.topic_name, int(p.partition_index), int(p.start_offset),
            None if int(p.leader_epoch) == UNKNOWN else int(p.leader_epoch),
            None if int(getattr(p, "lag", UNKNOWN)) == UNKNOWN else int(p.lag))
         for topic in group.topics for p in topic.partitions
         if int(p.error_code) == ErrorCode.NONE and int(p.start_offset) != UNKNOWN),
        key=lambda offset: (offset.topic, offset.partition)))
