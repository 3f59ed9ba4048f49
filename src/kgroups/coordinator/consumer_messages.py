"""Requests and responses of KIP-848's consumer-group APIs (ConsumerGroupHeartbeat, API 68, and
ConsumerGroupDescribe, API 69), decoded: topics are named by id as on the wire."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kgroups.coordinator.messages import RequestId, Response
from kgroups.coordinator.share_messages import (
    AlterShareOffsetsResponse,
    DeleteShareOffsetsResponse,
    DescribeShareOffsetsResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
    ShareGroupInitializedResponse,
)
from kgroups.errors import ErrorCode
from kgroups.records.consumer_group import TopicPartitionList


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatRequest:
    """Fields left None are unchanged since the member's previous heartbeat."""

    request_id: RequestId
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: TopicPartitionList | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1
    # Which of the given topics the member's principal may Describe (the broker's authorizer);
    # a regex resolved on this heartbeat keeps only those, as Kafka filters its matches by the
    # rights of the heartbeat that resolves it. None: no authorizer, every topic.
    describable_topics: Callable[[Iterable[str]], frozenset[str]] | None = field(
        default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    """`assignment` None: unchanged since the member's last heartbeat."""

    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitionList | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeRequest:
    request_id: RequestId
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: TopicPartitionList
    target_assignment: TopicPartitionList
    classic: bool = False  # a member still speaking the classic protocol (online migration)


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResponse:
    groups: tuple[DescribedConsumerGroup, ...]


# Every answer the coordinator gives: the classic, consumer and share protocols'.
AnyResponse = (Response | ConsumerGroupHeartbeatResponse | ConsumerGroupDescribeResponse
               | ShareGroupHeartbeatResponse | ShareGroupDescribeResponse
               | ShareGroupInitializedResponse | DescribeShareOffsetsResponse
               | AlterShareOffsetsResponse | DeleteShareOffsetsResponse)


class HeartbeatError(Exception):
    """Ends a heartbeat with an error response (no record written for it)."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString (a v0 member id is one)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
