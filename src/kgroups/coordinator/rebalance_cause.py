"""Why a group rebalances: the cause the coordinator records as it starts each rebalance.

Its own module, importing nothing of kgroups, so the requests/responses, the group and the
effects can all name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class RebalanceCause(Enum):
    """Why the coordinator started a rebalance, one value per rule that starts one: a group
    that keeps rebalancing is diagnosed by which of these recurs (Kafka says it in words in
    its "Preparing to rebalance group" line; these are the stable labels for metrics)."""

    NEW_MEMBER_JOINED = "new_member_joined"  # a JoinGroup without a member id (or pending id)
    MEMBER_METADATA_CHANGED = "member_metadata_changed"  # a member rejoined with new protocols
    METADATA_CHANGE = "metadata_change"  # the leader rejoined a Stable group (topic metadata)
    MEMBER_LEFT = "member_left"  # LeaveGroup naming the member (the client's reason, v5+)
    SESSION_TIMEOUT = "session_timeout"  # no heartbeat within session.timeout.ms
    REBALANCE_TIMEOUT = "rebalance_timeout"  # joined members did not sync in time
    STATIC_MEMBER_REPLACED = "static_member_replaced"  # a known instance id rejoined anew
    GROUP_MAX_SIZE = "group_max_size"  # loaded with more members than group.max.size
    ADMIN_REMOVAL = "admin_removal"  # removed by instance id (RemoveMembersFromConsumerGroup)
    ASSIGNMENT_WRITE_FAILED = "assignment_write_failed"  # the leader's assignment not stored


@dataclass(frozen=True, slots=True)
class RebalanceNote:
    """The last rebalance the coordinator started for a group: what describe and metrics show
    to answer "why does it keep rebalancing". Kept in memory only (Kafka persists no cause
    either): a restarted coordinator knows none until the next rebalance."""

    cause: RebalanceCause
    detail: str
    started_ms: int
    old_generation: int
