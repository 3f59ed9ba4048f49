"""A KIP-932 share group in memory, and how its records change it.

A share group keeps, beside what every group keeps (the `ClassicGroup` object), a `ShareGroup`:
the group epoch, the target assignment and its epoch, each member's subscription, epochs and
assignment, and which share-partitions of the group are initialized (their state exists in the
share coordinator), being initialized, or having their state deleted. Unlike a consumer group,
a partition may be assigned to several members at once, and a member takes its target as soon
as it heartbeats (nothing is revoked first). `apply_share_record` is the one way records change
it, for the live path and for replay alike.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kgroups.coordinator.consumer_group import Assignment, from_list, to_list
from kgroups.records.share_group import (
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareGroupValue,
    ShareTopicPartitions,
)

# topic id -> (topic name as recorded, partitions)
SharePartitions = dict[uuid.UUID, tuple[str, frozenset[int]]]


class ShareGroupState:
    """The states Kafka reports for share groups: Empty without members, else Stable."""

    EMPTY = "Empty"
    STABLE = "Stable"


@dataclass(slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    """The share-protocol part of a group (see the module docstring)."""

    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp: int | None = None
    members: dict[str, ShareMember] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    initializing: SharePartitions = field(default_factory=dict)
    initialized: SharePartitions = field(default_factory=dict)
    deleting: dict[uuid.UUID, str] = field(default_factory=dict)
    # Partitions became initialized since the group epoch last moved: the next heartbeat moves
    # it so that the target takes them in (memory only, as Kafka's).
    initialized_since_epoch: bool = field(default=False, compare=False)
    # The initializing partitions this coordinator asked the broker to initialize (memory
    # only): those recorded initializing by an earlier incarnation are asked for again.
    requested: set[tuple[uuid.UUID, int]] = field(default_factory=set, compare=False)
    metadata_checked: int = field(default=-1, compare=False)
    stored: dict[ShareGroupKey, ShareGroupValue] = field(
        default_factory=dict, compare=False, repr=False)

    def state(self) -> str:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed_topic_names)

    def state_metadata_value(
        self, initializing: SharePartitions, initialized: SharePartitions,
        deleting: dict[uuid.UUID, str],
    ) -> ShareGroupStatePartitionMetadataValue:
        """Record type 15 holding the given sets."""
        def listed(parts: SharePartitions) -> tuple[ShareTopicPartitions, ...]:
            return tuple(ShareTopicPartitions(t, name, tuple(sorted(ps)))
                         for t, (name, ps) in parts.items() if ps)
        return ShareGroupStatePartitionMetadataValue(
            listed(initializing), listed(initialized), tuple(deleting.items()))


def member_metadata_value(member: ShareMember) -> ShareGroupMemberMetadataValue:
    """As Kafka 4.3.1 writes it: the subscribed topic names sorted."""
    return ShareGroupMemberMetadataValue(member.rack_id, member.client_id, member.client_host,
                                         tuple(sorted(member.subscribed_topic_names)))


def current_assignment_value(member: ShareMember) -> ShareGroupCurrentMemberAssignmentValue:
    return ShareGroupCurrentMemberAssignmentValue(
        member.member_epoch, member.previous_member_epoch, 0, to_list(member.assigned))


def merged(base: SharePartitions, extra: SharePartitions) -> SharePartitions:
    """`base` with `extra`'s partitions added."""
    result = dict(base)
    for topic_id, (name, parts) in extra.items():
        _, have = result.get(topic_id, (name, frozenset()))
        result[topic_id] = (name, have | parts)
    return result


def without(base: SharePartitions, gone: SharePartitions) -> SharePartitions:
    """`base` without `gone`'s partitions (topics left empty dropped)."""
    result: SharePartitions = {}
    for topic_id, (name, parts) in base.items():
        left = parts - gone.get(topic_id, ("", frozenset()))[1]
        if left:
            result[topic_id] = (name, left)
    return result


def _parts_of(topics: tuple[ShareTopicPartitions, ...]) -> SharePartitions:
    return {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in topics}


def apply_share_record(
    share: ShareGroup, key: ShareGroupKey, value: ShareGroupValue | None
) -> None:
    """Change `share` as the record says (tombstones remove what their key names)."""
    if isinstance(key, ShareGroupMetadataKey):
        if isinstance(value, ShareGroupMetadataValue):
            share.group_epoch = value.epoch
            share.metadata_hash = value.metadata_hash
        return
    if isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        if isinstance(value, ShareGroupTargetAssignmentMetadataValue):
            share.assignment_epoch = value.assignment_epoch
            share.assignment_timestamp = value.assignment_timestamp
        else:
            share.assignment_epoch = -1
            share.assignment_timestamp = None
        return
    if isinstance(key, ShareGroupTargetAssignmentMemberKey):
        if isinstance(value, ShareGroupTargetAssignmentMemberValue):
            share.targets[key.member_id] = from_list(value.topic_partitions)
        else:
            share.targets.pop(key.member_id, None)
        return
    if isinstance(key, ShareGroupStatePartitionMetadataKey):
        if isinstance(value, ShareGroupStatePartitionMetadataValue):
            initialized = _parts_of(value.initialized)
            if without(initialized, share.initialized):
                share.initialized_since_epoch = True
            share.initializing = _parts_of(value.initializing)
            share.initialized = initialized
            share.deleting = dict(value.deleting)
        else:
            share.initializing, share.initialized, share.deleting = {}, {}, {}
        return
    if isinstance(key, ShareGroupMemberMetadataKey):
        if isinstance(value, ShareGroupMemberMetadataValue):
            member = share.members.setdefault(key.member_id, ShareMember(key.member_id))
            member.rack_id = value.rack_id
            member.client_id = value.client_id
            member.client_host = value.client_host
            member.subscribed_topic_names = value.subscribed_topic_names
        else:
            share.members.pop(key.member_id, None)
        return
    if isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        member = share.members.setdefault(key.member_id, ShareMember(key.member_id))
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        member.assigned = from_list(value.assigned_partitions)
    else:
        left = share.members.get(key.member_id)
        if left is not None:
            left.member_epoch = left.previous_member_epoch = -1
            left.assigned = {}
