"""Names of the coordinator's timers, built by small functions so no file spells a key by hand.

A key says what a deadline guards; re-arming the same key replaces its deadline (`TimerQueue`).
Keys are NamedTuples and the coordinator's dispatch matches on them exhaustively, so a kind added
here without a handler fails loudly. Every heartbeat builds a session key and the timer queue
hashes it a few times, so keys are built with `tuple.__new__` and a kind hashes by identity
(`Enum.__hash__` is Python code; at ~0.5 us per hash it doubled a heartbeat's cost).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class GroupTimerKind(Enum):
    JOIN = "join"  # the join phase (incl. the initial rebalance delay) ends
    SYNC = "sync"  # members that got their JoinGroup answer must have sent SyncGroup
    SESSION = "session"  # a member's session (or a new member's join timeout) runs out
    PENDING_MEMBER = "pending_member"  # a MEMBER_ID_REQUIRED id was never used to join
    CONSUMER_SESSION = "consumer_session"  # a consumer-protocol member's session runs out
    CONSUMER_REBALANCE = "consumer_rebalance"  # ... or it did not revoke within its timeout
    # A classic member of a consumer group (online migration) told to rejoin did not, or did
    # not send SyncGroup after its JoinGroup answer, within its rebalance timeout.
    CONSUMER_JOIN = "consumer_join"
    CONSUMER_SYNC = "consumer_sync"
    SHARE_SESSION = "share_session"  # a share group member's session runs out

    __hash__ = object.__hash__  # members are singletons compared by identity


class GroupTimer(NamedTuple):
    kind: GroupTimerKind
    group_id: str
    member_id: str


class OffsetExpiryTimer(NamedTuple):
    """The periodic offset expiry of one owned __consumer_offsets partition."""

    offsets_partition: int


_new = tuple.__new__
_JOIN = GroupTimerKind.JOIN
_SYNC = GroupTimerKind.SYNC
_SESSION = GroupTimerKind.SESSION
_PENDING_MEMBER = GroupTimerKind.PENDING_MEMBER
_CONSUMER_SESSION = GroupTimerKind.CONSUMER_SESSION
_CONSUMER_REBALANCE = GroupTimerKind.CONSUMER_REBALANCE
_CONSUMER_JOIN = GroupTimerKind.CONSUMER_JOIN
_CONSUMER_SYNC = GroupTimerKind.CONSUMER_SYNC
_SHARE_SESSION = GroupTimerKind.SHARE_SESSION


def join_timer(group_id: str) -> GroupTimer:
    return _new(GroupTimer, (_JOIN, group_id, ""))


def sync_timer(group_id: str) -> GroupTimer:
    return _new(GroupTimer, (_SYNC, group_id, ""))


def session_timer(group_id: str, member_id: str) -> GroupTimer:
    return _new(GroupTimer, (_SESSION, group_id, member_id))


def pending_member_timer(group_id: str, member_id: str) -> GroupTimer:
    return _new(GroupTimer, (_PENDING_MEMBER, group_id, member_id))


def consumer_session_timer(group_id: str, member_id: str) -> GroupTimer:
    return _new(GroupTimer, (_CONSUMER_SESSION, group_id, member_id))


def consumer_rebalance_timer(group_id: str, member_id: str) -> GroupTimer:
    return _new(GroupTimer, (_CONSUMER_REBALANCE, group_id, member_id))


def consumer_join_timer(group_id: str, member_id: str) -> GroupTimer:
    return _new(GroupTimer, (_CONSUMER_JOIN, group_id, member_id))


def consumer_sync_timer(group_id: str, member_id: str) -> GroupTimer:
    return _new(GroupTimer, (_CONSUMER_SYNC, group_id, member_id))


def share_session_timer(group_id: str, member_id: str) -> GroupTimer:
    return _new(GroupTimer, (_SHARE_SESSION, group_id, member_id))


def offset_expiry_timer(offsets_partition: int) -> OffsetExpiryTimer:
    return OffsetExpiryTimer(offsets_partition)
