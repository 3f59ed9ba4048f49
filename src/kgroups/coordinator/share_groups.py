"""ShareGroupHeartbeat and ShareGroupDescribe: KIP-932's share groups in the core.

A heartbeat follows Kafka 4.3.1's order: validate, find or create the group and member (fencing
stale epochs), update the member's subscription, bump the group epoch when a subscription, the
subscribed topics' metadata or the set of initialized share-partitions changed, recompute the
target assignment with the "simple" assignor when the group epoch is ahead of it (at most once
per group.share.assignment.interval.ms), then give the member its target at once (share groups
revoke nothing first). Subscribed partitions whose share state does not exist yet are recorded
as initializing (record type 15) and handed to the broker in the response, which initializes
them in the share coordinator and reports back (`initialized`): only then are they assignable.
Every change is a record applied through `persistence.apply_record` as it is made.
"""

from __future__ import annotations

from kgroups.assignors import share_simple
from kgroups.coordinator.consumer_group import metadata_hash, to_list
from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.effects import RemovalReason
from kgroups.coordinator.group import ClassicGroup, GroupState
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.share_group import (
    ShareGroup,
    ShareMember,
    SharePartitions,
    current_assignment_value,
    member_metadata_value,
    merged,
    without,
)
from kgroups.coordinator.share_messages import (
    DescribedShareGroup,
    DescribedShareMember,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareGroupInitializedRequest,
    ShareGroupInitializedResponse,
    ShareTopics,
)
from kgroups.coordinator.timer_keys import share_session_timer
from kgroups.errors import ErrorCode
from kgroups.records.share_group import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

LEAVE_EPOCH = -1


class ShareHeartbeatError(Exception):
    """Ends a heartbeat with an error response (no record written for it)."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


class ShareGroups:
    """The share protocol's handlers over the shard's groups (`ShardContext`)."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx

    # -- ShareGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, req: ShareGroupHeartbeatRequest) -> None:
        journal = Journal()
        try:
            self._validate(req)
            if req.member_epoch == LEAVE_EPOCH:
                response = self._leave(req, journal)
            else:
                response = self._member_heartbeat(req, journal)
        except ShareHeartbeatError as exc:
            response = ShareGroupHeartbeatResponse(exc.error, exc.message)
        self._ctx.reply_when_written(self._ctx.partition_of(req.group_id), journal,
                                     req.request_id, response, ShareGroupHeartbeatResponse)

    def _validate(self, req: ShareGroupHeartbeatRequest) -> None:
        """Kafka's request checks, in Kafka's order and with its messages (an empty member id
        is refused before the coordinator, without a message)."""
        if not req.member_id:
            raise ShareHeartbeatError(ErrorCode.INVALID_REQUEST)
        if not req.group_id:
            raise ShareHeartbeatError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if req.rack_id == "":
            raise ShareHeartbeatError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        if req.member_epoch == 0:
            if not req.subscribed_topic_names:
                raise ShareHeartbeatError(ErrorCode.INVALID_REQUEST,
                                          "SubscribedTopicNames must be set in first request.")
        elif req.member_epoch < LEAVE_EPOCH:
            raise ShareHeartbeatError(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
        error = self._ctx.ownership_error(req.group_id)
        if error is not None:
            raise ShareHeartbeatError(error)

    def _share_group(self, group_id: str, create: bool, journal: Journal,
                     missing: str = "Share group {} not found.") -> tuple[ClassicGroup, ShareGroup]:
        """The group and its share part; `create`: made for a joining member. `missing`: the
        message for a group that does not exist (Kafka's words differ for a leave)."""
        group = self._ctx.groups.get(group_id)
        if group is not None and group.state is not GroupState.DEAD:
            if group.share is not None:
                return group, group.share
            if group.consumer is not None or group.streams is not None or group.members \
                    or group.offsets or not create:
                raise ShareHeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                          f"Group {group_id} is not a share group.")
            return group, self._ctx.open_share_part(group, journal)
        if not create:
            raise ShareHeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, missing.format(group_id))
        group = self._ctx.create_group(group_id, journal)
        return group, self._ctx.open_share_part(group, journal)

    def _member_heartbeat(
        self, req: ShareGroupHeartbeatRequest, journal: Journal
    ) -> ShareGroupHeartbeatResponse:
        ctx = self._ctx
        joining = req.member_epoch == 0
        group, share = self._share_group(req.group_id, joining, journal)
        member = share.members.get(req.member_id)
        limit = ctx.config.group_share_max_size
        if member is None and len(share.members) >= limit:
            raise ShareHeartbeatError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The share group has reached its maximum capacity of {limit} members.")
        if member is None:
            if not joining:
                raise ShareHeartbeatError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {req.group_id}.")
            member = ShareMember(req.member_id)
        elif not joining:
            _check_epoch(member, req.member_epoch)
        is_new = req.member_id not in share.members
        updated = ShareMember(
            member.member_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id, client_host=req.client_host,
            subscribed_topic_names=(tuple(req.subscribed_topic_names)
                                    if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names))
        bump = is_new or set(updated.subscribed_topic_names) != set(
            member.subscribed_topic_names)
        if is_new or member_metadata_value(updated) != member_metadata_value(member):
            ctx.record(group, journal, ShareGroupMemberMetadataKey(group.group_id,
                                                                   member.member_id),
                       member_metadata_value(updated))
        member = share.members[member.member_id]
        new_hash = share.metadata_hash
        if bump or share.metadata_checked != ctx.topics_version:
            new_hash = metadata_hash(share.subscribed_topics(), ctx.topics)
            share.metadata_checked = ctx.topics_version
        first_names = share.group_epoch == 0 and bool(member.subscribed_topic_names)
        # Newly initialized share-partitions move the epoch only when no target computation is
        # pending: a pending one (the assignment interval) takes them in, as Kafka 4.3.1 does.
        pending = share.group_epoch > share.assignment_epoch
        moved = bump or new_hash != share.metadata_hash \
            or (share.initialized_since_epoch and not pending)
        steps = int(moved) + int(bump and first_names)
        if steps:
            share.initialized_since_epoch = False
            ctx.record(group, journal, ShareGroupMetadataKey(group.group_id),
                       ShareGroupMetadataValue(share.group_epoch + steps, new_hash))
        if self._target_due(share):
            self._update_target(group, share, journal)
        assigned_before = member.assigned
        target = share.targets.get(member.member_id, {})
        if joining or member.member_epoch != share.assignment_epoch or member.assigned != target:
            ctx.record(group, journal, ShareGroupCurrentMemberAssignmentKey(
                group.group_id, member.member_id), current_assignment_value(ShareMember(
                    member.member_id, member_epoch=share.assignment_epoch,
                    previous_member_epoch=member.member_epoch, assigned=dict(target))))
        member = share.members[member.member_id]
        initialize = self._record_initializing(group, share, journal)
        ctx.timers.schedule(share_session_timer(group.group_id, member.member_id),
                            ctx.now + ctx.config.group_share_session_timeout_ms)
        return ShareGroupHeartbeatResponse(
            ErrorCode.NONE, None, member.member_id, member.member_epoch,
            ctx.config.group_share_heartbeat_interval_ms,
            # As Kafka 4.3.1 answers: the assignment goes to a member joining, to one whose
            # assignment changed, and to one that named its subscription (seen on the wire).
            to_list(member.assigned) if joining or req.subscribed_topic_names is not None
            or member.assigned != assigned_before else None,
            initialize, share.group_epoch)

    def _target_due(self, share: ShareGroup) -> bool:
        """As for consumer groups (KIP-1263): at most one target computation per interval."""
        if share.group_epoch <= share.assignment_epoch:
            return False
        if share.assignment_timestamp is None:
            return True
        elapsed = self._ctx.now - share.assignment_timestamp
        return not 0 <= elapsed < self._ctx.config.group_share_assignment_interval_ms

    def _update_target(self, group: ClassicGroup, share: ShareGroup, journal: Journal) -> None:
        topics = self._ctx.topics
        members = [share_simple.ShareAssignorMember(
            m.member_id, tuple(topics[t].topic_id for t in sorted(set(m.subscribed_topic_names))
                               if t in topics), share.targets.get(m.member_id, {}))
            for m in share.members.values()]
        partitions = {info.topic_id: info.partitions for info in topics.values()}
        initialized = share.initialized
        share.initialized_since_epoch = False  # this computation takes them in
        result = share_simple.assign(
            members, partitions,
            lambda t, p: t in initialized and p in initialized[t][1])
        for member_id in share.members:
            target = result.get(member_id, {})
            if member_id not in share.targets or share.targets[member_id] != target:
                self._ctx.record(group, journal,
                                 ShareGroupTargetAssignmentMemberKey(group.group_id, member_id),
                                 ShareGroupTargetAssignmentMemberValue(to_list(target)))
        self._ctx.record(group, journal, ShareGroupTargetAssignmentMetadataKey(group.group_id),
                         ShareGroupTargetAssignmentMetadataValue(share.group_epoch, self._ctx.now))

    def _record_initializing(self, group: ClassicGroup, share: ShareGroup,
                             journal: Journal) -> ShareTopics:
        """Subscribed partitions neither initialized nor initializing (nor being deleted) are
        recorded initializing; they, and those recorded initializing before this coordinator
        loaded the group (whose initialization may never have finished), are what the broker
        is to initialize."""
        wanted: SharePartitions = {}
        again: SharePartitions = {}
        for name in sorted(share.subscribed_topics()):
            info = self._ctx.topics.get(name)
            if info is None or info.topic_id in share.deleting:
                continue
            initializing = share.initializing.get(info.topic_id, ("", frozenset()))[1]
            known = share.initialized.get(info.topic_id, ("", frozenset()))[1] | initializing
            missing = frozenset(range(info.partitions)) - known
            if missing:
                wanted[info.topic_id] = (name, missing)
            stale = frozenset(p for p in initializing
                              if (info.topic_id, p) not in share.requested)
            if stale:
                again[info.topic_id] = (name, stale)
        if wanted:
            self._ctx.record(group, journal, ShareGroupStatePartitionMetadataKey(group.group_id),
                             share.state_metadata_value(merged(share.initializing, wanted),
                                                        share.initialized, share.deleting))
        asked = merged(again, wanted)
        share.requested.update((t, p) for t, (_, ps) in asked.items() for p in ps)
        return tuple((t, name, tuple(sorted(ps))) for t, (name, ps) in asked.items())

    # -- initialization results ---------------------------------------------------------------

    def initialized(self, req: ShareGroupInitializedRequest) -> None:
        """The broker's report on share-partitions it initialized (or failed to): they move
        from initializing to initialized (or are dropped from initializing, to be asked for
        again by a later heartbeat)."""
        group = self._ctx.groups.get(req.group_id)
        share = None if group is None else group.share
        if group is None or share is None:
            self._ctx.reply(req.request_id, ShareGroupInitializedResponse(
                ErrorCode.GROUP_ID_NOT_FOUND))
            return
        done: SharePartitions = {t: (name, frozenset(ps)) for t, name, ps in req.topics}
        initialized = share.initialized
        if req.error == ErrorCode.NONE:
            initialized = merged(initialized, done)
        journal = Journal()
        self._ctx.record(group, journal, ShareGroupStatePartitionMetadataKey(group.group_id),
                         share.state_metadata_value(without(share.initializing, done),
                                                    initialized, share.deleting))
        self._ctx.reply_when_written(group.offsets_partition, journal, req.request_id,
                                     ShareGroupInitializedResponse(ErrorCode.NONE),
                                     ShareGroupInitializedResponse)

    # -- leaving and fencing ------------------------------------------------------------------

    def _leave(self, req: ShareGroupHeartbeatRequest,
               journal: Journal) -> ShareGroupHeartbeatResponse:
        group, share = self._share_group(req.group_id, False, journal, "Group {} not found.")
        member = share.members.get(req.member_id)
        if member is None:
            raise ShareHeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {req.group_id}.")
        self.fence(group, share, member.member_id, journal, RemovalReason.LEFT_GROUP)
        return ShareGroupHeartbeatResponse(ErrorCode.NONE, None, member.member_id, LEAVE_EPOCH)

    def fence(self, group: ClassicGroup, share: ShareGroup, member_id: str, journal: Journal,
              reason: RemovalReason) -> None:
        """Remove the member's records and bump the group epoch (Kafka's order)."""
        for key in (ShareGroupCurrentMemberAssignmentKey(group.group_id, member_id),
                    ShareGroupTargetAssignmentMemberKey(group.group_id, member_id),
                    ShareGroupMemberMetadataKey(group.group_id, member_id)):
            self._ctx.record(group, journal, key, None)
        self._ctx.timers.cancel(share_session_timer(group.group_id, member_id))
        new_hash = metadata_hash(share.subscribed_topics(), self._ctx.topics)
        self._ctx.record(group, journal, ShareGroupMetadataKey(group.group_id),
                         ShareGroupMetadataValue(share.group_epoch + 1, new_hash))
        self._ctx.member_removed(group, member_id, None, reason)

    def on_session_timer(self, group: ClassicGroup, member_id: str) -> None:
        """A member missed its session (group.share.session.timeout.ms): it is removed."""
        share = group.share
        if share is None or member_id not in share.members:
            return
        journal = Journal()
        self.fence(group, share, member_id, journal, RemovalReason.SESSION_TIMEOUT)
        self._ctx.write(group.offsets_partition, journal, lambda: None, lambda _e: None)

    # -- ShareGroupDescribe -------------------------------------------------------------------

    def describe(self, req: ShareGroupDescribeRequest) -> None:
        """Invalid (empty) group ids are answered first, then the others in request order, as
        Kafka's coordinator service gathers its answers."""
        ordered = [g for g in req.group_ids if not g] + [g for g in req.group_ids if g]
        self._ctx.reply(req.request_id, ShareGroupDescribeResponse(
            tuple(self._describe(g) for g in ordered)))

    def _describe(self, group_id: str) -> DescribedShareGroup:
        error = self._ctx.ownership_error(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        if error is not None:
            return DescribedShareGroup(group_id, error)
        group = self._ctx.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return DescribedShareGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                       f"Group {group_id} not found.")
        share = group.share
        if share is None:
            return DescribedShareGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                       f"Group {group_id} is not a share group.")
        return DescribedShareGroup(
            group_id, ErrorCode.NONE, None, share.state(), share.group_epoch,
            share.assignment_epoch, share_simple.NAME, tuple(
                DescribedShareMember(m.member_id, m.rack_id, m.member_epoch, m.client_id,
                                     m.client_host, m.subscribed_topic_names,
                                     to_list(m.assigned))
                for m in share.members.values()))


def _check_epoch(member: ShareMember, epoch: int) -> None:
    """Kafka's fencing: an epoch ahead of the member's, or behind it unless it is the previous
    epoch, is FENCED_MEMBER_EPOCH."""
    if epoch > member.member_epoch:
        raise ShareHeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a greater member epoch ({epoch}) than the one known by "
            f"the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin.")
    if epoch < member.member_epoch and epoch != member.previous_member_epoch:
        raise ShareHeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a smaller member epoch ({epoch}) than the one known by "
            f"the group coordinator ({member.member_epoch}), and it does not match the previous "
            f"member epoch ({member.previous_member_epoch}). The member must abandon all its "
            "partitions and rejoin.")
