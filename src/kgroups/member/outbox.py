"""What a member has to send, and the part both protocols share: offset commits.

A member never does I/O: its requests wait here until its driver takes them. Request ids are
`(member key, sequence)`, so the driver can route each answer back to the member (and drop
answers for a member that has since crashed).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from kgroups.coordinator import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    SyncGroupRequest,
)
from kgroups.coordinator.consumer_messages import ConsumerGroupHeartbeatRequest
from kgroups.errors import ErrorCode
from kgroups.member.settings import TopicPartition

MemberRequest = (
    JoinGroupRequest | SyncGroupRequest | HeartbeatRequest | LeaveGroupRequest
    | OffsetCommitRequest | ConsumerGroupHeartbeatRequest
)


@dataclass(slots=True)
class Outbox:
    key: Hashable
    pending: list[MemberRequest] = field(default_factory=list)
    sequence: int = 0

    def next_id(self) -> tuple[Hashable, int]:
        self.sequence += 1
        return (self.key, self.sequence)

    def take(self) -> list[MemberRequest]:
        taken, self.pending = self.pending, []
        return taken


@dataclass(slots=True)
class CommitLedger:
    """Commits sent and refused by the coordinator (any partition answered with an error)."""

    sent: int = 0
    refused: int = 0
    last_at: int = 0
    # The errors of refused commits, by name: why commits failed is the interesting part.
    errors: dict[str, int] = field(default_factory=dict)

    def commit(
        self, outbox: Outbox, group_id: str, owned: Iterable[TopicPartition], now: int,
        member_id: str, generation: int, instance_id: str | None,
    ) -> None:
        """An OffsetCommit of every owned partition; the offset is the commit time, which only
        has to grow for the coordinator to accept it."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(owned):
            by_topic.setdefault(topic, []).append(partition)
        if not by_topic:
            return
        self.sent += 1
        self.last_at = now
        outbox.pending.append(OffsetCommitRequest(
            outbox.next_id(), group_id,
            tuple(OffsetCommitTopic(topic, tuple(OffsetCommitPartition(p, now) for p in parts))
                  for topic, parts in by_topic.items()),
            generation_id=generation, member_id=member_id, group_instance_id=instance_id))

    def answered(self, response: OffsetCommitResponse) -> ErrorCode:
        """Records the outcome; the first partition error (NONE when all were accepted)."""
        for topic in response.topics:
            for partition in topic.partitions:
                if partition.error is not ErrorCode.NONE:
                    self.refused += 1
                    name = partition.error.name
                    self.errors[name] = self.errors.get(name, 0) + 1
                    return partition.error
        return ErrorCode.NONE
