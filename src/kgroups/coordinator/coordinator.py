"""`GroupCoordinator`: the public face of the core (handlers, ownership, admin APIs, timers)."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Hashable, Iterable
from typing import assert_never

from kgroups.coordinator.api import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroups.coordinator.consumer_api import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from kgroups.coordinator.effects import Effects, RebalanceCause, RemovalReason
from kgroups.coordinator.group import ClassicGroup, GroupState
from kgroups.coordinator.migration import MigrationHandlers
from kgroups.coordinator.offsets import OffsetHandlers
from kgroups.coordinator.persistence import (
    PartitionImage,
    consumer_group_tombstones,
    group_tombstone,
    offset_record,
    rebuild_groups,
)
from kgroups.coordinator.timer_keys import (
    GroupTimer,
    GroupTimerKind,
    OffsetExpiryTimer,
    consumer_session_timer,
    offset_expiry_timer,
)
from kgroups.coordinator.views import GroupSummary, GroupView, summary_of, view_of
from kgroups.errors import ErrorCode
from kgroups.records.schema import OffsetsRecord


class GroupCoordinator(OffsetHandlers, MigrationHandlers):
    """Kafka's group coordinator (classic protocol, and KIP-848's consumer protocol) for the
    __consumer_offsets partitions it owns.

    Every method takes the current time in ms and returns the `Effects` to carry out.
    """

    # -- request handlers ---------------------------------------------------------------------

    def join_group(self, req: JoinGroupRequest, now: int) -> Effects:
        return self._run(now, lambda: self._join(req))

    def sync_group(self, req: SyncGroupRequest, now: int) -> Effects:
        return self._run(now, lambda: self._sync(req))

    def heartbeat(self, req: HeartbeatRequest, now: int) -> Effects:
        return self._run(now, lambda: self._heartbeat(req))

    def leave_group(self, req: LeaveGroupRequest, now: int) -> Effects:
        return self._run(now, lambda: self._leave(req))

    def offset_commit(self, req: OffsetCommitRequest, now: int) -> Effects:
        return self._run(now, lambda: self._commit(req))

    def offset_fetch(self, req: OffsetFetchRequest, now: int) -> Effects:
        return self._run(now, lambda: self._fetch(req))

    def offset_delete(self, req: OffsetDeleteRequest, now: int) -> Effects:
        return self._run(now, lambda: self._offset_delete(req))

    def describe_groups(self, req: DescribeGroupsRequest, now: int) -> Effects:
        return self._run(now, lambda: self._describe(req))

    def list_groups(self, req: ListGroupsRequest, now: int) -> Effects:
        return self._run(now, lambda: self._list(req))

    def delete_groups(self, req: DeleteGroupsRequest, now: int) -> Effects:
        return self._run(now, lambda: self._delete_groups(req))

    def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeatRequest, now: int) -> Effects:
        return self._run(now, lambda: self._consumer_heartbeat(req))

    def consumer_group_describe(self, req: ConsumerGroupDescribeRequest, now: int) -> Effects:
        return self._run(now, lambda: self._consumer_describe(req))

    # -- writes and time ----------------------------------------------------------------------

    def write_completed(self, write_id: int, error: ErrorCode | None, now: int) -> Effects:
        """The shell appended (error None) or failed to append the records of `write_id`."""
        return self._run(now, lambda: self._complete_write(write_id, error))

    def advance_time(self, now: int) -> Effects:
        """Fire every timer due at `now` (call it at `next_deadline()`)."""
        return self._run(now, lambda: None)

    def next_deadline(self) -> int | None:
        return self._timers.next_deadline()

    def _on_timer(self, key: Hashable) -> None:
        """Every kind of timer has its case; anything else is a bug and raises."""
        match key:
            case OffsetExpiryTimer(offsets_partition):
                if offsets_partition in self._owned:
                    self._expire_offsets(offsets_partition)
            case GroupTimer(kind, group_id, member_id):
                group = self._groups.get(group_id)
                if group is not None:
                    self._on_group_timer(group, kind, member_id)
            case _:
                raise TypeError(f"not a coordinator timer: {key!r}")

    def _on_group_timer(self, group: ClassicGroup, kind: GroupTimerKind, member_id: str) -> None:
        match kind:
            case GroupTimerKind.JOIN:
                self._on_join_timer(group)
            case GroupTimerKind.SYNC:
                self._on_sync_timer(group)
            case GroupTimerKind.SESSION:
                self._on_session_timer(group, member_id)
            case GroupTimerKind.PENDING_MEMBER:
                self._remove_pending_member(group, member_id, RemovalReason.PENDING_MEMBER_TIMEOUT)
            case GroupTimerKind.CONSUMER_SESSION:
                self._on_consumer_timer(group, member_id, session=True)
            case GroupTimerKind.CONSUMER_REBALANCE:
                self._on_consumer_timer(group, member_id, session=False)
            case GroupTimerKind.CONSUMER_JOIN:
                self._on_classic_member_timer(group, member_id, sync=False)
            case GroupTimerKind.CONSUMER_SYNC:
                self._on_classic_member_timer(group, member_id, sync=True)
            case _:
                assert_never(kind)

    # -- ownership ----------------------------------------------------------------------------

    @property
    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self._owned)

    @property
    def loading_partitions(self) -> frozenset[int]:
        return frozenset(self._loading)

    def begin_loading(self, offsets_partition: int) -> None:
        """Mark a partition as being read back: its groups answer COORDINATOR_LOAD_IN_PROGRESS."""
        self._check_partition(offsets_partition)
        if offsets_partition in self._owned:
            raise ValueError(f"__consumer_offsets-{offsets_partition} is already loaded")
        self._loading.add(offsets_partition)

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
        if offsets_partition in self._owned:
            raise ValueError(f"__consumer_offsets-{offsets_partition} is already loaded")
        return self._run(now, lambda: self._install(offsets_partition, image))

    def _install(self, offsets_partition: int, image: PartitionImage) -> None:
        groups = rebuild_groups(image, offsets_partition)
        misplaced = [g for g in groups if self.partition_of(g) != offsets_partition]
        if misplaced:
            raise ValueError(
                f"__consumer_offsets-{offsets_partition} holds groups that belong elsewhere: "
                f"{sorted(misplaced)[:5]}"
            )
        self._loading.discard(offsets_partition)
        self._owned.add(offsets_partition)
        for group in groups.values():
            self._groups[group.group_id] = group
            self._event(group, None)
            for member in group.members.values():
                self._refresh_session(group, member)
            if group.consumer is not None:  # silent consumer-protocol members expire too
                for member_id, consumer_member in group.consumer.members.items():
                    classic = consumer_member.classic
                    timeout = (self.config.group_consumer_session_timeout_ms
                               if classic is None else classic.session_timeout_ms)
                    self._timers.schedule(consumer_session_timer(group.group_id, member_id),
                                          self._now + timeout)
            if len(group.members) > self.config.group_max_size:
                self._prepare_rebalance(
                    group, RebalanceCause.GROUP_MAX_SIZE,
                    f"Freshly-loaded group is over capacity ({len(group.members)} members, "
                    f"group.max.size {self.config.group_max_size})")
        self._timers.schedule(
            offset_expiry_timer(offsets_partition),
            self._now + self.config.offsets_retention_check_interval_ms,
        )

    def unload_partition(self, offsets_partition: int, now: int) -> Effects:
        """Give up a partition: waiting requests get NOT_COORDINATOR and its groups are dropped."""
        return self._run(now, lambda: self._unload(offsets_partition))

    def _unload(self, offsets_partition: int) -> None:
        self._loading.discard(offsets_partition)
        if offsets_partition not in self._owned:
            return
        self._fail_pending_writes(offsets_partition, ErrorCode.NOT_COORDINATOR)
        self._owned.discard(offsets_partition)
        doomed = [g for g in self._groups.values() if g.offsets_partition == offsets_partition]
        for group in doomed:
            for member in group.members.values():
                if member.join_request is not None:
                    self._reply(
                        member.join_request,
                        JoinGroupResponse(ErrorCode.NOT_COORDINATOR, member_id=member.member_id),
                    )
                    group.set_join_request(member, None)
                if member.sync_request is not None:
                    self._reply(member.sync_request, SyncGroupResponse(ErrorCode.NOT_COORDINATOR))
                    member.sync_request = None
            self._transition(group, GroupState.DEAD)
            del self._groups[group.group_id]
        gone = {g.group_id for g in doomed}
        expiry = offset_expiry_timer(offsets_partition)
        self._timers.cancel_where(
            lambda key: key == expiry or (isinstance(key, GroupTimer) and key.group_id in gone)
        )

    def _check_partition(self, offsets_partition: int) -> None:
        if not 0 <= offsets_partition < self.config.offsets_topic_num_partitions:
            raise ValueError(
                f"no __consumer_offsets partition {offsets_partition} "
                f"(offsets.topic.num.partitions={self.config.offsets_topic_num_partitions})"
            )

    # -- inspection ---------------------------------------------------------------------------

    def group_view(self, group_id: str) -> GroupView | None:
        group = self._groups.get(group_id)
        return None if group is None else view_of(group)

    def group_views(self) -> dict[str, GroupView]:
        return {group_id: view_of(group) for group_id, group in self._groups.items()}

    def group_summaries(self) -> list[GroupSummary]:
        """Every live group of the owned partitions, for metrics (Dead placeholders excluded)."""
        return [summary_of(group, self.topic_name) for group in self._groups.values()
                if group.offsets_partition in self._owned and group.state is not GroupState.DEAD]

    # -- admin APIs ---------------------------------------------------------------------------

    def _describe(self, req: DescribeGroupsRequest) -> None:
        self._reply(
            req.request_id,
            DescribeGroupsResponse(
                tuple(self._describe_one(g, req.version) for g in req.group_ids)
            ),
        )

    def _describe_one(self, group_id: str, version: int) -> DescribedGroup:
        error = self._ownership_error(group_id)
        if error is not None:
            return DescribedGroup(group_id, error)
        group = self._groups.get(group_id)
        # A consumer-protocol group is described by ConsumerGroupDescribe; DescribeGroups
        # answers about it as about a missing group, as Kafka does (admin clients fall back
        # from one API to the other on this answer).
        if group is None or group.state is GroupState.DEAD or group.consumer is not None:
            if version >= 6:
                why = ("is not a classic group" if group is not None
                       and group.state is not GroupState.DEAD else "not found")
                return DescribedGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                      error_message=f"Group {group_id} {why}.")
            return DescribedGroup(group_id, ErrorCode.NONE)
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name if stable else None
        # Metadata only while Stable, but the last assignment always, as Kafka describes a
        # member mid-rebalance (it keeps the previous generation's assignment until replaced).
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata_for(protocol) if protocol is not None else b"",
                m.assignment,
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            group_id,
            ErrorCode.NONE,
            group.state.value,
            group.protocol_type or "",
            protocol or "",
            members,
            group.last_rebalance,
        )

    def _list(self, req: ListGroupsRequest) -> None:
        wanted = {state.lower() for state in req.states_filter}
        listed = tuple(
            listed
            for group in self._groups.values()
            if group.offsets_partition in self._owned and group.state is not GroupState.DEAD
            for listed in (_listed(group),)
            if not wanted or listed.state.lower() in wanted
        )
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._loading else ErrorCode.NONE
        self._reply(req.request_id, ListGroupsResponse(error, listed))

    def _delete_groups(self, req: DeleteGroupsRequest) -> None:
        """Each partition's deletions are one write, applied at once: the groups are Dead while
        it is in flight and reverted (back to Empty, offsets restored) if it fails, as Kafka
        reverts a deletion whose tombstones could not be written."""
        results: dict[str, ErrorCode] = {}
        by_partition: dict[int, list[ClassicGroup]] = {}
        for group_id in req.group_ids:
            error = self._ownership_error(group_id)
            group = self._groups.get(group_id)
            if error is None and (group is None or group.state is GroupState.DEAD):
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif error is None and group is not None and (
                group.state is not GroupState.EMPTY
                or (group.consumer is not None and group.consumer.members)
            ):
                error = ErrorCode.NON_EMPTY_GROUP
            elif group is not None and group in by_partition.get(group.offsets_partition, ()):
                error = ErrorCode.GROUP_ID_NOT_FOUND  # named twice: the first one deletes it
            if error is not None or group is None:
                results[group_id] = error or ErrorCode.GROUP_ID_NOT_FOUND
                continue
            by_partition.setdefault(group.offsets_partition, []).append(group)

        outstanding = len(by_partition)

        def answer() -> None:
            self._reply(
                req.request_id,
                DeleteGroupsResponse(tuple((g, results[g]) for g in req.group_ids)),
            )

        def settle(groups: list[ClassicGroup], error: ErrorCode) -> None:
            nonlocal outstanding
            for group in groups:
                results[group.group_id] = error
            outstanding -= 1
            if outstanding == 0:
                answer()

        if not by_partition:
            answer()
            return
        for partition, groups in by_partition.items():
            self._write_at_once(
                partition,
                [r for g in groups for r in _deletion_records(g, self._commits_in_flight)],
                functools.partial(settle, groups, ErrorCode.NONE),
                functools.partial(settle, groups),
                revertible=True,
            )


def _deletion_records(
    group: ClassicGroup, commits_in_flight: dict[str, Counter[tuple[str, int]]]
) -> list[OffsetsRecord]:
    """Tombstones for every offset of `group`, those of commits still in flight included (they
    may land before the deletion does), then for the group itself."""
    pending = commits_in_flight.get(group.group_id, Counter())
    in_flight = {key for key, count in pending.items() if count > 0}
    keys = sorted(set(group.offsets) | in_flight)
    return [offset_record(group.group_id, topic, p, None) for topic, p in keys] + [
        *consumer_group_tombstones(group), group_tombstone(group.group_id)
    ]


def _listed(group: ClassicGroup) -> ListedGroup:
    """A consumer-protocol group lists with its consumer state, as Kafka lists it."""
    if group.consumer is not None:
        return ListedGroup(group.group_id, "consumer", group.consumer.state(), "consumer")
    return ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
