"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: KIP-848's consumer protocol in the core.

Each heartbeat follows Kafka's order: validate, find or create the group and member (fencing
stale epochs), update the member's subscription, bump the group epoch when a subscription or
the subscribed topics' metadata changed, recompute the target assignment when the group epoch
is ahead of it, then move the member one reconciliation step. Every change is a record applied
through `persistence.apply_record` as it is made (each step reads the state the previous one
left), and the answer is sent once the records are durable.

Regex subscriptions are resolved as Kafka resolves them, after the heartbeat that asked for it
(Kafka resolves on a background executor): that heartbeat is answered from the group as it was,
and the resolution's records (type 16, and the group epoch when the topics changed) follow in
a write of their own, so the member's next heartbeat sees the new epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kgroups.assignors.server import ServerMember, coordinator_order
from kgroups.assignors.server import assign as assign_server
from kgroups.coordinator.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    current_assignment_value,
    from_list,
    member_metadata_value,
    metadata_hash,
    to_list,
)
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    HeartbeatError,
    kafka_uuid_string,
)
from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.effects import RemovalReason
from kgroups.coordinator.group import ClassicGroup, GroupState
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.migration import Migration
from kgroups.coordinator.reconciliation import MemberFencedError, reconcile
from kgroups.coordinator.regex_subscriptions import (
    InvalidRegexError,
    compile_regex,
    refresh_due,
    resolve,
)
from kgroups.coordinator.timer_keys import consumer_rebalance_timer, consumer_session_timer
from kgroups.errors import ErrorCode
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)


class ConsumerGroups:
    """The consumer protocol's handlers over the shard's groups (`ShardContext`); conversions to
    and from classic groups are `migration`'s, called as explicit steps."""

    def __init__(self, ctx: ShardContext, migration: Migration) -> None:
        self._ctx = ctx
        self._migration = migration
        # Per group id: (the ConsumerGroup object, the most members it held at a target
        # computation) -- see `_most_members`.
        self._member_map_sizes: dict[str, tuple[int, int]] = {}

    # -- ConsumerGroupHeartbeat ---------------------------------------------------------------

    def heartbeat(self, req: ConsumerGroupHeartbeatRequest) -> None:
        journal = Journal()
        after: list[Callable[[], None]] = []  # work that follows the heartbeat's own write
        try:
            self._validate_heartbeat(req)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                response = self._consumer_leave(req, journal)
            else:
                response = self._join_or_heartbeat(req, journal, after)
        except HeartbeatError as exc:
            response = ConsumerGroupHeartbeatResponse(exc.error, exc.message)
        self._answer_after(req, journal, response)
        for step in after:
            step()

    def _answer_after(
        self, req: ConsumerGroupHeartbeatRequest, journal: Journal,
        response: ConsumerGroupHeartbeatResponse,
    ) -> None:
        if not journal:
            self._ctx.reply(req.request_id, response)
            return
        self._ctx.write(
            self._ctx.partition_of(req.group_id), journal,
            lambda: self._ctx.reply(req.request_id, response),
            lambda error: self._ctx.reply(req.request_id, ConsumerGroupHeartbeatResponse(error)),
        )

    def _validate_heartbeat(self, req: ConsumerGroupHeartbeatRequest) -> None:
        """Kafka's request checks, in Kafka's order and with its messages."""
        if not self._ctx.config.consumer_protocol_enabled:
            # As Kafka answers without 'consumer' in group.coordinator.rebalance.protocols
            # (it still lists the API in ApiVersions): the error alone, no message.
            raise HeartbeatError(ErrorCode.UNSUPPORTED_VERSION)
        epoch = req.member_epoch
        if (req.version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and not req.member_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if not req.group_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if req.instance_id == "":
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
        if req.rack_id == "":
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST,
                                     "RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST,
                                     "TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise HeartbeatError(
                    ErrorCode.INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex"
                    " must be non-null when (re-)joining.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be null.")
        elif epoch < STATIC_LEAVE_EPOCH:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
        assignors = self._ctx.config.group_consumer_assignors
        if req.server_assignor is not None and req.server_assignor not in assignors:
            raise HeartbeatError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(assignors)}.")
        error = self._ctx.ownership_error(req.group_id)
        if error is not None:
            raise HeartbeatError(error)

    def _consumer_group(self, group_id: str, create: bool,
                        journal: Journal) -> tuple[ClassicGroup, ConsumerGroup]:
        """The group and its consumer part; `create`: made for a joining member (an empty
        classic group becomes a consumer group), in `journal`, so that a failed write takes the
        group (or its consumer part) away again with the records."""
        group = self._ctx.groups.get(group_id)
        if group is not None and group.state is not GroupState.DEAD:
            if group.consumer is None and (group.members or group.state is not GroupState.EMPTY
                                           or group.share is not None):
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     f"Group {group_id} is not a consumer group.")
            if group.consumer is not None:
                return group, group.consumer
            if not create:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     f"Group {group_id} not found.")
            return group, self._ctx.open_consumer_part(group, journal)
        if not create:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        group = self._ctx.create_group(group_id, journal)
        return group, self._ctx.open_consumer_part(group, journal)

    def _join_or_heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, journal: Journal,
        after: list[Callable[[], None]],
    ) -> ConsumerGroupHeartbeatResponse:
        """A member joining a live classic group upgrades it first (`migration`), in this
        heartbeat's records; if the member is then refused, the upgrade is undone too."""
        group = self._ctx.groups.get(req.group_id)
        if not (req.member_epoch == 0 and group is not None and group.consumer is None
                and group.state not in (GroupState.EMPTY, GroupState.DEAD)):
            return self._member_heartbeat(req, journal, after)
        self._migration.upgrade(group, journal)
        try:
            return self._member_heartbeat(req, journal, after)
        except HeartbeatError:
            # As in Kafka, whose conversion records go only with a heartbeat that succeeds,
            # the group stays classic (parked requests were told to rejoin all the same).
            self._ctx.roll_back(journal)
            raise

    def _member_heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, journal: Journal,
        after: list[Callable[[], None]],
    ) -> ConsumerGroupHeartbeatResponse:
        joining = req.member_epoch == 0
        existing = self._ctx.groups.get(req.group_id)
        if existing is None or existing.state is GroupState.DEAD or (
                existing.consumer is None and not existing.members):
            # A group this heartbeat would create (or convert): refuse a bad regex first.
            _check_new_regex(None, req.subscribed_topic_regex)
        group, consumer = self._consumer_group(req.group_id, joining, journal)
        member_id = req.member_id or kafka_uuid_string(self._ctx.new_uuid())
        if len(consumer.members) >= self._ctx.config.group_consumer_max_size and (
            not req.member_id or req.member_id not in consumer.members
        ):
            raise HeartbeatError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                "The consumer group has reached its maximum capacity of "
                f"{self._ctx.config.group_consumer_max_size} members.")
        owned = None if req.topic_partitions is None else from_list(req.topic_partitions)
        if req.instance_id is None:
            member = self._dynamic_member(consumer, req.group_id, member_id, req.member_epoch,
                                          owned)
        else:
            member = self._static_member(group, consumer, member_id, req, owned, journal)
        updated = ConsumerMember(
            member.member_id,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id,
            client_host=req.client_host,
            subscribed_topic_names=(tuple(req.subscribed_topic_names)
                                    if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex
                                    if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=(req.server_assignor if req.server_assignor is not None
                             else member.server_assignor),
        )
        is_new = member.member_id not in consumer.members
        old_regex = member.subscribed_topic_regex
        regex_changed = updated.subscribed_topic_regex != old_regex
        counts = consumer.subscribed_regexes()
        # Kafka decides on a refresh from the group as the heartbeat found it.
        resolved_before = dict(consumer.resolved_regexes)
        new_regex = updated.subscribed_topic_regex
        if regex_changed and new_regex and not counts.get(new_regex):
            _check_new_regex(consumer, new_regex)
        # Compared before the record is applied (applying it updates `member` in place).
        bump = is_new or updated.subscribed_topic_names != member.subscribed_topic_names
        if is_new or member_metadata_value(updated) != member_metadata_value(member):
            self._ctx.record(group, journal, ConsumerGroupMemberMetadataKey(
                group.group_id, member.member_id), member_metadata_value(updated))
        subscription_changed = bump or regex_changed
        member = consumer.members[member.member_id]
        regex_requested = False
        if regex_changed:
            if old_regex and counts.get(old_regex) == 1:
                self._ctx.record(group, journal, ConsumerGroupRegularExpressionKey(
                    group.group_id, old_regex), None)
            if new_regex:
                regex_requested = not counts.get(new_regex)
                # A regex already resolved (another member's) moves the target now.
                resolved = bool(counts.get(new_regex)) and new_regex in consumer.resolved_regexes
                bump = bump or resolved
            elif old_regex:
                bump = True
        # Kafka recomputes the hash when the subscription moved the epoch or when topics
        # changed since it last did (a regex dropped or not yet resolved moves neither).
        new_hash = consumer.metadata_hash
        if bump or consumer.metadata_checked != self._ctx.topics_version:
            new_hash = metadata_hash(consumer.subscribed_topics(), self._ctx.topics)
            consumer.metadata_checked = self._ctx.topics_version
        # As Kafka 4.3.1 answers: a subscription change or a change of the subscribed topics'
        # metadata moves the epoch by one, and by two when a group that never had an epoch
        # gets a member subscribing to topic names (seen on the wire, existing topics or not;
        # a member with no names, or only a regex, moves it by one), written as one record.
        first_names = consumer.group_epoch == 0 and bool(member.subscribed_topic_names)
        steps = int(bump or new_hash != consumer.metadata_hash) + int(bump and first_names)
        if steps:
            self._ctx.record(group, journal, ConsumerGroupMetadataKey(group.group_id),
                             ConsumerGroupMetadataValue(consumer.group_epoch + steps, new_hash))
        if self.target_due(consumer):
            self.update_target(group, consumer, journal,
                                newcomer=member.member_id if is_new else None)
        if refresh_due(consumer.subscribed_regexes(), resolved_before, self._ctx.now,
                       self._ctx.topics_created_version,
                       self._ctx.config.group_consumer_regex_refresh_interval_ms, regex_requested):
            after.append(lambda: self._resolve_regexes(group, consumer, req.describable_topics))
        assigned_before = member.assigned
        self.maybe_reconcile(group, consumer, member, owned, journal,
                              subscription_changed=subscription_changed)
        member = consumer.members[member.member_id]
        self._ctx.timers.schedule(
            consumer_session_timer(group.group_id, member.member_id),
            self._ctx.now + self._ctx.config.group_consumer_session_timeout_ms)
        full = joining or (req.rebalance_timeout_ms != -1 and (
            req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
                           and req.topic_partitions is not None)
        changed = member.assigned != assigned_before
        return ConsumerGroupHeartbeatResponse(
            ErrorCode.NONE, None, member.member_id, member.member_epoch,
            self._ctx.config.group_consumer_heartbeat_interval_ms,
            to_list(member.assigned) if full or changed else None,
        )

    def _dynamic_member(
        self, consumer: ConsumerGroup, group_id: str, member_id: str, epoch: int,
        owned: Assignment | None,
    ) -> ConsumerMember:
        member = consumer.members.get(member_id)
        if member is None:
            if epoch != 0:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     _not_a_member(member_id, group_id))
            return ConsumerMember(member_id)
        if epoch != 0:
            _check_epoch(member, epoch, owned)
        return member

    def _static_member(
        self, group: ClassicGroup, consumer: ConsumerGroup, member_id: str,
        req: ConsumerGroupHeartbeatRequest, owned: Assignment | None,
        journal: Journal,
    ) -> ConsumerMember:
        instance_id = req.instance_id or ""
        holder_id = consumer.static_members.get(instance_id)
        holder = consumer.members.get(holder_id) if holder_id is not None else None
        if req.member_epoch == 0:
            if holder is not None and holder.classic is not None \
                    and holder.member_id != member_id:
                # As Kafka 4.3.1 does, a consumer-protocol member joining with the instance id
                # of a classic static member takes its place at once (a classic member never
                # says it left for a while with epoch -2), its partitions and epoch included.
                return self.replace_static(group, consumer, holder, member_id, journal)
            if holder is None:
                return consumer.members.get(member_id) or ConsumerMember(member_id)
            if holder.member_id == member_id:
                return holder
            if holder.member_epoch != STATIC_LEAVE_EPOCH:
                raise HeartbeatError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} cannot join the "
                    f"group because the instance id is owned by {holder.member_id} member.")
            return self.replace_static(group, consumer, holder, member_id, journal)
        if holder is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Instance id {instance_id} is unknown.")
        if holder.member_id != member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} "
                                 f"was fenced by member {holder.member_id}.")
        _check_epoch(holder, req.member_epoch, owned)
        return holder

    def replace_static(
        self, group: ClassicGroup, consumer: ConsumerGroup, old: ConsumerMember,
        new_id: str, journal: Journal,
    ) -> ConsumerMember:
        """The new member takes the old one's place, target and partitions, at epoch 0."""
        target = consumer.targets.get(old.member_id, {})
        assigned = dict(old.assigned)
        self.remove_member_records(group, old.member_id, journal)
        self._ctx.cancel_consumer_member_timers(group.group_id, old.member_id)
        successor = ConsumerMember(new_id, old.instance_id, old.rack_id, old.client_id,
                                   old.client_host, old.subscribed_topic_names,
                                   old.subscribed_topic_regex, old.rebalance_timeout_ms,
                                   old.server_assignor, 0, 0, MemberState.STABLE, assigned,
                                   epochs=dict(old.epochs))
        self._ctx.record(group, journal, ConsumerGroupMemberMetadataKey(group.group_id, new_id),
                         member_metadata_value(successor))
        self._ctx.record(group, journal,
                         ConsumerGroupTargetAssignmentMemberKey(group.group_id, new_id),
                         ConsumerGroupTargetAssignmentMemberValue(to_list(target)))
        self._ctx.record(group, journal,
                         ConsumerGroupCurrentMemberAssignmentKey(group.group_id, new_id),
                         current_assignment_value(successor))
        self._ctx.member_removed(group, old.member_id, old.instance_id,
                                 RemovalReason.FENCED_BY_STATIC_REPLACEMENT)
        return consumer.members[new_id]

    def target_due(self, consumer: ConsumerGroup) -> bool:
        """Whether the group's target is behind its epoch and may be computed in this request:
        at most once per group.consumer.assignment.interval.ms (KIP-1263, Kafka 4.3's
        batching), so N members joining within the interval cost one assignor run, not N.
        As with Kafka no timer fires at the interval's end: the next heartbeat (or classic
        join) after it computes the target; meanwhile members reconcile towards the target
        as it was (a joiner gets the assignment epoch and nothing). A target stamped in the
        future (a clock set back) does not hold the group up."""
        if consumer.group_epoch <= consumer.assignment_epoch:
            return False
        if consumer.assignment_timestamp is None:
            return True
        elapsed = self._ctx.now - consumer.assignment_timestamp
        return not 0 <= elapsed < self._ctx.config.group_consumer_assignment_interval_ms

    def update_target(
        self, group: ClassicGroup, consumer: ConsumerGroup, journal: Journal,
        newcomer: str | None = None,
    ) -> None:
        """Run the group's assignor over every member (current targets make it sticky) and
        write the targets that changed, then the new assignment epoch. Members go to the
        assignor in the order Kafka's coordinator puts them into its member map (the ones
        already in the group, then `newcomer`, the one whose first heartbeat this is), which
        with their ids' hash codes fixes the order Kafka's assignors walk them in."""
        assignor = consumer.preferred_assignor(self._ctx.config.group_consumer_assignors[0])
        topics = self._ctx.topics
        members = self._assignor_inputs(consumer)
        subscribed = consumer.subscribed_topics()
        partitions = {info.topic_id: info.partitions for name, info in topics.items()
                      if name in subscribed}
        order = coordinator_order(members, newcomer,
                                  self._most_members(group.group_id, consumer))
        result = assign_server(assignor, order, partitions)
        for member_id in consumer.members:
            target = result.get(member_id, {})
            if target != consumer.targets.get(member_id) or member_id not in consumer.targets:
                self._ctx.record(group, journal,
                                 ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                                 ConsumerGroupTargetAssignmentMemberValue(to_list(target)))
        self._ctx.record(
            group, journal, ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
            ConsumerGroupTargetAssignmentMetadataValue(consumer.group_epoch, self._ctx.now))

    def _assignor_inputs(self, consumer: ConsumerGroup) -> list[ServerMember]:
        """Each member as the assignor reads it, in member order. The parts of a member's last
        input whose sources are the very same objects (its target; its subscribed names,
        resolved regex and the topics) are kept (inputs are read only), so a new group epoch
        costs the assignor's run and the targets that moved, not every member's conversion."""
        names = self._ctx.topic_names
        topics = self._ctx.topics
        previous = consumer.assignor_inputs
        inputs: dict[str, tuple[Any, ...]] = {}
        for m in consumer.members.values():
            target = consumer.targets.get(m.member_id)
            subscribed = m.subscribed_topic_names
            resolved = consumer.resolved_regexes.get(m.subscribed_topic_regex or "")
            entry = previous.get(m.member_id)
            if entry is not None and entry[1] is subscribed and entry[2] is resolved \
                    and entry[3] is topics and entry[4] is names:
                if entry[0] is target and entry[5] == m.instance_id and entry[6] == m.rack_id:
                    inputs[m.member_id] = entry
                    continue
                topic_ids = entry[7].topics
            else:
                topic_ids = [topics[t].topic_id for t in sorted(consumer.member_topics(m))
                             if t in topics]
            inputs[m.member_id] = (target, subscribed, resolved, topics, names, m.instance_id,
                                   m.rack_id, ServerMember(
                m.member_id, topic_ids,
                {t: sorted(p) for t, p in (target or {}).items() if t in names},
                instance_id=m.instance_id, rack=m.rack_id))
        consumer.assignor_inputs = inputs
        return [entry[7] for entry in inputs.values()]

    def _most_members(self, group_id: str, consumer: ConsumerGroup) -> int:
        """The most members the group held at its earlier target computations (0 at the
        first), and the present count noted for the next. Kafka's member map never shrinks
        and its iteration order follows its table's size; this is memory only, as Kafka's
        map is, and a re-created group starts again."""
        sizes = self._member_map_sizes
        seen, most = sizes.get(group_id, (id(consumer), 0))
        before = most if seen == id(consumer) else 0
        sizes[group_id] = (id(consumer), max(before, len(consumer.members)))
        return before

    def _resolve_regexes(
        self, group: ClassicGroup, consumer: ConsumerGroup,
        describable: Callable[[Iterable[str]], frozenset[str]] | None,
    ) -> None:
        """Resolve every subscribed regex against the topics (Kafka's
        handleRegularExpressionsResult): a record per regex, and the group epoch bumped when
        a regex's topics or the subscribed topics' metadata changed. With an authorizer only
        the topics the resolving heartbeat's principal may Describe count (`describable`)."""
        journal = Journal()
        bump = False
        matches = resolve(consumer.subscribed_regexes(), self._ctx.topics)
        if describable is not None:
            matches = {regex: describable(topics) for regex, topics in matches.items()}
        for regex, topics in sorted(matches.items()):
            old = consumer.resolved_regexes.get(regex)
            bump = bump or (old.topics if old is not None else frozenset()) != topics
            self._ctx.record(group, journal,
                             ConsumerGroupRegularExpressionKey(group.group_id, regex),
                             ConsumerGroupRegularExpressionValue(
                             tuple(sorted(topics)), self._ctx.topics_version, self._ctx.now))
        new_hash = metadata_hash(consumer.subscribed_topics(), self._ctx.topics)
        if bump or new_hash != consumer.metadata_hash:
            self._ctx.record(group, journal, ConsumerGroupMetadataKey(group.group_id),
                             ConsumerGroupMetadataValue(consumer.group_epoch + 1, new_hash))
        self._ctx.write(group.offsets_partition, journal, lambda: None, lambda _e: None)

    def maybe_reconcile(
        self, group: ClassicGroup, consumer: ConsumerGroup, member: ConsumerMember,
        owned: Assignment | None, journal: Journal,
        subscription_changed: bool = False,
    ) -> None:
        epoch = consumer.assignment_epoch
        if member.is_reconciled_to(epoch) and not subscription_changed:
            return
        owners = consumer.partition_owners
        pending = member.pending_revocation
        topics = self._ctx.topics
        subscribed = frozenset(topics[t].topic_id for t in consumer.member_topics(member)
                               if t in topics)
        try:
            # Any holder blocks a partition, except the member itself for what it was giving
            # up (as Kafka: only one member can hold a partition).
            updated = reconcile(
                member, epoch, consumer.targets.get(member.member_id, {}),
                lambda t, p: (t, p) in owners and p not in pending.get(t, ()), owned,
                subscribed, subscription_changed)
        except MemberFencedError as exc:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(exc)) from exc
        if updated is member:
            return
        self._ctx.record(group, journal,
                         ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
                         current_assignment_value(updated))
        timer = consumer_rebalance_timer(group.group_id, member.member_id)
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            self._ctx.timers.schedule(timer, self._ctx.now + max(updated.rebalance_timeout_ms, 0))
        else:
            self._ctx.timers.cancel(timer)

    # -- leaving and fencing ------------------------------------------------------------------

    def _consumer_leave(
        self, req: ConsumerGroupHeartbeatRequest, journal: Journal
    ) -> ConsumerGroupHeartbeatResponse:
        group, consumer = self._consumer_group(req.group_id, False, journal)
        if req.instance_id is None:
            member = consumer.members.get(req.member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     _not_a_member(req.member_id, req.group_id))
        else:
            holder_id = consumer.static_members.get(req.instance_id)
            if holder_id is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Instance id {req.instance_id} is unknown.")
            if holder_id != req.member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                     f"Static member {req.member_id} with instance id "
                                     f"{req.instance_id} was fenced by member {holder_id}.")
            member = consumer.members[holder_id]
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # A static member going away for a while keeps its partitions (and its session).
            self._ctx.record(group, journal, ConsumerGroupCurrentMemberAssignmentKey(
                group.group_id, member.member_id), current_assignment_value(ConsumerMember(
                    member.member_id, member_epoch=STATIC_LEAVE_EPOCH,
                    previous_member_epoch=member.previous_member_epoch, state=member.state,
                    assigned=member.assigned, epochs=member.epochs)))
            self._ctx.timers.cancel(consumer_rebalance_timer(group.group_id, member.member_id))
        else:
            self.fence(group, member, journal, RemovalReason.LEFT_GROUP)
        return ConsumerGroupHeartbeatResponse(ErrorCode.NONE, None, member.member_id,
                                              req.member_epoch, 0, None)

    def fence(
        self, group: ClassicGroup, member: ConsumerMember, journal: Journal,
        reason: RemovalReason,
    ) -> None:
        """Remove the member (its partitions become free) and bump the group epoch; or, when
        only classic-protocol members would stay and the policy allows it, downgrade the group
        to a classic one (`migration`)."""
        if self._migration.downgrade_allowed(group, [member]):
            self._migration.downgrade(group, [member], journal, reason)
            return
        consumer = group.consumer
        assert consumer is not None
        regex = member.subscribed_topic_regex
        last_of_regex = bool(regex) and consumer.subscribed_regexes().get(regex or "") == 1
        self.remove_member_records(group, member.member_id, journal)
        if last_of_regex:
            self._ctx.record(group, journal,
                             ConsumerGroupRegularExpressionKey(group.group_id, regex or ""), None)
        self._ctx.cancel_consumer_member_timers(group.group_id, member.member_id)
        new_hash = metadata_hash(consumer.subscribed_topics(), self._ctx.topics)
        self._ctx.record(group, journal, ConsumerGroupMetadataKey(group.group_id),
                         ConsumerGroupMetadataValue(consumer.group_epoch + 1, new_hash))
        self._ctx.member_removed(group, member.member_id, member.instance_id, reason)

    def remove_member_records(
        self, group: ClassicGroup, member_id: str, journal: Journal
    ) -> None:
        for key in (ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member_id),
                    ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                    ConsumerGroupMemberMetadataKey(group.group_id, member_id)):
            self._ctx.record(group, journal, key, None)

    def on_consumer_timer(self, group: ClassicGroup, member_id: str, session: bool) -> None:
        """A member missed its session, or did not revoke within its rebalance timeout."""
        consumer = group.consumer
        member = None if consumer is None else consumer.members.get(member_id)
        if member is None:
            return
        if not session and member.state is not MemberState.UNREVOKED_PARTITIONS:
            return
        journal = Journal()
        reason = RemovalReason.SESSION_TIMEOUT if session else RemovalReason.REBALANCE_TIMEOUT
        self.fence(group, member, journal, reason)
        self._ctx.write(group.offsets_partition, journal, lambda: None, lambda _e: None)

    # -- shared --------------------------------------------------------------------------------

    # -- ConsumerGroupDescribe ----------------------------------------------------------------

    def describe(self, req: ConsumerGroupDescribeRequest) -> None:
        if not self._ctx.config.consumer_protocol_enabled:
            self._ctx.reply(req.request_id, ConsumerGroupDescribeResponse(tuple(
                DescribedConsumerGroup(g, ErrorCode.UNSUPPORTED_VERSION, state="")
                for g in req.group_ids)))
            return
        self._ctx.reply(req.request_id, ConsumerGroupDescribeResponse(
            tuple(self._describe_consumer(g) for g in req.group_ids)))

    def _describe_consumer(self, group_id: str) -> DescribedConsumerGroup:
        """A group that is not (or no longer) a consumer group has no state, as Kafka says."""
        error = self._ctx.ownership_error(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        if error is not None:
            return DescribedConsumerGroup(group_id, error, state="")
        group = self._ctx.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD or group.consumer is None:
            message = (f"Group {group_id} not found." if group is None
                       or group.state is GroupState.DEAD
                       else f"Group {group_id} is not a consumer group.")
            return DescribedConsumerGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message,
                                          state="")
        consumer = group.consumer
        # A member's assignment, as Kafka 4.3.1 describes it, includes the partitions it has
        # been asked to revoke and still holds; members that speak the classic protocol are
        # described as such (MemberType 0).
        members = tuple(
            DescribedConsumerMember(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id,
                m.client_host, m.subscribed_topic_names, m.subscribed_topic_regex,
                to_list(_held(m)), to_list(consumer.targets.get(m.member_id, {})),
                classic=m.classic is not None)
            for m in consumer.members.values()
        )
        return DescribedConsumerGroup(
            group_id, ErrorCode.NONE, None, consumer.state(), consumer.group_epoch,
            consumer.assignment_epoch,
            consumer.preferred_assignor(self._ctx.config.group_consumer_assignors[0]), members)


def _check_new_regex(consumer: ConsumerGroup | None, regex: str | None) -> None:
    """INVALID_REGULAR_EXPRESSION for a regex no member of the group subscribes with yet that
    does not compile (Kafka checks only regexes new to the group)."""
    if not regex or (consumer is not None and consumer.subscribed_regexes().get(regex)):
        return
    try:
        compile_regex(regex)
    except InvalidRegexError as exc:
        raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc)) from exc


def _held(member: ConsumerMember) -> Assignment:
    """What the member holds: its assignment and the partitions pending revocation."""
    if not member.pending_revocation:
        return member.assigned
    held = dict(member.assigned)
    for topic_id, parts in member.pending_revocation.items():
        held[topic_id] = held.get(topic_id, frozenset()) | parts
    return held


def _not_a_member(member_id: str, group_id: str) -> str:
    return f"Member {member_id} is not a member of group {group_id}."


def _check_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
    """Kafka's fencing: an epoch ahead of the member's, or behind it unless it is the previous
    epoch and the member reports only partitions it still has, is FENCED_MEMBER_EPOCH."""
    if epoch > member.member_epoch:
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin.")
    if epoch < member.member_epoch:
        subset = owned is not None and all(
            parts <= member.assigned.get(topic_id, frozenset()) for topic_id, parts in owned.items()
        )
        if epoch != member.previous_member_epoch or not subset:
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its partitions and rejoin.")
