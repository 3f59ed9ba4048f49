"""The round-robin assignor: members take turns, in member order, and on its turn each member
takes the lowest-numbered unassigned partition (topics by name, then partition number) among
the topics it subscribes to; a member with nothing left to take drops out of the circle.

With identical subscriptions this is Kafka's result exactly (partitions dealt round the sorted
members). With unequal subscriptions it follows seed 001's worked example, where Consumer0
(Topic-A, Topic-B) ends with A0-A2 and Consumer1 (Topic-B, Topic-C) with B0-B2 and C0-C2: Java's
RoundRobinAssignor, which deals partitions and skips unsubscribed members, would hand B1 to
Consumer0 instead. Round-robin's results are computed by the leader alone, so the difference
never splits a mixed-language group; use `sticky` when subscriptions differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kgroups.assignors.interface import PartitionAssignor
from kgroups.assignors.model import ClusterMetadata, MemberSubscription, ordered_members
from kgroups.assignors.space import UNOWNED, GroupAssignment, PartitionSpace


class RoundRobinAssignor(PartitionAssignor):
    """Kafka's `roundrobin` strategy (eager)."""

    name = "roundrobin"

    def assign(
        self, cluster: ClusterMetadata, group_subscription: Sequence[MemberSubscription]
    ) -> GroupAssignment:
        members = ordered_members(group_subscription)
        space = PartitionSpace.build(cluster, members)
        owner = np.full(space.size, UNOWNED, dtype=np.int32)
        counts = space.counts.tolist()
        offsets = space.offsets.tolist()
        next_partition = [0] * len(space.topics)
        # Each member's subscribed topic positions in name order, and how far it has used them
        # up: a topic once exhausted stays exhausted, so the cursor only moves forward.
        wanted = [sorted(space.index[t] for t in m.topics if t in space.index) for m in members]
        cursor = [0] * len(members)
        active = [i for i, topics in enumerate(wanted) if topics]
        while active:
            still_active = []
            for member in active:
                topics = wanted[member]
                position = cursor[member]
                while (
                    position < len(topics)
                    and next_partition[topics[position]] >= counts[topics[position]]
                ):
                    position += 1
                cursor[member] = position
                if position == len(topics):
                    continue
                topic = topics[position]
                owner[offsets[topic] + next_partition[topic]] = member
                next_partition[topic] += 1
                still_active.append(member)
            active = still_active
        return GroupAssignment(space, [m.member_id for m in members], owner)
