"""Requests and responses of KIP-932's share-group APIs (ShareGroupHeartbeat, API 76, and
ShareGroupDescribe, API 77) in the core, and the share-partition initialization the broker
carries out for the coordinator (topics are named by id, as on the wire)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kgroups.coordinator.messages import RequestId
from kgroups.errors import ErrorCode
from kgroups.records.consumer_group import TopicPartitionList

# (topic id, topic name, partitions) of share-partitions to initialize or initialized.
ShareTopics = tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatRequest:
    """Fields left None are unchanged since the member's previous heartbeat."""

    request_id: RequestId
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResponse:
    """`assignment` None: unchanged since the member's last heartbeat. `initialize`: the
    share-partitions this heartbeat recorded as initializing, for the broker to initialize in
    the share coordinator and then report (`ShareGroupInitializedRequest`); never on the wire,
    nor is `group_epoch` (the epoch the initialization belongs to)."""

    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitionList | None = None
    initialize: ShareTopics = ()
    group_epoch: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupInitializedRequest:
    """The broker initialized (error NONE) or failed to initialize these share-partitions of
    the group: they are recorded initialized, or no longer initializing."""

    request_id: RequestId
    group_id: str
    topics: ShareTopics
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class ShareGroupInitializedResponse:
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeRequest:
    request_id: RequestId
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: TopicPartitionList


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedShareMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeResponse:
    groups: tuple[DescribedShareGroup, ...]


# -- the share-group offsets admin APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets,
# DeleteShareGroupOffsets): the coordinator checks and records, the broker reads or writes the
# share coordinator's state and reports back.


@dataclass(frozen=True, slots=True)
class ShareTopicResult:
    """A topic of an offsets answer: per partition its error (and message); `topic_id` None for
    a topic that does not exist."""

    topic_name: str
    topic_id: uuid.UUID | None
    partitions: tuple[tuple[int, ErrorCode, str | None], ...]


@dataclass(frozen=True, slots=True)
class DescribeShareOffsetsRequest:
    """`topics` None: every share-partition the group has state for."""

    request_id: RequestId
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None


@dataclass(frozen=True, slots=True)
class DescribeShareOffsetsResponse:
    """The share-partitions to read the state of (topic name, id, partitions), for the
    broker to fill in; unknown topics' partitions come with their error."""

    error: ErrorCode
    topics: tuple[ShareTopicResult, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterShareOffsetsRequest:
    request_id: RequestId
    group_id: str
    topics: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]  # name, (partition, offset)


@dataclass(frozen=True, slots=True)
class AlterShareOffsetsResponse:
    """`initialize`: the share-partitions recorded initializing, with their new start
    offsets, for the broker to initialize at `state_epoch` and report
    (`ShareGroupInitializedRequest`)."""

    error: ErrorCode
    error_message: str | None = None
    topics: tuple[ShareTopicResult, ...] = ()
    initialize: tuple[tuple[uuid.UUID, str, int, int], ...] = ()  # id, name, partition, offset
    state_epoch: int = 0


@dataclass(frozen=True, slots=True)
class DeleteShareOffsetsRequest:
    request_id: RequestId
    group_id: str
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteShareOffsetsResponse:
    """`delete`: the share-partitions whose state the broker deletes, then reports
    (`ShareStateDeletedRequest`)."""

    error: ErrorCode
    error_message: str | None = None
    topics: tuple[ShareTopicResult, ...] = ()
    delete: ShareTopics = ()


@dataclass(frozen=True, slots=True)
class ShareStateDeletedRequest:
    """The broker deleted the state of these topics' share-partitions: they are no longer
    recorded as being deleted."""

    request_id: RequestId
    group_id: str
    topic_ids: tuple[uuid.UUID, ...]
