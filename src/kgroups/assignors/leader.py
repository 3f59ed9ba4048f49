"""The group leader's step between JoinGroup and SyncGroup, on ConsumerProtocol bytes.

JoinGroup hands the leader every member's subscription as ConsumerProtocol bytes (written by
Java, librdkafka, kafka-python, aiokafka or kgroups); SyncGroup takes one assignment blob per
member back. `lead_assignment` is that whole step, speaking the shared record model
(`ConsumerSubscription`, `ConsumerAssignment`) in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kgroups.assignors.interface import create_assignor
from kgroups.assignors.model import AssignmentInputError, ClusterMetadata, MemberSubscription
from kgroups.assignors.space import GroupAssignment
from kgroups.records.consumer_protocol import decode_subscription, encode_assignment
from kgroups.records.schema import ConsumerAssignment, ConsumerSubscription, TopicPartitions
from kgroups.records.wire import RecordDecodeError


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One entry of the JoinGroup response's member list, as the leader receives it."""

    member_id: str
    instance_id: str | None
    metadata: bytes


def member_subscription(
    member_id: str, instance_id: str | None, subscription: ConsumerSubscription
) -> MemberSubscription:
    """The assignor's view of a decoded ConsumerProtocol subscription."""
    return MemberSubscription.of(
        member_id,
        subscription.topics,
        {tp.topic: tp.partitions for tp in subscription.owned_partitions},
        subscription.generation_id,
        subscription.rack_id or None,
        instance_id,
        subscription.user_data or None,
    )


def consumer_assignments(result: GroupAssignment) -> dict[str, ConsumerAssignment]:
    """Each member's ConsumerProtocol assignment (v0 layout: topics in name order)."""
    return {
        member_id: ConsumerAssignment(
            tuple(TopicPartitions(t, tuple(p)) for t, p in sorted(topics.items())), None, 0
        )
        for member_id, topics in result.as_dict().items()
    }


def lead_assignment(
    strategy: str, cluster: ClusterMetadata, members: Sequence[JoinedMember]
) -> dict[str, bytes]:
    """SyncGroup assignment bytes per member. A member whose metadata cannot be decoded makes
    the whole step fail with its id named: assigning without it would hand its partitions to
    others while it still believes it is in the group."""
    subscriptions = []
    for member in members:
        try:
            decoded = decode_subscription(member.metadata)
        except RecordDecodeError as error:
            raise AssignmentInputError(
                f"member {member.member_id!r} sent an unreadable subscription: {error}"
            ) from error
        subscriptions.append(member_subscription(member.member_id, member.instance_id, decoded))
    result = create_assignor(strategy).assign(cluster, subscriptions)
    return {m: encode_assignment(a) for m, a in consumer_assignments(result).items()}
