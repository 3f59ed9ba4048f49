"""A KIP-848 consumer group in memory, and how its records change it.

A consumer-protocol group keeps what the classic one keeps (committed offsets, on the
`ClassicGroup` object that offsets APIs already use) plus a `ConsumerGroupState`: the group epoch,
the target assignment and its epoch, and each member's subscription, epochs, reconciliation
state and current assignment. `apply_consumer_record` is the one way records change it, for the
live path and for replay alike; `partition_owners` is derived from the current assignments as
they are applied, so a rebuilt group knows who holds what exactly as the live one did.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kgroups.records.classic_member import (
    ClassicMemberMetadata,
    decode_classic_member_metadata,
    encode_classic_member_metadata,
)
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicPartitionList,
)

Assignment = dict[uuid.UUID, frozenset[int]]
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(IntEnum):
    """Kafka's MemberState bytes, as stored in ConsumerGroupCurrentMemberAssignmentValue."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1  # must give partitions up before it moves on
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for partitions others still hold
    UNKNOWN = 127


class ConsumerGroupState:
    """The group states Kafka reports for consumer groups (ListGroups, ConsumerGroupDescribe)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the coordinator needs to know of a topic: its id and partition count."""

    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """A subscribed regular expression as last resolved (record type 16): the topics it matched,
    the topic catalogue version it was resolved against, and when."""

    topics: frozenset[str]
    version: int
    timestamp: int


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = ""  # Kafka's default: "" (no regex), as it writes it
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # The epoch at which each partition assigned or pending revocation came to the member
    # (KIP-1251): a commit with an older member epoch is taken for partitions held since then.
    epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # Set while the member speaks the classic protocol inside this group (online migration).
    classic: ClassicMemberMetadata | None = None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


@dataclass(slots=True)
class ConsumerGroup:
    """The consumer-protocol part of a group (see the module docstring)."""

    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    # When the target was last computed (wall-clock ms, as recorded; None: never): the next
    # computation waits for group.consumer.assignment.interval.ms after it.
    assignment_timestamp: int | None = None
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    # The topic catalogue version `metadata_hash` was last computed against (memory only, as
    # Kafka's metadata refresh deadline: a loaded group computes it at its first heartbeat).
    metadata_checked: int = field(default=-1, compare=False)
    partition_owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    # Kept as member records apply (`count_subscription`), so a heartbeat reads the group's
    # subscriptions without walking every member: how many members name each topic, use
    # each non-empty regex and ask for each assignor, and the subscribed topics once derived.
    topic_refs: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    regex_refs: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    assignor_refs: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    subscribed_cache: frozenset[str] | None = field(default=None, compare=False, repr=False)
    # The value each of the group's keys holds as the log (with the writes in flight) has it:
    # what a failed write's revert puts back (`journal`).
    stored: dict[ConsumerGroupKey, ConsumerGroupValue] = field(
        default_factory=dict, compare=False, repr=False)
    # Each member's last assignor input and the objects it was built from (the handlers'
    # `_assignor_inputs`), memory only.
    assignor_inputs: dict[str, tuple[Any, ...]] = field(
        default_factory=dict, compare=False, repr=False)

    def state(self) -> str:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if all(m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.STABLE
        return ConsumerGroupState.RECONCILING

    def subscribed_topics(self) -> frozenset[str]:
        """Topics named by members plus those every resolved regex matched (Kafka counts a
        resolved regex's topics until its tombstone, even when no member still uses it)."""
        if self.subscribed_cache is None:
            matched = (t for r in self.resolved_regexes.values() for t in r.topics)
            self.subscribed_cache = frozenset((*self.topic_refs, *matched))
        return self.subscribed_cache

    def member_topics(self, member: ConsumerMember) -> frozenset[str]:
        """What the member subscribes to: its names and what its regex resolved to (nothing
        while the regex is not resolved yet)."""
        resolved = self.resolved_regexes.get(member.subscribed_topic_regex or "")
        topics = frozenset(member.subscribed_topic_names)
        return topics | resolved.topics if resolved is not None else topics

    def subscribed_regexes(self) -> dict[str, int]:
        """Each non-empty regex the members subscribe with, and how many do (a copy: callers
        compare it with the group after their records applied)."""
        return dict(self.regex_refs)

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (ties: the first asked for, in member order),
        else the default."""
        refs = self.assignor_refs
        if not refs:
            return default
        most = max(refs.values())
        tied = [name for name, count in refs.items() if count == most]
        if len(tied) == 1:
            return tied[0]
        for member in self.members.values():  # a tie: the first member asking for one wins
            if member.server_assignor in tied:
                return member.server_assignor
        raise AssertionError("assignor counts out of step with the members")

    def count_subscription(self, member: ConsumerMember, sign: int) -> None:
        """Add (sign 1) or take away (-1) what `member` subscribes with from the counts."""
        topics_moved = False
        for topic in member.subscribed_topic_names:
            topics_moved |= _count(self.topic_refs, topic, sign)
        if topics_moved:
            self.subscribed_cache = None
        if member.subscribed_topic_regex:
            _count(self.regex_refs, member.subscribed_topic_regex, sign)
        if member.server_assignor is not None:
            _count(self.assignor_refs, member.server_assignor, sign)


def _count(refs: dict[str, int], name: str, sign: int) -> bool:
    """Move `name`'s count; whether it appeared or went away."""
    count = refs.get(name, 0) + sign
    if count:
        refs[name] = count
    else:
        del refs[name]
    return count == 0 or (sign > 0 and count == 1)


def metadata_hash(topics: Iterable[str], image: Mapping[str, TopicInfo]) -> int:
    """A 64-bit digest of the subscribed topics' ids and partition counts: when it moves (a
    topic created, deleted, recreated or grown) the group epoch is bumped, as Kafka bumps it.
    Kafka's own hash function differs; a Kafka broker reading kgroups' value would only bump
    the epoch once."""
    parts = [f"{t}/{image[t].topic_id}/{image[t].partitions}" for t in sorted(set(topics))
             if t in image]
    if not parts:
        return 0
    digest = hashlib.blake2b("\n".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def to_list(assignment: Assignment) -> TopicPartitionList:
    """An assignment in record/wire form: topics by id, partitions sorted, empty topics out."""
    return tuple(
        (topic_id, tuple(sorted(parts)))
        for topic_id, parts in sorted(assignment.items(), key=lambda item: item[0].bytes)
        if parts
    )


def from_list(topics: TopicPartitionList | Iterable[tuple[uuid.UUID, Iterable[int]]]) -> Assignment:
    result: dict[uuid.UUID, set[int]] = {}
    for topic_id, parts in topics:
        result.setdefault(topic_id, set()).update(parts)
    return {topic_id: frozenset(parts) for topic_id, parts in result.items() if parts}


# -- records -----------------------------------------------------------------------------------


def member_metadata_value(member: ConsumerMember) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(
        member.instance_id, member.rack_id, member.client_id, member.client_host,
        member.subscribed_topic_names, member.subscribed_topic_regex,
        member.rebalance_timeout_ms, member.server_assignor,
        None if member.classic is None else encode_classic_member_metadata(member.classic),
    )


def current_assignment_value(member: ConsumerMember) -> ConsumerGroupCurrentMemberAssignmentValue:
    """With each partition's assignment epoch, as Kafka 4.3 writes them (a partition without
    one, e.g. of a member converted from a classic group, counts from the member epoch)."""
    assigned, pending = to_list(member.assigned), to_list(member.pending_revocation)
    return ConsumerGroupCurrentMemberAssignmentValue(
        member.member_epoch, member.previous_member_epoch, int(member.state), assigned, pending,
        _epochs_of(member, assigned), _epochs_of(member, pending),
    )


def _epochs_of(member: ConsumerMember, topics: TopicPartitionList) -> tuple[tuple[int, ...], ...]:
    default = max(member.member_epoch, 0)
    return tuple(tuple(member.epochs.get((t, p), default) for p in parts) for t, parts in topics)


def _read_epochs(
    topics: TopicPartitionList, epochs: tuple[tuple[int, ...] | None, ...], default: int
) -> dict[tuple[uuid.UUID, int], int]:
    """Kafka's reading: a topic whose epochs are missing or do not match its partitions takes
    the member epoch (never below 0) for each."""
    result: dict[tuple[uuid.UUID, int], int] = {}
    for index, (topic_id, parts) in enumerate(topics):
        listed = epochs[index] if index < len(epochs) else None
        if listed is None or len(listed) != len(parts):
            listed = (max(default, 0),) * len(parts)
        result.update(((topic_id, p), e) for p, e in zip(parts, listed, strict=True))
    return result


def apply_consumer_record(
    consumer: ConsumerGroup, key: ConsumerGroupKey, value: ConsumerGroupValue | None
) -> None:
    """Change `consumer` as the record says (tombstones remove what their key names)."""
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        if isinstance(value, ConsumerGroupRegularExpressionValue):
            consumer.resolved_regexes[key.regular_expression] = ResolvedRegex(
                frozenset(value.topics), value.version, value.timestamp)
        else:
            consumer.resolved_regexes.pop(key.regular_expression, None)
        consumer.subscribed_cache = None
        return
    if isinstance(key, ConsumerGroupMetadataKey):
        if isinstance(value, ConsumerGroupMetadataValue):
            consumer.group_epoch = value.epoch
            consumer.metadata_hash = value.metadata_hash
        return
    if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
            consumer.assignment_epoch = value.assignment_epoch
            consumer.assignment_timestamp = value.assignment_timestamp
        else:
            consumer.assignment_epoch = -1
            consumer.assignment_timestamp = None
        return
    if isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
            consumer.targets[key.member_id] = from_list(value.topic_partitions)
        else:
            consumer.targets.pop(key.member_id, None)
        return
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        if isinstance(value, ConsumerGroupMemberMetadataValue):
            member = _member(consumer, key.member_id)
            consumer.count_subscription(member, -1)
            if member.instance_id is not None and member.instance_id != value.instance_id:
                consumer.static_members.pop(member.instance_id, None)
            member.instance_id = value.instance_id
            member.rack_id = value.rack_id
            member.client_id = value.client_id
            member.client_host = value.client_host
            member.subscribed_topic_names = value.subscribed_topic_names
            member.subscribed_topic_regex = value.subscribed_topic_regex
            member.rebalance_timeout_ms = value.rebalance_timeout_ms
            member.server_assignor = value.server_assignor
            member.classic = decode_classic_member_metadata(value.classic_member_metadata)
            consumer.count_subscription(member, 1)
            if value.instance_id is not None:
                consumer.static_members[value.instance_id] = key.member_id
        else:
            gone = consumer.members.pop(key.member_id, None)
            if gone is not None:
                consumer.count_subscription(gone, -1)
                _release(consumer, gone)
                if gone.instance_id is not None and \
                        consumer.static_members.get(gone.instance_id) == key.member_id:
                    del consumer.static_members[gone.instance_id]
        return
    if isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
            member = _member(consumer, key.member_id)
            _release(consumer, member)
            member.member_epoch = value.member_epoch
            member.previous_member_epoch = value.previous_member_epoch
            known = value.state in MemberState._value2member_map_
            member.state = MemberState(value.state) if known else MemberState.UNKNOWN
            member.assigned = from_list(value.assigned_partitions)
            member.pending_revocation = from_list(value.partitions_pending_revocation)
            member.epochs = {
                **_read_epochs(value.partitions_pending_revocation, value.pending_epochs,
                               value.member_epoch),
                **_read_epochs(value.assigned_partitions, value.assigned_epochs,
                               value.member_epoch)}
            for assignment in (member.assigned, member.pending_revocation):
                for topic_id, parts in assignment.items():
                    for partition in parts:
                        consumer.partition_owners[(topic_id, partition)] = key.member_id
        else:
            left = consumer.members.get(key.member_id)
            if left is not None:
                _release(consumer, left)
                left.member_epoch = LEAVE_EPOCH
                left.previous_member_epoch = LEAVE_EPOCH
                left.state = MemberState.STABLE
                left.assigned = {}
                left.pending_revocation = {}
                left.epochs = {}


def _member(consumer: ConsumerGroup, member_id: str) -> ConsumerMember:
    member = consumer.members.get(member_id)
    if member is None:
        member = ConsumerMember(member_id)
        consumer.members[member_id] = member
    return member


def _release(consumer: ConsumerGroup, member: ConsumerMember) -> None:
    """Forget the partitions `member` held (assigned or pending revocation)."""
    owners = consumer.partition_owners
    for assignment in (member.assigned, member.pending_revocation):
        for topic_id, parts in assignment.items():
            for partition in parts:
                if owners.get((topic_id, partition)) == member.member_id:
                    del owners[(topic_id, partition)]
