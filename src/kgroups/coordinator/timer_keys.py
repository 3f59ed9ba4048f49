"""Names of the coordinator's timers, built by small functions so no file spells a key by hand.

A key says what a deadline guards; re-arming the same key replaces its deadline (`TimerQueue`).
Keys are NamedTuples (hashable, cheap to build on every heartbeat) and the coordinator's
dispatch matches on them exhaustively, so a kind added here without a handler fails loudly.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class GroupTimerKind(Enum):
    JOIN = "join"  # the join phase (incl. the initial rebalance delay) ends
    SYNC = "sync"  # members that got their JoinGroup answer must have sent SyncGroup
    SESSION = "session"  # a member's session (or a new member's join timeout) runs out
    PENDING_MEMBER = "pending_member"  # a MEMBER_ID_REQUIRED id was never used to join


class GroupTimer(NamedTuple):
    kind: GroupTimerKind
    group_id: str
    member_id: str


class OffsetExpiryTimer(NamedTuple):
    """The periodic offset expiry of one owned __consumer_offsets partition."""

    offsets_partition: int


def join_timer(group_id: str) -> GroupTimer:
    return GroupTimer(GroupTimerKind.JOIN, group_id, "")


def sync_timer(group_id: str) -> GroupTimer:
    return GroupTimer(GroupTimerKind.SYNC, group_id, "")


def session_timer(group_id: str, member_id: str) -> GroupTimer:
    return GroupTimer(GroupTimerKind.SESSION, group_id, member_id)


def pending_member_timer(group_id: str, member_id: str) -> GroupTimer:
    return GroupTimer(GroupTimerKind.PENDING_MEMBER, group_id, member_id)


def offset_expiry_timer(offsets_partition: int) -> OffsetExpiryTimer:
    return OffsetExpiryTimer(offsets_partition)
