"""Group state <-> __consumer_offsets records: what a change writes, and how records change state.

`apply_record` is the one way a record changes a group: the live coordinator applies the records
it writes through it, and `rebuild_groups` (a partition's load) applies the log's records through
it, so a live group and its replay cannot drift. Whatever `group_record` stores, `rebuild_groups`
reads back into an equal group (Stable when it has members, else Empty).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from kgroups.coordinator.consumer_group import ConsumerGroup, apply_consumer_record
from kgroups.coordinator.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState, Member
from kgroups.coordinator.share_group import ShareGroup, apply_share_record
from kgroups.records.codec import RecordDecodeError, decode_key, decode_value
from kgroups.records.consumer_group import (
    CONSUMER_GROUP_KEY_TYPES,
    ConsumerGroupKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupValue,
)
from kgroups.records.consumer_protocol import decode_subscription
from kgroups.records.schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecord,
)
from kgroups.records.share_group import (
    SHARE_GROUP_KEY_TYPES,
    ShareGroupKey,
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupValue,
)


def group_record(group: ClassicGroup, assignments: dict[str, bytes]) -> OffsetsRecord:
    """The GroupMetadata record for `group`'s current generation with the given assignments."""
    return _metadata_record(group, group.members.values(), group.leader_id, assignments)


def static_replacement_record(
    group: ClassicGroup, old_id: str, replacement: Member
) -> OffsetsRecord:
    """The GroupMetadata record of `group` once `replacement` (same instance id, new member id)
    has taken `old_id`'s place: applying it is what performs the replacement. The replacement
    goes last and inherits leadership, as `ClassicGroup.replace_static_member` orders them."""
    members = [m for m in group.members.values() if m.member_id != old_id] + [replacement]
    leader = replacement.member_id if group.leader_id == old_id else group.leader_id
    assignments = {m.member_id: m.assignment for m in members}
    return _metadata_record(group, members, leader, assignments)


def _metadata_record(
    group: ClassicGroup,
    roster: Iterable[Member],
    leader_id: str | None,
    assignments: dict[str, bytes],
) -> OffsetsRecord:
    protocol = group.protocol_name
    members = tuple(
        MemberMetadata(
            member_id=member.member_id,
            client_id=member.client_id,
            client_host=member.client_host,
            session_timeout=member.session_timeout_ms,
            rebalance_timeout=member.rebalance_timeout_ms,
            subscription=member.metadata_for(protocol) if protocol is not None else b"",
            assignment=assignments.get(member.member_id, b""),
            group_instance_id=member.group_instance_id,
        )
        for member in roster
    )
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=protocol,
        leader=leader_id if members else None,
        current_state_timestamp=group.state_timestamp,
        members=members,
    )
    return OffsetsRecord(GroupMetadataKey(group.group_id), value)


def group_tombstone(group_id: str) -> OffsetsRecord:
    return OffsetsRecord(GroupMetadataKey(group_id), None)


def consumer_group_tombstones(group: ClassicGroup) -> list[OffsetsRecord]:
    """The records that end an empty consumer group's consumer-protocol part (its target
    assignment epoch, its resolved regexes and its group epoch, in Kafka's order; an empty
    group has no member records)."""
    if group.consumer is None:
        return []
    regexes = sorted(group.consumer.resolved_regexes)
    return [OffsetsRecord(ConsumerGroupTargetAssignmentMetadataKey(group.group_id), None),
            *(OffsetsRecord(ConsumerGroupRegularExpressionKey(group.group_id, regex), None)
              for regex in regexes),
            OffsetsRecord(ConsumerGroupMetadataKey(group.group_id), None)]


def share_group_tombstones(group: ClassicGroup) -> list[OffsetsRecord]:
    """The records that end an empty share group's share part: its target assignment epoch,
    its share-partitions' metadata and its group epoch."""
    if group.share is None:
        return []
    return [OffsetsRecord(ShareGroupTargetAssignmentMetadataKey(group.group_id), None),
            OffsetsRecord(ShareGroupStatePartitionMetadataKey(group.group_id), None),
            OffsetsRecord(ShareGroupMetadataKey(group.group_id), None)]


def offset_record(group_id: str, topic: str, partition: int, value: OffsetCommitValue | None):
    """An offset commit record, or its tombstone when `value` is None."""
    return OffsetsRecord(OffsetCommitKey(group_id, topic, partition), value)


def subscribed_topics(group: ClassicGroup) -> frozenset[str] | None:
    """Topics a consumer group subscribes to (None when unknown: not a consumer group, or a
    subscription that does not parse). Offset expiry and OffsetDelete depend on this."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    if not group.members:
        return frozenset()
    if group.protocol_name is None:
        return None
    protocol = group.protocol_name
    # Members usually send identical subscriptions: each distinct one is decoded once.
    subscriptions = {member.metadata_for(protocol) for member in group.members.values()}
    topics: set[str] = set()
    try:
        for subscription in subscriptions:
            topics.update(decode_subscription(subscription).topics)
    except ValueError:
        return None
    return frozenset(topics)


@dataclass(slots=True)
class PartitionImage:
    """The latest value per key of one __consumer_offsets partition: all that replay needs,
    since a later record for a key always supersedes an earlier one (the log is compacted on
    exactly that premise)."""

    group_values: dict[str, GroupMetadataValue | None] = field(default_factory=dict)
    offsets: dict[tuple[str, str, int], OffsetCommitValue | None] = field(default_factory=dict)
    # KIP-848 consumer-group records: the latest value per key (None: tombstone).
    consumer_values: dict[ConsumerGroupKey, ConsumerGroupValue | None] = field(
        default_factory=dict)
    # KIP-932 share-group records: the latest value per key (None: tombstone).
    share_values: dict[ShareGroupKey, ShareGroupValue | None] = field(default_factory=dict)
    # Transactions without their marker yet: (producer id, producer epoch) -> their records
    # (TxnOffsetCommit's offsets, pending until the marker).
    open_transactions: dict[tuple[int, int], list[OffsetsRecord]] = field(default_factory=dict)

    def hold_raw(self, producer_id: int, producer_epoch: int,
                 records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """An open transaction's encoded records (keys that do not decode are left out: they
        were not written by a coordinator)."""
        held = self.open_transactions.setdefault((producer_id, producer_epoch), [])
        for raw_key, raw_value in records:
            try:
                key = decode_key(raw_key)
                value = None if raw_value is None else decode_value(key, raw_value)
            except RecordDecodeError:
                continue
            held.append(OffsetsRecord(key, value))

    def apply(self, records: Iterable[OffsetsRecord]) -> None:
        group_values = self.group_values
        offsets = self.offsets
        for record in records:
            key = record.key
            if type(key) is OffsetCommitKey:
                offsets[(key.group, key.topic, key.partition)] = record.value  # type: ignore[assignment]
            elif type(key) is GroupMetadataKey:
                group_values[key.group] = record.value  # type: ignore[assignment]
            elif key.version in CONSUMER_GROUP_KEY_TYPES:
                self.consumer_values[key] = record.value  # type: ignore[index,assignment]
            elif key.version in SHARE_GROUP_KEY_TYPES:
                self.share_values[key] = record.value  # type: ignore[index,assignment]

    def apply_raw(
        self, records: Iterable[tuple[bytes, bytes | None]], *, skip_undecodable: bool = False
    ) -> int:
        """`apply` for encoded (key, value) pairs, each key at most once (the survivors of a
        fold): the bulk path of a log replay. Values decode exactly as `decode_record` decodes
        them. A malformed record raises RecordDecodeError naming its byte position, or with
        `skip_undecodable` is left out and counted (returned): its key then holds nothing, as
        its earlier records were superseded by it."""
        group_values = self.group_values
        offsets = self.offsets
        skipped = 0
        for raw_key, raw_value in records:
            try:
                where = _offset_key_fields(raw_key)
                if where is not None:
                    value = None if raw_value is None else decode_value(_AN_OFFSET_KEY, raw_value)
                    offsets[where] = value  # type: ignore[assignment]
                    continue
                key = decode_key(raw_key)
                if type(key) is GroupMetadataKey:
                    group_values[key.group] = decode_value(key, raw_value)  # type: ignore[assignment]
                elif key.version in CONSUMER_GROUP_KEY_TYPES:
                    self.consumer_values[key] = decode_value(key, raw_value)  # type: ignore[index,assignment]
                elif key.version in SHARE_GROUP_KEY_TYPES:
                    self.share_values[key] = decode_value(key, raw_value)  # type: ignore[index,assignment]
            except RecordDecodeError:
                if not skip_undecodable:
                    raise
                skipped += 1
        return skipped


# decode_value only looks at the key's type: any offset commit key selects the value schema.
_AN_OFFSET_KEY = OffsetCommitKey("", "", 0)
_KEY_HEAD = struct.Struct(">hh")  # key type, group length
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _offset_key_fields(raw: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of a well-formed offset commit key, else None (the caller
    then takes the codec, which names what is wrong). Every survivor of a replay is a distinct
    key, so a flat parse beats the codec's shared key cache here."""
    size = len(raw)
    if size < 10:
        return None
    key_type, group_length = _KEY_HEAD.unpack_from(raw)
    group_end = 4 + group_length
    if key_type not in (0, 1) or group_length < 0 or group_end + 6 > size:
        return None
    topic_end = group_end + 2 + _INT16.unpack_from(raw, group_end)[0]
    if topic_end < group_end + 2 or topic_end + 4 != size:
        return None
    try:
        group = raw[4:group_end].decode()
        topic = raw[group_end + 2 : topic_end].decode()
    except UnicodeDecodeError:
        return None
    return group, topic, _INT32.unpack_from(raw, topic_end)[0]


def apply_record(group: ClassicGroup, record: OffsetsRecord, now: int) -> None:
    """Change `group` as `record` says: the same function for the live path, for replay and
    for a failed write's revert (which applies the values its keys held before).

    An offset record sets or (tombstone) removes one committed offset. A GroupMetadata record
    sets the stored generation, protocol, leader and roster: each stored member updates the
    member with its id, or renames the member holding its instance id (a static replacement),
    or joins the group; a group that had no classic members, or was Dead, is then what replay
    makes of it (Stable with members, else Empty). A GroupMetadata tombstone ends the classic
    part: no members, generation or protocol, and the group is Dead until a consumer-group
    record makes it a consumer group (an online upgrade writes exactly that)."""
    key = record.key
    if type(key) is OffsetCommitKey:
        apply_offset(group, key.topic, key.partition, record.value)  # type: ignore[arg-type]
    elif key.version in CONSUMER_GROUP_KEY_TYPES:
        _apply_consumer(group, key, record.value)  # type: ignore[arg-type]
    elif key.version in SHARE_GROUP_KEY_TYPES:
        _apply_share(group, key, record.value)  # type: ignore[arg-type]
    elif record.value is None:
        group.stored_metadata = None
        group.clear_members()
        group.protocol_type = group.protocol_name = None
        group.generation_id = 0
        group.transition_to(GroupState.DEAD, now)
    else:
        revives = group.state is GroupState.DEAD or (
            group.state is GroupState.EMPTY and not group.members)
        _apply_metadata(group, record.value)  # type: ignore[arg-type]
        revived = GroupState.STABLE if group.members else GroupState.EMPTY
        if revives and group.state is not revived:
            group.previous_state = group.state
            group.state = revived
            group.state_timestamp = now


def _apply_consumer(
    group: ClassicGroup, key: ConsumerGroupKey, value: ConsumerGroupValue | None
) -> None:
    """A consumer-group record: the group becomes a consumer group (its first record; a Dead
    group, whose classic part an upgrade just ended, is Empty again, as replay finds it), the
    record changes it, and the group-epoch tombstone (DeleteGroups) ends its consumer part."""
    if group.consumer is None:
        if value is None:
            return
        group.consumer = ConsumerGroup()
        if group.state is GroupState.DEAD:
            group.previous_state = group.state
            group.state = GroupState.EMPTY
    consumer = group.consumer
    apply_consumer_record(consumer, key, value)
    if value is None:
        consumer.stored.pop(key, None)
    else:
        consumer.stored[key] = value
    if isinstance(key, ConsumerGroupMetadataKey) and value is None:
        group.consumer = None
    elif consumer.members:
        group.subscribed_topics = consumer.subscribed_topics()


def _apply_share(group: ClassicGroup, key: ShareGroupKey, value: ShareGroupValue | None) -> None:
    """A share-group record, as `_apply_consumer` for consumer groups: the first makes the
    group a share group, the group-epoch tombstone (DeleteGroups) ends its share part."""
    if group.share is None:
        if value is None:
            return
        group.share = ShareGroup()
        if group.state is GroupState.DEAD:
            group.previous_state = group.state
            group.state = GroupState.EMPTY
    share = group.share
    apply_share_record(share, key, value)
    if value is None:
        share.stored.pop(key, None)
    else:
        share.stored[key] = value
    if isinstance(key, ShareGroupMetadataKey) and value is None:
        group.share = None


def apply_offset(
    group: ClassicGroup, topic: str, partition: int, value: OffsetCommitValue | None
) -> None:
    if value is None:
        group.offsets.pop((topic, partition), None)
    else:
        group.offsets[(topic, partition)] = value


def _apply_metadata(group: ClassicGroup, value: GroupMetadataValue) -> None:
    group.stored_metadata = value
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.generation_id = value.generation
    protocol = value.protocol or ""
    for stored in value.members:
        member = group.members.get(stored.member_id)
        instance_id = stored.group_instance_id
        if member is None and instance_id is not None and instance_id in group.static_members:
            previous_id = group.static_members[instance_id]
            member = group.replace_static_member(instance_id, previous_id, stored.member_id)
        if member is None:
            group.add(
                Member(
                    member_id=stored.member_id,
                    group_instance_id=instance_id,
                    client_id=stored.client_id,
                    client_host=stored.client_host,
                    rebalance_timeout_ms=stored.rebalance_timeout,
                    session_timeout_ms=stored.session_timeout,
                    protocol_type=value.protocol_type,
                    protocols=((protocol, stored.subscription),),
                    assignment=stored.assignment,
                )
            )
            continue
        member.client_id = stored.client_id
        member.client_host = stored.client_host
        member.rebalance_timeout_ms = stored.rebalance_timeout
        member.session_timeout_ms = stored.session_timeout
        member.assignment = stored.assignment
        # Only the selected protocol's metadata is stored; the member's other protocols stay.
        group.set_protocols(member, tuple(
            (name, stored.subscription if name == protocol else metadata)
            for name, metadata in member.protocols
        ))
    if value.members and value.leader in group.members:
        group.leader_id = value.leader


def copy_member(member: Member) -> Member:
    """A detached copy: later changes to `member` do not reach it."""
    return replace(member)


def _replay_in_order(
    groups: dict[str, ClassicGroup],
    values: Mapping[ConsumerGroupKey, ConsumerGroupValue | None]
    | Mapping[ShareGroupKey, ShareGroupValue | None],
    record_types: tuple[int, ...], offsets_partition: int,
) -> None:
    """Apply the surviving records of these keys, kind by kind in `record_types` order, each
    to its group (made Empty for it if the log had no other record of it)."""
    for record_type in record_types:
        for key, value in values.items():
            if key.version != record_type or value is None:
                continue
            if key.group not in groups:
                groups[key.group] = ClassicGroup(key.group, offsets_partition, GroupState.EMPTY,
                                                 -1)
            apply_record(groups[key.group], OffsetsRecord(key, value), 0)


def rebuild_groups(image: PartitionImage, offsets_partition: int) -> dict[str, ClassicGroup]:
    """Groups as a coordinator that had just written `image` would hold them: each surviving
    record applied through `apply_record`/`apply_offset` to a group built for it."""
    groups: dict[str, ClassicGroup] = {}
    for group_id, value in image.group_values.items():
        if value is not None:
            state = GroupState.STABLE if value.members else GroupState.EMPTY
            group = ClassicGroup(group_id, offsets_partition, state, value.current_state_timestamp)
            apply_record(group, OffsetsRecord(GroupMetadataKey(group_id), value), 0)
            group.subscribed_topics = subscribed_topics(group)
            groups[group_id] = group
    # Consumer-group records in the order Kafka writes them for a group: epoch, subscriptions,
    # resolved regexes, target assignment, current assignments (each later kind refers to
    # members of earlier).
    _replay_in_order(groups, image.consumer_values, (3, 5, 16, 6, 7, 8), offsets_partition)
    # Share-group records likewise: epoch, subscriptions, share-partitions, target assignment,
    # current assignments.
    _replay_in_order(groups, image.share_values, (11, 10, 15, 12, 13, 14), offsets_partition)
    for group in groups.values():
        if group.share is not None:  # what was initialized before the load is in the epoch
            group.share.initialized_since_epoch = False
    for (group_id, topic, partition), offset in image.offsets.items():
        if offset is None:
            continue
        if group_id not in groups:
            groups[group_id] = ClassicGroup(group_id, offsets_partition, GroupState.EMPTY, -1)
        group = groups[group_id]
        apply_offset(group, topic, partition, offset)
    return groups
