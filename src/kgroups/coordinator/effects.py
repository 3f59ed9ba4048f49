"""What the sans-IO core asks its shell to do: send replies, persist records, log group events.

Every entry point returns an `Effects`; the shell performs them in order. Writes must be appended
to their __consumer_offsets partition in the order emitted, then confirmed with
`GroupCoordinator.write_completed`, which may release replies that waited for durability.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kgroups.coordinator.consumer_messages import AnyResponse
from kgroups.coordinator.messages import RequestId
from kgroups.coordinator.rebalance_cause import RebalanceCause
from kgroups.immutable import value_class
from kgroups.records.schema import OffsetsRecord


@value_class
class Reply:
    request_id: RequestId
    response: AnyResponse


@value_class
class TxnMarker:
    """The end of a transaction as a control record: COMMIT (`commits`) or ABORT, written by
    the transaction coordinator of `coordinator_epoch`."""

    commits: bool
    coordinator_epoch: int


@value_class
class Write:
    """Records for one __consumer_offsets partition, as one batch. A `producer_id` other than
    -1 makes it a transactional batch of that producer (TxnOffsetCommit's offsets); with a
    `marker` the batch is that producer's control batch instead (records empty)."""

    write_id: int
    offsets_partition: int
    records: list[OffsetsRecord]
    producer_id: int = -1
    producer_epoch: int = -1
    marker: TxnMarker | None = None


@value_class
class GroupEvent:
    """A group changed state (`old_state` None when it was just created)."""

    group_id: str
    old_state: str | None
    new_state: str
    generation: int
    member_count: int


class RemovalReason(Enum):
    """Why a member left a group: an operator reading the log needs to tell a crashed consumer
    (a timeout) from one that left, was too slow to rejoin, or was replaced."""

    SESSION_TIMEOUT = "session_timeout"  # no heartbeat within session.timeout.ms
    JOIN_TIMEOUT = "new_member_join_timeout"  # a new member's join outlived the join timeout
    PENDING_MEMBER_TIMEOUT = "pending_member_timeout"  # MEMBER_ID_REQUIRED id never used
    LEFT_GROUP = "left_group"  # LeaveGroup naming the member
    REMOVED_BY_INSTANCE_ID = "removed_by_instance_id"  # LeaveGroup naming only its instance id
    DID_NOT_REJOIN = "did_not_rejoin"  # a dynamic member missed the join phase
    DID_NOT_SYNC = "did_not_sync"  # got its JoinGroup answer, never sent SyncGroup
    FENCED_BY_STATIC_REPLACEMENT = "fenced_by_static_replacement"  # its instance id rejoined
    STATIC_REPLACEMENT_REVERTED = "static_replacement_reverted"  # replacement write failed
    GROUP_MAX_SIZE_REACHED = "group_max_size_reached"  # over group.max.size when rejoining
    REBALANCE_TIMEOUT = "rebalance_timeout"  # a consumer-protocol member did not revoke in time


@value_class
class RebalanceStarted:
    """The group entered PreparingRebalance: from `old_state`, leaving `old_generation`,
    because of `cause`; `detail` says it in words (with the client's reason, if it sent one)."""

    group_id: str
    old_state: str
    old_generation: int
    cause: RebalanceCause
    detail: str


@value_class
class MemberRemoved:
    """A member (or a pending member id) is no longer part of the group."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    reason: RemovalReason


@dataclass(slots=True)
class Effects:
    replies: list[Reply] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    events: list[GroupEvent] = field(default_factory=list)
    removals: list[MemberRemoved] = field(default_factory=list)
    rebalances: list[RebalanceStarted] = field(default_factory=list)
