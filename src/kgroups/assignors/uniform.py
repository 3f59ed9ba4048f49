"""`uniform` through the client-side interface: Kafka's server-side assignor for a scenario.

KIP-848's `uniform` runs on the group coordinator (`kgroups.assignors.server`, which gives
Kafka 4.3's exact output). `kgroups assign --strategy uniform` and `assign_scenario` reach it
through this adapter: topics get their ids from the scenario (a topic's `"id"`) or, without
one, an id derived from the name (Kafka's output depends on the ids' hash order, so the same
ids give the broker's assignment); members are handed over in the scenario's order, as the
coordinator hands over its member map, each with its owned partitions as its current target
and its topics in the scenario's topic order.
A partition two members both claim, or one a topic does not have, is nobody's current
partition (a coordinator never holds such a target).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence

import numpy as np

from kgroups.assignors.interface import PartitionAssignor
from kgroups.assignors.model import ClusterMetadata, MemberSubscription, ordered_members
from kgroups.assignors.server import ServerMember
from kgroups.assignors.server import assign as assign_server
from kgroups.assignors.space import GroupAssignment, PartitionSpace

# Ids for topics a scenario gives none: stable across runs, so results are repeatable.
DERIVED_TOPIC_IDS = uuid.UUID("6b67726f-7570-732d-746f-7069632d6964")


class UniformAssignor(PartitionAssignor):
    """KIP-848's `uniform` target-assignment strategy, as Kafka's coordinator computes it."""

    name = "uniform"

    def assign(
        self, cluster: ClusterMetadata, group_subscription: Sequence[MemberSubscription]
    ) -> GroupAssignment:
        ordered_members(group_subscription)  # one clear error for a duplicate member id
        members = list(group_subscription)
        space = PartitionSpace.build(cluster, members)
        ids = {t: cluster.topic_ids.get(t) or uuid.uuid5(DERIVED_TOPIC_IDS, t)
               for t in space.topics}
        topic_of = {topic_id: topic for topic, topic_id in ids.items()}
        claimed = Counter((t, p) for m in members for t, parts in m.owned.items()
                          if t in space.index for p in set(parts))
        server_members = [
            ServerMember(
                m.member_id,
                [ids[t] for t in cluster.partition_counts if t in m.topics and t in space.index],
                {ids[t]: sorted(p for p in set(parts)
                                if 0 <= p < cluster.partition_counts[t] and claimed[t, p] == 1)
                 for t, parts in m.owned.items() if t in space.index},
                m.instance_id,
                m.rack,
            )
            for m in members
        ]
        target = assign_server("uniform", server_members,
                               {ids[t]: cluster.partition_counts[t] for t in space.topics})
        owner = np.full(space.size, -1, dtype=np.int32)
        for position, member in enumerate(members):
            for topic_id, partitions in target.get(member.member_id, {}).items():
                start = int(space.offsets[space.index[topic_of[topic_id]]])
                owner[start + np.fromiter(partitions, dtype=np.int64)] = position
        return GroupAssignment(space, [m.member_id for m in members], owner)
