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
