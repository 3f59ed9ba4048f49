"""The round-robin assignor, as Kafka's RoundRobinAssignor deals: all subscribed partitions in
order (topics by name, then partition number) go round the members in member order; a member
not subscribed to a partition's topic is skipped, and the next partition goes to the member
after the one that took this one.

Seed 001's prose example for unequal subscriptions (Consumer0 on Topic-A/B, Consumer1 on
Topic-B/C, three partitions each) says 3 against 6; the RoundRobinAssignor code the same seed
quotes, and Kafka itself (checked by tests/assignors/test_kafka_oracle.py), give B1 to
Consumer0: 4 against 5. kgroups follows Kafka, so a kgroups leader and a Java leader hand a
group the same assignment.

Within one topic the walk only ever moves forward through that topic's subscribers, so each
topic is dealt in one numpy step: its partitions take its subscribers cyclically, starting from
the first subscriber at or after the member the previous topic ended on.
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
        next_member = 0
        for position, topic in enumerate(space.topics):
            subscribers = np.array(
                [i for i, m in enumerate(members) if topic in m.topics], dtype=np.int32
            )
            count = int(space.counts[position])
            first = int(np.searchsorted(subscribers, next_member)) % len(subscribers)
            dealt = subscribers[(first + np.arange(count)) % len(subscribers)]
            start = int(space.offsets[position])
            owner[start : start + count] = dealt
            next_member = (int(dealt[-1]) + 1) % len(members)
        return GroupAssignment(space, [m.member_id for m in members], owner)
