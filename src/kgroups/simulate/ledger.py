"""Who consumes which partition over virtual time, and the costs read off it.

The ledger is told every change of every member's owned set. From that it keeps, per
partition, the gaps with no owner (their total and the longest), the hand-overs (a partition
taken away from a member, and a partition that ends up with a different member than before),
the moments with no partition consumed at all (stop-the-world), and whether a partition ever
had two owners at once. Only time after `measure_from` counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kgroups.member import TopicPartition


@dataclass(frozen=True, slots=True)
class Segment:
    """`member` consumed `partition` from `start_ms` to `end_ms`."""

    partition: TopicPartition
    member: str
    start_ms: int
    end_ms: int


@dataclass(slots=True)
class OwnershipLedger:
    partitions: tuple[TopicPartition, ...]
    measure_from: int
    keep_segments: bool = False
    owners: dict[TopicPartition, list[str]] = field(default_factory=dict)
    last_owner: dict[TopicPartition, str] = field(default_factory=dict)
    gap_since: dict[TopicPartition, int] = field(default_factory=dict)
    unowned_ms: int = 0
    longest_gap: dict[TopicPartition, int] = field(default_factory=dict)
    revoked: int = 0  # partitions taken away from a member (revoked, lost, or it died)
    moved: int = 0  # partitions whose next owner differs from the previous one
    max_owners: int = 0
    double_owned: int = 0  # times a partition gained a second owner
    first_double: tuple[int, TopicPartition, tuple[str, ...]] | None = None
    stop_the_world_ms: int = 0
    segments: list[Segment] = field(default_factory=list)
    _owned_count: int = 0
    _idle_since: int | None = None
    _since: dict[tuple[TopicPartition, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for partition in self.partitions:
            self.owners[partition] = []
            self.gap_since[partition] = 0
            self.longest_gap[partition] = 0
        self._idle_since = 0

    def gain(self, member: str, partitions: Iterable[TopicPartition], now: int) -> None:
        for partition in partitions:
            owners = self.owners[partition]
            owners.append(member)
            if len(owners) == 1:
                self._close_gap(partition, now)
                self._owned_count += 1
                if self._owned_count == 1:
                    self._end_idle(now)
            self.max_owners = max(self.max_owners, len(owners))
            if len(owners) > 1:
                self.double_owned += 1
                if self.first_double is None:
                    self.first_double = (now, partition, tuple(owners))
            previous = self.last_owner.get(partition)
            if previous is not None and previous != member and now >= self.measure_from:
                self.moved += 1
            self.last_owner[partition] = member
            if self.keep_segments:
                self._since[(partition, member)] = now

    def lose(self, member: str, partitions: Iterable[TopicPartition], now: int) -> None:
        for partition in partitions:
            owners = self.owners[partition]
            owners.remove(member)
            if now >= self.measure_from:
                self.revoked += 1
            if not owners:
                self.gap_since[partition] = now
                self._owned_count -= 1
                if self._owned_count == 0:
                    self._idle_since = now
            if self.keep_segments:
                start = self._since.pop((partition, member))
                self.segments.append(Segment(partition, member, start, now))

    def finish(self, now: int) -> None:
        """Close what is still open at the end of the run."""
        for partition in list(self.gap_since):
            self._close_gap(partition, now)
            if not self.owners[partition]:
                self.gap_since[partition] = now
        if self._owned_count == 0:
            self._end_idle(now)
        if self.keep_segments:
            for (partition, member), start in self._since.items():
                self.segments.append(Segment(partition, member, start, now))
            self._since.clear()

    def _close_gap(self, partition: TopicPartition, now: int) -> None:
        since = self.gap_since.pop(partition, None)
        if since is None:
            return
        length = now - max(since, self.measure_from)
        if length > 0:
            self.unowned_ms += length
            if length > self.longest_gap[partition]:
                self.longest_gap[partition] = length

    def _end_idle(self, now: int) -> None:
        if self._idle_since is not None:
            length = now - max(self._idle_since, self.measure_from)
            if length > 0:
                self.stop_the_world_ms += length
            self._idle_since = None
