"""kgroups.coordinator: Kafka's classic group coordinator as a sans-IO state machine.

The core never touches sockets, files, asyncio, a clock or randomness: the caller passes decoded
requests, the current time (ms) and a source of fresh ids, and carries out the `Effects` each call
returns (tests/test_import_graph.py enforces it). That keeps every rule
testable with an explicit clock and lets the broker decide how to do I/O.

API (everything below is exported here):

    coordinator = GroupCoordinator(GroupCoordinatorConfig.from_properties(props),
                                   new_uuid=uuid.uuid4)   # the caller's id source
    coordinator.begin_loading(p)                       # p answers COORDINATOR_LOAD_IN_PROGRESS
    fx = coordinator.load_partition(p, records, now)   # records: Iterable[OffsetsRecord], log order
    fx = coordinator.join_group(JoinGroupRequest(...), now)   # likewise sync_group, heartbeat,
        # leave_group, offset_commit, offset_fetch, offset_delete, describe_groups,
        # list_groups, delete_groups
    fx.replies  -> [Reply(request_id, response)]  send each response to its request's client
    fx.writes   -> [Write(write_id, offsets_partition, records)]  append in this order, then
    fx = coordinator.write_completed(write_id, None | ErrorCode, now)   # releases waiting replies
    fx.events   -> [GroupEvent(group_id, old_state, new_state, generation, member_count)]
    fx.removals -> [MemberRemoved(group_id, member_id, group_instance_id, RemovalReason)]
    fx.rebalances -> [RebalanceStarted(group_id, old_state, old_generation, RebalanceCause,
                      detail)]                          # log and count why groups rebalance
    fx = coordinator.advance_time(now)                 # call at coordinator.next_deadline()
    fx = coordinator.unload_partition(p, now)          # parked requests get NOT_COORDINATOR
    partition_for(group_id, num_partitions)            # where a group lives (Kafka's formula)

Bulk load (a big log): `latest, _ = latest_values(partition_bytes)`, then
`image = PartitionImage(); image.apply_raw(latest.items()); core.load_image(p, image, now)`
(bench/parallel_fold.py runs the folds in forked workers).

JoinGroup and SyncGroup may be answered in a later call's effects (when the rebalance completes);
the leader's SyncGroup, OffsetCommit, a static member's replacement, OffsetDelete and
DeleteGroups are answered only after `write_completed` for their write. See docs/coordinator.md.
"""

from kgroups.coordinator.bulk_load import latest_values
from kgroups.coordinator.config import GroupCoordinatorConfig
from kgroups.coordinator.coordinator import GroupCoordinator
from kgroups.coordinator.effects import (
    Effects,
    GroupEvent,
    MemberRemoved,
    RebalanceStarted,
    RemovalReason,
    Reply,
    Write,
)
from kgroups.coordinator.group import GroupState
from kgroups.coordinator.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchedGroup,
    FetchedOffset,
    FetchedTopic,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    MemberIdentity,
    MemberLeaveResult,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionError,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicPartitionErrors,
)
from kgroups.coordinator.persistence import PartitionImage
from kgroups.coordinator.placement import partition_for
from kgroups.coordinator.rebalance_cause import RebalanceCause, RebalanceNote
from kgroups.coordinator.views import GroupSummary, GroupView, MemberView

__all__ = [
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "Effects",
    "FetchedGroup",
    "FetchedOffset",
    "FetchedTopic",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupEvent",
    "GroupState",
    "GroupSummary",
    "GroupView",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupMember",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListedGroup",
    "MemberIdentity",
    "MemberLeaveResult",
    "MemberRemoved",
    "MemberView",
    "OffsetCommitPartition",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetCommitTopic",
    "OffsetDeleteRequest",
    "OffsetDeleteResponse",
    "OffsetFetchGroup",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "PartitionError",
    "PartitionImage",
    "RebalanceCause",
    "RebalanceNote",
    "RebalanceStarted",
    "RemovalReason",
    "Reply",
    "Response",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TopicPartitionErrors",
    "Write",
    "latest_values",
    "partition_for",
]
