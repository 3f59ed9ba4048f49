"""Classic groups: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, Kafka's classic rebalance
protocol (a classic member of a consumer group is `classic_members.py`'s).

Follows Kafka's GroupCoordinator/GroupMetadataManager for classic groups rule by rule (the
reference lists them); comments name the Kafka behaviour where it is not obvious.
"""

from __future__ import annotations

import functools

from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.effects import RebalanceCause, RemovalReason
from kgroups.coordinator.group import ClassicGroup, GroupState, Member
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.messages import (
    MAX_STRING_BYTES,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    MemberLeaveResult,
    RequestId,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroups.coordinator.persistence import (
    copy_member,
    group_record,
    static_replacement_record,
    subscribed_topics,
)
from kgroups.coordinator.timer_keys import join_timer, pending_member_timer, sync_timer
from kgroups.errors import ErrorCode
from kgroups.records.schema import GroupMetadataValue

_MEMBERSHIP_STATES = (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
# The rebalance a member's removal starts, by why it was removed.
_CAUSE_OF_REMOVAL = {
    RemovalReason.LEFT_GROUP: RebalanceCause.MEMBER_LEFT,
    RemovalReason.REMOVED_BY_INSTANCE_ID: RebalanceCause.ADMIN_REMOVAL,
    RemovalReason.SESSION_TIMEOUT: RebalanceCause.SESSION_TIMEOUT,
    RemovalReason.JOIN_TIMEOUT: RebalanceCause.SESSION_TIMEOUT,
}


def _with_client_reason(detail: str, reason: str | None) -> str:
    """Kafka's wording: the coordinator's reason, then the one the client sent, if any."""
    return f"{detail}; client reason: {reason}" if reason else detail


def validate_member(
    group: ClassicGroup, member_id: str, instance_id: str | None
) -> ErrorCode | None:
    """Kafka's validateCurrentMember: the instance id, if given, must map to this member."""
    if instance_id is not None:
        current = group.static_members.get(instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if current != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        return None
    return None if member_id in group.members else ErrorCode.UNKNOWN_MEMBER_ID


class ClassicGroups:
    """The classic protocol's handlers over the shard's groups (`ShardContext`)."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx

    # -- JoinGroup ----------------------------------------------------------------------------

    def join_error(self, req: JoinGroupRequest) -> ErrorCode | None:
        """What a JoinGroup is refused for whatever its group's type (checked first)."""
        error = self._ctx.membership_status_error(req.group_id)
        if error is None and not (
            self._ctx.config.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= self._ctx.config.group_max_session_timeout_ms
        ):
            error = ErrorCode.INVALID_SESSION_TIMEOUT
        group = self._ctx.groups.get(req.group_id)
        if error is None and group is not None and group.streams is not None \
                and group.streams.members:
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # a live streams group, as Kafka
        return error

    def join(self, req: JoinGroupRequest) -> None:
        error = self.join_error(req)
        if error is not None:
            self._ctx.reply(req.request_id, JoinGroupResponse(error, member_id=req.member_id))
            return
        group = self._ctx.groups.get(req.group_id)
        if group is not None and group.share is not None:
            # A share group's id: not a classic group, whatever the member (Kafka's answer).
            self._reply_join_error(req, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID)
            return
        is_new_member = req.member_id == UNKNOWN_MEMBER_ID
        if group is None:
            if not is_new_member:
                self._reply_join_error(req, ErrorCode.UNKNOWN_MEMBER_ID)
                return
            if not (req.protocol_type and req.protocols):
                self._reply_join_error(
                    req, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID
                )
                return
            group = self._ctx.create_group(req.group_id)

        if not self._accepts_joining_member(group, req.member_id):
            # Kafka drops the member, or the pending member id, that asked to join.
            if req.member_id in group.pending_members:
                self.remove_pending_member(
                    group, req.member_id, RemovalReason.GROUP_MAX_SIZE_REACHED
                )
            else:
                self._remove_member(group, req.member_id, RemovalReason.GROUP_MAX_SIZE_REACHED)
            self._reply_join_error(req, ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)
        elif is_new_member:
            self._join_new_member(group, req)
        else:
            self._join_current_member(group, req)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _reply_join_error(
        self, req: JoinGroupRequest, error: ErrorCode, member_id: str | None = None
    ) -> None:
        member_id = req.member_id if member_id is None else member_id
        self._ctx.reply(req.request_id, JoinGroupResponse(error, member_id=member_id))

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """group.max.size: during PreparingRebalance only members that already rejoined count,
        which lets the last members to rejoin be the ones turned away."""
        limit = self._ctx.config.group_max_size
        member = group.members.get(member_id)
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            return (member is not None and member.awaiting_join) or (
                group.awaiting_join_count < limit
            )
        return member is not None or len(group.members) < limit

    def rebalance_timeout(self, req: JoinGroupRequest) -> int:
        if req.version == 0 or req.rebalance_timeout_ms < 0:
            return req.session_timeout_ms
        return req.rebalance_timeout_ms

    def _join_new_member(self, group: ClassicGroup, req: JoinGroupRequest) -> None:
        names = tuple(name for name, _ in req.protocols)
        if group.state is GroupState.DEAD:
            self._reply_join_error(req, ErrorCode.COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID)
            return
        if not group.supports_protocols(req.protocol_type, names):
            self._reply_join_error(req, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID)
            return
        instance_id = req.group_instance_id
        new_member_id = f"{instance_id or req.client_id}-{self._ctx.new_uuid()}"
        if len(new_member_id.encode()) > MAX_STRING_BYTES:
            # A client or instance id near the wire's limit leaves no room for the uuid: the
            # id could be neither answered nor written, so Kafka fails the join and keeps no
            # trace of it.
            self._reply_join_error(req, ErrorCode.UNKNOWN_SERVER_ERROR, UNKNOWN_MEMBER_ID)
            return
        if instance_id is not None:
            old_member_id = group.static_members.get(instance_id)
            if old_member_id is not None:
                self._replace_static_member(group, req, old_member_id, new_member_id)
            else:
                self._add_member_and_rebalance(group, req, new_member_id)
        elif req.version >= 4:
            # Kafka hands out the id first so a client that dies before its second JoinGroup
            # leaves no member behind: only a pending id that expires after a session timeout.
            group.pending_members.add(new_member_id)
            self._ctx.timers.schedule(
                pending_member_timer(group.group_id, new_member_id),
                self._ctx.now + req.session_timeout_ms,
            )
            self._ctx.reply(
                req.request_id,
                JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id),
            )
        else:
            self._add_member_and_rebalance(group, req, new_member_id)

    def _join_current_member(self, group: ClassicGroup, req: JoinGroupRequest) -> None:
        names = tuple(name for name, _ in req.protocols)
        if group.state is GroupState.DEAD:
            self._reply_join_error(req, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return
        if not group.supports_protocols(req.protocol_type, names):
            self._reply_join_error(req, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            return
        if req.member_id in group.pending_members:
            if req.group_instance_id is not None:
                self._reply_join_error(req, ErrorCode.UNKNOWN_MEMBER_ID)
                return
            self._ctx.timers.cancel(pending_member_timer(group.group_id, req.member_id))
            self._add_member_and_rebalance(group, req, req.member_id)
            return
        error = validate_member(group, req.member_id, req.group_instance_id)
        if error is not None:
            self._reply_join_error(req, error)
            return
        member = group.members[req.member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, req)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == req.protocols:
                # The member lost its JoinGroup response: resend this generation's.
                self._ctx.reply(req.request_id, self._join_response(group, member.member_id))
            else:
                self._update_member_and_rebalance(group, member, req)
        elif group.is_leader(member.member_id) or member.protocols != req.protocols:
            # Stable (an Empty group has no member to get this far). A leader's JoinGroup is
            # how it asks for a rebalance (e.g. after topic metadata changed).
            self._update_member_and_rebalance(group, member, req)
        else:
            response = self._join_response(group, member.member_id, include_members=False)
            self._ctx.reply(req.request_id, response)

    def _join_response(
        self,
        group: ClassicGroup,
        member_id: str,
        include_members: bool = True,
        skip_assignment: bool = False,
        leader: str | None = None,
    ) -> JoinGroupResponse:
        members: tuple[JoinGroupMember, ...] = ()
        if include_members and group.is_leader(member_id):
            members = tuple(JoinGroupMember(*entry) for entry in group.leader_member_list())
        return JoinGroupResponse(
            ErrorCode.NONE,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=(group.leader_id if leader is None else leader) or "",
            skip_assignment=skip_assignment,
            members=members,
        )

    def _park_join(self, group: ClassicGroup, member: Member, req: JoinGroupRequest) -> None:
        if member.join_request is not None and member.join_request != req.request_id:
            # A second JoinGroup supersedes the first; answer the first so it is not orphaned.
            self._ctx.reply(
                member.join_request,
                JoinGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id),
            )
        group.set_join_request(member, req.request_id)
        member.join_version = req.version

    def _add_member_and_rebalance(
        self, group: ClassicGroup, req: JoinGroupRequest, member_id: str
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=self.rebalance_timeout(req),
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            is_new=True,
        )
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.previous_state is GroupState.EMPTY
        ):
            group.new_member_added = True
        group.add(member)
        self._park_join(group, member, req)
        # A new member cannot heartbeat before its JoinGroup returns, so it is timed out by the
        # new-member join timeout instead of its session timeout.
        self._ctx.schedule_session(group, member, self._ctx.config.group_new_member_join_timeout_ms)
        detail = f"Adding new member {member_id}"
        if req.group_instance_id is not None:
            detail += f" with group instance id {req.group_instance_id}"
        self._maybe_prepare_rebalance(group, RebalanceCause.NEW_MEMBER_JOINED,
                                      _with_client_reason(detail, req.reason))

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: Member, req: JoinGroupRequest
    ) -> None:
        # In Stable, a member rejoining with the same protocols is the leader asking for a
        # rebalance because the topics' metadata changed (new partitions, a pattern match).
        if member.protocols != req.protocols:
            cause = RebalanceCause.MEMBER_METADATA_CHANGED
            detail = f"Updating metadata for member {member.member_id} during {group.state.value}"
        else:
            cause = RebalanceCause.METADATA_CHANGE
            detail = f"Leader {member.member_id} re-joining group during {group.state.value}"
        group.set_protocols(member, req.protocols)
        member.rebalance_timeout_ms = self.rebalance_timeout(req)
        member.session_timeout_ms = req.session_timeout_ms
        self._park_join(group, member, req)
        self._maybe_prepare_rebalance(group, cause, _with_client_reason(detail, req.reason))

    def _replace_static_member(
        self, group: ClassicGroup, req: JoinGroupRequest, old_id: str, new_id: str
    ) -> None:
        """A known instance id rejoining without a member id: the old incarnation is fenced.

        In a Stable group whose protocol stays, the replacement is persisted (below). Otherwise
        it is part of a rebalance, which persists nothing before the leader's SyncGroup."""
        instance_id = req.group_instance_id
        assert instance_id is not None
        old_member = group.members[old_id]
        self._ctx.answer_parked(group, old_member, ErrorCode.FENCED_INSTANCE_ID)
        self._ctx.cancel_session(group, old_id)
        self._ctx.member_removed(group, old_id, instance_id,
                                 RemovalReason.FENCED_BY_STATIC_REPLACEMENT)
        if (
            group.state is GroupState.STABLE
            and group.select_protocol({old_id: req.protocols}) == group.protocol_name
        ):
            self._persist_static_replacement(group, req, old_member, new_id)
            return
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._ctx.refresh_session(group, member)
        self._update_joined_member(group, member, req)
        detail = _with_client_reason(
            f"Static member {old_id} with instance id {instance_id} replaced by {new_id} "
            f"during {group.state.value}", req.reason)
        if group.state in _MEMBERSHIP_STATES:
            # Completing: the leader may already be assigning to the old id, only a rebalance
            # fixes that. Stable: the selected protocol would change.
            self.prepare_rebalance(group, RebalanceCause.STATIC_MEMBER_REPLACED, detail)

    def _update_joined_member(
        self, group: ClassicGroup, member: Member, req: JoinGroupRequest
    ) -> None:
        group.set_protocols(member, req.protocols)
        member.rebalance_timeout_ms = self.rebalance_timeout(req)
        member.session_timeout_ms = req.session_timeout_ms
        self._park_join(group, member, req)

    def _persist_static_replacement(
        self, group: ClassicGroup, req: JoinGroupRequest, old_member: Member, new_id: str
    ) -> None:
        """The replacement's GroupMetadata record is applied at once (the new id is live while
        the write is in flight, as in Kafka) and answered when durable. If the write fails, its
        revert puts the old member back (`journal`) and the new id gets the error, as Kafka
        reverts to the old member."""
        old_id = old_member.member_id
        old_leader = group.leader_id
        generation = group.generation_id
        replacement = copy_member(old_member)
        replacement.member_id = new_id
        replacement.protocols = req.protocols
        replacement.rebalance_timeout_ms = self.rebalance_timeout(req)
        replacement.session_timeout_ms = req.session_timeout_ms

        def still_pending() -> bool:
            """Its JoinGroup is still parked (not answered by a rebalance, removal or retry)."""
            current = group.members.get(new_id)
            return current is not None and current.join_request == req.request_id

        def persisted() -> None:
            if not still_pending():
                return
            current = group.members[new_id]
            group.set_join_request(current, None)
            if req.version >= 9:
                is_leader = group.is_leader(new_id)
                response = self._join_response(group, new_id, skip_assignment=is_leader)
            else:
                # Before v9 the old leader id is returned so a rejoining leader does not run an
                # assignment that a Stable group would ignore.
                response = self._join_response(
                    group, new_id, include_members=False, leader=old_leader
                )
            self._ctx.reply(req.request_id, response)

        def failed(error: ErrorCode) -> None:
            self._ctx.reply(
                req.request_id,
                JoinGroupResponse(
                    error,
                    member_id=UNKNOWN_MEMBER_ID,
                    generation_id=generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=old_leader or "",
                ),
            )

        journal = Journal()
        journal.on_revert.append(functools.partial(  # the protocols before the record's apply
            self._revert_static_replacement, group, old_member.protocols, old_id, new_id,
            req.request_id))
        self._ctx.record_all(group, journal,
                             [static_replacement_record(group, old_id, replacement)])
        self._ctx.write(group.offsets_partition, journal, persisted, failed, still_pending)
        member = group.members[new_id]
        # The record stores only the selected protocol's metadata; the member keeps them all.
        group.set_protocols(member, req.protocols)
        self._ctx.refresh_session(group, member)
        self._park_join(group, member, req)

    def _revert_static_replacement(
        self, group: ClassicGroup, protocols: tuple[tuple[str, bytes], ...], old_id: str,
        new_id: str, request_id: RequestId,
    ) -> None:
        """The replacement's record was undone (the old id is back in its place, from the
        group's previous GroupMetadata value): the new id leaves as STATIC_REPLACEMENT_REVERTED
        without a parked JoinGroup (the write's failure answers it), and the old member gets
        back every protocol it offered and a running session."""
        member = group.members.get(old_id)
        if member is None:
            return  # the group moved on since: nothing of the replacement remains
        self._ctx.cancel_session(group, new_id)
        self._ctx.member_removed(group, new_id, member.group_instance_id,
                                 RemovalReason.STATIC_REPLACEMENT_REVERTED)
        if member.join_request == request_id:
            group.set_join_request(member, None)
        group.set_protocols(member, protocols)
        self._ctx.refresh_session(group, member)

    # -- the join phase -----------------------------------------------------------------------

    def _maybe_prepare_rebalance(
        self, group: ClassicGroup, cause: RebalanceCause, detail: str
    ) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self.prepare_rebalance(group, cause, detail)

    def prepare_rebalance(self, group: ClassicGroup, cause: RebalanceCause, detail: str) -> None:
        self._ctx.note_rebalance(group, cause, detail)
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._ctx.timers.cancel(sync_timer(group.group_id))
        if group.state is GroupState.EMPTY:
            # Kafka delays the first rebalance of an empty group so that consumers starting
            # together land in one generation instead of one rebalance each.
            delay = self._ctx.config.group_initial_rebalance_delay_ms
            group.initial_delay_ms = delay
            group.initial_delay_remaining_ms = max(group.max_rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            self._ctx.timers.schedule(join_timer(group.group_id), self._ctx.now + delay)
        else:
            group.initial_delay_ms = None
            group.initial_delay_remaining_ms = None
            self._ctx.timers.schedule(
                join_timer(group.group_id), self._ctx.now + group.max_rebalance_timeout_ms()
            )
        self._ctx.transition(group, GroupState.PREPARING_REBALANCE)
        self._try_complete_join(group)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        """Complete the join phase early when everyone is in (never during the initial delay)."""
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.initial_delay_ms is None
            and group.has_all_members_joined()
        ):
            self._ctx.timers.cancel(join_timer(group.group_id))
            self._complete_join(group)

    def on_join_timer(self, group: ClassicGroup) -> None:
        """Only armed while PreparingRebalance: leaving that state goes through _complete_join,
        which runs from this timer or cancels it."""
        remaining = group.initial_delay_remaining_ms
        delay = group.initial_delay_ms
        if remaining is not None and delay is not None and group.new_member_added and remaining:
            group.new_member_added = False
            group.initial_delay_ms = min(
                self._ctx.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = max(remaining - delay, 0)
            self._ctx.timers.schedule(join_timer(group.group_id),
                                      self._ctx.now + group.initial_delay_ms)
            return
        self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        group.initial_delay_ms = None
        group.initial_delay_remaining_ms = None
        for member in list(group.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                self._remove_member(group, member.member_id, RemovalReason.DID_NOT_REJOIN)
        if group.members and not self._elect_joined_leader(group):
            # Nobody rejoined (only static members remain): wait another rebalance timeout for
            # their sessions to expire.
            self._ctx.timers.schedule(
                join_timer(group.group_id), self._ctx.now + group.max_rebalance_timeout_ms()
            )
            return
        group.generation_id += 1
        group.pending_sync_members.clear()
        if not group.members:
            group.protocol_name = None
            group.subscribed_topics = subscribed_topics(group)
            self._ctx.transition(group, GroupState.EMPTY)
            # Persisted so a restarted coordinator knows since when the group is empty (offset
            # expiry counts from then); Kafka does not revert anything if this write fails.
            self._ctx.write_tolerated(group.offsets_partition, [group_record(group, {})])
            return
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = subscribed_topics(group)
        self._ctx.transition(group, GroupState.COMPLETING_REBALANCE)
        for member in group.members.values():
            if member.join_request is not None:
                self._ctx.reply(member.join_request, self._join_response(group, member.member_id))
                group.set_join_request(member, None)
            self._ctx.refresh_session(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        deadline = self._ctx.now + group.max_rebalance_timeout_ms()
        self._ctx.timers.schedule(sync_timer(group.group_id), deadline)

    def _elect_joined_leader(self, group: ClassicGroup) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        joined = next((m for m in group.members.values() if m.awaiting_join), None)
        if joined is None:
            return False
        group.leader_id = joined.member_id
        return True

    def on_sync_timer(self, group: ClassicGroup) -> None:
        """Members that got their JoinGroup answer but never sent SyncGroup are dropped."""
        if group.state not in _MEMBERSHIP_STATES or not group.pending_sync_members:
            return
        missing = sorted(group.pending_sync_members)
        for member_id in missing:
            self._remove_member(group, member_id, RemovalReason.DID_NOT_SYNC)
        self.prepare_rebalance(
            group, RebalanceCause.REBALANCE_TIMEOUT,
            f"Removing {', '.join(missing)} on pending sync request expiration")

    # -- SyncGroup ----------------------------------------------------------------------------

    def sync(self, req: SyncGroupRequest) -> None:
        error = self._ctx.membership_status_error(req.group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance state was lost with the old coordinator; old clients do not know
            # COORDINATOR_LOAD_IN_PROGRESS here, and rejoining is what they must do anyway.
            error = ErrorCode.REBALANCE_IN_PROGRESS
        group = self._ctx.groups.get(req.group_id)
        if error is None:
            error = self._validate_sync(group, req)
        if error is not None:
            self._ctx.reply(req.request_id, SyncGroupResponse(error))
            return
        assert group is not None
        member = group.members[req.member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            self._ctx.reply(req.request_id, SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.state is GroupState.STABLE:
            group.pending_sync_members.discard(member.member_id)
            self._ctx.reply(req.request_id, self._sync_response(group, member))
            self._ctx.refresh_session(group, member)
        else:
            if member.sync_request is not None:
                self._ctx.reply(member.sync_request,
                                SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_request = req.request_id
            group.pending_sync_members.discard(member.member_id)
            if group.is_leader(member.member_id):
                self._store_assignment(group, dict(req.assignments))

    def _validate_generation_member(
        self, group: ClassicGroup | None, member_id: str, instance_id: str | None, generation: int,
    ) -> ErrorCode | None:
        """The checks SyncGroup and Heartbeat share, in Kafka's order: the group exists and is
        not Dead, the member (and its instance id) is known, and it speaks of this generation."""
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = validate_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return None

    def _validate_sync(self, group: ClassicGroup | None, req: SyncGroupRequest) -> ErrorCode | None:
        error = self._validate_generation_member(
            group, req.member_id, req.group_instance_id, req.generation_id)
        if error is not None:
            return error
        assert group is not None  # a missing group failed validation above
        if req.protocol_type is not None and req.protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if req.protocol_name is not None and req.protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _sync_response(self, group: ClassicGroup, member: Member) -> SyncGroupResponse:
        return SyncGroupResponse(
            ErrorCode.NONE,
            assignment=member.assignment,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
        )

    def _store_assignment(self, group: ClassicGroup, assignments: dict[str, bytes]) -> None:
        """The leader's assignment is persisted first; the group goes Stable only once durable."""
        full = {member_id: assignments.get(member_id, b"") for member_id in group.members}
        generation = group.generation_id

        def still_current() -> bool:
            return (
                self._ctx.groups.get(group.group_id) is group
                and group.state is GroupState.COMPLETING_REBALANCE
                and group.generation_id == generation
            )

        def persisted() -> None:
            if not still_current():
                if self._ctx.groups.get(group.group_id) is group:
                    # Memory moved on (a new rebalance, an upgrade), but the log holds the
                    # record now: it is what a revert of a later write goes back to.
                    group.stored_metadata = value
                return
            # The assignments came in with the record (applied just before).
            self._propagate_assignment(group, ErrorCode.NONE)
            self._ctx.transition(group, GroupState.STABLE)

        def failed(error: ErrorCode) -> None:
            if not still_current():
                return
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(
                group, RebalanceCause.ASSIGNMENT_WRITE_FAILED,
                f"Error {error.name} when storing group assignment during SyncGroup")

        record = group_record(group, full)
        assert isinstance(record.value, GroupMetadataValue)
        value: GroupMetadataValue = record.value
        self._ctx.write_when_durable(
            group.offsets_partition,
            [record],
            lambda: group if still_current() else None,
            persisted,
            failed,
        )

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.sync_request is None:
                continue
            if error is ErrorCode.NONE:
                response = self._sync_response(group, member)
            else:
                response = SyncGroupResponse(error)
            self._ctx.reply(member.sync_request, response)
            member.sync_request = None
            # Its session was not counting while it waited; it starts again now.
            self._ctx.refresh_session(group, member)

    # -- Heartbeat ----------------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest) -> None:
        error = self._ctx.membership_status_error(req.group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.NONE  # Kafka answers blindly while loading; the next one will tell.
        if error is None:
            error = self._heartbeat_error(req)
        self._ctx.reply(req.request_id, HeartbeatResponse(error))

    def _heartbeat_error(self, req: HeartbeatRequest) -> ErrorCode:
        group = self._ctx.groups.get(req.group_id)
        error = self._validate_generation_member(
            group, req.member_id, req.group_instance_id, req.generation_id)
        if error is not None:
            return error
        assert group is not None  # a missing group failed validation above
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._ctx.refresh_session(group, group.members[req.member_id])
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- LeaveGroup ---------------------------------------------------------------------------

    def leave(self, req: LeaveGroupRequest) -> None:
        error = self._ctx.membership_status_error(req.group_id)
        if error is not None:
            self._ctx.reply(req.request_id, LeaveGroupResponse(error))
            return
        group = self._ctx.groups.get(req.group_id)
        if group is not None and group.state is GroupState.DEAD:
            self._ctx.reply(req.request_id, LeaveGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        results = tuple(
            MemberLeaveResult(
                leaving.member_id,
                leaving.group_instance_id,
                self._leave_one(group, leaving),
            )
            for leaving in req.members
        )
        top_error = ErrorCode.NONE
        if req.version < 3 and results:
            top_error = results[0].error
        self._ctx.reply(req.request_id, LeaveGroupResponse(top_error, results))

    def _leave_one(self, group: ClassicGroup | None, leaving: MemberIdentity) -> ErrorCode:
        member_id, instance_id = leaving.member_id, leaving.group_instance_id
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_id == UNKNOWN_MEMBER_ID:
            # Removal by instance id (the admin client's removeMembersFromConsumerGroup).
            current = group.static_members.get(instance_id or "")
            if instance_id is None or current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_member_and_update(group, current, RemovalReason.REMOVED_BY_INSTANCE_ID,
                                           leaving.reason)
            return ErrorCode.NONE
        if member_id in group.pending_members:
            self.remove_pending_member(group, member_id, RemovalReason.LEFT_GROUP)
            # Kafka counts a pending member's leave like any other: a Stable or
            # CompletingRebalance group rebalances (not so when a pending id just expires).
            if group.state in _MEMBERSHIP_STATES:
                detail = f"Removing pending member {member_id} on LeaveGroup"
                self._maybe_prepare_rebalance(group, RebalanceCause.MEMBER_LEFT,
                                              _with_client_reason(detail, leaving.reason))
            return ErrorCode.NONE
        error = validate_member(group, member_id, instance_id)
        if error is not None:
            return error
        self._remove_member_and_update(group, member_id, RemovalReason.LEFT_GROUP, leaving.reason)
        return ErrorCode.NONE

    # -- removing members ---------------------------------------------------------------------

    def _remove_member(self, group: ClassicGroup, member_id: str, reason: RemovalReason) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        self._ctx.cancel_session(group, member_id)
        self._ctx.member_removed(group, member_id, member.group_instance_id, reason)
        if member.join_request is not None:
            self._ctx.reply(
                member.join_request,
                JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID),
            )
        if member.sync_request is not None:
            self._ctx.reply(member.sync_request, SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID))

    def _remove_member_and_update(
        self, group: ClassicGroup, member_id: str, reason: RemovalReason,
        client_reason: str | None = None,
    ) -> None:
        instance_id = group.members[member_id].group_instance_id
        self._remove_member(group, member_id, reason)
        if group.state in _MEMBERSHIP_STATES:
            detail = f"Removing member {member_id} ({reason.value})"
            if reason is RemovalReason.REMOVED_BY_INSTANCE_ID:
                detail = f"Removing member {member_id} with instance id {instance_id} by an admin"
            self.prepare_rebalance(group, _CAUSE_OF_REMOVAL[reason],
                                    _with_client_reason(detail, client_reason))
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def remove_pending_member(
        self, group: ClassicGroup, member_id: str, reason: RemovalReason
    ) -> None:
        if member_id not in group.pending_members:
            return
        group.pending_members.discard(member_id)
        self._ctx.timers.cancel(pending_member_timer(group.group_id, member_id))
        self._ctx.member_removed(group, member_id, None, reason)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def on_session_timer(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.DEAD:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # waiting members are alive by definition; re-armed when they are answered
        # A new member's timer is the new-member join timeout, not its session timeout.
        reason = RemovalReason.JOIN_TIMEOUT if member.is_new else RemovalReason.SESSION_TIMEOUT
        self._remove_member_and_update(group, member_id, reason)
