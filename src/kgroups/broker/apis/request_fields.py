"""Request fields that only some versions of an API carry, read by type.

A decoded request is one kio class per version; a field added in version N is absent from the
classes before it. Each function here names the versions without the field and answers what
Kafka assumes for them, so the handlers never guess with `getattr(request, name, default)` and
the type checker proves every other version has the field under that name.
"""

from __future__ import annotations

import datetime

from kio.schema.consumer_group_heartbeat.v0 import request as cgh_v0
from kio.schema.consumer_group_heartbeat.v1 import request as cgh_v1
from kio.schema.delete_topics.v1 import request as delete_topics_v1
from kio.schema.delete_topics.v2 import request as delete_topics_v2
from kio.schema.delete_topics.v3 import request as delete_topics_v3
from kio.schema.delete_topics.v4 import request as delete_topics_v4
from kio.schema.delete_topics.v5 import request as delete_topics_v5
from kio.schema.delete_topics.v6 import request as delete_topics_v6
from kio.schema.describe_groups.v0 import request as describe_v0
from kio.schema.describe_groups.v1 import request as describe_v1
from kio.schema.describe_groups.v2 import request as describe_v2
from kio.schema.describe_groups.v3 import request as describe_v3
from kio.schema.describe_groups.v4 import request as describe_v4
from kio.schema.describe_groups.v5 import request as describe_v5
from kio.schema.describe_groups.v6 import request as describe_v6
from kio.schema.find_coordinator.v0 import request as coordinator_v0
from kio.schema.find_coordinator.v1 import request as coordinator_v1
from kio.schema.find_coordinator.v2 import request as coordinator_v2
from kio.schema.find_coordinator.v3 import request as coordinator_v3
from kio.schema.find_coordinator.v4 import request as coordinator_v4
from kio.schema.find_coordinator.v5 import request as coordinator_v5
from kio.schema.find_coordinator.v6 import request as coordinator_v6
from kio.schema.heartbeat.v0 import request as heartbeat_v0
from kio.schema.heartbeat.v1 import request as heartbeat_v1
from kio.schema.heartbeat.v2 import request as heartbeat_v2
from kio.schema.heartbeat.v3 import request as heartbeat_v3
from kio.schema.heartbeat.v4 import request as heartbeat_v4
from kio.schema.join_group.v0 import request as join_v0
from kio.schema.join_group.v1 import request as join_v1
from kio.schema.join_group.v2 import request as join_v2
from kio.schema.join_group.v3 import request as join_v3
from kio.schema.join_group.v4 import request as join_v4
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.join_group.v6 import request as join_v6
from kio.schema.join_group.v7 import request as join_v7
from kio.schema.join_group.v8 import request as join_v8
from kio.schema.join_group.v9 import request as join_v9
from kio.schema.leave_group.v3 import request as leave_v3
from kio.schema.leave_group.v4 import request as leave_v4
from kio.schema.leave_group.v5 import request as leave_v5
from kio.schema.list_groups.v0 import request as list_v0
from kio.schema.list_groups.v1 import request as list_v1
from kio.schema.list_groups.v2 import request as list_v2
from kio.schema.list_groups.v3 import request as list_v3
from kio.schema.list_groups.v4 import request as list_v4
from kio.schema.list_groups.v5 import request as list_v5
from kio.schema.offset_commit.v2 import request as commit_v2
from kio.schema.offset_commit.v3 import request as commit_v3
from kio.schema.offset_commit.v4 import request as commit_v4
from kio.schema.offset_commit.v5 import request as commit_v5
from kio.schema.offset_commit.v6 import request as commit_v6
from kio.schema.offset_commit.v7 import request as commit_v7
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_commit.v9 import request as commit_v9
from kio.schema.offset_fetch.v8 import request as fetch_v8
from kio.schema.offset_fetch.v9 import request as fetch_v9
from kio.schema.sync_group.v0 import request as sync_v0
from kio.schema.sync_group.v1 import request as sync_v1
from kio.schema.sync_group.v2 import request as sync_v2
from kio.schema.sync_group.v3 import request as sync_v3
from kio.schema.sync_group.v4 import request as sync_v4
from kio.schema.sync_group.v5 import request as sync_v5

JoinGroupRequest = (
    join_v0.JoinGroupRequest | join_v1.JoinGroupRequest | join_v2.JoinGroupRequest
    | join_v3.JoinGroupRequest | join_v4.JoinGroupRequest | join_v5.JoinGroupRequest
    | join_v6.JoinGroupRequest | join_v7.JoinGroupRequest | join_v8.JoinGroupRequest
    | join_v9.JoinGroupRequest)
SyncGroupRequest = (
    sync_v0.SyncGroupRequest | sync_v1.SyncGroupRequest | sync_v2.SyncGroupRequest
    | sync_v3.SyncGroupRequest | sync_v4.SyncGroupRequest | sync_v5.SyncGroupRequest)
HeartbeatRequest = (
    heartbeat_v0.HeartbeatRequest | heartbeat_v1.HeartbeatRequest
    | heartbeat_v2.HeartbeatRequest | heartbeat_v3.HeartbeatRequest
    | heartbeat_v4.HeartbeatRequest)
LeaveGroupMember = (
    leave_v3.MemberIdentity | leave_v4.MemberIdentity | leave_v5.MemberIdentity)
OffsetCommitRequest = (
    commit_v2.OffsetCommitRequest | commit_v3.OffsetCommitRequest
    | commit_v4.OffsetCommitRequest | commit_v5.OffsetCommitRequest
    | commit_v6.OffsetCommitRequest | commit_v7.OffsetCommitRequest
    | commit_v8.OffsetCommitRequest | commit_v9.OffsetCommitRequest)
OffsetCommitPartition = (
    commit_v2.OffsetCommitRequestPartition | commit_v3.OffsetCommitRequestPartition
    | commit_v4.OffsetCommitRequestPartition | commit_v5.OffsetCommitRequestPartition
    | commit_v6.OffsetCommitRequestPartition | commit_v7.OffsetCommitRequestPartition
    | commit_v8.OffsetCommitRequestPartition | commit_v9.OffsetCommitRequestPartition)
OffsetFetchGroup = fetch_v8.OffsetFetchRequestGroup | fetch_v9.OffsetFetchRequestGroup
DescribeGroupsRequest = (
    describe_v0.DescribeGroupsRequest | describe_v1.DescribeGroupsRequest
    | describe_v2.DescribeGroupsRequest | describe_v3.DescribeGroupsRequest
    | describe_v4.DescribeGroupsRequest | describe_v5.DescribeGroupsRequest
    | describe_v6.DescribeGroupsRequest)
ListGroupsRequest = (
    list_v0.ListGroupsRequest | list_v1.ListGroupsRequest | list_v2.ListGroupsRequest
    | list_v3.ListGroupsRequest | list_v4.ListGroupsRequest | list_v5.ListGroupsRequest)
ConsumerGroupHeartbeatRequest = (
    cgh_v0.ConsumerGroupHeartbeatRequest | cgh_v1.ConsumerGroupHeartbeatRequest)
FindCoordinatorRequest = (
    coordinator_v0.FindCoordinatorRequest | coordinator_v1.FindCoordinatorRequest
    | coordinator_v2.FindCoordinatorRequest | coordinator_v3.FindCoordinatorRequest
    | coordinator_v4.FindCoordinatorRequest | coordinator_v5.FindCoordinatorRequest
    | coordinator_v6.FindCoordinatorRequest)
DeleteTopicsRequest = (
    delete_topics_v1.DeleteTopicsRequest | delete_topics_v2.DeleteTopicsRequest
    | delete_topics_v3.DeleteTopicsRequest | delete_topics_v4.DeleteTopicsRequest
    | delete_topics_v5.DeleteTopicsRequest | delete_topics_v6.DeleteTopicsRequest)

# FindCoordinator's key type for a group, the only one before v1.
_GROUP_KEY_TYPE = 0
# What the coordinator is told when a version has no rebalance timeout (JoinGroup v0: the
# session timeout stands for it) or no retention time (OffsetCommit v5+: the broker's).
UNSET_MS = -1


def milliseconds(value: datetime.timedelta) -> int:
    """A kio duration field as the whole milliseconds the coordinator takes."""
    return value // datetime.timedelta(milliseconds=1)


def join_rebalance_timeout_ms(request: JoinGroupRequest) -> int:
    """From v1."""
    if isinstance(request, join_v0.JoinGroupRequest):
        return UNSET_MS
    return milliseconds(request.rebalance_timeout)


def join_group_instance_id(request: JoinGroupRequest) -> str | None:
    """From v5 (static membership)."""
    if isinstance(request, join_v0.JoinGroupRequest | join_v1.JoinGroupRequest
                  | join_v2.JoinGroupRequest | join_v3.JoinGroupRequest
                  | join_v4.JoinGroupRequest):
        return None
    return request.group_instance_id


def join_reason(request: JoinGroupRequest) -> str | None:
    """From v8."""
    if isinstance(request, join_v8.JoinGroupRequest | join_v9.JoinGroupRequest):
        return request.reason
    return None


def sync_group_instance_id(request: SyncGroupRequest) -> str | None:
    """From v3."""
    if isinstance(request, sync_v0.SyncGroupRequest | sync_v1.SyncGroupRequest
                  | sync_v2.SyncGroupRequest):
        return None
    return request.group_instance_id


def sync_protocol(request: SyncGroupRequest) -> tuple[str | None, str | None]:
    """The protocol type and name the member believes in, from v5 (both None before)."""
    if isinstance(request, sync_v5.SyncGroupRequest):
        return request.protocol_type, request.protocol_name
    return None, None


def heartbeat_group_instance_id(request: HeartbeatRequest) -> str | None:
    """From v3."""
    if isinstance(request, heartbeat_v3.HeartbeatRequest | heartbeat_v4.HeartbeatRequest):
        return request.group_instance_id
    return None


def leave_reason(member: LeaveGroupMember) -> str | None:
    """A leaving member's reason, from v5 (members themselves from v3)."""
    if isinstance(member, leave_v5.MemberIdentity):
        return member.reason
    return None


# The versions of OffsetCommit without a field, as tuples made once: every commit asks each,
# and a `A | B | C` union is built anew at every call.
_COMMIT_BEFORE_V7 = (commit_v2.OffsetCommitRequest, commit_v3.OffsetCommitRequest,
                     commit_v4.OffsetCommitRequest, commit_v5.OffsetCommitRequest,
                     commit_v6.OffsetCommitRequest)
_COMMIT_WITH_RETENTION = (commit_v2.OffsetCommitRequest, commit_v3.OffsetCommitRequest,
                          commit_v4.OffsetCommitRequest)
_COMMIT_PARTITION_BEFORE_V6 = (commit_v2.OffsetCommitRequestPartition,
                               commit_v3.OffsetCommitRequestPartition,
                               commit_v4.OffsetCommitRequestPartition,
                               commit_v5.OffsetCommitRequestPartition)


def commit_group_instance_id(request: OffsetCommitRequest) -> str | None:
    """From v7."""
    if isinstance(request, _COMMIT_BEFORE_V7):
        return None
    return request.group_instance_id


def commit_retention_ms(request: OffsetCommitRequest) -> int:
    """v2-v4 only: later versions leave retention to the broker's setting."""
    if isinstance(request, _COMMIT_WITH_RETENTION):
        return milliseconds(request.retention_time)
    return UNSET_MS


def commit_leader_epoch(partition: OffsetCommitPartition) -> int:
    """From v6; -1 (unknown) before."""
    if isinstance(partition, _COMMIT_PARTITION_BEFORE_V6):
        return -1
    return int(partition.committed_leader_epoch)


def fetch_member(group: OffsetFetchGroup) -> tuple[str | None, int]:
    """The member id and epoch a batched OffsetFetch checks (KIP-848), from v9; none in v8."""
    if isinstance(group, fetch_v9.OffsetFetchRequestGroup):
        return group.member_id, int(group.member_epoch)
    return None, -1


def describe_include_operations(request: DescribeGroupsRequest) -> bool:
    """From v3."""
    if isinstance(request, describe_v0.DescribeGroupsRequest | describe_v1.DescribeGroupsRequest
                  | describe_v2.DescribeGroupsRequest):
        return False
    return request.include_authorized_operations


def list_states_filter(request: ListGroupsRequest) -> tuple[str, ...]:
    """From v4; empty (all states) before."""
    if isinstance(request, list_v4.ListGroupsRequest | list_v5.ListGroupsRequest):
        return tuple(request.states_filter)
    return ()


def list_types_filter(request: ListGroupsRequest) -> tuple[str, ...]:
    """From v5; empty (all types) before."""
    if isinstance(request, list_v5.ListGroupsRequest):
        return tuple(request.types_filter)
    return ()


def heartbeat_topic_regex(request: ConsumerGroupHeartbeatRequest) -> str | None:
    """ConsumerGroupHeartbeat's regex subscription, from v1."""
    if isinstance(request, cgh_v1.ConsumerGroupHeartbeatRequest):
        return request.subscribed_topic_regex
    return None


def coordinator_key_type(request: FindCoordinatorRequest) -> int:
    """From v1; v0 asks for a group's coordinator only."""
    if isinstance(request, coordinator_v0.FindCoordinatorRequest):
        return _GROUP_KEY_TYPE
    return int(request.key_type)


def deleted_topic_names(request: DeleteTopicsRequest) -> tuple[str, ...] | None:
    """DeleteTopics by names only (v1-v5); None from v6, which names topics by name or id."""
    if isinstance(request, delete_topics_v6.DeleteTopicsRequest):
        return None
    return tuple(request.topic_names)
