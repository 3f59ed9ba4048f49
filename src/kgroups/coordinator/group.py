"""One classic consumer group in memory: its state, generation, members and committed offsets.

This module holds the data and the small invariants that belong to it (leader re-election when
the leader leaves, protocol voting, allowed state transitions); the rules that decide *when*
things happen live in the coordinator handlers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from kgroups.assignors.java_hash import string_hash
from kgroups.coordinator.consumer_group import ConsumerGroup
from kgroups.coordinator.messages import RequestId
from kgroups.coordinator.rebalance_cause import RebalanceNote
from kgroups.coordinator.share_group import ShareGroup
from kgroups.coordinator.streams_group import StreamsGroup
from kgroups.records.schema import GroupMetadataValue, OffsetCommitValue


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# new state -> the states it may be entered from (Kafka's ClassicGroupState).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(slots=True)
class Member:
    """A joined member. `join_request`/`sync_request` hold the parked request ids, if any.

    While the member is in a group, its `join_request` and `protocols` change only through
    `ClassicGroup.set_join_request` / `set_protocols`, which keep the group's tallies."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_request: RequestId | None = None
    join_version: int = 0
    sync_request: RequestId | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_request is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_request is not None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    offsets_partition: int
    state: GroupState
    state_timestamp: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    previous_state: GroupState | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetCommitValue] = field(default_factory=dict)
    subscribed_topics: frozenset[str] | None = None
    new_member_added: bool = False
    initial_delay_ms: int | None = None
    initial_delay_remaining_ms: int | None = None
    # The consumer-protocol (KIP-848) part, when the group is a consumer group.
    consumer: ConsumerGroup | None = None
    # The streams (KIP-1071) part, when the group is a streams group.
    streams: StreamsGroup | None = None
    # The share-protocol (KIP-932) part, when the group is a share group.
    share: ShareGroup | None = None
    # The group's GroupMetadata value as the log (with the writes in flight) holds it: what a
    # failed write's revert puts back (`journal`).
    stored_metadata: GroupMetadataValue | None = field(default=None, compare=False, repr=False)
    last_rebalance: RebalanceNote | None = None
    # Tallies over `members` (Kafka's numMembersAwaitingJoinResponse and supportedProtocols),
    # kept by the methods that change them, so that each JoinGroup of a big group is not a scan
    # of every member (a 1000-member group forming did a million member visits).
    _awaiting_join: int = field(default=0, init=False, repr=False, compare=False)
    _protocol_support: Counter[str] = field(
        default_factory=Counter, init=False, repr=False, compare=False)

    def can_transition_to(self, new_state: GroupState) -> bool:
        return self.state in VALID_PREVIOUS_STATES[new_state]

    def transition_to(self, new_state: GroupState, now: int) -> None:
        if not self.can_transition_to(new_state):
            raise AssertionError(
                f"group {self.group_id}: illegal transition {self.state.value} -> {new_state.value}"
            )
        self.previous_state = self.state
        self.state = new_state
        self.state_timestamp = now

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def awaiting_join_count(self) -> int:
        return self._awaiting_join

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self._awaiting_join and not self.pending_members

    def set_join_request(self, member: Member, request: RequestId | None) -> None:
        """Park (or clear, with None) the JoinGroup `member` of this group waits on."""
        self._awaiting_join += (request is not None) - (member.join_request is not None)
        member.join_request = request

    def set_protocols(self, member: Member, protocols: tuple[tuple[str, bytes], ...]) -> None:
        """Change the protocols `member` of this group offers."""
        self._tally_protocols(member, -1)
        member.protocols = protocols
        self._tally_protocols(member, 1)

    def _tally_protocols(self, member: Member, delta: int) -> None:
        support = self._protocol_support
        for name in {name for name, _ in member.protocols}:
            support[name] += delta
            if not support[name]:
                del support[name]

    def _enter(self, member: Member) -> None:
        self.members[member.member_id] = member
        self._awaiting_join += member.join_request is not None
        self._tally_protocols(member, 1)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self._enter(member)
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._awaiting_join -= member.join_request is not None
            self._tally_protocols(member, -1)
        instance_id = member.group_instance_id if member is not None else None
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give `instance_id`'s member a new id, keeping its place (and leadership)."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        self.static_members[instance_id] = new_id
        return member

    def clear_members(self) -> None:
        """Drop every member, pending member and the roles they held (no rebalance)."""
        self.members.clear()
        self.static_members.clear()
        self.pending_members.clear()
        self.pending_sync_members.clear()
        self.leader_id = None
        self._awaiting_join = 0
        self._protocol_support.clear()

    def readmit(self, members: Iterable[Member]) -> None:
        """Put back members taken out by `clear_members` (their roles are the caller's)."""
        self.members.update((member.member_id, member) for member in members)
        self._awaiting_join = sum(member.awaiting_join for member in self.members.values())
        self._protocol_support.clear()
        for member in self.members.values():
            self._tally_protocols(member, 1)

    def supports_protocols(self, protocol_type: str, names: tuple[str, ...]) -> bool:
        """Kafka's check before admitting a join: same type, and a protocol everyone speaks."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        everyone = len(self.members)
        return any(self._protocol_support[name] == everyone for name in names)

    def select_protocol(
        self, overrides: dict[str, tuple[tuple[str, bytes], ...]] | None = None
    ) -> str:
        """Each member votes for its first protocol every member supports; most votes wins.
        `overrides` (member id -> protocols) asks what the vote would be after such a change
        (a static member rejoining with other protocols)."""
        overrides = overrides or {}
        offered = [overrides.get(m.member_id, m.protocols) for m in self.members.values()]
        candidates = _common(offered)
        if not candidates:
            raise AssertionError(f"group {self.group_id} has no protocol common to all members")
        votes = Counter(
            next(name for name, _ in protocols if name in candidates) for protocols in offered
        )
        best = max(votes.values())
        return next(name for name in java_hash_map_order(list(votes)) if votes[name] == best)

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    def leader_member_list(self) -> tuple[tuple[str, str | None, bytes], ...]:
        """What the leader's JoinGroup response lists: every member's selected-protocol metadata."""
        protocol = self.protocol_name
        assert protocol is not None
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(protocol))
            for m in self.members.values()
        )


def _common(offered: Iterable[tuple[tuple[str, bytes], ...]]) -> set[str]:
    """The protocol names every member's offer includes."""
    common: set[str] | None = None
    for protocols in offered:
        names = {name for name, _ in protocols}
        common = names if common is None else common & names
    return common or set()


def java_hash_map_order(keys: list[str]) -> list[str]:
    """The order a java.util.HashMap<String, _> filled with `keys` (in this order) iterates in.

    Kafka counts protocol votes in such a map and keeps the first protocol with the most votes
    in its iteration order, so a tie goes to the name in the lowest hash bucket (insertion order
    within a bucket). The table starts at 16 buckets and doubles while over 3/4 full.
    """
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        code = string_hash(key)
        return (code ^ (code >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)  # sorted() is stable: insertion order within a bucket
