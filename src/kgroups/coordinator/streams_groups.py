"""StreamsGroupHeartbeat and StreamsGroupDescribe: KIP-1071's streams protocol in the core.

Each heartbeat follows Kafka 4.3.1's order: validate, find or create the group and member
(fencing stale epochs), update the member's metadata, take the topology the first member brings
(later members must bring the same one), check the topology against the topics when they
changed (`streams_topology`: statuses such as MISSING_SOURCE_TOPICS, the internal topics the
broker is to create), bump the group epoch when the member, the topics or the validated topology
changed, recompute the target assignment through the group's task assignor when the epoch is
ahead of it (after the initial rebalance delay, and at most once per assignment interval), then
move the member one reconciliation step (`streams_reconciliation`). Every change is a record
applied through `persistence.apply_record` as it is made, and the answer is sent once the
records are durable.
"""

from __future__ import annotations

from collections.abc import Mapping

from kgroups.assignors.streams_tasks import (
    SubtopologyInfo,
    TaskAssignment,
    TaskAssignor,
    TaskAssignorError,
    TaskGroupSpec,
    TaskMemberSpec,
)
from kgroups.coordinator.consumer_messages import HeartbeatError
from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.effects import RemovalReason
from kgroups.coordinator.group import ClassicGroup, GroupState
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.persistence import streams_group_tombstones
from kgroups.coordinator.streams_group import (
    LEAVE_EPOCH,
    StreamsGroup,
    StreamsMember,
    StreamsMemberState,
    Tasks,
    TaskTuple,
    current_assignment_value,
    member_metadata_value,
    target_value,
    tasks_of,
)
from kgroups.coordinator.streams_messages import (
    DescribedStreamsGroup,
    DescribedStreamsMember,
    DescribedSubtopology,
    EndpointPartitions,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
    StreamsStatus,
    TaskIdList,
)
from kgroups.coordinator.streams_reconciliation import StreamsMemberFencedError, reconcile
from kgroups.coordinator.streams_topology import ConfiguredTopology, configure, topology_hash
from kgroups.coordinator.timer_keys import (
    streams_initial_timer,
    streams_rebalance_timer,
    streams_session_timer,
)
from kgroups.errors import ErrorCode
from kgroups.records.schema import GroupMetadataKey
from kgroups.records.streams_group import (
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    TopicInfo,
)

STANDBY_REPLICAS_CONFIG = "num.standby.replicas"
_INITIAL_DELAY = "Assignment delayed due to the configured initial rebalance delay."
_INTERVAL_DELAY = "Assignment delayed due to the configured assignment interval."
ASSIGNMENT_DELAYED = 5  # StreamsGroupHeartbeatResponse.Status.ASSIGNMENT_DELAYED


class StreamsGroups:
    """The streams protocol's handlers over the shard's groups (`ShardContext`), with the
    server-side task assignors by name (the first is the group's)."""

    def __init__(self, ctx: ShardContext, assignors: Mapping[str, TaskAssignor]) -> None:
        self._ctx = ctx
        self._assignors = dict(assignors)

    # -- StreamsGroupHeartbeat ----------------------------------------------------------------

    def heartbeat(self, req: StreamsGroupHeartbeatRequest) -> None:
        journal = Journal()
        try:
            _validate(req)
            error = self._ctx.ownership_error(req.group_id)
            if error is not None:
                raise HeartbeatError(error)
            if req.member_epoch == LEAVE_EPOCH:
                response = self._leave(req, journal)
            else:
                response = self._member_heartbeat(req, journal)
        except HeartbeatError as exc:
            self._ctx.roll_back(journal)
            journal = Journal()
            response = StreamsGroupHeartbeatResponse(exc.error, exc.message)
        if not journal:
            self._ctx.reply(req.request_id, response)
            return
        self._ctx.write(
            self._ctx.partition_of(req.group_id), journal,
            lambda: self._ctx.reply(req.request_id, response),
            lambda error: self._ctx.reply(req.request_id, StreamsGroupHeartbeatResponse(error)))

    def _streams_group(self, group_id: str, create: bool,
                       journal: Journal) -> tuple[ClassicGroup, StreamsGroup, bool]:
        """The group, its streams part, and whether this heartbeat created it. An empty
        classic group becomes a streams group when a member joins it."""
        group = self._ctx.groups.get(group_id)
        if group is not None and group.state is not GroupState.DEAD:
            if group.streams is not None:
                return group, group.streams, False
            if group.consumer is not None or group.share is not None or group.members \
                    or group.state is not GroupState.EMPTY:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     f"Group {group_id} is not a streams group.")
            if not create:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     f"Streams group {group_id} not found.")
            if group.stored_metadata is not None:
                # Kafka 4.3.1 ends the empty classic group's metadata first (offline migration
                # of a Streams application from the classic protocol keeps its offsets).
                self._ctx.record(group, journal, GroupMetadataKey(group_id), None)
            return group, self._open(group, journal), False
        if not create:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"Streams group {group_id} not found.")
        group = self._ctx.create_group(group_id, journal)
        return group, self._open(group, journal), True

    @staticmethod
    def _open(group: ClassicGroup, journal: Journal) -> StreamsGroup:
        streams = group.streams = StreamsGroup()
        if group.state is GroupState.DEAD:  # its classic part just ended: Empty, as replayed
            group.previous_state = group.state
            group.state = GroupState.EMPTY

        def close() -> None:
            if group.streams is streams and not streams.stored:
                group.streams = None

        journal.on_revert.append(close)
        return streams

    def _member_heartbeat(
        self, req: StreamsGroupHeartbeatRequest, journal: Journal
    ) -> StreamsGroupHeartbeatResponse:
        ctx = self._ctx
        config = ctx.config
        joining = req.member_epoch == 0
        group, streams, created = self._streams_group(req.group_id, joining, journal)
        member = streams.members.get(req.member_id)
        is_new = member is None
        if member is None:
            if not joining:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {req.member_id} is not a member of group "
                                     f"{req.group_id}.")
            if len(streams.members) >= config.group_streams_max_size:
                raise HeartbeatError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    "The streams group has reached its maximum capacity of "
                    f"{config.group_streams_max_size} members.")
            member = StreamsMember(req.member_id)
        elif not joining:
            _check_epoch(member, req)
        topology = req.topology
        if topology is not None and streams.topology is not None \
                and streams.topology.epoch <= topology.epoch and streams.topology != topology:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST,
                                 "Topology updates are not supported yet.")
        was_empty = not streams.members
        updated = StreamsMember(
            member.member_id, member.instance_id,
            req.rack_id if req.rack_id is not None else member.rack_id,
            req.client_id, req.client_host,
            req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            topology.epoch if topology is not None else member.topology_epoch,
            req.process_id if req.process_id is not None else member.process_id,
            req.user_endpoint if req.user_endpoint is not None else member.user_endpoint,
            req.client_tags if req.client_tags is not None else member.client_tags)
        bump = is_new or member_metadata_value(updated) != member_metadata_value(member)
        if bump:
            ctx.record(group, journal,
                       StreamsGroupMemberMetadataKey(group.group_id, member.member_id),
                       member_metadata_value(updated))
        member = streams.members[member.member_id]
        statuses: list[tuple[int, str]] = []
        reconfigure = False
        if topology is not None and streams.topology is None:
            ctx.record(group, journal, StreamsGroupTopologyKey(group.group_id), topology)
            reconfigure = True
        group_topology = streams.topology
        if group_topology is None:
            raise AssertionError("a streams member joined a group without a topology")
        if member.topology_epoch != group_topology.epoch:
            statuses.append((StreamsStatus.STALE_TOPOLOGY,
                             f"The member's topology epoch {member.topology_epoch} is behind "
                             f"the group's topology epoch {group_topology.epoch}."))
        new_hash = streams.metadata_hash
        if reconfigure or streams.configured is None \
                or streams.metadata_checked != ctx.topics_version:
            new_hash = topology_hash(group_topology, ctx.topics)
            streams.metadata_checked = ctx.topics_version
            if new_hash != streams.metadata_hash:
                bump = reconfigure = True
        if reconfigure or streams.configured is None:
            streams.configured = configure(group_topology, ctx.topics)
        configured: ConfiguredTopology = streams.configured
        validated = -1
        if configured.ready and configured.subtopologies is not None:
            validated = group_topology.epoch
            for tasks in (req.active_tasks, req.standby_tasks, req.warmup_tasks):
                _check_tasks(configured, tasks)
        bump = bump or validated != streams.validated_topology_epoch
        configs = ((STANDBY_REPLICAS_CONFIG, str(config.group_streams_num_standby_replicas)),)
        bump = bump or configs != streams.last_assignment_configs
        if bump:
            # As Kafka 4.3.1 writes it: a group's first epoch is 2.
            epoch = streams.group_epoch + (2 if streams.group_epoch == 0 else 1)
            ctx.record(group, journal, StreamsGroupMetadataKey(group.group_id),
                       StreamsGroupMetadataValue(epoch, new_hash, validated, configs))
        delay = config.group_streams_initial_rebalance_delay_ms
        initial = streams_initial_timer(group.group_id)
        if was_empty and delay > 0 and not ctx.timers.is_armed(initial):
            ctx.timers.schedule(initial, ctx.now + delay)
        if streams.group_epoch > streams.assignment_epoch:
            if ctx.timers.is_armed(initial):
                statuses.append((ASSIGNMENT_DELAYED, _INITIAL_DELAY))
            elif self._interval_running(streams):
                statuses.append((ASSIGNMENT_DELAYED, _INTERVAL_DELAY))
            else:
                try:
                    self.update_target(group, streams, journal)
                except TaskAssignorError as exc:  # Kafka's answer, its assignor's message
                    raise HeartbeatError(
                        ErrorCode.UNKNOWN_SERVER_ERROR,
                        f"Failed to compute a new target assignment for epoch "
                        f"{streams.group_epoch}: {exc}") from exc
        owned = None if req.active_tasks is None else TaskTuple(
            tasks_of(req.active_tasks), tasks_of(req.standby_tasks or ()),
            tasks_of(req.warmup_tasks or ()))
        before = member.assigned
        self._reconcile(group, streams, member, owned, journal)
        member = streams.members[member.member_id]
        ctx.timers.schedule(streams_session_timer(group.group_id, member.member_id),
                            ctx.now + config.group_streams_session_timeout_ms)
        if req.shutdown_application:
            streams.shutdown_requested_by = member.member_id
        changed = joining or member.assigned != before
        # As Kafka 4.3.1 moves it (seen on the wire): when the member's tasks changed, and when
        # a known member rejoins (epoch 0), but not for a newcomer given nothing yet.
        if changed and not (is_new and member.assigned == before) \
                and member.user_endpoint is not None:
            streams.endpoint_information_epoch += 1
        if configured.status is not None:
            statuses.append(configured.status)
        if streams.shutdown_requested_by is not None:
            statuses.append((StreamsStatus.SHUTDOWN_APPLICATION,
                             f"Streams group member {streams.shutdown_requested_by} encountered "
                             "a fatal error and requested a shutdown for the entire "
                             "application."))
        endpoints = None
        if member.user_endpoint is not None \
                and req.endpoint_information_epoch != streams.endpoint_information_epoch:
            endpoints = _endpoint_partitions(streams, configured)
        assigned = member.assigned
        return StreamsGroupHeartbeatResponse(
            ErrorCode.NONE, None, member.member_id, member.member_epoch,
            config.group_streams_heartbeat_interval_ms, status=tuple(statuses),
            active_tasks=_wire(assigned.active) if changed else None,
            standby_tasks=_wire(assigned.standby) if changed else None,
            warmup_tasks=_wire(assigned.warmup) if changed else None,
            endpoint_information_epoch=0 if created else streams.endpoint_information_epoch,
            partitions_by_user_endpoint=endpoints,
            creatable_topics=configured.internal_topics_to_create)

    def _interval_running(self, streams: StreamsGroup) -> bool:
        """Whether the target was computed less than group.streams.assignment.interval.ms ago
        (KIP-1263: a target at most once per interval; a stamp in the future does not hold)."""
        stamp = streams.assignment_timestamp
        if stamp is None:
            return False
        elapsed = self._ctx.now - stamp
        return 0 <= elapsed < self._ctx.config.group_streams_assignment_interval_ms

    def update_target(self, group: ClassicGroup, streams: StreamsGroup,
                      journal: Journal) -> None:
        """Run the group's assignor over every member (their current targets make it sticky)
        and write the targets that changed, then the new assignment epoch. A topology that is
        not ready gives every member no tasks. TaskAssignorError: the assignor could not place
        the tasks (nothing written)."""
        configured = streams.configured
        result: dict[str, TaskAssignment] = {}
        if configured is not None and configured.ready and configured.subtopologies:
            topology = {sub_id: SubtopologyInfo(sub.num_tasks, sub.stateful)
                        for sub_id, sub in configured.subtopologies.items()}
            spec = TaskGroupSpec(
                {member_id: self._member_spec(streams, m)
                 for member_id, m in streams.members.items()},
                dict(streams.last_assignment_configs))
            assignor = next(iter(self._assignors.values()))
            result = assignor.assign(spec, topology)
        for member_id in streams.members:
            given = result.get(member_id)
            target = TaskTuple() if given is None else TaskTuple(
                _tasks(given.active_tasks), _tasks(given.standby_tasks),
                _tasks(given.warmup_tasks))
            if member_id not in streams.targets or streams.targets[member_id] != target:
                self._ctx.record(group, journal, StreamsGroupTargetAssignmentMemberKey(
                    group.group_id, member_id), target_value(target))
        self._ctx.record(group, journal, StreamsGroupTargetAssignmentMetadataKey(group.group_id),
                         StreamsGroupTargetAssignmentMetadataValue(streams.group_epoch,
                                                                   self._ctx.now))

    @staticmethod
    def _member_spec(streams: StreamsGroup, member: StreamsMember) -> TaskMemberSpec:
        target = streams.targets.get(member.member_id, TaskTuple())
        return TaskMemberSpec(member.process_id, member.instance_id, member.rack_id,
                              dict(member.client_tags), target.active, target.standby,
                              target.warmup)

    def _reconcile(self, group: ClassicGroup, streams: StreamsGroup, member: StreamsMember,
                   owned: TaskTuple | None, journal: Journal) -> None:
        target = streams.targets.get(member.member_id, TaskTuple())
        try:
            updated = reconcile(
                member, streams.target_epoch(), target, streams.active_owners.get,
                lambda task: frozenset(streams.standby_owners.get(task, ())),
                lambda task: frozenset(streams.warmup_owners.get(task, ())), owned)
        except StreamsMemberFencedError as exc:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(exc)) from exc
        if updated is member:
            return
        self._ctx.record(group, journal, StreamsGroupCurrentMemberAssignmentKey(
            group.group_id, member.member_id), current_assignment_value(updated))
        timer = streams_rebalance_timer(group.group_id, member.member_id)
        if updated.state is StreamsMemberState.UNREVOKED_TASKS:
            self._ctx.timers.schedule(timer,
                                      self._ctx.now + max(updated.rebalance_timeout_ms, 0))
        else:
            self._ctx.timers.cancel(timer)

    # -- leaving and fencing ------------------------------------------------------------------

    def _leave(self, req: StreamsGroupHeartbeatRequest,
               journal: Journal) -> StreamsGroupHeartbeatResponse:
        group = self._ctx.groups.get(req.group_id)
        if group is None or group.state is GroupState.DEAD or group.streams is None:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        member = group.streams.members.get(req.member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group "
                                 f"{req.group_id}.")
        if req.shutdown_application:
            group.streams.shutdown_requested_by = member.member_id
        self.fence(group, member, journal, RemovalReason.LEFT_GROUP)
        return StreamsGroupHeartbeatResponse(ErrorCode.NONE, None, member.member_id,
                                             LEAVE_EPOCH)

    def fence(self, group: ClassicGroup, member: StreamsMember, journal: Journal,
              reason: RemovalReason) -> None:
        """Remove the member (its tasks become free) and bump the group epoch."""
        streams = group.streams
        assert streams is not None
        for key in (StreamsGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
                    StreamsGroupTargetAssignmentMemberKey(group.group_id, member.member_id),
                    StreamsGroupMemberMetadataKey(group.group_id, member.member_id)):
            self._ctx.record(group, journal, key, None)
        for timer in (streams_session_timer(group.group_id, member.member_id),
                      streams_rebalance_timer(group.group_id, member.member_id)):
            self._ctx.timers.cancel(timer)
        if not streams.members:  # Kafka clears a shutdown request once the group is empty
            streams.shutdown_requested_by = None
        self._ctx.record(group, journal, StreamsGroupMetadataKey(group.group_id),
                         StreamsGroupMetadataValue(
                             streams.group_epoch + 1, streams.metadata_hash,
                             streams.validated_topology_epoch, streams.last_assignment_configs))
        self._ctx.member_removed(group, member.member_id, member.instance_id, reason)

    def on_timer(self, group: ClassicGroup, member_id: str, session: bool) -> None:
        """A member missed its session, or did not revoke within its rebalance timeout."""
        streams = group.streams
        member = None if streams is None else streams.members.get(member_id)
        if member is None:
            return
        if not session and member.state is not StreamsMemberState.UNREVOKED_TASKS:
            return
        journal = Journal()
        reason = RemovalReason.SESSION_TIMEOUT if session else RemovalReason.REBALANCE_TIMEOUT
        self.fence(group, member, journal, reason)
        self._ctx.write(group.offsets_partition, journal, lambda: None, lambda _e: None)

    def downgrade(self, group: ClassicGroup) -> None:
        """An empty streams group joined with the classic protocol becomes a classic group, as
        Kafka 4.3.1 converts it (offline migration back to `group.protocol=classic`): its
        streams records end (target epoch, group epoch, topology), its offsets stay."""
        journal = Journal()
        self._ctx.record_all(group, journal, streams_group_tombstones(group))
        if group.state is GroupState.DEAD:
            group.previous_state = group.state
            group.state = GroupState.EMPTY
        self._ctx.timers.cancel(streams_initial_timer(group.group_id))
        self._ctx.write(group.offsets_partition, journal, lambda: None, lambda _e: None)

    # -- StreamsGroupDescribe -----------------------------------------------------------------

    def describe(self, req: StreamsGroupDescribeRequest) -> None:
        self._ctx.reply(req.request_id, StreamsGroupDescribeResponse(
            tuple(self._describe(g) for g in req.group_ids)))

    def _describe(self, group_id: str) -> DescribedStreamsGroup:
        error = self._ctx.ownership_error(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        if error is not None:
            return DescribedStreamsGroup(group_id, error)
        group = self._ctx.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD or group.streams is None:
            message = (f"Group {group_id} not found." if group is None
                       or group.state is GroupState.DEAD
                       else f"Group {group_id} is not a streams group.")
            return DescribedStreamsGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message)
        streams = group.streams
        configured = streams.configured
        if configured is None and streams.topology is not None:
            configured = streams.configured = configure(streams.topology, self._ctx.topics)
        # As Kafka 4.3.1 describes it: the configured subtopologies (partition counts decided)
        # once the topology is ready, else the topology as the members sent it; topics sorted.
        subtopologies = None
        if configured is not None and configured.ready and configured.subtopologies is not None:
            subtopologies = tuple(
                _described(s.subtopology_id, s.source_topics, s.repartition_sink_topics,
                           s.state_changelog_topics, s.repartition_source_topics)
                for s in configured.subtopologies.values())
        elif streams.topology is not None:
            subtopologies = tuple(
                _described(s.subtopology_id, s.source_topics, s.repartition_sink_topics,
                           s.state_changelog_topics, s.repartition_source_topics)
                for s in sorted(streams.topology.subtopologies, key=lambda s: s.subtopology_id))
        members = tuple(
            DescribedStreamsMember(
                m.member_id, m.member_epoch, m.instance_id, m.rack_id, m.client_id,
                m.client_host, m.topology_epoch, m.process_id, m.user_endpoint, m.client_tags,
                _wire_tuple(m.assigned), _wire_tuple(streams.targets.get(m.member_id,
                                                                         TaskTuple())))
            for m in streams.members.values())
        return DescribedStreamsGroup(
            group_id, ErrorCode.NONE, None, streams.state(), streams.group_epoch,
            streams.target_epoch(),
            None if streams.topology is None else streams.topology.epoch, subtopologies,
            members)


# -- checks -------------------------------------------------------------------------------------


def _blank(value: str | None) -> bool:
    """Java's `value.trim().isEmpty()` for a non-null value (trim drops chars <= U+0020)."""
    return value is not None and not value.lstrip("".join(map(chr, range(33))))


def _validate(req: StreamsGroupHeartbeatRequest) -> None:
    """Kafka 4.3.1's request checks (GroupCoordinatorService), in its order, with its
    messages: features it does not support yet, then the request's own consistency."""
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

    if req.instance_id is not None:
        raise invalid("Static membership is not yet supported.")
    if req.task_offsets_sent:
        raise invalid("TaskOffsets are not supported yet.")
    if req.task_end_offsets_sent:
        raise invalid("TaskEndOffsets are not supported yet.")
    if req.warmup_tasks:
        raise invalid("WarmupTasks are not supported yet.")
    topology = req.topology
    if topology is not None and any(s.source_topic_regex for s in topology.subtopologies):
        raise invalid("Regular expressions for source topics are not supported yet.")
    for value, message in ((req.member_id, "MemberId can't be empty."),
                           (req.group_id, "GroupId can't be empty."),
                           (req.rack_id, "RackId can't be empty.")):
        if _blank(value):
            raise invalid(message)
    epoch = req.member_epoch
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        for tasks, name in ((req.active_tasks, "ActiveTasks"), (req.standby_tasks, "StandbyTasks"),
                            (req.warmup_tasks, "WarmupTasks")):
            if tasks is None or tasks:
                raise invalid(f"{name} must be empty when (re-)joining.")
        if topology is None:
            raise invalid("Topology must be non-null when (re-)joining.")
        _check_topology(topology)
    elif epoch < -2:
        raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    elif epoch == -2:
        raise invalid("InstanceId can't be null.")
    given = (req.active_tasks, req.standby_tasks, req.warmup_tasks)
    if any(t is not None for t in given) and any(t is None for t in given):
        raise invalid("If one task-type is non-null, all must be non-null.")
    if epoch != 0 and topology is not None:
        raise invalid("Topology can only be provided when (re-)joining.")


def _check_topology(topology: StreamsGroupTopologyValue) -> None:
    if topology.epoch < 0:
        # Kafka's StreamsTopology refuses it with an IllegalArgumentException, which its
        # coordinator answers as an unknown server error without a message.
        raise HeartbeatError(ErrorCode.UNKNOWN_SERVER_ERROR)
    for sub in topology.subtopologies:
        for changelog in sub.state_changelog_topics:
            if changelog.partitions != 0:
                raise HeartbeatError(
                    ErrorCode.STREAMS_INVALID_TOPOLOGY,
                    f"Changelog topic {changelog.name} must have an undefined partition count, "
                    f"but it is set to {changelog.partitions}.")


def _check_epoch(member: StreamsMember, req: StreamsGroupHeartbeatRequest) -> None:
    """Kafka's fencing: an epoch ahead of the member's, or behind it unless it is the previous
    epoch and the member reports only tasks it still has, is FENCED_MEMBER_EPOCH."""
    epoch = req.member_epoch
    if epoch > member.member_epoch:
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The streams group member has a greater member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin.")
    if epoch < member.member_epoch:
        assigned = member.assigned
        subset = all(
            reported is not None and all(
                parts <= held.get(sub, frozenset()) for sub, parts in tasks_of(reported).items())
            for reported, held in ((req.active_tasks, assigned.active),
                                   (req.standby_tasks, assigned.standby),
                                   (req.warmup_tasks, assigned.warmup)))
        if epoch != member.previous_member_epoch or not subset:
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The streams group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its partitions and rejoin.")


def _check_tasks(configured: ConfiguredTopology, tasks: TaskIdList | None) -> None:
    subtopologies = configured.subtopologies or {}
    for sub_id, partitions in tasks or ():
        sub = subtopologies.get(sub_id)
        if sub is None:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST,
                                 f"Subtopology {sub_id} does not exist in the topology.")
        for partition in partitions:
            if not 0 <= partition < sub.num_tasks:
                raise HeartbeatError(
                    ErrorCode.INVALID_REQUEST,
                    f"Task {partition} for subtopology {sub_id} is invalid. Number of tasks "
                    f"for this subtopology: {sub.num_tasks}")


# -- shapes -------------------------------------------------------------------------------------


def _tasks(given: Mapping[str, frozenset[int]]) -> Tasks:
    return {sub: frozenset(parts) for sub, parts in given.items() if parts}


def _wire(tasks: Tasks) -> TaskIdList:
    return tuple((sub, tuple(sorted(parts))) for sub, parts in sorted(tasks.items()) if parts)


def _wire_tuple(tasks: TaskTuple) -> tuple[TaskIdList, TaskIdList, TaskIdList]:
    return _wire(tasks.active), _wire(tasks.standby), _wire(tasks.warmup)


def _described(sub_id: str, sources: tuple[str, ...], sinks: tuple[str, ...],
               changelogs: tuple[TopicInfo, ...],
               repartition: tuple[TopicInfo, ...]) -> DescribedSubtopology:
    return DescribedSubtopology(sub_id, tuple(sorted(sources)), tuple(sorted(sinks)),
                                tuple(sorted(changelogs, key=lambda t: t.name)),
                                tuple(sorted(repartition, key=lambda t: t.name)))


def _endpoint_partitions(streams: StreamsGroup,
                         configured: ConfiguredTopology) -> tuple[EndpointPartitions, ...]:
    """Each member with a user endpoint and the input partitions its active and standby tasks
    materialize (interactive queries find a key's host from this)."""
    subtopologies = configured.subtopologies or {}

    def partitions(tasks: Tasks) -> tuple[tuple[str, tuple[int, ...]], ...]:
        by_topic: dict[str, set[int]] = {}
        for sub_id, parts in tasks.items():
            sub = subtopologies.get(sub_id)
            for topic in () if sub is None else sub.input_topics():
                by_topic.setdefault(topic, set()).update(parts)
        return tuple((topic, tuple(sorted(parts))) for topic, parts in sorted(by_topic.items()))

    return tuple(
        EndpointPartitions(m.user_endpoint, partitions(m.assigned.active),
                           partitions(m.assigned.standby))
        for m in streams.members.values() if m.user_endpoint is not None)
