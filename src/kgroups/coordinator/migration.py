"""Online migration between the classic protocol and KIP-848's consumer protocol, as Kafka does it.

Upgrade: when a consumer-protocol member joins (ConsumerGroupHeartbeat, epoch 0) a live classic
group whose members use the "consumer" embedded protocol, the group becomes a consumer group in
that heartbeat's records: the classic group's tombstone, then each classic member as a
consumer-group member carrying ClassicMemberMetadata (session timeout, JoinGroup protocols),
at the classic generation as group, assignment and member epoch, its target and current
assignment both taken from its classic assignment. The joining member's own records follow.

Inside a consumer group, classic members keep speaking JoinGroup/SyncGroup/Heartbeat/
LeaveGroup: a JoinGroup updates the member's subscription and reconciles it one step towards
the server assignor's target (its generation is its member epoch; no leader, nobody waits for
anyone); SyncGroup hands out what it now owns; Heartbeat answers REBALANCE_IN_PROGRESS when the
member must rejoin to move on (the group epoch passed it, it must revoke, or partitions it waits
for were released). A classic member told to rejoin must do so, and sync after its JoinGroup,
within its rebalance timeout, else it is fenced.

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

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from kgroups.coordinator.api import (
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    MemberLeaveResult,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroups.coordinator.consumer_api import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
)
from kgroups.coordinator.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    current_assignment_value,
    member_metadata_value,
    metadata_hash,
    to_list,
)
from kgroups.coordinator.consumer_membership import ConsumerGroupHandlers, HeartbeatError
from kgroups.coordinator.core import ignore_failure, ignore_success
from kgroups.coordinator.effects import RebalanceCause, RemovalReason
from kgroups.coordinator.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState, Member
from kgroups.coordinator.membership import MembershipHandlers
from kgroups.coordinator.persistence import (
    consumer_group_tombstones,
    group_record,
    group_tombstone,
    subscribed_topics,
)
from kgroups.coordinator.timer_keys import (
    consumer_join_timer,
    consumer_session_timer,
    consumer_sync_timer,
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


class MigrationHandlers(MembershipHandlers, ConsumerGroupHandlers):
    """Classic requests to consumer groups, and the conversions both ways (module docstring)."""

    # -- upgrade ------------------------------------------------------------------------------

    def _consumer_join_or_heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, records: list[OffsetsRecord], *rest: Any
    ) -> ConsumerGroupHeartbeatResponse:
        group = self._groups.get(req.group_id)
        if not (req.member_epoch == 0 and group is not None and group.consumer is None
                and group.state not in (GroupState.EMPTY, GroupState.DEAD)):
            return super()._consumer_join_or_heartbeat(req, records, *rest)
        before = _ClassicState.of(group)
        self._upgrade(group, records)
        try:
            return super()._consumer_join_or_heartbeat(req, records, *rest)
        except HeartbeatError:
            # The joining member is refused (group full, instance id held...): as in Kafka,
            # whose conversion records go only with a heartbeat that succeeds, the group
            # stays classic (parked requests were told to rejoin all the same).
            self._revert_upgrade(group, before, records)
            raise

    def _static_member(
        self, group: ClassicGroup, consumer: ConsumerGroup, member_id: str,
        req: ConsumerGroupHeartbeatRequest, owned: Assignment | None,
        records: list[OffsetsRecord],
    ) -> ConsumerMember:
        """As Kafka 4.3.1 does, a consumer-protocol member joining with the instance id of a
        classic static member takes its place at once (a classic member never says it left
        for a while with epoch -2), its partitions and epoch included."""
        holder_id = consumer.static_members.get(req.instance_id or "")
        holder = consumer.members.get(holder_id) if holder_id is not None else None
        if (req.member_epoch == 0 and holder is not None and holder.classic is not None
                and holder.member_id != member_id):
            return self._replace_static(group, consumer, holder, member_id, records)
        return super()._static_member(group, consumer, member_id, req, owned, records)

    def _revert_upgrade(
        self, group: ClassicGroup, before: _ClassicState, records: list[OffsetsRecord]
    ) -> None:
        consumer = group.consumer
        assert consumer is not None
        for member_id in consumer.members:
            self._cancel_consumer_timers(group, member_id)
        records.clear()
        group.consumer = None
        old_state = group.state
        before.restore(group)
        self._event(group, old_state)
        for member in group.members.values():
            self._refresh_session(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._timers.schedule(join_timer(group.group_id),
                                  self._now + group.max_rebalance_timeout_ms())
        elif group.state is GroupState.COMPLETING_REBALANCE:
            self._timers.schedule(sync_timer(group.group_id),
                                  self._now + group.max_rebalance_timeout_ms())

    def _upgrade(self, group: ClassicGroup, records: list[OffsetsRecord]) -> None:
        """Kafka's validateOnlineUpgrade and convertToConsumerGroup (module docstring)."""
        gid = group.group_id
        prefix = f"Cannot upgrade classic group {gid} to consumer group because"
        if not self.config.online_upgrade_enabled:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"{prefix} online upgrade is disabled.")
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"{prefix} the group does not use the consumer embedded protocol.")
        if len(group.members) > self.config.group_consumer_max_size:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"{prefix} the group size exceeds the consumer group maximum size.")
        try:
            converted = [self._converted(group, m) for m in group.members.values()]
        except RecordDecodeError as exc:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"{prefix} the embedded consumer protocol is malformed.") from exc
        except _CustomAssignorError as exc:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"{prefix} an unsupported custom assignor is in use. Please refer to the "
                "documentation or switch to a default assignor before re-attempting the "
                "upgrade.") from exc
        epoch = group.generation_id
        self._end_classic_state(group)
        records.append(group_tombstone(gid))  # the classic state was just cleared in memory
        for member in converted:
            self._record(group, records, ConsumerGroupMemberMetadataKey(gid, member.member_id),
                         member_metadata_value(member))
        topics = {t for member in converted for t in member.subscribed_topic_names}
        self._record(group, records, ConsumerGroupMetadataKey(gid),
                     ConsumerGroupMetadataValue(epoch, metadata_hash(topics, self._topics)))
        for member in converted:
            self._record(group, records,
                         ConsumerGroupTargetAssignmentMemberKey(gid, member.member_id),
                         ConsumerGroupTargetAssignmentMemberValue(to_list(member.assigned)))
        self._record(group, records, ConsumerGroupTargetAssignmentMetadataKey(gid),
                     ConsumerGroupTargetAssignmentMetadataValue(epoch, self._now))
        for member in converted:
            self._record(group, records,
                         ConsumerGroupCurrentMemberAssignmentKey(gid, member.member_id),
                         current_assignment_value(member))
            classic = member.classic
            assert classic is not None
            self._timers.schedule(consumer_session_timer(gid, member.member_id),
                                  self._now + classic.session_timeout_ms)

    def _converted(self, group: ClassicGroup, member: Member) -> ConsumerMember:
        """A classic member as Kafka's ConsumerGroup.fromClassicGroup makes it a consumer-group
        member: Stable at the generation, owning (and targeted with) its classic assignment."""
        assert group.protocol_name is not None
        subscription = decode_subscription(member.metadata_for(group.protocol_name))
        assigned: Assignment = {}
        if member.assignment:
            assignment = decode_assignment(member.assignment)
            if assignment.user_data:
                raise _CustomAssignorError(member.member_id)
            assigned = self._ids_of(assignment.assigned_partitions)
        generation = group.generation_id
        return ConsumerMember(
            member.member_id, instance_id=member.group_instance_id, rack_id=subscription.rack_id,
            client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=subscription.topics,
            rebalance_timeout_ms=member.rebalance_timeout_ms, member_epoch=generation,
            previous_member_epoch=generation, state=MemberState.STABLE, assigned=assigned,
            classic=ClassicMemberMetadata(member.session_timeout_ms, member.protocols),
        )

    def _end_classic_state(self, group: ClassicGroup) -> None:
        """The classic side of a group that becomes a consumer group: parked JoinGroup and
        SyncGroup requests are told to rejoin (Kafka completes them with REBALANCE_IN_PROGRESS),
        classic timers stop, and the group holds no classic member any more."""
        gid = group.group_id
        for member in group.members.values():
            if member.join_request is not None:
                self._reply(member.join_request, JoinGroupResponse(
                    ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
                group.set_join_request(member, None)
            if member.sync_request is not None:
                self._reply(member.sync_request,
                            SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS))
                member.sync_request = None
            self._cancel_session(group, member.member_id)
        for pending in group.pending_members:
            self._timers.cancel(pending_member_timer(gid, pending))
        self._timers.cancel(join_timer(gid))
        self._timers.cancel(sync_timer(gid))
        group.clear_members()
        group.protocol_type = None
        group.protocol_name = None
        group.generation_id = 0
        old_state = group.state
        group.previous_state = old_state
        group.state = GroupState.EMPTY  # what a consumer group's classic side says (replay too)
        group.state_timestamp = self._now
        self._event(group, old_state)

    # -- downgrade ----------------------------------------------------------------------------

    def _fence(
        self, group: ClassicGroup, member: ConsumerMember, records: list[OffsetsRecord],
        reason: RemovalReason,
    ) -> None:
        if self._downgrade_allowed(group, [member]):
            self._downgrade(group, [member], records, reason)
        else:
            super()._fence(group, member, records, reason)
            self._cancel_classic_member_timers(group.group_id, member.member_id)

    def _downgrade_allowed(self, group: ClassicGroup, leaving: list[ConsumerMember]) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMembers: only classic members would stay."""
        consumer = group.consumer
        assert consumer is not None
        leaving_ids = {m.member_id for m in leaving}
        staying = [m for m in consumer.members.values() if m.member_id not in leaving_ids]
        return (bool(staying) and all(m.classic is not None for m in staying)
                and self.config.online_downgrade_enabled
                and len(staying) <= self.config.group_max_size)

    def _downgrade(
        self, group: ClassicGroup, leaving: list[ConsumerMember], records: list[OffsetsRecord],
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
            self._cancel_consumer_timers(group, member.member_id)
            self._cancel_classic_member_timers(gid, member.member_id)
        ids = list(consumer.members)
        for key_type in (ConsumerGroupCurrentMemberAssignmentKey,
                         ConsumerGroupTargetAssignmentMemberKey):
            for member_id in ids:
                self._record(group, records, key_type(gid, member_id), None)
        self._record(group, records, ConsumerGroupTargetAssignmentMetadataKey(gid), None)
        for member_id in ids:
            self._record(group, records, ConsumerGroupMemberMetadataKey(gid, member_id), None)
        for regex in sorted(consumer.resolved_regexes):
            self._record(group, records, ConsumerGroupRegularExpressionKey(gid, regex), None)
        self._record(group, records, ConsumerGroupMetadataKey(gid), None)
        for member in leaving:
            self._member_removed(group, member.member_id, member.instance_id, reason)
        classic_record = self._classic_record(group, staying, targets, epoch)
        self._apply(group, [classic_record])
        records.append(classic_record)
        for member in staying:  # the record keeps only the selected protocol's metadata
            classic = member.classic
            assert classic is not None
            group.set_protocols(group.members[member.member_id], classic.supported_protocols)
        group.subscribed_topics = subscribed_topics(group)
        old_state = group.state
        group.previous_state = old_state
        group.state = GroupState.STABLE  # as a replay of the record finds it
        self._event(group, old_state)
        for classic_member in group.members.values():
            self._refresh_session(group, classic_member)
        if rebalance:
            self._prepare_rebalance(
                group, RebalanceCause.MEMBER_LEFT,
                f"Downgrade group {gid} from consumer to classic for member leaving.")

    def _classic_record(
        self, group: ClassicGroup, staying: list[ConsumerMember],
        targets: dict[str, Assignment], epoch: int,
    ) -> OffsetsRecord:
        """The GroupMetadata record of the classic group the staying members form: generation
        = group epoch, the protocol their votes select, the first of them leading, each one's
        target assignment encoded in the version of its selected protocol's subscription."""
        roster = ClassicGroup(group.group_id, group.offsets_partition, GroupState.STABLE,
                              self._now, protocol_type=CONSUMER_PROTOCOL_TYPE,
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
            m.member_id: self._classic_assignment(targets[m.member_id],
                                                  m.metadata_for(protocol))
            for m in roster.members.values()
        }
        return group_record(roster, assignments)

    # -- classic requests to a consumer group -------------------------------------------------

    def _join(self, req: JoinGroupRequest) -> None:
        error = self._membership_status_error(req.group_id)
        if error is None and not (
            self.config.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            error = ErrorCode.INVALID_SESSION_TIMEOUT
        group = self._groups.get(req.group_id)
        if error is not None or group is None or group.consumer is None:
            super()._join(req)  # a classic group, or an error the classic path answers alike
            return
        if not group.consumer.members:
            # An empty consumer group becomes a classic one (Kafka's maybeDeleteEmptyConsumerGroup).
            tombstones = consumer_group_tombstones(group)
            self._apply(group, tombstones)
            self._write_applied(group.offsets_partition, tombstones, ignore_success,
                                ignore_failure)
            super()._join(req)
            return
        if self.config.group_consumer_migration_policy == "disabled":
            # Kafka 4.3.1 keeps classic members out of a live consumer group then.
            self._reply(req.request_id, JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                                          member_id=UNKNOWN_MEMBER_ID))
            return
        records: list[OffsetsRecord] = []
        try:
            response = self._classic_join_to_consumer(group, group.consumer, req, records)
        except HeartbeatError as exc:
            response = JoinGroupResponse(exc.error, member_id=req.member_id)
        if not records:
            self._reply(req.request_id, response)
            return

        def joined() -> None:
            self._after_classic_join(group, response, req)
            self._reply(req.request_id, response)

        self._write_applied(
            group.offsets_partition, records, joined,
            lambda error: self._reply(req.request_id,
                                      JoinGroupResponse(error, member_id=req.member_id)))

    def _classic_join_to_consumer(
        self, group: ClassicGroup, consumer: ConsumerGroup, req: JoinGroupRequest,
        records: list[OffsetsRecord],
    ) -> JoinGroupResponse:
        """Kafka's classicGroupJoinToConsumerGroup: one reconciliation step, answered at once."""
        unknown = req.member_id == UNKNOWN_MEMBER_ID
        member_id = self._new_uuid() if unknown else req.member_id
        limit = self.config.group_consumer_max_size
        if len(consumer.members) >= limit and member_id not in consumer.members:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if not _supports_classic_protocols(consumer, req.protocol_type,
                                           [name for name, _ in req.protocols]):
            raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if req.group_instance_id is None and unknown and req.version >= 4:
            return JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        holder_id = consumer.static_members.get(req.group_instance_id or "", "")
        replaced = consumer.members.get(holder_id)
        member = self._joining_classic_member(group, consumer, member_id, req, unknown, records)
        if replaced is not None and replaced.member_id == member.member_id:
            replaced = None  # the static member rejoining, not a replacement
        try:
            subscription = decode_subscription(req.protocols[0][1])
        except RecordDecodeError as exc:
            raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL) from exc
        updated = ConsumerMember(
            member.member_id,
            instance_id=req.group_instance_id or member.instance_id,
            rack_id=subscription.rack_id or member.rack_id,
            client_id=req.client_id, client_host=req.client_host,
            subscribed_topic_names=subscription.topics,
            subscribed_topic_regex=member.subscribed_topic_regex,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=member.server_assignor,
            classic=ClassicMemberMetadata(req.session_timeout_ms, req.protocols),
        )
        is_new = member.member_id not in consumer.members
        # Compared before the record is applied (applying it updates `member` in place).
        bump = is_new or updated.subscribed_topic_names != member.subscribed_topic_names
        if is_new or member_metadata_value(updated) != member_metadata_value(member):
            self._record(group, records, ConsumerGroupMemberMetadataKey(
                group.group_id, member.member_id), member_metadata_value(updated))
        new_hash = metadata_hash(consumer.subscribed_topics(), self._topics)
        # One step for a subscription or metadata change, as Kafka's updateSubscriptionMetadata.
        steps = int(bump or new_hash != consumer.metadata_hash)
        if steps:
            self._record(group, records, ConsumerGroupMetadataKey(group.group_id),
                         ConsumerGroupMetadataValue(consumer.group_epoch + steps, new_hash))
        if self._target_due(consumer):
            self._update_target(group, consumer, records)
        owned = self._ids_of(subscription.owned_partitions)
        self._maybe_reconcile(group, consumer, consumer.members[member.member_id], owned,
                              records)
        joined = consumer.members[member.member_id]
        classic = joined.classic
        assert classic is not None
        response = JoinGroupResponse(
            ErrorCode.NONE, member_id=joined.member_id, generation_id=joined.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=classic.supported_protocols[0][0])
        if replaced is not None and replaced.classic is None and \
                self._downgrade_allowed(group, []):
            # Kafka's validateOnlineDowngradeWithReplacedMember: a classic static member took
            # the place of the last consumer-protocol one.
            self._downgrade(group, [], records, RemovalReason.FENCED_BY_STATIC_REPLACEMENT,
                            rebalance=set(replaced.subscribed_topic_names)
                            != set(joined.subscribed_topic_names))
        return response

    def _joining_classic_member(
        self, group: ClassicGroup, consumer: ConsumerGroup, member_id: str,
        req: JoinGroupRequest, unknown: bool, records: list[OffsetsRecord],
    ) -> ConsumerMember:
        """Kafka's getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember for a classic member:
        a member id the group does not know joins as a new member."""
        instance_id = req.group_instance_id
        if instance_id is None:
            return consumer.members.get(member_id) or ConsumerMember(member_id)
        holder_id = consumer.static_members.get(instance_id)
        holder = consumer.members.get(holder_id) if holder_id is not None else None
        if unknown:
            if holder is None:
                return consumer.members.get(member_id) or ConsumerMember(member_id)
            return self._replace_static(group, consumer, holder, member_id, records)
        if holder is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID)
        if holder.member_id != member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID)
        return holder

    def _after_classic_join(
        self, group: ClassicGroup, response: JoinGroupResponse, req: JoinGroupRequest
    ) -> None:
        """Once the join is durable: its join timeout ends, its session and the deadline of its
        SyncGroup (its rebalance timeout) start."""
        if response.error is not ErrorCode.NONE or group.consumer is None:
            return  # refused, or the join turned the group classic (its sessions restarted)
        gid, member_id = group.group_id, response.member_id
        self._timers.cancel(consumer_join_timer(gid, member_id))
        self._timers.schedule(consumer_session_timer(gid, member_id),
                              self._now + req.session_timeout_ms)
        self._timers.schedule(consumer_sync_timer(gid, member_id),
                              self._now + self._rebalance_timeout(req))

    def _sync(self, req: SyncGroupRequest) -> None:
        group = self._groups.get(req.group_id)
        if group is None or group.consumer is None:
            super()._sync(req)
            return
        error = self._membership_status_error(req.group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is None and not group.consumer.members:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        member = None
        if error is None:
            member, error = self._classic_member(group.consumer, req.member_id,
                                                 req.group_instance_id, req.generation_id)
        if error is None and member is not None:
            error = _protocol_mismatch(member, req.protocol_type, req.protocol_name)
        if error is None and member is not None and (
                group.consumer.group_epoch > member.member_epoch
                and member.state is not MemberState.UNREVOKED_PARTITIONS):
            self._arm_join_timeout(group.group_id, member)
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None or member is None:
            self._reply(req.request_id, SyncGroupResponse(error or ErrorCode.UNKNOWN_MEMBER_ID))
            return
        classic = member.classic
        assert classic is not None
        gid = group.group_id
        self._timers.cancel(consumer_sync_timer(gid, member.member_id))
        self._timers.schedule(consumer_session_timer(gid, member.member_id),
                              self._now + classic.session_timeout_ms)
        self._reply(req.request_id, SyncGroupResponse(
            ErrorCode.NONE,
            assignment=self._classic_assignment(member.assigned,
                                                classic.supported_protocols[0][1]),
            protocol_type=req.protocol_type, protocol_name=req.protocol_name))

    def _heartbeat(self, req: HeartbeatRequest) -> None:
        group = self._groups.get(req.group_id)
        if group is None or group.consumer is None:
            super()._heartbeat(req)
            return
        error = self._membership_status_error(req.group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.NONE
        if error is None:
            error = self._classic_heartbeat_error(group, group.consumer, req)
        self._reply(req.request_id, HeartbeatResponse(error))

    def _classic_heartbeat_error(
        self, group: ClassicGroup, consumer: ConsumerGroup, req: HeartbeatRequest
    ) -> ErrorCode:
        """Kafka's classicGroupHeartbeatToConsumerGroup: the member must rejoin when the group
        epoch passed it, when it must revoke, or when partitions it waited for are free."""
        member, error = self._classic_member(consumer, req.member_id, req.group_instance_id,
                                             req.generation_id)
        if error is not None or member is None:
            return error or ErrorCode.UNKNOWN_MEMBER_ID
        classic = member.classic
        assert classic is not None
        self._timers.schedule(consumer_session_timer(group.group_id, member.member_id),
                              self._now + classic.session_timeout_ms)
        if (member.member_epoch < consumer.group_epoch
                or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and not _waits_on_unreleased(consumer, member))):
            self._arm_join_timeout(group.group_id, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _leave(self, req: LeaveGroupRequest) -> None:
        group = self._groups.get(req.group_id)
        if group is None or group.consumer is None:
            super()._leave(req)
            return
        error = self._membership_status_error(req.group_id)
        if error is not None:
            self._reply(req.request_id, LeaveGroupResponse(error))
            return
        consumer = group.consumer
        results: list[MemberLeaveResult] = []
        leaving: dict[str, ConsumerMember] = {}
        for identity in req.members:
            member, error = self._leaving_classic_member(consumer, identity)
            member_id = identity.member_id if member is None else member.member_id
            results.append(MemberLeaveResult(member_id, identity.group_instance_id, error))
            if member is not None:
                leaving[member.member_id] = member
        records: list[OffsetsRecord] = []
        if leaving:
            self._fence_classic_members(group, list(leaving.values()), records)
        top_error = results[0].error if req.version < 3 and results else ErrorCode.NONE
        response = LeaveGroupResponse(top_error, tuple(results))
        if not records:
            self._reply(req.request_id, response)
            return
        self._write_applied(group.offsets_partition, records,
                            lambda: self._reply(req.request_id, response),
                            lambda error: self._reply(req.request_id, LeaveGroupResponse(error)))

    def _leaving_classic_member(
        self, consumer: ConsumerGroup, identity: MemberIdentity
    ) -> tuple[ConsumerMember | None, ErrorCode]:
        """Kafka's checks in classicGroupLeaveToConsumerGroup, for one member of the batch (as
        Kafka 4.3 does, a consumer-protocol member may be removed this way too)."""
        instance_id = identity.group_instance_id
        if instance_id is None:
            member = consumer.members.get(identity.member_id)
        else:
            holder = consumer.static_members.get(instance_id)
            member = consumer.members.get(holder) if holder is not None else None
            if member is not None and identity.member_id not in (UNKNOWN_MEMBER_ID,
                                                                  member.member_id):
                return None, ErrorCode.FENCED_INSTANCE_ID
        if member is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        return member, ErrorCode.NONE

    def _fence_classic_members(
        self, group: ClassicGroup, members: list[ConsumerMember], records: list[OffsetsRecord]
    ) -> None:
        """Kafka's consumerGroupFenceMembers: remove them and bump the group epoch once (or
        downgrade, when only classic members would remain and the policy allows it)."""
        if self._downgrade_allowed(group, members):
            self._downgrade(group, members, records, RemovalReason.LEFT_GROUP)
            return
        consumer = group.consumer
        assert consumer is not None
        counts = consumer.subscribed_regexes()
        for member in members:
            regex = member.subscribed_topic_regex
            if regex:
                counts[regex] -= 1
                if not counts[regex] and regex in consumer.resolved_regexes:
                    self._record(group, records,
                                 ConsumerGroupRegularExpressionKey(group.group_id, regex), None)
            self._remove_member_records(group, member.member_id, records)
            self._cancel_consumer_timers(group, member.member_id)
            self._cancel_classic_member_timers(group.group_id, member.member_id)
            self._member_removed(group, member.member_id, member.instance_id,
                                 RemovalReason.LEFT_GROUP)
        new_hash = metadata_hash(consumer.subscribed_topics(), self._topics)
        self._record(group, records, ConsumerGroupMetadataKey(group.group_id),
                     ConsumerGroupMetadataValue(consumer.group_epoch + 1, new_hash))

    # -- ConsumerGroupDescribe ----------------------------------------------------------------

    def _describe_consumer(self, group_id: str) -> DescribedConsumerGroup:
        """Members that speak the classic protocol are described as such (MemberType 0); a
        group that is not (or no longer) a consumer group has no state, as Kafka says it."""
        described = super()._describe_consumer(group_id)
        if described.error is not ErrorCode.NONE:
            return replace(described, state="")
        group = self._groups.get(group_id)
        consumer = None if group is None else group.consumer
        if consumer is None or not described.members:
            return described
        return replace(described, members=tuple(
            replace(m, classic=m.member_id in consumer.members
                    and consumer.members[m.member_id].classic is not None)
            for m in described.members))

    # -- timers -------------------------------------------------------------------------------

    def _on_classic_member_timer(self, group: ClassicGroup, member_id: str, sync: bool) -> None:
        """A classic member of a consumer group did not rejoin (or sync) in time: fenced."""
        consumer = group.consumer
        member = None if consumer is None else consumer.members.get(member_id)
        if member is None:
            return
        records: list[OffsetsRecord] = []
        reason = RemovalReason.DID_NOT_SYNC if sync else RemovalReason.DID_NOT_REJOIN
        self._fence(group, member, records, reason)
        self._write_applied(group.offsets_partition, records, lambda: None, lambda _e: None)

    def _cancel_classic_member_timers(self, group_id: str, member_id: str) -> None:
        self._timers.cancel(consumer_join_timer(group_id, member_id))
        self._timers.cancel(consumer_sync_timer(group_id, member_id))

    def _arm_join_timeout(self, group_id: str, member: ConsumerMember) -> None:
        """Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent: a deadline already set stays."""
        key = consumer_join_timer(group_id, member.member_id)
        if not self._timers.is_armed(key):
            self._timers.schedule(key, self._now + max(member.rebalance_timeout_ms, 0))

    # -- shared -------------------------------------------------------------------------------

    def _classic_member(
        self, consumer: ConsumerGroup, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[ConsumerMember | None, ErrorCode | None]:
        """Kafka's validateConsumerGroupMember, throwIfMemberDoesNotUseClassicProtocol and
        throwIfGenerationIdUnmatched, in that order."""
        if instance_id is None:
            member = consumer.members.get(member_id)
        else:
            holder = consumer.static_members.get(instance_id)
            member = consumer.members.get(holder) if holder is not None else None
            if member is not None and member.member_id != member_id:
                return None, ErrorCode.FENCED_INSTANCE_ID
        if member is None or member.classic is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        if generation != member.member_epoch:
            return None, ErrorCode.ILLEGAL_GENERATION
        return member, None

    def _ids_of(self, partitions: Iterable[TopicPartitions]) -> Assignment:
        """ConsumerProtocol topic names -> ids (topics that do not exist are left out)."""
        result: dict[uuid.UUID, frozenset[int]] = {}
        for entry in partitions:
            info = self._topics.get(entry.topic)
            if info is not None and entry.partitions:
                result[info.topic_id] = result.get(info.topic_id, frozenset()) | frozenset(
                    entry.partitions)
        return result

    def _classic_assignment(self, assigned: Assignment, subscription: bytes) -> bytes:
        """`assigned` as a ConsumerProtocol assignment in the version of the member's
        subscription (capped at the highest version there is), without user data."""
        version = min(int.from_bytes(subscription[:2], "big", signed=True), 3) \
            if len(subscription) >= 2 else 0
        names = self._topic_names
        return encode_assignment(ConsumerAssignment(tuple(
            TopicPartitions(names[topic_id], tuple(sorted(parts)))
            for topic_id, parts in assigned.items() if topic_id in names and parts
        ), None, max(version, 0)))


@dataclass(frozen=True, slots=True)
class _ClassicState:
    """What an upgrade clears of a classic group, to put back if the joining member is refused
    (pending member ids are not kept: their clients rejoin without them)."""

    members: dict[str, Member]
    static_members: dict[str, str]
    pending_sync_members: set[str]
    fields: tuple[object, ...]

    _FIELDS = ("leader_id", "protocol_type", "protocol_name", "generation_id", "state",
               "previous_state", "state_timestamp", "subscribed_topics")

    @classmethod
    def of(cls, group: ClassicGroup) -> _ClassicState:
        return cls(dict(group.members), dict(group.static_members),
                   set(group.pending_sync_members),
                   tuple(getattr(group, name) for name in cls._FIELDS))

    def restore(self, group: ClassicGroup) -> None:
        group.readmit(self.members.values())
        group.static_members.update(self.static_members)
        group.pending_sync_members.update(self.pending_sync_members)
        for name, value in zip(self._FIELDS, self.fields, strict=True):
            setattr(group, name, value)


class _CustomAssignorError(Exception):
    """A classic member's assignment carries user data: Kafka refuses to convert the group."""


def _supports_classic_protocols(
    consumer: ConsumerGroup, protocol_type: str, names: list[str]
) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: type "consumer", and a protocol every
    classic member of the group supports."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    classic = [m.classic for m in consumer.members.values() if m.classic is not None]
    return any(all(any(n == name for n, _ in c.supported_protocols) for c in classic)
               for name in names)


def _protocol_mismatch(
    member: ConsumerMember, protocol_type: str | None, protocol_name: str | None
) -> ErrorCode | None:
    """Kafka's throwIfClassicProtocolUnmatched (the name is the one its JoinGroup returned)."""
    classic = member.classic
    assert classic is not None
    if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    if protocol_name is not None and protocol_name != classic.supported_protocols[0][0]:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    return None


def _waits_on_unreleased(consumer: ConsumerGroup, member: ConsumerMember) -> bool:
    """Some partition of its target it does not hold yet is still held by another member."""
    owners = consumer.partition_owners
    for topic_id, parts in consumer.targets.get(member.member_id, {}).items():
        held = member.assigned.get(topic_id, frozenset())
        if any(p not in held and (topic_id, p) in owners for p in parts):
            return True
    return False
