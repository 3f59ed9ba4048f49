"""Requests and responses of KIP-1071's streams-group APIs (StreamsGroupHeartbeat, API 88, and
StreamsGroupDescribe, API 89), decoded. Tasks are named by subtopology id and partition number,
topics by name, as on the wire."""

from __future__ import annotations

from dataclasses import dataclass

from kgroups.coordinator.messages import RequestId
from kgroups.errors import ErrorCode
from kgroups.records.streams_group import Pairs, StreamsGroupTopologyValue, TopicInfo

# (subtopology id, sorted partition numbers) pairs, as the heartbeat lists tasks.
TaskIdList = tuple[tuple[str, tuple[int, ...]], ...]


class StreamsStatus:
    """StreamsGroupHeartbeatResponse status codes (Kafka's StreamsGroupHeartbeatResponse.Status)."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4


@dataclass(frozen=True, slots=True)
class StreamsGroupHeartbeatRequest:
    """Fields left None are unchanged since the member's previous heartbeat. `topology` is
    only sent when (re-)joining; its `epoch` is the member's topology epoch."""

    request_id: RequestId
    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: StreamsGroupTopologyValue | None = None
    active_tasks: TaskIdList | None = None
    standby_tasks: TaskIdList | None = None
    warmup_tasks: TaskIdList | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: Pairs | None = None
    task_offsets_sent: bool = False  # TaskOffsets non-null (refused by Kafka 4.3.1)
    task_end_offsets_sent: bool = False
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class EndpointPartitions:
    """The partitions one user endpoint's member materializes (interactive queries)."""

    endpoint: tuple[str, int]
    active: tuple[tuple[str, tuple[int, ...]], ...]
    standby: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class StreamsGroupHeartbeatResponse:
    """Task lists None: unchanged since the member's last heartbeat. `creatable_topics`: the
    internal topics the broker is to create for the group (name -> partitions, replication
    factor, configs), as Kafka's coordinator hands them to its broker."""

    error: ErrorCode
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    acceptable_recovery_lag: int = 0
    task_offset_interval_ms: int = 0
    status: tuple[tuple[int, str], ...] = ()
    active_tasks: TaskIdList | None = None
    standby_tasks: TaskIdList | None = None
    warmup_tasks: TaskIdList | None = None
    endpoint_information_epoch: int = 0
    partitions_by_user_endpoint: tuple[EndpointPartitions, ...] | None = None
    creatable_topics: tuple[TopicInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupDescribeRequest:
    request_id: RequestId
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedStreamsMember:
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: Pairs
    assignment: tuple[TaskIdList, TaskIdList, TaskIdList]  # active, standby, warm-up
    target_assignment: tuple[TaskIdList, TaskIdList, TaskIdList]


@dataclass(frozen=True, slots=True)
class DescribedSubtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...]
    state_changelog_topics: tuple[TopicInfo, ...]
    repartition_source_topics: tuple[TopicInfo, ...]


@dataclass(frozen=True, slots=True)
class DescribedStreamsGroup:
    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology_epoch: int | None = None  # None: no topology to describe
    subtopologies: tuple[DescribedSubtopology, ...] | None = None
    members: tuple[DescribedStreamsMember, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupDescribeResponse:
    groups: tuple[DescribedStreamsGroup, ...]
