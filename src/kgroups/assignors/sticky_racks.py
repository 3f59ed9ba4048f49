"""Rack awareness (KIP-881) for the sticky assignors' equal-subscription path, as Kafka's
sticky assignors apply it.

It is on when some member names a rack that holds a replica and the partitions' replica racks
are not all alike (otherwise every choice is equally local). Then a member gives up the
partitions it held that have no replica in its rack, and each free partition first goes to a
member below its quota in a rack holding a replica (members taken round-robin), before the
rest is dealt as without racks. Whenever any member names a rack, free partitions are taken
in order of how many members are local to them, fewest first, so scarce local choices are
used before common ones.
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
        for position, topic in enumerate(space.topics):
            start, count = int(space.offsets[position]), int(space.counts[position])
            for partition, racks in enumerate(cluster.partition_racks.get(topic, ())[:count]):
                replicas[start + partition, [index[r] for r in racks]] = True
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

    def is_local(self, flat: int, member: int) -> bool:
        rack = int(self.member_rack[member])
        return rack >= 0 and bool(self.replicas[flat, rack])

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
        fill up; returns the partitions nobody local could take."""
        at_max = int((counts > min_quota).sum())
        next_index = 0
        left: list[int] = []
        for flat in free.tolist():
            taker = self._next_local(flat, below, next_index)
            member = None
            if taker >= 0:
                member = below[taker]
                if counts[member] + 1 == min_quota:
                    del below[taker]
                    if at_max < members_at_max:
                        queue.append(member)
                else:
                    taker += 1
                next_index = taker % len(below) if below else 0
            elif queue:
                taker = self._next_local(flat, queue, 0)
                if taker >= 0:
                    member = queue[taker]
                    del queue[taker]
                    at_max += 1
                    if at_max == members_at_max:
                        queue.clear()
            if member is None:
                left.append(flat)
            else:
                owner[flat] = member
                counts[member] += 1
        return np.asarray(left, dtype=np.int64)

    def _next_local(self, flat: int, members: list[int], first: int) -> int:
        for step in range(len(members)):
            position = (first + step) % len(members)
            if self.is_local(flat, members[position]):
                return position
        return -1
