"""Classic members of consumer groups, as Kafka serves them during an online migration.

Inside a consumer group, classic members keep speaking JoinGroup/SyncGroup/Heartbeat/
LeaveGroup: a JoinGroup updates the member's subscription and reconciles it one step towards
the server assignor's target (its generation is its member epoch; no leader, nobody waits for
anyone); SyncGroup hands out what it now owns; Heartbeat answers REBALANCE_IN_PROGRESS when the
member must rejoin to move on (the group epoch passed it, it must revoke, or partitions it waits
for were released). A classic member told to rejoin must do so, and sync after its JoinGroup,
within its rebalance timeout, else it is fenced. The conversions themselves are `migration`'s.
"""

from __future__ import annotations

from kgroups.coordinator.classic_groups import ClassicGroups
from kgroups.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    member_metadata_value,
    metadata_hash,
)
from kgroups.coordinator.consumer_groups import ConsumerGroups
from kgroups.coordinator.consumer_messages import (
    HeartbeatError,
)
from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.effects import RemovalReason
from kgroups.coordinator.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.messages import (
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
from kgroups.coordinator.migration import Migration
from kgroups.coordinator.timer_keys import (
    consumer_join_timer,
    consumer_session_timer,
    consumer_sync_timer,
)
from kgroups.errors import ErrorCode
from kgroups.records.classic_member import ClassicMemberMetadata
from kgroups.records.consumer_group import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
)
from kgroups.records.consumer_protocol import (
    decode_subscription,
)
from kgroups.records.wire import RecordDecodeError


class ClassicMembers:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup from classic members of consumer groups."""

    def __init__(self, ctx: ShardContext, classic: ClassicGroups, consumer: ConsumerGroups,
                 migration: Migration) -> None:
        self._ctx = ctx
        self._classic = classic
        self._consumer = consumer
        self._migration = migration

    def join(self, group: ClassicGroup, consumer: ConsumerGroup, req: JoinGroupRequest) -> None:
        """A JoinGroup the classic path's checks let through (`ClassicGroups.join_error`), to
        a consumer group: an empty one becomes classic and the classic path takes the join."""
        if not consumer.members:
            self._migration.dissolve_empty_consumer_group(group)
            self._classic.join(req)
            return
        if self._ctx.config.group_consumer_migration_policy == "disabled":
            # Kafka 4.3.1 keeps classic members out of a live consumer group then.
            self._ctx.reply(req.request_id, JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                                              member_id=UNKNOWN_MEMBER_ID))
            return
        journal = Journal()
        try:
            response = self._classic_join_to_consumer(group, consumer, req, journal)
        except HeartbeatError as exc:
            response = JoinGroupResponse(exc.error, member_id=req.member_id)
        if not journal:
            self._ctx.reply(req.request_id, response)
            return

        def joined() -> None:
            self._after_classic_join(group, response, req)
            self._ctx.reply(req.request_id, response)

        self._ctx.write(
            group.offsets_partition, journal, joined,
            lambda error: self._ctx.reply(req.request_id,
                                          JoinGroupResponse(error, member_id=req.member_id)))

    def _classic_join_to_consumer(
        self, group: ClassicGroup, consumer: ConsumerGroup, req: JoinGroupRequest,
        journal: Journal,
    ) -> JoinGroupResponse:
        """Kafka's classicGroupJoinToConsumerGroup: one reconciliation step, answered at once."""
        unknown = req.member_id == UNKNOWN_MEMBER_ID
        member_id = str(self._ctx.new_uuid()) if unknown else req.member_id
        limit = self._ctx.config.group_consumer_max_size
        if len(consumer.members) >= limit and member_id not in consumer.members:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if not _supports_classic_protocols(consumer, req.protocol_type,
                                           [name for name, _ in req.protocols]):
            raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if req.group_instance_id is None and unknown and req.version >= 4:
            return JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        holder_id = consumer.static_members.get(req.group_instance_id or "", "")
        replaced = consumer.members.get(holder_id)
        member = self._joining_classic_member(group, consumer, member_id, req, unknown, journal)
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
            self._ctx.record(group, journal, ConsumerGroupMemberMetadataKey(
                group.group_id, member.member_id), member_metadata_value(updated))
        new_hash = metadata_hash(consumer.subscribed_topics(), self._ctx.topics)
        # One step for a subscription or metadata change, as Kafka's updateSubscriptionMetadata.
        steps = int(bump or new_hash != consumer.metadata_hash)
        if steps:
            self._ctx.record(group, journal, ConsumerGroupMetadataKey(group.group_id),
                             ConsumerGroupMetadataValue(consumer.group_epoch + steps, new_hash))
        if self._consumer.target_due(consumer):
            self._consumer.update_target(group, consumer, journal)
        owned = self._migration.ids_of(subscription.owned_partitions)
        self._consumer.maybe_reconcile(group, consumer, consumer.members[member.member_id], owned,
                                       journal)
        joined = consumer.members[member.member_id]
        classic = joined.classic
        assert classic is not None
        response = JoinGroupResponse(
            ErrorCode.NONE, member_id=joined.member_id, generation_id=joined.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=classic.supported_protocols[0][0])
        if replaced is not None and replaced.classic is None and \
                self._migration.downgrade_allowed(group, []):
            # Kafka's validateOnlineDowngradeWithReplacedMember: a classic static member took
            # the place of the last consumer-protocol one.
            self._migration.downgrade(
                group, [], journal, RemovalReason.FENCED_BY_STATIC_REPLACEMENT,
                rebalance=set(replaced.subscribed_topic_names)
                != set(joined.subscribed_topic_names))
        return response

    def _joining_classic_member(
        self, group: ClassicGroup, consumer: ConsumerGroup, member_id: str,
        req: JoinGroupRequest, unknown: bool, journal: Journal,
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
            return self._consumer.replace_static(group, consumer, holder, member_id, journal)
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
        self._ctx.timers.cancel(consumer_join_timer(gid, member_id))
        self._ctx.timers.schedule(consumer_session_timer(gid, member_id),
                                  self._ctx.now + req.session_timeout_ms)
        self._ctx.timers.schedule(consumer_sync_timer(gid, member_id),
                                  self._ctx.now + self._classic.rebalance_timeout(req))

    def sync(self, group: ClassicGroup, consumer: ConsumerGroup, req: SyncGroupRequest) -> None:
        error = self._ctx.membership_status_error(req.group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is None and not consumer.members:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        member = None
        if error is None:
            member, error = self._classic_member(consumer, req.member_id,
                                                 req.group_instance_id, req.generation_id)
        if error is None and member is not None:
            error = _protocol_mismatch(member, req.protocol_type, req.protocol_name)
        if error is None and member is not None and (
                consumer.group_epoch > member.member_epoch
                and member.state is not MemberState.UNREVOKED_PARTITIONS):
            self._arm_join_timeout(group.group_id, member)
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None or member is None:
            self._ctx.reply(req.request_id, SyncGroupResponse(error or ErrorCode.UNKNOWN_MEMBER_ID))
            return
        classic = member.classic
        assert classic is not None
        gid = group.group_id
        self._ctx.timers.cancel(consumer_sync_timer(gid, member.member_id))
        self._ctx.timers.schedule(consumer_session_timer(gid, member.member_id),
                                  self._ctx.now + classic.session_timeout_ms)
        self._ctx.reply(req.request_id, SyncGroupResponse(
            ErrorCode.NONE,
            assignment=self._migration.classic_assignment(member.assigned,
                                                          classic.supported_protocols[0][1]),
            protocol_type=req.protocol_type, protocol_name=req.protocol_name))

    def heartbeat(self, group: ClassicGroup, consumer: ConsumerGroup,
                  req: HeartbeatRequest) -> None:
        error = self._ctx.membership_status_error(req.group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.NONE
        if error is None:
            error = self._classic_heartbeat_error(group, consumer, req)
        self._ctx.reply(req.request_id, HeartbeatResponse(error))

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
        self._ctx.timers.schedule(consumer_session_timer(group.group_id, member.member_id),
                                  self._ctx.now + classic.session_timeout_ms)
        if (member.member_epoch < consumer.group_epoch
                or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and not _waits_on_unreleased(consumer, member))):
            self._arm_join_timeout(group.group_id, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group: ClassicGroup, consumer: ConsumerGroup, req: LeaveGroupRequest) -> None:
        error = self._ctx.membership_status_error(req.group_id)
        if error is not None:
            self._ctx.reply(req.request_id, LeaveGroupResponse(error))
            return
        results: list[MemberLeaveResult] = []
        leaving: dict[str, ConsumerMember] = {}
        for identity in req.members:
            member, error = self._leaving_classic_member(consumer, identity)
            member_id = identity.member_id if member is None else member.member_id
            results.append(MemberLeaveResult(member_id, identity.group_instance_id, error))
            if member is not None:
                leaving[member.member_id] = member
        journal = Journal()
        if leaving:
            self._fence_classic_members(group, list(leaving.values()), journal)
        top_error = results[0].error if req.version < 3 and results else ErrorCode.NONE
        response = LeaveGroupResponse(top_error, tuple(results))
        if not journal:
            self._ctx.reply(req.request_id, response)
            return
        self._ctx.write(group.offsets_partition, journal,
                                lambda: self._ctx.reply(req.request_id, response),
                                lambda error: self._ctx.reply(req.request_id,
                                                              LeaveGroupResponse(error)))

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
        self, group: ClassicGroup, members: list[ConsumerMember], journal: Journal
    ) -> None:
        """Kafka's consumerGroupFenceMembers: remove them and bump the group epoch once (or
        downgrade, when only classic members would remain and the policy allows it)."""
        if self._migration.downgrade_allowed(group, members):
            self._migration.downgrade(group, members, journal, RemovalReason.LEFT_GROUP)
            return
        consumer = group.consumer
        assert consumer is not None
        counts = consumer.subscribed_regexes()
        for member in members:
            regex = member.subscribed_topic_regex
            if regex:
                counts[regex] -= 1
                if not counts[regex] and regex in consumer.resolved_regexes:
                    self._ctx.record(group, journal,
                                     ConsumerGroupRegularExpressionKey(group.group_id, regex), None)
            self._consumer.remove_member_records(group, member.member_id, journal)
            self._ctx.cancel_consumer_member_timers(group.group_id, member.member_id)
            self._ctx.member_removed(group, member.member_id, member.instance_id,
                                     RemovalReason.LEFT_GROUP)
        new_hash = metadata_hash(consumer.subscribed_topics(), self._ctx.topics)
        self._ctx.record(group, journal, ConsumerGroupMetadataKey(group.group_id),
                         ConsumerGroupMetadataValue(consumer.group_epoch + 1, new_hash))

    # -- timers -------------------------------------------------------------------------------

    def on_timer(self, group: ClassicGroup, member_id: str, sync: bool) -> None:
        """A classic member of a consumer group did not rejoin (or sync) in time: fenced."""
        consumer = group.consumer
        member = None if consumer is None else consumer.members.get(member_id)
        if member is None:
            return
        journal = Journal()
        reason = RemovalReason.DID_NOT_SYNC if sync else RemovalReason.DID_NOT_REJOIN
        self._consumer.fence(group, member, journal, reason)
        self._ctx.write(group.offsets_partition, journal, lambda: None, lambda _e: None)

    def _arm_join_timeout(self, group_id: str, member: ConsumerMember) -> None:
        """Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent: a deadline already set stays."""
        key = consumer_join_timer(group_id, member.member_id)
        if not self._ctx.timers.is_armed(key):
            self._ctx.timers.schedule(key, self._ctx.now + max(member.rebalance_timeout_ms, 0))

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
