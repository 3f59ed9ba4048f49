"""`uniform`: KIP-848's server-side assignor, for computing target assignments.

Under KIP-848 the group coordinator, not a leader member, computes a *target* assignment from
each member's subscription and its current assignment, and reconciles members towards it
itself; there are no generations in user data and no revoke-then-assign staging in the
assignor. So `uniform` reads ownership from the owned partitions as given, treats every claim
as current (two members claiming one partition both lose it), and returns the target directly.
It balances like the sticky assignors: counts within one for equal subscriptions, and never a
partition held by a member two or more above another subscriber of its topic.
"""

from __future__ import annotations

from collections.abc import Sequence

from kgroups.assignors.claims import claims_from_mappings
from kgroups.assignors.interface import PartitionAssignor
from kgroups.assignors.model import (
    NO_GENERATION,
    ClusterMetadata,
    MemberSubscription,
    ordered_members,
)
from kgroups.assignors.space import GroupAssignment, PartitionSpace
from kgroups.assignors.sticky_engine import place


class UniformAssignor(PartitionAssignor):
    """KIP-848's `uniform` target-assignment strategy."""

    name = "uniform"

    def assign(
        self, cluster: ClusterMetadata, group_subscription: Sequence[MemberSubscription]
    ) -> GroupAssignment:
        members = ordered_members(group_subscription)
        space = PartitionSpace.build(cluster, members)
        claims = claims_from_mappings(
            space, [m.owned for m in members], [NO_GENERATION] * len(members)
        )
        placement = place(space, members, claims)
        return GroupAssignment(space, [m.member_id for m in members], placement.owner)
