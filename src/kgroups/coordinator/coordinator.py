"""`GroupCoordinator`: one shard of Kafka's group coordinator (its GroupCoordinatorShard) over the
__consumer_offsets partitions it owns.

Each request goes through `_dispatch`, one exhaustive `match` on its type, to the module of its
group type: `ClassicGroups` (classic protocol), `ConsumerGroups` (KIP-848's consumer protocol),
`ClassicMembers` (classic members of consumer groups), `StreamsGroups` (KIP-1071),
`ShareGroups` and `ShareOffsets` (KIP-932), `Offsets`, `GroupAdmin`. The modules are
fields of the shard, composed, not inherited; they share one `ShardContext` (the groups, timers,
clock and the journal of replies and writes of the request in progress), and call each other only
through the fields they were given (the consumer module calls `Migration` to convert a group).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import assert_never

from kgroups.assignors.streams_sticky import StickyTaskAssignor
from kgroups.assignors.streams_tasks import TaskAssignor
from kgroups.coordinator.classic_groups import ClassicGroups
from kgroups.coordinator.classic_members import ClassicMembers
from kgroups.coordinator.config import GroupCoordinatorConfig
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.consumer_groups import ConsumerGroups
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.effects import Effects, RebalanceCause, RemovalReason
from kgroups.coordinator.group import ClassicGroup, GroupState
from kgroups.coordinator.group_admin import GroupAdmin
from kgroups.coordinator.messages import (
    CompleteTransactionRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from kgroups.coordinator.migration import Migration
from kgroups.coordinator.offsets import Offsets
from kgroups.coordinator.pending_txn import OffsetKey, ProducerKey
from kgroups.coordinator.persistence import PartitionImage, rebuild_groups
from kgroups.coordinator.share_groups import ShareGroups
from kgroups.coordinator.share_messages import (
    AlterShareOffsetsRequest,
    DeleteShareOffsetsRequest,
    DescribeShareOffsetsRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
    ShareGroupInitializedRequest,
    ShareStateDeletedRequest,
)
from kgroups.coordinator.share_offsets import ShareOffsets
from kgroups.coordinator.streams_groups import StreamsGroups
from kgroups.coordinator.streams_messages import (
    StreamsGroupDescribeRequest,
    StreamsGroupHeartbeatRequest,
)
from kgroups.coordinator.timer_keys import (
    GroupTimer,
    GroupTimerKind,
    OffsetExpiryTimer,
    consumer_session_timer,
    offset_expiry_timer,
    share_session_timer,
    streams_session_timer,
)
from kgroups.coordinator.txn_offsets import TxnOffsets
from kgroups.coordinator.views import GroupSummary, GroupView, summary_of, view_of
from kgroups.errors import ErrorCode
from kgroups.records.schema import OffsetsRecord

# A pending transactional offset as inspection shows it: offset, metadata, leader epoch.
OffsetView = tuple[int, str, int]

# Every request the shard serves.
Request = (
    JoinGroupRequest | SyncGroupRequest | HeartbeatRequest | LeaveGroupRequest
    | OffsetCommitRequest | OffsetFetchRequest | OffsetDeleteRequest | DescribeGroupsRequest
    | ListGroupsRequest | DeleteGroupsRequest | ConsumerGroupHeartbeatRequest
    | ConsumerGroupDescribeRequest | TxnOffsetCommitRequest | CompleteTransactionRequest
    | StreamsGroupHeartbeatRequest | StreamsGroupDescribeRequest
    | ShareGroupHeartbeatRequest | ShareGroupDescribeRequest | ShareGroupInitializedRequest
    | DescribeShareOffsetsRequest | AlterShareOffsetsRequest | DeleteShareOffsetsRequest
    | ShareStateDeletedRequest
)


class GroupCoordinator:
    """Kafka's group coordinator (classic, consumer, streams and share groups) for the
    __consumer_offsets partitions it owns.

    Every method takes the current time in ms and returns the `Effects` to carry out. Fresh
    member ids come from `new_uuid` (the caller's randomness: the core draws none).
    """

    def __init__(
        self, config: GroupCoordinatorConfig | None = None, *,
        new_uuid: Callable[[], uuid.UUID],
        streams_assignors: Mapping[str, TaskAssignor] | None = None,
    ) -> None:
        self.config = config or GroupCoordinatorConfig()
        self._ctx = ShardContext(self.config, new_uuid)
        self._groups = self._ctx.groups  # the shared dict and queue, read here directly
        self._timers = self._ctx.timers
        self._classic = ClassicGroups(self._ctx)
        self._migration = Migration(self._ctx, self._classic)
        self._consumer = ConsumerGroups(self._ctx, self._migration)
        self._classic_members = ClassicMembers(
            self._ctx, self._classic, self._consumer, self._migration)
        self._offsets = Offsets(self._ctx)
        self._txn_offsets = TxnOffsets(self._ctx)
        self._admin = GroupAdmin(self._ctx)
        # Streams groups' task assignors by name (`group.streams.assignors`; Kafka's "sticky").
        self._streams = StreamsGroups(
            self._ctx, streams_assignors if streams_assignors is not None
            else {"sticky": StickyTaskAssignor()})
        self._share = ShareGroups(self._ctx)
        self._share_offsets = ShareOffsets(self._ctx)

    # -- request handlers ---------------------------------------------------------------------

    def join_group(self, req: JoinGroupRequest, now: int) -> Effects:
        return self._run(now, req)

    def sync_group(self, req: SyncGroupRequest, now: int) -> Effects:
        return self._run(now, req)

    def heartbeat(self, req: HeartbeatRequest, now: int) -> Effects:
        return self._run(now, req)

    def leave_group(self, req: LeaveGroupRequest, now: int) -> Effects:
        return self._run(now, req)

    def offset_commit(self, req: OffsetCommitRequest, now: int) -> Effects:
        return self._run(now, req)

    def offset_fetch(self, req: OffsetFetchRequest, now: int) -> Effects:
        return self._run(now, req)

    def offset_delete(self, req: OffsetDeleteRequest, now: int) -> Effects:
        return self._run(now, req)

    def describe_groups(self, req: DescribeGroupsRequest, now: int) -> Effects:
        return self._run(now, req)

    def list_groups(self, req: ListGroupsRequest, now: int) -> Effects:
        return self._run(now, req)

    def delete_groups(self, req: DeleteGroupsRequest, now: int) -> Effects:
        return self._run(now, req)

    def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeatRequest, now: int) -> Effects:
        return self._run(now, req)

    def consumer_group_describe(self, req: ConsumerGroupDescribeRequest, now: int) -> Effects:
        return self._run(now, req)

    def streams_group_heartbeat(self, req: StreamsGroupHeartbeatRequest, now: int) -> Effects:
        return self._run(now, req)

    def streams_group_describe(self, req: StreamsGroupDescribeRequest, now: int) -> Effects:
        return self._run(now, req)

    def share_group_heartbeat(self, req: ShareGroupHeartbeatRequest, now: int) -> Effects:
        return self._run(now, req)

    def share_group_describe(self, req: ShareGroupDescribeRequest, now: int) -> Effects:
        return self._run(now, req)

    def share_group_initialized(self, req: ShareGroupInitializedRequest, now: int) -> Effects:
        """The broker's report on the share-partitions a heartbeat asked it to initialize."""
        return self._run(now, req)

    def share_offsets(
        self, req: DescribeShareOffsetsRequest | AlterShareOffsetsRequest
        | DeleteShareOffsetsRequest | ShareStateDeletedRequest, now: int,
    ) -> Effects:
        """The share-group offsets admin APIs, and the broker's report of deleted state."""
        return self._run(now, req)

    def txn_offset_commit(self, req: TxnOffsetCommitRequest, now: int) -> Effects:
        return self._run(now, req)

    def complete_transaction(self, req: CompleteTransactionRequest, now: int) -> Effects:
        """The transaction coordinator's marker for one producer in one owned partition."""
        return self._run(now, req)

    def _dispatch(self, req: Request) -> None:
        """Every request to the module of its group type; classic-protocol requests to a
        consumer group go to its classic members' module."""
        match req:
            case JoinGroupRequest():
                group = self._groups.get(req.group_id)
                if group is not None and group.streams is not None \
                        and self._classic.join_error(req) is None:
                    self._streams.downgrade(group)  # an empty streams group becomes classic
                if group is not None and group.consumer is not None \
                        and self._classic.join_error(req) is None:
                    self._classic_members.join(group, group.consumer, req)
                else:
                    self._classic.join(req)  # errors are answered alike for both types
            case SyncGroupRequest():
                group = self._groups.get(req.group_id)
                if group is None or group.consumer is None:
                    self._classic.sync(req)
                else:
                    self._classic_members.sync(group, group.consumer, req)
            case HeartbeatRequest():
                group = self._groups.get(req.group_id)
                if group is None or group.consumer is None:
                    self._classic.heartbeat(req)
                else:
                    self._classic_members.heartbeat(group, group.consumer, req)
            case LeaveGroupRequest():
                group = self._groups.get(req.group_id)
                if group is None or group.consumer is None:
                    self._classic.leave(req)
                else:
                    self._classic_members.leave(group, group.consumer, req)
            case OffsetCommitRequest():
                self._offsets.commit(req)
            case OffsetFetchRequest():
                self._offsets.fetch(req)
            case OffsetDeleteRequest():
                self._offsets.delete(req)
            case DescribeGroupsRequest():
                self._admin.describe(req)
            case ListGroupsRequest():
                self._admin.list(req)
            case DeleteGroupsRequest():
                self._admin.delete(req)
            case ConsumerGroupHeartbeatRequest():
                self._consumer.heartbeat(req)
            case ConsumerGroupDescribeRequest():
                self._consumer.describe(req)
            case TxnOffsetCommitRequest():
                self._txn_offsets.commit(req)
            case CompleteTransactionRequest():
                self._txn_offsets.complete(req)
            case StreamsGroupHeartbeatRequest():
                self._streams.heartbeat(req)
            case StreamsGroupDescribeRequest():
                self._streams.describe(req)
            case ShareGroupHeartbeatRequest():
                self._share.heartbeat(req)
            case ShareGroupDescribeRequest():
                self._share.describe(req)
            case ShareGroupInitializedRequest():
                self._share.initialized(req)
            case DescribeShareOffsetsRequest():
                self._share_offsets.describe(req)
            case AlterShareOffsetsRequest():
                self._share_offsets.alter(req)
            case DeleteShareOffsetsRequest():
                self._share_offsets.delete(req)
            case ShareStateDeletedRequest():
                self._share_offsets.state_deleted(req)
            case _:
                assert_never(req)

    # -- topics --------------------------------------------------------------------------------

    def set_topics(self, topics: Mapping[str, TopicInfo], now: int | None = None) -> None:
        """The topics that exist now (`ShardContext.set_topics`)."""
        self._ctx.set_topics(topics, now)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._ctx.topic_names.get(topic_id)

    @property
    def offsets_expired_total(self) -> int:
        """Offsets dropped by retention since start (a counter the shell's metrics read)."""
        return self._ctx.offsets_expired_total

    # -- writes and time ----------------------------------------------------------------------

    def write_completed(self, write_id: int, error: ErrorCode | None, now: int) -> Effects:
        """The shell appended (error None) or failed to append the records of `write_id`."""
        return self._run(now, lambda: self._ctx.complete_write(write_id, error))

    def writes_completed(self, write_ids: Sequence[int], error: ErrorCode | None,
                         now: int) -> Effects:
        """`write_completed` for several writes, in order, in one call: one set of effects
        (and one look at the timers) for a loop turn's appended commits, not one per commit
        or per batch."""
        def complete_all() -> None:
            for write_id in write_ids:
                self._ctx.complete_write(write_id, error)
        return self._run(now, complete_all)

    def advance_time(self, now: int) -> Effects:
        """Fire every timer due at `now` (call it at `next_deadline()`)."""
        return self._run(now, None)

    def next_deadline(self) -> int | None:
        return self._timers.next_deadline()

    def partition_of(self, group_id: str) -> int:
        return self._ctx.partition_of(group_id)

    def _run(self, now: int, work: Request | Callable[[], None] | None) -> Effects:
        """The frame of every entry point: fresh effects, the work, then every timer already
        due at `now`."""
        ctx = self._ctx
        ctx.fx = fx = Effects()
        ctx.now = now
        if callable(work):
            work()
        elif work is not None:
            self._dispatch(work)
        while (key := self._timers.pop_due(now)) is not None:
            self._on_timer(key)
        return fx

    def _on_timer(self, key: Hashable) -> None:
        """Every kind of timer has its case; anything else is a bug and raises."""
        match key:
            case OffsetExpiryTimer(offsets_partition):
                if offsets_partition in self._ctx.owned:
                    self._offsets.expire(offsets_partition)
            case GroupTimer(kind, group_id, member_id):
                group = self._groups.get(group_id)
                if group is not None:
                    self._on_group_timer(group, kind, member_id)
            case _:
                raise TypeError(f"not a coordinator timer: {key!r}")

    def _on_group_timer(self, group: ClassicGroup, kind: GroupTimerKind, member_id: str) -> None:
        match kind:
            case GroupTimerKind.JOIN:
                self._classic.on_join_timer(group)
            case GroupTimerKind.SYNC:
                self._classic.on_sync_timer(group)
            case GroupTimerKind.SESSION:
                self._classic.on_session_timer(group, member_id)
            case GroupTimerKind.PENDING_MEMBER:
                self._classic.remove_pending_member(
                    group, member_id, RemovalReason.PENDING_MEMBER_TIMEOUT)
            case GroupTimerKind.CONSUMER_SESSION:
                self._consumer.on_consumer_timer(group, member_id, session=True)
            case GroupTimerKind.CONSUMER_REBALANCE:
                self._consumer.on_consumer_timer(group, member_id, session=False)
            case GroupTimerKind.CONSUMER_JOIN:
                self._classic_members.on_timer(group, member_id, sync=False)
            case GroupTimerKind.CONSUMER_SYNC:
                self._classic_members.on_timer(group, member_id, sync=True)
            case GroupTimerKind.STREAMS_SESSION:
                self._streams.on_timer(group, member_id, session=True)
            case GroupTimerKind.STREAMS_REBALANCE:
                self._streams.on_timer(group, member_id, session=False)
            case GroupTimerKind.STREAMS_INITIAL:
                # The delay's end computes nothing: the next heartbeat computes the first
                # target. Kafka 4.3.1 tries to at this moment but cannot ("Cannot compute
                # delayed target assignment: configured topology is not present" in its log),
                # so a group described meanwhile stays Assigning there.
                pass
            case GroupTimerKind.SHARE_SESSION:
                self._share.on_session_timer(group, member_id)
            case _:
                assert_never(kind)

    # -- ownership ----------------------------------------------------------------------------

    @property
    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self._ctx.owned)

    @property
    def loading_partitions(self) -> frozenset[int]:
        return frozenset(self._ctx.loading)

    def begin_loading(self, offsets_partition: int) -> None:
        """Mark a partition as being read back: its groups answer COORDINATOR_LOAD_IN_PROGRESS."""
        self._check_partition(offsets_partition)
        if offsets_partition in self._ctx.owned:
            raise ValueError(f"__consumer_offsets-{offsets_partition} is already loaded")
        self._ctx.loading.add(offsets_partition)

    def load_partition(
        self, offsets_partition: int, records: Iterable[OffsetsRecord], now: int
    ) -> Effects:
        """Take ownership of a partition, rebuilding its groups from its records in log order."""
        image = PartitionImage()
        image.apply(records)
        return self.load_image(offsets_partition, image, now)

    def load_image(self, offsets_partition: int, image: PartitionImage, now: int) -> Effects:
        """`load_partition` from an already folded image (the bulk path for big logs)."""
        self._check_partition(offsets_partition)
        if offsets_partition in self._ctx.owned:
            raise ValueError(f"__consumer_offsets-{offsets_partition} is already loaded")
        return self._run(now, lambda: self._install(offsets_partition, image))

    def _install(self, offsets_partition: int, image: PartitionImage) -> None:
        groups = rebuild_groups(image, offsets_partition)
        misplaced = [g for g in groups if self._ctx.partition_of(g) != offsets_partition]
        if misplaced:
            raise ValueError(
                f"__consumer_offsets-{offsets_partition} holds groups that belong elsewhere: "
                f"{sorted(misplaced)[:5]}"
            )
        self._ctx.loading.discard(offsets_partition)
        self._ctx.owned.add(offsets_partition)
        for (producer_id, producer_epoch), records in image.open_transactions.items():
            self._ctx.txn.hold(offsets_partition, producer_id, producer_epoch, records)
        for group in groups.values():
            self._groups[group.group_id] = group
            self._ctx.event(group, None)
            for member in group.members.values():
                self._ctx.refresh_session(group, member)
            if group.streams is not None:  # and silent streams members
                for member_id in group.streams.members:
                    self._timers.schedule(streams_session_timer(group.group_id, member_id),
                                          self._ctx.now
                                          + self._ctx.config.group_streams_session_timeout_ms)
            if group.consumer is not None:  # silent consumer-protocol members expire too
                for member_id, consumer_member in group.consumer.members.items():
                    classic = consumer_member.classic
                    timeout = (self._ctx.config.group_consumer_session_timeout_ms
                               if classic is None else classic.session_timeout_ms)
                    self._timers.schedule(consumer_session_timer(group.group_id, member_id),
                                              self._ctx.now + timeout)
            if group.share is not None:
                for member_id in group.share.members:
                    self._timers.schedule(share_session_timer(group.group_id, member_id),
                                          self._ctx.now
                                          + self._ctx.config.group_share_session_timeout_ms)
            if len(group.members) > self._ctx.config.group_max_size:
                self._classic.prepare_rebalance(
                    group, RebalanceCause.GROUP_MAX_SIZE,
                    f"Freshly-loaded group is over capacity ({len(group.members)} members, "
                    f"group.max.size {self._ctx.config.group_max_size})")
        self._timers.schedule(
            offset_expiry_timer(offsets_partition),
            self._ctx.now + self._ctx.config.offsets_retention_check_interval_ms,
        )

    def unload_partition(self, offsets_partition: int, now: int) -> Effects:
        """Give up a partition: waiting requests get NOT_COORDINATOR and its groups are dropped."""
        return self._run(now, lambda: self._unload(offsets_partition))

    def _unload(self, offsets_partition: int) -> None:
        self._ctx.loading.discard(offsets_partition)
        if offsets_partition not in self._ctx.owned:
            return
        self._ctx.fail_pending_writes(offsets_partition, ErrorCode.NOT_COORDINATOR)
        self._ctx.owned.discard(offsets_partition)
        self._ctx.txn.drop_partition(offsets_partition)
        doomed = [g for g in self._groups.values() if g.offsets_partition == offsets_partition]
        for group in doomed:
            for member in group.members.values():
                self._ctx.answer_parked(group, member, ErrorCode.NOT_COORDINATOR)
            self._ctx.transition(group, GroupState.DEAD)
            del self._groups[group.group_id]
        gone = {g.group_id for g in doomed}
        expiry = offset_expiry_timer(offsets_partition)
        self._timers.cancel_where(
            lambda key: key == expiry or (isinstance(key, GroupTimer) and key.group_id in gone)
        )

    def _check_partition(self, offsets_partition: int) -> None:
        if not 0 <= offsets_partition < self._ctx.config.offsets_topic_num_partitions:
            raise ValueError(
                f"no __consumer_offsets partition {offsets_partition} "
                f"(offsets.topic.num.partitions={self._ctx.config.offsets_topic_num_partitions})"
            )

    # -- inspection ---------------------------------------------------------------------------

    def group_view(self, group_id: str) -> GroupView | None:
        group = self._groups.get(group_id)
        return None if group is None else view_of(group)

    def pending_transactional_offsets(self) -> dict[ProducerKey, dict[OffsetKey, OffsetView]]:
        """(offsets partition, producer id) -> (group, topic, partition) -> the pending offset
        (what replay must rebuild, too)."""
        return {producer: {key: (value.offset, value.metadata, value.leader_epoch)
                           for key, value in held.items()}
                for producer, held in self._ctx.txn.snapshot().items()}

    def group_views(self) -> dict[str, GroupView]:
        return {group_id: view_of(group) for group_id, group in self._groups.items()}

    def group_summaries(self) -> list[GroupSummary]:
        """Every live group of the owned partitions, for metrics (Dead placeholders excluded)."""
        owned = self._ctx.owned
        return [summary_of(group, self._ctx.topic_names.get) for group in self._groups.values()
                if group.offsets_partition in owned and group.state is not GroupState.DEAD]
