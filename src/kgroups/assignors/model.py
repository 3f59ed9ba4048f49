"""The inputs every assignor reads: cluster metadata and the group's subscriptions.

These are kgroups' own types rather than a client library's, so the same assignor serves the
kgroups member, the kafka-python/aiokafka adapters and `kgroups assign` alike; each of those
only translates its own shapes into these.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

# What a member reports when it has never been assigned anything (Kafka's DEFAULT_GENERATION).
NO_GENERATION = -1


class RebalanceProtocol(IntEnum):
    """KIP-429 rebalance protocols: EAGER revokes everything before joining, COOPERATIVE keeps
    owned partitions and only gives up the ones the leader takes away."""

    EAGER = 0
    COOPERATIVE = 1


class AssignmentInputError(ValueError):
    """The group or cluster description cannot be assigned (named in the message)."""


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member as the leader sees it in JoinGroup: what it wants and what it holds.

    `owned` maps topic -> partitions the member currently holds; `generation` is the generation
    in which it got them, used to settle two members claiming the same partition.
    """

    member_id: str
    topics: frozenset[str]
    owned: Mapping[str, Sequence[int]] = field(default_factory=dict)
    generation: int = NO_GENERATION
    rack: str | None = None
    instance_id: str | None = None
    user_data: bytes | None = None

    @classmethod
    def of(
        cls,
        member_id: str,
        topics: Iterable[str],
        owned: Mapping[str, Iterable[int]] | None = None,
        generation: int = NO_GENERATION,
        rack: str | None = None,
        instance_id: str | None = None,
        user_data: bytes | None = None,
    ) -> MemberSubscription:
        """Builds a subscription from any iterables (lists from JSON, sets from clients)."""
        owned = owned or {}
        owned_tuples = dict(zip(owned.keys(), map(tuple, owned.values()), strict=True))
        return cls(
            member_id, frozenset(topics), owned_tuples, generation, rack, instance_id, user_data
        )


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """Partition counts per topic, and optionally each partition's replica racks (KIP-881).

    A topic a member subscribes to but that is missing here has no metadata yet and is skipped,
    as Kafka's assignors do.
    """

    partition_counts: Mapping[str, int]
    partition_racks: Mapping[str, Sequence[frozenset[str]]] = field(default_factory=dict)
    # Topic ids, where known: the server-side `uniform` walks topics in their hash order.
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=dict)

    def racks_of(self, topic: str, partition: int) -> frozenset[str]:
        racks = self.partition_racks.get(topic)
        if racks is None or partition >= len(racks):
            return frozenset()
        return racks[partition]


def member_order_key(member: MemberSubscription) -> tuple[int, str, str]:
    """Kafka's member order: static members by instance id first, then dynamic ones by id.

    Static members keep their place across restarts (new member id, same instance id), so
    ordering them by instance id keeps range and round-robin results stable for them.
    """
    if member.instance_id is not None:
        return (0, member.instance_id, member.member_id)
    return (1, member.member_id, "")


def ordered_members(
    members: Iterable[MemberSubscription], static_first: bool = True
) -> list[MemberSubscription]:
    """The group in Kafka's member order; rejects duplicate member ids (one clear error).

    Range and round-robin put static members first (`member_order_key`); Kafka's sticky
    assignors ignore group.instance.id and order members by member id alone
    (`static_first=False`), which is what a Java leader of a sticky group does."""
    listed = list(members)
    seen: set[str] = set()
    for member in listed:
        if member.member_id in seen:
            raise AssignmentInputError(f"member {member.member_id!r} appears twice")
        seen.add(member.member_id)
    if not static_first:
        return sorted(listed, key=lambda member: member.member_id)
    return sorted(listed, key=member_order_key)
