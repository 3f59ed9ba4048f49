"""Rack awareness (KIP-881) for the sticky assignors, as Kafka's sticky assignors apply it.

It is on when some member names a rack that holds a replica and the partitions' replica racks
are not all alike (otherwise every choice is equally local). Then a member gives up the
partitions it held that have no replica in its rack. With equal subscriptions each free
partition first goes to a member below its quota in a rack holding a replica (members taken
round-robin), before the rest is dealt as without racks; whenever any member names a rack,
free partitions are taken in order of how many members are local to them, fewest first, so
scarce local choices are used before common ones. With unequal subscriptions free partitions
go first to subscribers that match them (no rack named, or a rack holding a replica: Kafka's
general path), and the balancing moves pick the partitions they move by that (sticky_engine).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kgroups.assignors.model import ClusterMetadata, MemberSubscription
from kgroups.assignors.space import UNOWNED, PartitionSpace


@dataclass(frozen=True, slots=True)
class RackLayout:
    """Racks numbered 0..R-1: each member's rack (-1 for none) and, per flat partition, which
    racks hold a replica; `aware` says whether placement honours them."""

    aware: bool
    member_rack: np.ndarray  # int64 per member
    replicas: np.ndarray  # bool, partitions x racks
    local_members: np.ndarray  # int64 per partition: members in a rack holding a replica

    @classmethod
    def build(
        cls, cluster: ClusterMetadata, space: PartitionSpace,
        members: Sequence[MemberSubscription],
    ) -> RackLayout | None:
        """None when no member names a rack (nothing about racks changes the result)."""
        member_racks = [m.rack or None for m in members]
        if all(rack is None for rack in member_racks):
            return None
        names = {rack for rack in member_racks if rack is not None}
        for topic in space.topics:
            for racks in cluster.partition_racks.get(topic, ()):
                names |= racks
        index = {name: i for i, name in enumerate(sorted(names))}
        replicas = np.zeros((space.size, len(index)), dtype=bool)
        # Partitions share a few sets of replica racks: each partition is given its set's
        # number, and the rows are written once for all (a numpy write per partition took
        # seconds at a million partitions).
        set_ids: dict[frozenset[str], int] = {}
        set_of = np.full(space.size, -1, dtype=np.int64)
        for position, topic in enumerate(space.topics):
            start, count = int(space.offsets[position]), int(space.counts[position])
            ids = [set_ids.setdefault(racks, len(set_ids))
                   for racks in cluster.partition_racks.get(topic, ())[:count]]
            set_of[start:start + len(ids)] = ids
        rows = np.zeros((len(set_ids), len(index)), dtype=bool)
        for racks, row in set_ids.items():
            rows[row, [index[r] for r in racks]] = True
        known = set_of >= 0
        replicas[known] = rows[set_of[known]]
        member_rack = np.array(
            [-1 if rack is None else index[rack] for rack in member_racks], dtype=np.int64
        )
        racked = member_rack[member_rack >= 0]
        members_per_rack = np.bincount(racked, minlength=len(index))
        local_members = replicas.astype(np.int64) @ members_per_rack
        # Per rack, whether it holds any replica (np.any: the stub of ndarray.any types a
        # reduction over one axis as possibly a scalar).
        replica_racks: np.ndarray = np.any(replicas, axis=0)
        aware = bool(replica_racks[racked].any()) and not bool(
            (replicas == replica_racks).all()
        )
        return cls(aware, member_rack, replicas, local_members)

    def matches(self, flat: np.ndarray, member: int) -> np.ndarray:
        """Per partition of `flat`, whether `member` may take it rack-locally: it names no
        rack, or its rack holds a replica (Kafka's general path: no rack mismatches nothing)."""
        return self.match_matrix(flat, np.array([member]))[:, 0]

    def replica_sets(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The partitions of `flat` grouped by their set of replica racks: each set's first
        position in `flat`, and each partition's set number."""
        rows = self.replicas[flat]
        if rows.shape[1] < 63:  # one integer per set: a 1-d unique, not a sort of rows
            codes = rows.astype(np.int64) @ (np.int64(1) << np.arange(rows.shape[1]))
            _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        else:
            _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)

    def match_matrix(self, flat: np.ndarray, members: np.ndarray) -> np.ndarray:
        """`matches` for several members: (partitions x members) bool."""
        rack = self.member_rack[members]
        racked = rack >= 0
        matching = np.ones((flat.size, members.size), dtype=bool)
        matching[:, racked] = self.replicas[np.ix_(flat, rack[racked])]
        return matching

    def drop_remote(self, owner: np.ndarray) -> None:
        """Members give up what they held that has no replica in their (named) rack."""
        if not self.aware:
            return
        held = np.flatnonzero(owner >= 0)
        rack = self.member_rack[owner[held]]
        remote = (rack >= 0) & ~self.replicas[held, np.maximum(rack, 0)]
        owner[held[remote]] = UNOWNED

    def order_free(self, free: np.ndarray) -> np.ndarray:
        """Free partitions, fewest local members first (stable: ties keep partition order)."""
        return free[np.argsort(self.local_members[free], kind="stable")]

    def deal_local(
        self, owner: np.ndarray, counts: np.ndarray, free: np.ndarray,
        below: list[int], queue: list[int], min_quota: int, members_at_max: int,
    ) -> np.ndarray:
        """Gives each free partition, in order, to a member in a rack holding a replica: the
        next such member below quota (continuing round-robin from the last one served), else
        the first such member due the larger quota. `below` and `queue` are updated as members
        fill up; returns the partitions nobody local could take.

        The walk is sequential (each choice moves the round-robin), so it runs in Python, on
        Python ints: a partition's replica racks and a member's rack as bit sets, counts as a
        list, the owners written once at the end (numpy scalars per step cost three times
        as much at a million partitions)."""
        first, set_of = self.replica_sets(free)
        set_bits = [sum(1 << int(rack) for rack in np.flatnonzero(self.replicas[flat]))
                    for flat in free[first].tolist()]
        member_bit = [0 if rack < 0 else 1 << rack for rack in self.member_rack.tolist()]
        count = counts.tolist()
        at_max = sum(1 for c in count if c > min_quota)
        next_index = 0
        left: list[int] = []
        given: list[int] = []
        takers: list[int] = []
        for flat, racks in zip(free.tolist(), [set_bits[s] for s in set_of.tolist()],
                               strict=True):
            taker = _next_local(racks, below, next_index, member_bit)
            member = None
            if taker >= 0:
                member = below[taker]
                if count[member] + 1 == min_quota:
                    del below[taker]
                    if at_max < members_at_max:
                        queue.append(member)
                else:
                    taker += 1
                next_index = taker % len(below) if below else 0
            elif queue:
                taker = _next_local(racks, queue, 0, member_bit)
                if taker >= 0:
                    member = queue[taker]
                    del queue[taker]
                    at_max += 1
                    if at_max == members_at_max:
                        queue.clear()
            if member is None:
                left.append(flat)
            else:
                given.append(flat)
                takers.append(member)
                count[member] += 1
        owner[given] = takers
        counts[:] = count
        return np.asarray(left, dtype=np.int64)


def _next_local(racks: int, members: list[int], first: int, member_bit: list[int]) -> int:
    """The position in `members`, from `first` round-robin, of the first member whose rack
    is in the bit set `racks`; -1 if none."""
    size = len(members)
    for step in range(size):
        position = (first + step) % size
        if member_bit[members[position]] & racks:
            return position
    return -1
