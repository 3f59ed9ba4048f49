"""Per-group history rules in plain Python: what counts as a rebalance and how a partition's
commit window is judged (Burrow's rules). Spark calls these once per group or partition through
grouped pandas UDFs; keeping them free of Spark lets the rules be tested directly."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import pairwise
from typing import Any

# Burrow keeps this many offsets per partition and judges the partition over them.
BURROW_WINDOW = 10
# Burrow keeps the same number of log end offsets per partition, one per offset refresh (10 s
# by default): a consumer caught up within that span is not called stopped yet.
RECENT_LAG_ZERO_MS = BURROW_WINDOW * 10_000


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """A GroupMetadata record of one group, in log order; `members` is None for a tombstone."""

    log_partition: int
    log_offset: int
    ts: int
    generation: int | None
    members: Sequence[Mapping[str, Any]] | None


@dataclass(frozen=True, slots=True)
class Rebalance:
    """The change from one generation of a group to the next."""

    from_generation: int
    to_generation: int
    ts: int
    members_joined: int
    members_left: int
    partitions_moved: int
    partitions_kept: int
    seconds_since_previous: float


def member_identity(member: Mapping[str, Any]) -> str:
    """Who a member is across generations: a static member keeps its instance id while its
    member id changes on every restart, so the instance id names it when there is one."""
    instance_id = member.get("instance_id")
    return str(instance_id) if instance_id else str(member["member_id"])


def partition_owners(members: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], str]:
    """(topic, partition) -> identity of the member the generation assigned it to."""
    owners: dict[tuple[str, int], str] = {}
    for member in members:
        identity = member_identity(member)
        assigned_partitions = member.get("partitions")  # None, a list, or an Arrow/numpy array
        if assigned_partitions is None:
            continue
        for assigned in assigned_partitions:
            owners[(str(assigned["topic"]), int(assigned["partition"]))] = identity
    return owners


def _compare(previous: GroupEvent, current: GroupEvent, previous_start: int) -> Rebalance:
    before_members = {member_identity(m) for m in previous.members or ()}
    after_members = {member_identity(m) for m in current.members or ()}
    before = partition_owners(previous.members or ())
    after = partition_owners(current.members or ())
    kept = sum(1 for tp, owner in after.items() if before.get(tp) == owner)
    moved = sum(1 for tp, owner in after.items() if tp in before and before[tp] != owner)
    return Rebalance(
        from_generation=int(previous.generation or 0),
        to_generation=int(current.generation or 0),
        ts=current.ts,
        members_joined=len(after_members - before_members),
        members_left=len(before_members - after_members),
        partitions_moved=moved,
        partitions_kept=kept,
        seconds_since_previous=(current.ts - previous_start) / 1000.0,
    )


def rebalances(events: Iterable[GroupEvent]) -> list[Rebalance]:
    """Every generation change of one group.

    Events are taken in log order. A record that repeats the current generation (a static member
    replaced without a rebalance) updates that generation's membership; a tombstone deletes the
    group, so the next generation after it starts a new history rather than a rebalance.
    """
    ordered = sorted(events, key=lambda e: (e.log_partition, e.log_offset))
    found: list[Rebalance] = []
    previous: GroupEvent | None = None
    previous_start = 0
    for event in ordered:
        if event.members is None:
            previous = None
            continue
        if previous is None or event.generation != previous.generation:
            if previous is not None:
                found.append(_compare(previous, event, previous_start))
            previous_start = event.ts
        previous = event
    return found


class PartitionStatus(IntEnum):
    """Burrow's partition verdicts, ordered by severity as Burrow orders them."""

    OK = 0
    WARN = 1
    STOP = 2
    STALL = 3
    REWIND = 4


class GroupStatus(IntEnum):
    """Burrow's group verdict: its worst partition's, where STOP, STALL and REWIND all read
    ERR (the partition rows say which)."""

    OK = 0
    WARN = 1
    ERR = 2

    @classmethod
    def of(cls, partitions: Iterable[PartitionStatus]) -> GroupStatus:
        worst = max(partitions, default=PartitionStatus.OK)
        return cls.ERR if worst > PartitionStatus.WARN else cls(int(worst))


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """One commit of a partition: committed offset, commit time (ms), lag at that time."""

    offset: int
    ts: int
    lag: int


def partition_status(
    window: Sequence[CommitPoint], current_lag: int, now_ms: int, recent_log_end: int | None = None
) -> PartitionStatus:
    """Burrow's evaluation of one partition over its last commits (oldest first).

    With no current lag, or no commit to judge, the partition is OK. Otherwise, in Burrow's
    order: no commit for longer than the window spans is STOP, even when the lag was zero
    inside the window (that history may be old), unless the consumer was caught up lately:
    `recent_log_end`, the log end RECENT_LAG_ZERO_MS before now, at or below the last committed
    offset. Then a window with a zero lag anywhere is OK; an offset that goes backwards is
    REWIND; offsets that never move are STALL; a lag that never decreases is WARN.
    """
    if not window or current_lag <= 0:
        return PartitionStatus.OK
    first, last = window[0], window[-1]
    caught_up_lately = recent_log_end is not None and recent_log_end <= last.offset
    if now_ms - last.ts > last.ts - first.ts and not caught_up_lately:
        return PartitionStatus.STOP
    if any(point.lag == 0 for point in window):
        return PartitionStatus.OK
    pairs = list(pairwise(window))
    if any(later.offset < earlier.offset for earlier, later in pairs):
        return PartitionStatus.REWIND
    if all(later.offset == earlier.offset for earlier, later in pairs):
        return PartitionStatus.STALL
    if all(later.lag >= earlier.lag for earlier, later in pairs):
        return PartitionStatus.WARN
    return PartitionStatus.OK
