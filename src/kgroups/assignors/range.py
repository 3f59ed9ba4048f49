"""The range assignor, with KIP-881 rack awareness.

Per topic, the subscribers in member order get consecutive blocks: n // m each, the first
n % m one more. Topics with the same subscribers and partition count therefore line up
(partition i of each goes to the same member), which is what joins over co-partitioned
topics need. With racks, each member first takes partitions that have a replica in its rack,
within the same per-member quotas, and the rest are dealt out as ranges afterwards.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import islice

import numpy as np

from kgroups.assignors.interface import PartitionAssignor
from kgroups.assignors.model import ClusterMetadata, MemberSubscription, ordered_members
from kgroups.assignors.space import UNOWNED, GroupAssignment, PartitionSpace


class _TopicQuota:
    """One topic's state while it is being dealt: who may still take how many partitions."""

    def __init__(self, topic: str, count: int, consumers: list[int], racks: list[str | None]):
        self.topic = topic
        self.consumers = consumers
        self.unassigned: dict[int, None] = dict.fromkeys(range(count))
        self.taken = dict.fromkeys(consumers, 0)
        self.per_consumer = count // len(consumers)
        self.extra_left = count % len(consumers)
        self.consumer_racks = racks
        self.partition_racks: list[frozenset[str]] = []

    def room(self, consumer: int) -> int:
        ceiling = self.per_consumer + (1 if self.extra_left > 0 else 0)
        return max(0, ceiling - self.taken[consumer])

    def racks_match(self, consumer: int, partition: int) -> bool:
        rack = self.consumer_racks[consumer]
        if rack is None:
            return True
        return partition < len(self.partition_racks) and rack in self.partition_racks[partition]

    def give(self, consumer: int, partitions: list[int], owner: np.ndarray, offset: int) -> None:
        self.taken[consumer] += len(partitions)
        if self.taken[consumer] > self.per_consumer:
            self.extra_left -= 1
        for partition in partitions:
            del self.unassigned[partition]
            owner[offset + partition] = consumer

    def needs_racks(self) -> bool:
        """KIP-881: only worth it when racks are known on both sides, overlap, and not every
        partition has a replica in every rack (otherwise every choice is equally local)."""
        member_racks = {self.consumer_racks[c] for c in self.consumers} - {None}
        replica_racks = set().union(*self.partition_racks) if self.partition_racks else set()
        if not member_racks or not member_racks & replica_racks:
            return False
        return any(racks != replica_racks for racks in self.partition_racks)


class RangeAssignor(PartitionAssignor):
    """Kafka's `range` strategy (eager)."""

    name = "range"

    def assign(
        self, cluster: ClusterMetadata, group_subscription: Sequence[MemberSubscription]
    ) -> GroupAssignment:
        members = ordered_members(group_subscription)
        space = PartitionSpace.build(cluster, members)
        owner = np.full(space.size, UNOWNED, dtype=np.int32)
        racks = [m.rack or None for m in members]
        states = []
        for position, topic in enumerate(space.topics):
            consumers = [i for i, m in enumerate(members) if topic in m.topics]
            state = _TopicQuota(topic, int(space.counts[position]), consumers, racks)
            if any(r is not None for r in racks):
                state.partition_racks = [
                    cluster.racks_of(topic, p) for p in range(int(space.counts[position]))
                ]
            states.append((state, int(space.offsets[position])))

        if any(state.needs_racks() for state, _ in states):
            self._assign_rack_local(states, owner)
        for state, offset in states:
            self._deal_ranges(state, owner, offset, rack_local=False)
        return GroupAssignment(space, [m.member_id for m in members], owner)

    def _assign_rack_local(self, states: list[tuple[_TopicQuota, int]], owner: np.ndarray) -> None:
        """Co-partitioned topics (same subscribers, same partition count) are matched together
        so partition i of each still lands on one member; other topics are matched alone."""
        groups: dict[tuple[tuple[int, ...], int], list[tuple[_TopicQuota, int]]] = defaultdict(list)
        for state, offset in states:
            groups[(tuple(state.consumers), len(state.unassigned))].append((state, offset))
        for (consumers, count), group in groups.items():
            if len(group) > 1:
                self._match_co_partitioned(list(consumers), count, group, owner)
            elif group[0][0].needs_racks():
                self._deal_ranges(group[0][0], owner, group[0][1], rack_local=True)

    @staticmethod
    def _match_co_partitioned(
        consumers: list[int], count: int, group: list[tuple[_TopicQuota, int]], owner: np.ndarray
    ) -> None:
        remaining = list(consumers)
        for partition in range(count):
            match = next(
                (
                    c
                    for c in remaining
                    if all(s.racks_match(c, partition) and s.room(c) > 0 for s, _ in group)
                ),
                None,
            )
            if match is None:
                continue
            for state, offset in group:
                state.give(match, [partition], owner, offset)
            if all(state.room(match) == 0 for state, _ in group):
                remaining.remove(match)
                if not remaining:
                    return

    @staticmethod
    def _deal_ranges(state: _TopicQuota, owner: np.ndarray, offset: int, rack_local: bool) -> None:
        for consumer in state.consumers:
            if not state.unassigned:
                return
            candidates = (
                p for p in state.unassigned if not rack_local or state.racks_match(consumer, p)
            )
            chosen = list(islice(candidates, state.room(consumer)))
            if chosen:
                state.give(consumer, chosen, owner, offset)
