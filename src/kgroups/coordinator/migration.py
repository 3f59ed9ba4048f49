"""Online migration between the classic protocol and KIP-848's consumer protocol, as Kafka does it.

Upgrade: when a consumer-protocol member joins (ConsumerGroupHeartbeat, epoch 0) a live classic
group whose members use the "consumer" embedded protocol, the group becomes a consumer group in
that heartbeat's journal: the classic group's tombstone, then each classic member as a
consumer-group member carrying ClassicMemberMetadata (session timeout, JoinGroup protocols),
at the classic generation as group, assignment and member epoch, its target and current
assignment both taken from its classic assignment. The joining member's own records follow.

Inside a consumer group, classic members keep speaking the classic protocol (classic_members.py).

Downgrade: when the last consumer-protocol member leaves (heartbeat leave, LeaveGroup, session
or rebalance timeout, or a classic static member taking its instance id) and classic members
remain, the group becomes classic again: tombstones for every consumer-group record, then one
GroupMetadata record at the group epoch whose members carry their target assignment; the
classic group then rebalances (after a static replacement, only if the subscription changed).

group.consumer.migration.policy gates both directions (bidirectional, upgrade, downgrade,
disabled; with disabled, classic members cannot join a live consumer group either). Empty
groups change type freely whatever the policy.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kgroups.coordinator.classic_groups import ClassicGroups
from kgroups.coordinator.consumer_group import (
    Assignment,
    ConsumerMember,
    MemberState,
    current_assignment_value,
    member_metadata_value,
    metadata_hash,
    to_list,
)
from kgroups.coordinator.consumer_messages import (
    HeartbeatError,
)
from kgroups.coordinator.context import ShardContext, ignore_failure, ignore_success
from kgroups.coordinator.effects import RebalanceCause, RemovalReason
from kgroups.coordinator.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState, Member
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.persistence import (
    consumer_group_tombstones,
    group_record,
    group_tombstone,
    subscribed_topics,
)
from kgroups.coordinator.timer_keys import (
    consumer_session_timer,
    join_timer,
    pending_member_timer,
    sync_timer,
)
from kgroups.errors import ErrorCode
from kgroups.records.classic_member import ClassicMemberMetadata
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from kgroups.records.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from kgroups.records.schema import ConsumerAssignment, OffsetsRecord, TopicPartitions
from kgroups.records.wire import RecordDecodeError


class Migration:
    """The conversions between a classic group and a consumer group (module docstring), as
    explicit steps the consumer-group module calls."""

    def __init__(self, ctx: ShardContext, classic: ClassicGroups) -> None:
        self._ctx = ctx
        self._classic = classic

    # -- upgrade ------------------------------------------------------------------------------

    def upgrade(self, group: ClassicGroup, journal: Journal) -> None:
        """Kafka's validateOnlineUpgrade and convertToConsumerGroup (module docstring): a
        refusal raises HeartbeatError and changes nothing; else the conversion's records go
        into `journal` (applied: the classic tombstone ends the classic part, the consumer
        records make the group a consumer group), and so does how to undo the rest."""
        gid = group.group_id
        prefix = f"Cannot upgrade classic group {gid} to consumer group because"
        if not self._ctx.config.online_upgrade_enabled:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"{prefix} online upgrade is disabled.")
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"{prefix} the group does not use the consumer embedded protocol.")
        if len(group.members) > self._ctx.config.group_consumer_max_size:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"{prefix} the group size exceeds the consumer group maximum size.")
        try:
            converted = [self._converted(group, m) for m in group.members.values()]
        except RecordDecodeError as exc:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"{prefix} the embedded consumer protocol is malformed.") from exc
        except _NoProtocolError as exc:
            raise HeartbeatError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"{prefix} it has no protocol selected yet.") from exc
        except _CustomAssignorError as exc:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"{prefix} an unsupported custom assignor is in use. Please refer to the "
                "documentation or switch to a default assignor before re-attempting the "
                "upgrade.") from exc
        epoch = group.generation_id
        topics = {t for member in converted for t in member.subscribed_topic_names}
        records = [
            group_tombstone(gid),
            *(OffsetsRecord(ConsumerGroupMemberMetadataKey(gid, member.member_id),
                            member_metadata_value(member)) for member in converted),
            OffsetsRecord(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(
                epoch, metadata_hash(topics, self._ctx.topics))),
            *(OffsetsRecord(ConsumerGroupTargetAssignmentMemberKey(gid, member.member_id),
                            ConsumerGroupTargetAssignmentMemberValue(to_list(member.assigned)))
              for member in converted),
            OffsetsRecord(ConsumerGroupTargetAssignmentMetadataKey(gid),
                          ConsumerGroupTargetAssignmentMetadataValue(epoch, self._ctx.now)),
            *(OffsetsRecord(ConsumerGroupCurrentMemberAssignmentKey(gid, member.member_id),
                            current_assignment_value(member)) for member in converted),
        ]
        self._end_classic_state(group, journal)
        self._ctx.record_all(group, journal, records)
        for member in converted:
            classic = member.classic
            assert classic is not None
            self._ctx.timers.schedule(consumer_session_timer(gid, member.member_id),
                                      self._ctx.now + classic.session_timeout_ms)

    def _converted(self, group: ClassicGroup, member: Member) -> ConsumerMember:
        """A classic member as Kafka's ConsumerGroup.fromClassicGroup makes it a consumer-group
        member: Stable at the generation, owning (and targeted with) its classic assignment."""
        if group.protocol_name is None:  # its first generation is still forming
            raise _NoProtocolError(member.member_id)
        subscription = decode_subscription(member.metadata_for(group.protocol_name))
        assigned: Assignment = {}
        if member.assignment:
            assignment = decode_assignment(member.assignment)
            if assignment.user_data:
                raise _CustomAssignorError(member.member_id)
            assigned = self.ids_of(assignment.assigned_partitions)
        generation = group.generation_id
        return ConsumerMember(
            member.member_id, instance_id=member.group_instance_id, rack_id=subscription.rack_id,
            client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=subscription.topics,
            rebalance_timeout_ms=member.rebalance_timeout_ms, member_epoch=generation,
            previous_member_epoch=generation, state=MemberState.STABLE, assigned=assigned,
            classic=ClassicMemberMetadata(member.session_timeout_ms, member.protocols),
        )

    def _end_classic_state(self, group: ClassicGroup, journal: Journal) -> None:
        """The classic side of a group that becomes a consumer group: parked JoinGroup and
        SyncGroup requests are told to rejoin (Kafka completes them with REBALANCE_IN_PROGRESS)
        and classic timers stop. The members themselves go with the classic tombstone; what
        the records do not hold of them (all their protocols, the rebalance's state) comes
        back with them if the journal is reverted."""
        gid = group.group_id
        for member in group.members.values():
            self._ctx.answer_parked(group, member, ErrorCode.REBALANCE_IN_PROGRESS)
            self._ctx.cancel_session(group, member.member_id)
        for pending in group.pending_members:
            self._ctx.timers.cancel(pending_member_timer(gid, pending))
        self._ctx.timers.cancel(join_timer(gid))
        self._ctx.timers.cancel(sync_timer(gid))
        journal.on_revert.append(functools.partial(self._restore_classic, group,
                                                   _ClassicBookkeeping.of(group)))

    def _restore_classic(self, group: ClassicGroup, kept: _ClassicBookkeeping) -> None:
        """After an upgrade's records were undone (the stored GroupMetadata value is back): the
        classic group as the upgrade found it in memory, and its timers."""
        if group.consumer is not None or self._ctx.groups.get(group.group_id) is not group:
            return  # a later write made it a consumer group again, or it is gone
        old_state = group.state
        kept.restore(group)
        if group.state is not old_state:
            self._ctx.event(group, old_state)
        for member in group.members.values():
            self._ctx.refresh_session(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._ctx.timers.schedule(join_timer(group.group_id),
                                      self._ctx.now + group.max_rebalance_timeout_ms())
        elif group.state is GroupState.COMPLETING_REBALANCE:
            self._ctx.timers.schedule(sync_timer(group.group_id),
                                      self._ctx.now + group.max_rebalance_timeout_ms())

    # -- downgrade ----------------------------------------------------------------------------

    def downgrade_allowed(self, group: ClassicGroup, leaving: list[ConsumerMember]) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMembers: only classic members would stay."""
        consumer = group.consumer
        assert consumer is not None
        leaving_ids = {m.member_id for m in leaving}
        staying = [m for m in consumer.members.values() if m.member_id not in leaving_ids]
        return (bool(staying) and all(m.classic is not None for m in staying)
                and self._ctx.config.online_downgrade_enabled
                and len(staying) <= self._ctx.config.group_max_size)

    def downgrade(
        self, group: ClassicGroup, leaving: list[ConsumerMember], journal: Journal,
        reason: RemovalReason, *, rebalance: bool = True,
    ) -> None:
        """Kafka's convertToClassicGroup (module docstring); after a static replacement that
        keeps the subscription the classic group stays Stable (`rebalance` False)."""
        consumer = group.consumer
        assert consumer is not None
        gid = group.group_id
        leaving_ids = {m.member_id for m in leaving}
        staying = [m for m in consumer.members.values() if m.member_id not in leaving_ids]
        targets = {m.member_id: consumer.targets.get(m.member_id, {}) for m in staying}
        epoch = consumer.group_epoch
        for member in consumer.members.values():
            self._ctx.cancel_consumer_member_timers(gid, member.member_id)
        ids = list(consumer.members)
        for key_type in (ConsumerGroupCurrentMemberAssignmentKey,
                         ConsumerGroupTargetAssignmentMemberKey):
            for member_id in ids:
                self._ctx.record(group, journal, key_type(gid, member_id), None)
        self._ctx.record(group, journal, ConsumerGroupTargetAssignmentMetadataKey(gid), None)
        for member_id in ids:
            self._ctx.record(group, journal, ConsumerGroupMemberMetadataKey(gid, member_id), None)
        for regex in sorted(consumer.resolved_regexes):
            self._ctx.record(group, journal, ConsumerGroupRegularExpressionKey(gid, regex), None)
        self._ctx.record(group, journal, ConsumerGroupMetadataKey(gid), None)
        for member in leaving:
            self._ctx.member_removed(group, member.member_id, member.instance_id, reason)
        self._ctx.record_all(group, journal,
                             [self._classic_record(group, staying, targets, epoch)])
        for member in staying:  # the record keeps only the selected protocol's metadata
            classic = member.classic
            assert classic is not None
            group.set_protocols(group.members[member.member_id], classic.supported_protocols)
        group.subscribed_topics = subscribed_topics(group)
        journal.on_revert.append(functools.partial(self._stop_classic_timers, group))
        for classic_member in group.members.values():
            self._ctx.refresh_session(group, classic_member)
        if rebalance:
            self._classic.prepare_rebalance(
                group, RebalanceCause.MEMBER_LEFT,
                f"Downgrade group {gid} from consumer to classic for member leaving.")

    def _stop_classic_timers(self, group: ClassicGroup) -> None:
        """A downgrade was undone: the classic rebalance it started stops with it."""
        self._ctx.timers.cancel(join_timer(group.group_id))
        self._ctx.timers.cancel(sync_timer(group.group_id))

    def _classic_record(
        self, group: ClassicGroup, staying: list[ConsumerMember],
        targets: dict[str, Assignment], epoch: int,
    ) -> OffsetsRecord:
        """The GroupMetadata record of the classic group the staying members form: generation
        = group epoch, the protocol their votes select, the first of them leading, each one's
        target assignment encoded in the version of its selected protocol's subscription."""
        roster = ClassicGroup(group.group_id, group.offsets_partition, GroupState.STABLE,
                              self._ctx.now, protocol_type=CONSUMER_PROTOCOL_TYPE,
                              generation_id=epoch)
        for member in staying:
            classic = member.classic
            assert classic is not None
            roster.add(Member(member.member_id, member.instance_id, member.client_id,
                              member.client_host, member.rebalance_timeout_ms,
                              classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE,
                              classic.supported_protocols))
        protocol = roster.select_protocol()
        roster.protocol_name = protocol
        assignments = {
            m.member_id: self.classic_assignment(targets[m.member_id],
                                                  m.metadata_for(protocol))
            for m in roster.members.values()
        }
        return group_record(roster, assignments)

    # -- shared -------------------------------------------------------------------------------

    def ids_of(self, partitions: Iterable[TopicPartitions]) -> Assignment:
        """ConsumerProtocol topic names -> ids (topics that do not exist are left out)."""
        result: dict[uuid.UUID, frozenset[int]] = {}
        for entry in partitions:
            info = self._ctx.topics.get(entry.topic)
            if info is not None and entry.partitions:
                result[info.topic_id] = result.get(info.topic_id, frozenset()) | frozenset(
                    entry.partitions)
        return result

    def classic_assignment(self, assigned: Assignment, subscription: bytes) -> bytes:
        """`assigned` as a ConsumerProtocol assignment in the version of the member's
        subscription (capped at the highest version there is), without user data."""
        version = min(int.from_bytes(subscription[:2], "big", signed=True), 3) \
            if len(subscription) >= 2 else 0
        names = self._ctx.topic_names
        return encode_assignment(ConsumerAssignment(tuple(
            TopicPartitions(names[topic_id], tuple(sorted(parts)))
            for topic_id, parts in assigned.items() if topic_id in names and parts
        ), None, max(version, 0)))
    def dissolve_empty_consumer_group(self, group: ClassicGroup) -> None:
        """An empty consumer group a classic member joins becomes a classic group (Kafka's
        maybeDeleteEmptyConsumerGroup): the tombstones of its consumer part."""
        journal = Journal()
        self._ctx.record_all(group, journal, consumer_group_tombstones(group))
        self._ctx.write(group.offsets_partition, journal, ignore_success, ignore_failure)




@dataclass(frozen=True, slots=True)
class _ClassicBookkeeping:
    """A classic group's in-memory state as an upgrade found it, which may be ahead of its
    GroupMetadata value (a rebalance in progress: the generation it forms, members that joined
    or were replaced since, every protocol they offered, who still owes a SyncGroup). Pending
    member ids are not kept: their clients rejoin anyway."""

    members: tuple[Member, ...]
    static_members: tuple[tuple[str, str], ...]
    pending_sync_members: frozenset[str]
    fields: tuple[object, ...]

    _FIELDS = ("leader_id", "protocol_type", "protocol_name", "generation_id", "state",
               "previous_state", "state_timestamp", "subscribed_topics")

    @classmethod
    def of(cls, group: ClassicGroup) -> _ClassicBookkeeping:
        return cls(tuple(group.members.values()), tuple(group.static_members.items()),
                   frozenset(group.pending_sync_members),
                   tuple(getattr(group, name) for name in cls._FIELDS))

    def restore(self, group: ClassicGroup) -> None:
        """In place of the roster the GroupMetadata value brought back."""
        group.clear_members()
        group.readmit(self.members)
        group.static_members.update(self.static_members)
        group.pending_sync_members.update(self.pending_sync_members)
        for name, value in zip(self._FIELDS, self.fields, strict=True):
            setattr(group, name, value)


class _NoProtocolError(Exception):
    """The classic group has not selected a protocol yet: its members' subscriptions cannot be
    read (Kafka's conversion fails on the missing protocol name)."""


class _CustomAssignorError(Exception):
    """A classic member's assignment carries user data: Kafka refuses to convert the group."""
