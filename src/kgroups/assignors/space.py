"""The group's partitions laid out as one flat, numbered range, and assignments over it.

Every assignor works on "flat" partition numbers: topics sorted by name, each topic's partitions
contiguous. An assignment is then one int32 array (owner member index per partition, -1 for
nobody), which numpy can build and reshape in bulk: at a million partitions a Python object per
partition would cost more time than the whole assignment.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, islice

import numpy as np

import kgroups.assignors.sticky_native as sticky_native
from kgroups.assignors.model import ClusterMetadata, MemberSubscription

UNOWNED = -1


@dataclass(frozen=True, slots=True)
class PartitionSpace:
    """The subscribed topics that have metadata, in name order, with their flat offsets."""

    topics: tuple[str, ...]
    counts: np.ndarray  # int64, partitions per topic
    offsets: np.ndarray  # int64, len(topics) + 1; topic i spans offsets[i]:offsets[i + 1]
    index: Mapping[str, int]

    @classmethod
    def build(
        cls, cluster: ClusterMetadata, members: Iterable[MemberSubscription]
    ) -> PartitionSpace:
        wanted = set().union(*(m.topics for m in members))
        topics = tuple(sorted(t for t in wanted if cluster.partition_counts.get(t, 0) > 0))
        counts = np.array([cluster.partition_counts[t] for t in topics], dtype=np.int64)
        offsets = np.zeros(len(topics) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(topics, counts, offsets, {t: i for i, t in enumerate(topics)})

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def topic_of(self, flat: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, flat, side="right") - 1


class GroupAssignment:
    """What the leader hands back: each member's partitions, and (cooperative) what it revokes.

    Per-member views are built on demand from the owner array, so a caller that only needs a
    few members, or the counts, never pays for turning a million partitions into Python lists.
    """

    def __init__(
        self,
        space: PartitionSpace,
        member_ids: Sequence[str],
        owner: np.ndarray,
        revoked_from: np.ndarray | None = None,
        revoked_ties: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.space = space
        self.member_ids = tuple(member_ids)
        self.owner = owner
        self.revoked_from = revoked_from
        # (flat, member) pairs: partitions claimed by several members in one generation are
        # given up by every claimer that is not assigned them, which one owner array can't hold.
        self.revoked_ties = revoked_ties
        self._positions = {member_id: i for i, member_id in enumerate(self.member_ids)}

    def counts(self) -> dict[str, int]:
        """Partitions per member (every member listed, zero included)."""
        assigned = self.owner[self.owner >= 0]
        per_member = np.bincount(assigned, minlength=len(self.member_ids))
        return dict(zip(self.member_ids, per_member.tolist(), strict=True))

    def partitions(self, member_id: str) -> dict[str, list[int]]:
        """Topic -> sorted partitions assigned to `member_id` this round."""
        return self._grouped(np.flatnonzero(self.owner == self._positions[member_id]))

    def revoked(self, member_id: str) -> dict[str, list[int]]:
        """Topic -> partitions `member_id` must give up this round (cooperative only)."""
        if self.revoked_from is None:
            return {}
        position = self._positions[member_id]
        flat = np.flatnonzero(self.revoked_from == position)
        if self.revoked_ties is not None:
            tied_flat, tied_member = self.revoked_ties
            flat = np.union1d(flat, tied_flat[tied_member == position])
        return self._grouped(flat)

    def as_dict(self) -> dict[str, dict[str, list[int]]]:
        """Every member's topic -> partitions, members without partitions included."""
        with collector_paused():
            return self._all_grouped(self.owner)

    def revoked_dict(self) -> dict[str, dict[str, list[int]]]:
        """Every member's revoked topic -> partitions (empty dicts under eager protocols)."""
        if self.revoked_from is None:
            return {member_id: {} for member_id in self.member_ids}
        if self.revoked_ties is not None and self.revoked_ties[0].size:
            return {member_id: self.revoked(member_id) for member_id in self.member_ids}
        with collector_paused():
            return self._all_grouped(self.revoked_from)

    def _all_grouped(self, owners: np.ndarray) -> dict[str, dict[str, list[int]]]:
        """Every member's topic -> partitions of `owners` (member index per flat partition):
        built by the compiled module where it is built, else by the Python reference."""
        if sticky_native.compiled is not None:
            grouped: dict[str, dict[str, list[int]]] = sticky_native.compiled.group_owners(
                np.ascontiguousarray(owners, dtype=np.int32),
                np.ascontiguousarray(self.space.offsets, dtype=np.int64),
                self.space.topics,
                self.member_ids,
            )
            return grouped
        return self.all_grouped_in_python(owners)

    def all_grouped_in_python(self, owners: np.ndarray) -> dict[str, dict[str, list[int]]]:
        """`_all_grouped` in Python (numpy). One pass over all partitions ordered by (member,
        flat number): each run of equal (member, topic) becomes one list, and each member's
        dict is built in one call, so the Python-level work is one step per member."""
        result: dict[str, dict[str, list[int]]] = {m: {} for m in self.member_ids}
        flat = np.flatnonzero(owners >= 0)
        if flat.size == 0:
            return result
        by_member = flat[np.argsort(owners[flat], kind="stable")]
        members = owners[by_member]
        topics = self.space.topic_of(by_member)
        starts = np.flatnonzero(
            np.concatenate(([True], (members[1:] != members[:-1]) | (topics[1:] != topics[:-1])))
        )
        runs = _lists(by_member - self.space.offsets[topics], starts)
        run_names = np.array(self.space.topics, dtype=object)[topics[starts]].tolist()
        run_members = members[starts]
        firsts = np.flatnonzero(np.concatenate(([True], run_members[1:] != run_members[:-1])))
        pairs = zip(run_names, runs, strict=True)
        ids = self.member_ids
        for member, count in zip(
            run_members[firsts].tolist(), np.diff(firsts, append=len(runs)).tolist(), strict=True
        ):
            result[ids[member]] = dict(islice(pairs, count))
        return result

    def _grouped(self, flat: np.ndarray) -> dict[str, list[int]]:
        """Sorted flat numbers -> topic -> partitions, one slice per topic."""
        if flat.size == 0:
            return {}
        topic_positions = self.space.topic_of(flat)
        cuts = np.flatnonzero(np.diff(topic_positions)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [flat.size]))
        local = (flat - self.space.offsets[topic_positions]).tolist()
        grouped: dict[str, list[int]] = {}
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            grouped[self.space.topics[topic_positions[start]]] = local[start:end]
        return grouped


def _lists(values: np.ndarray, starts: np.ndarray) -> list[list[int]]:
    """`values` cut at `starts` (ascending, starting at 0) into Python lists. Runs of one
    length are gathered as the rows of one 2-D array, whose `tolist()` builds all their lists
    in C: a million one-partition runs is the usual shape at Kafka's reference scale."""
    lengths = np.diff(starts, append=values.size)
    by_length = np.argsort(lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[by_length])) + 1
    groups = [
        values[starts[group, None] + np.arange(lengths[group[0]])].tolist()
        for group in np.split(by_length, cuts)
    ]
    if len(groups) == 1:
        return groups[0]
    lists = list(chain.from_iterable(groups))
    position = np.empty_like(by_length)
    position[by_length] = np.arange(by_length.size)
    return list(map(lists.__getitem__, position.tolist()))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector. At Kafka's reference scale an assignment's result
    is a million new lists (and `assign_scenario` makes millions more objects), none in a
    reference cycle; left on, the collector re-scans the growing heap every few hundred
    allocations, which takes longer than building the objects."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
