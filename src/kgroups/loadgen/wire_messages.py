"""A member's requests (the coordinator's message dataclasses) as kio wire requests, and the
wire answers back as the coordinator's response dataclasses the member reads.

The broker's handlers (kgroups.broker.apis) translate the other way, server side; this is the
client side of the same mapping, for the API versions `Versions` settled with the broker.
`wire.build` drops the fields a version lacks, so one builder serves every version.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, assert_never

from kgroups.broker.wire import build, request_type, sibling
from kgroups.coordinator import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberLeaveResult,
    OffsetCommitRequest,
    OffsetCommitResponse,
    PartitionError,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicPartitionErrors,
)
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.errors import ErrorCode
from kgroups.member import MemberRequest

JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT = 11, 14, 12, 13, 8
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
MemberResponse = (JoinGroupResponse | SyncGroupResponse | HeartbeatResponse | LeaveGroupResponse
                  | OffsetCommitResponse | ConsumerGroupHeartbeatResponse)


@dataclass(frozen=True, slots=True)
class Versions:
    """The version of each group API the members send (settled in `bootstrap.negotiate`)."""

    join_group: int
    sync_group: int
    heartbeat: int
    leave_group: int
    offset_commit: int
    # None: the broker has no KIP-848 consumer groups.
    consumer_group_heartbeat: int | None
    consumer_group_describe: int | None


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def api_name(request: MemberRequest) -> str:
    """The Kafka name of the API a member request goes out as (for the tallies)."""
    return type(request).__name__.removesuffix("Request")


def to_wire(request: MemberRequest, versions: Versions) -> Any:
    match request:
        case JoinGroupRequest():
            wire = request_type(JOIN_GROUP, versions.join_group)
            return build(
                wire, group_id=request.group_id, member_id=request.member_id,
                session_timeout=_ms(request.session_timeout_ms),
                rebalance_timeout=_ms(request.rebalance_timeout_ms),
                group_instance_id=request.group_instance_id,
                protocol_type=request.protocol_type, reason=request.reason,
                protocols=tuple(build(sibling(wire, "JoinGroupRequestProtocol"), name=name,
                                      metadata=metadata)
                                for name, metadata in request.protocols))
        case SyncGroupRequest():
            wire = request_type(SYNC_GROUP, versions.sync_group)
            return build(
                wire, group_id=request.group_id, generation_id=request.generation_id,
                member_id=request.member_id, group_instance_id=request.group_instance_id,
                protocol_type=request.protocol_type, protocol_name=request.protocol_name,
                assignments=tuple(build(sibling(wire, "SyncGroupRequestAssignment"),
                                        member_id=member_id, assignment=assignment)
                                  for member_id, assignment in request.assignments))
        case HeartbeatRequest():
            return build(request_type(HEARTBEAT, versions.heartbeat), group_id=request.group_id,
                         generation_id=request.generation_id, member_id=request.member_id,
                         group_instance_id=request.group_instance_id)
        case LeaveGroupRequest():
            wire = request_type(LEAVE_GROUP, versions.leave_group)
            return build(wire, group_id=request.group_id, members=tuple(
                build(sibling(wire, "MemberIdentity"), member_id=m.member_id,
                      group_instance_id=m.group_instance_id, reason=m.reason)
                for m in request.members))
        case OffsetCommitRequest():
            wire = request_type(OFFSET_COMMIT, versions.offset_commit)
            topic_type = sibling(wire, "OffsetCommitRequestTopic")
            partition_type = sibling(wire, "OffsetCommitRequestPartition")
            return build(
                wire, group_id=request.group_id, member_id=request.member_id,
                generation_id_or_member_epoch=request.generation_id,
                group_instance_id=request.group_instance_id,
                topics=tuple(build(topic_type, name=topic.name, partitions=tuple(
                    build(partition_type, partition_index=p.partition,
                          committed_offset=p.offset, committed_leader_epoch=p.leader_epoch,
                          committed_metadata=p.metadata)
                    for p in topic.partitions)) for topic in request.topics))
        case ConsumerGroupHeartbeatRequest():
            if versions.consumer_group_heartbeat is None:
                raise ValueError("the broker does not speak ConsumerGroupHeartbeat")
            wire = request_type(CONSUMER_GROUP_HEARTBEAT, versions.consumer_group_heartbeat)
            owned = request.topic_partitions
            return build(
                wire, group_id=request.group_id, member_id=request.member_id,
                member_epoch=request.member_epoch, instance_id=request.instance_id,
                rack_id=request.rack_id, rebalance_timeout=_ms(request.rebalance_timeout_ms),
                subscribed_topic_names=request.subscribed_topic_names,
                subscribed_topic_regex=request.subscribed_topic_regex,
                server_assignor=request.server_assignor,
                topic_partitions=None if owned is None else tuple(
                    build(sibling(wire, "TopicPartitions"), topic_id=topic_id,
                          partitions=partitions) for topic_id, partitions in owned))
        case _:
            assert_never(request)


def from_wire(request: MemberRequest, answer: Any) -> MemberResponse:
    """The wire answer to `request` as the member's response dataclass."""
    match request:
        case JoinGroupRequest():
            return JoinGroupResponse(
                ErrorCode(int(answer.error_code)), answer.member_id, int(answer.generation_id),
                getattr(answer, "protocol_type", None), answer.protocol_name or None,
                answer.leader, bool(getattr(answer, "skip_assignment", False)),
                tuple(JoinGroupMember(m.member_id, getattr(m, "group_instance_id", None),
                                      bytes(m.metadata)) for m in answer.members))
        case SyncGroupRequest():
            return SyncGroupResponse(ErrorCode(int(answer.error_code)), bytes(answer.assignment),
                                     getattr(answer, "protocol_type", None),
                                     getattr(answer, "protocol_name", None))
        case HeartbeatRequest():
            return HeartbeatResponse(ErrorCode(int(answer.error_code)))
        case LeaveGroupRequest():
            return LeaveGroupResponse(ErrorCode(int(answer.error_code)), tuple(
                MemberLeaveResult(m.member_id, m.group_instance_id, ErrorCode(int(m.error_code)))
                for m in answer.members))
        case OffsetCommitRequest():
            return OffsetCommitResponse(tuple(
                TopicPartitionErrors(t.name, tuple(
                    PartitionError(int(p.partition_index), ErrorCode(int(p.error_code)))
                    for p in t.partitions))
                for t in answer.topics))
        case ConsumerGroupHeartbeatRequest():
            assignment = None
            if answer.assignment is not None:
                assignment = tuple((t.topic_id, tuple(int(p) for p in t.partitions))
                                   for t in answer.assignment.topic_partitions)
            return ConsumerGroupHeartbeatResponse(
                ErrorCode(int(answer.error_code)), answer.error_message, answer.member_id,
                int(answer.member_epoch),
                int(answer.heartbeat_interval.total_seconds() * 1000), assignment)
        case _:
            assert_never(request)


def answer_error(response: MemberResponse) -> ErrorCode:
    """The error a response carries (an OffsetCommit's first partition error; a LeaveGroup's
    top-level error, else its first member's)."""
    match response:
        case OffsetCommitResponse():
            for topic in response.topics:
                for partition in topic.partitions:
                    if partition.error is not ErrorCode.NONE:
                        return partition.error
            return ErrorCode.NONE
        case LeaveGroupResponse():
            if response.error is not ErrorCode.NONE:
                return response.error
            return next((m.error for m in response.members if m.error is not ErrorCode.NONE),
                        ErrorCode.NONE)
        case _:
            return response.error
