"""Read-only snapshots of group state, for logging, admin tools and tests.

A view holds exactly what a coordinator persists about a group (plus its live state), so two
coordinators, one live and one rebuilt from the log, can be compared view for view.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgroups.coordinator.group import ClassicGroup
from kgroups.coordinator.rebalance_cause import RebalanceNote
from kgroups.records.schema import OffsetCommitValue


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
    consumer-protocol state for KIP-848 groups, as ListGroups reports them."""

    group_id: str
    group_type: str  # "classic" or "consumer"
    state: str
    member_count: int
    last_rebalance: RebalanceNote | None
    offsets: tuple[tuple[str, int, int], ...]  # (topic, partition, committed offset)


def summary_of(group: ClassicGroup) -> GroupSummary:
    offsets = tuple((t, p, v.offset) for (t, p), v in group.offsets.items())
    if group.consumer is not None:
        return GroupSummary(group.group_id, "consumer", group.consumer.state(),
                            len(group.consumer.members), group.last_rebalance, offsets)
    return GroupSummary(group.group_id, "classic", group.state.value, len(group.members),
                        group.last_rebalance, offsets)
