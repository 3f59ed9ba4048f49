"""`sticky` (eager, KIP-54) and `cooperative-sticky` (KIP-429).

Both place partitions with the shared engine; they differ in where a member's previous
ownership comes from and in what the leader hands back. Eager members revoke everything before
joining, so `sticky` carries the previous assignment in its user data (Java's layout). Cooperative
members keep their partitions and report them in the subscription's owned-partitions field, and
a partition that must change owner is only revoked this round; it is assigned to its new owner
in the follow-up rebalance, once nobody holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from kgroups.assignors.claims import Claims, claims_from_mappings
from kgroups.assignors.interface import PartitionAssignor
from kgroups.assignors.model import (
    NO_GENERATION,
    ClusterMetadata,
    MemberSubscription,
    RebalanceProtocol,
    ordered_members,
)
from kgroups.assignors.space import UNOWNED, GroupAssignment, PartitionSpace
from kgroups.assignors.sticky_engine import Placement, place, tied_claims
from kgroups.assignors.sticky_racks import RackLayout
from kgroups.assignors.user_data import (
    UserDataError,
    decode_generation,
    encode_generation,
    encode_sticky_user_data,
    sticky_claims,
)

log = logging.getLogger(__name__)


class StickyAssignor(PartitionAssignor):
    """Kafka's `sticky` strategy (eager)."""

    name = "sticky"

    def __init__(self) -> None:
        self._last_assignment: dict[str, tuple[int, ...]] | None = None
        self._last_generation = NO_GENERATION

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        if self._last_assignment is None:
            return None
        return encode_sticky_user_data(self._last_assignment, self._last_generation)

    def on_assignment(self, assignment: Mapping[str, Sequence[int]], generation: int) -> None:
        self._last_assignment = dict(
            zip(assignment.keys(), map(tuple, assignment.values()), strict=True)
        )
        self._last_generation = generation

    def claims(self, space: PartitionSpace, members: Sequence[MemberSubscription]) -> Claims:
        """Eager members own nothing when they join; their history is in the user data.
        Unreadable user data costs that member its stickiness, never the rebalance."""
        claims, unreadable = sticky_claims(space, [m.user_data for m in members])
        for position in np.flatnonzero(unreadable).tolist():
            log.warning("ignoring unreadable user data of %s", members[position].member_id)
        return claims

    def assign(
        self, cluster: ClusterMetadata, group_subscription: Sequence[MemberSubscription]
    ) -> GroupAssignment:
        members, space, _, placement = self._placed(cluster, group_subscription)
        return GroupAssignment(space, [m.member_id for m in members], placement.owner)

    def _placed(
        self, cluster: ClusterMetadata, group_subscription: Sequence[MemberSubscription]
    ) -> tuple[list[MemberSubscription], PartitionSpace, Claims, Placement]:
        """The members in the sticky order, their partitions, what they claim and where the
        sticky placement puts each partition: both strategies start from this."""
        members = ordered_members(group_subscription, static_first=False)
        space = PartitionSpace.build(cluster, members)
        claims = self.claims(space, members)
        return members, space, claims, place(
            space, members, claims, RackLayout.build(cluster, space, members))


class CooperativeStickyAssignor(StickyAssignor):
    """Kafka's `cooperative-sticky` strategy: sticky placement, moves staged over two rounds."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        return encode_generation(self._last_generation)

    def on_assignment(self, assignment: Mapping[str, Sequence[int]], generation: int) -> None:
        """Only the generation goes into this strategy's user data; the partitions travel in
        the subscription's owned-partitions field, so there is nothing else to keep."""
        self._last_generation = generation

    def claims(self, space: PartitionSpace, members: Sequence[MemberSubscription]) -> Claims:
        """Cooperative members report what they hold in the owned-partitions field; the
        generation comes from the subscription (v2+) or else from this strategy's user data."""
        return claims_from_mappings(
            space, [m.owned for m in members], [self._generation_of(m) for m in members]
        )

    @staticmethod
    def _generation_of(member: MemberSubscription) -> int:
        if member.generation != NO_GENERATION or not member.user_data:
            return member.generation
        try:
            return decode_generation(member.user_data)
        except UserDataError as error:
            log.warning("ignoring user data of %s: %s", member.member_id, error)
            return NO_GENERATION

    def assign(
        self, cluster: ClusterMetadata, group_subscription: Sequence[MemberSubscription]
    ) -> GroupAssignment:
        members, space, claims, placement = self._placed(cluster, group_subscription)
        owner = placement.owner
        moving = (placement.previous >= 0) & (owner != placement.previous)
        revoked_from = np.where(moving, placement.previous, UNOWNED).astype(np.int32)
        owner[moving] = UNOWNED
        flat, claimer = tied_claims(space, members, claims)
        owner[self._withheld_ties(space, members, flat, claimer, owner)] = UNOWNED
        given_up = owner[flat] != claimer
        return GroupAssignment(
            space, [m.member_id for m in members], owner, revoked_from,
            (flat[given_up], claimer[given_up]),
        )

    @staticmethod
    def _withheld_ties(
        space: PartitionSpace,
        members: Sequence[MemberSubscription],
        flat: np.ndarray,
        claimer: np.ndarray,
        owner: np.ndarray,
    ) -> np.ndarray:
        """Partitions two members claim in the same generation may still be consumed by both,
        so, as Kafka does, nobody is assigned them this round (each claimer revokes it) and the
        follow-up rebalance places them. Kafka's general (unequal subscriptions) path holds one
        back only when it goes to a member that did not claim it."""
        if flat.size == 0:
            return flat
        if len({m.topics for m in members}) == 1:
            return np.unique(flat)
        went_to_claimer = np.zeros(space.size, dtype=bool)
        went_to_claimer[flat[owner[flat] == claimer]] = True
        return np.unique(flat[~went_to_claimer[flat]])
