"""Read-only snapshots of group state, for logging, admin tools and tests.

A view holds exactly what a coordinator persists about a group (plus its live state), so two
coordinators, one live and one rebuilt from the log, can be compared view for view.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from kgroups.coordinator.consumer_group import ConsumerGroup
from kgroups.coordinator.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup
from kgroups.coordinator.rebalance_cause import RebalanceNote
from kgroups.records.consumer_protocol import decode_assignment
from kgroups.records.schema import OffsetCommitValue
from kgroups.records.wire import RecordDecodeError


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members: tuple[MemberView, ...]
    offsets: tuple[tuple[str, int, OffsetCommitValue], ...]


def view_of(group: ClassicGroup) -> GroupView:
    protocol = group.protocol_name
    members = tuple(
        MemberView(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.session_timeout_ms,
            m.rebalance_timeout_ms,
            # Mid-rebalance a member may already have dropped the outgoing protocol.
            dict(m.protocols).get(protocol, b"") if protocol is not None else b"",
            m.assignment,
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    )
    offsets = tuple((t, p, v) for (t, p), v in sorted(group.offsets.items()))
    return GroupView(
        group.group_id,
        group.state.value,
        group.generation_id,
        group.protocol_type,
        protocol,
        group.leader_id if group.members else None,
        members,
        offsets,
    )


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """What metrics read of a group at each scrape: cheap to build (no member copies), and the
    consumer-protocol state for KIP-848 groups, as ListGroups reports them. `assigned` is the
    group's current assignment: the partitions its members hold (classic: decoded from the
    ConsumerProtocol assignments SyncGroup handed out; consumer protocol: each member's
    current assignment, partitions pending revocation included), as a lag exporter reads it
    from the group's description."""

    group_id: str
    group_type: str  # "classic", "consumer" or "share"
    state: str
    member_count: int
    last_rebalance: RebalanceNote | None
    offsets: tuple[tuple[str, int, int], ...]  # (topic, partition, committed offset)
    assigned: tuple[tuple[str, int], ...] = ()


def summary_of(group: ClassicGroup,
               topic_name: Callable[[uuid.UUID], str | None]) -> GroupSummary:
    """`topic_name` names a consumer group's topics (its assignments hold topic ids)."""
    offsets = tuple((t, p, v.offset) for (t, p), v in group.offsets.items())
    if group.consumer is not None:
        return GroupSummary(group.group_id, "consumer", group.consumer.state(),
                            len(group.consumer.members), group.last_rebalance, offsets,
                            _consumer_assigned(group.consumer, topic_name))
    if group.share is not None:
        return GroupSummary(group.group_id, "share", group.share.state(),
                            len(group.share.members), group.last_rebalance, offsets,
                            _named(((member.assigned,) for member in group.share.members.values()),
                                   topic_name))
    assigned: set[tuple[str, int]] = set()
    if group.protocol_type == CONSUMER_PROTOCOL_TYPE:
        for member in group.members.values():
            assigned.update(_decoded_assignment(member.assignment))
    return GroupSummary(group.group_id, "classic", group.state.value, len(group.members),
                        group.last_rebalance, offsets, tuple(sorted(assigned)))


TopicPartitions = tuple[tuple[str, int], ...]


def _consumer_assigned(consumer: ConsumerGroup,
                       topic_name: Callable[[uuid.UUID], str | None]) -> TopicPartitions:
    return _named(((member.assigned, member.pending_revocation)
                   for member in consumer.members.values()), topic_name)


def _named(held_by_members: Iterable[Iterable[Mapping[uuid.UUID, Iterable[int]]]],
           topic_name: Callable[[uuid.UUID], str | None]) -> TopicPartitions:
    """The partitions the members hold (each member's assignments by topic id), by name."""
    held: set[tuple[str, int]] = set()
    for assignments in held_by_members:
        for assignment in assignments:
            for topic_id, partitions in assignment.items():
                name = topic_name(topic_id)
                if name is not None:  # a deleted topic has no partitions to lag on
                    held.update((name, p) for p in partitions)
    return tuple(sorted(held))


@lru_cache(maxsize=4096)
def _decoded_assignment(data: bytes) -> TopicPartitions:
    """The partitions of a classic member's ConsumerProtocol assignment; none when it is empty
    or not one (the bytes are the group leader's, and only clients read them). Cached: every
    scrape asks again for the same bytes."""
    if not data:
        return ()
    try:
        decoded = decode_assignment(data)
    except RecordDecodeError:
        return ()
    return tuple((t.topic, p) for t in decoded.assigned_partitions for p in t.partitions)
