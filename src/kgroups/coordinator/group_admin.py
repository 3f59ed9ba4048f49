"""DescribeGroups, ListGroups and DeleteGroups: the admin APIs over groups of every type."""

from __future__ import annotations

import functools
from collections import Counter

from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.group import ClassicGroup, GroupState
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kgroups.coordinator.persistence import (
    consumer_group_tombstones,
    group_tombstone,
    offset_record,
    share_group_tombstones,
)
from kgroups.errors import ErrorCode
from kgroups.records.schema import OffsetsRecord


class GroupAdmin:
    """The admin APIs over the shard's groups (`ShardContext`)."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx

    def describe(self, req: DescribeGroupsRequest) -> None:
        self._ctx.reply(
            req.request_id,
            DescribeGroupsResponse(
                tuple(self._describe_one(g, req.version) for g in req.group_ids)
            ),
        )

    def _describe_one(self, group_id: str, version: int) -> DescribedGroup:
        error = self._ctx.ownership_error(group_id)
        if error is not None:
            return DescribedGroup(group_id, error)
        group = self._ctx.groups.get(group_id)
        # A consumer-protocol group is described by ConsumerGroupDescribe; DescribeGroups
        # answers about it as about a missing group, as Kafka does (admin clients fall back
        # from one API to the other on this answer).
        if group is None or group.state is GroupState.DEAD or group.consumer is not None \
                or group.share is not None:
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

    def list(self, req: ListGroupsRequest) -> None:
        wanted = {state.lower() for state in req.states_filter}
        listed = tuple(
            listed
            for group in self._ctx.groups.values()
            if group.offsets_partition in self._ctx.owned and group.state is not GroupState.DEAD
            for listed in (_listed(group),)
            if not wanted or listed.state.lower() in wanted
        )
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._ctx.loading else ErrorCode.NONE
        self._ctx.reply(req.request_id, ListGroupsResponse(error, listed))

    def delete(self, req: DeleteGroupsRequest) -> None:
        """Each partition's deletions are one write, applied at once: the groups are Dead while
        it is in flight and reverted (back to Empty, offsets restored) if it fails, as Kafka
        reverts a deletion whose tombstones could not be written."""
        results: dict[str, ErrorCode] = {}
        by_partition: dict[int, list[ClassicGroup]] = {}
        for group_id in req.group_ids:
            error = self._ctx.ownership_error(group_id)
            group = self._ctx.groups.get(group_id)
            if error is None and (group is None or group.state is GroupState.DEAD):
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif error is None and group is not None and (
                group.state is not GroupState.EMPTY
                or (group.consumer is not None and group.consumer.members)
                or (group.share is not None and group.share.members)
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
            self._ctx.reply(
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
            journal = Journal()
            for group in groups:
                self._ctx.record_all(group, journal,
                                     _deletion_records(group, self._ctx.commits_in_flight,
                                                       self._ctx.txn.keys_of(group.group_id)))
                journal.on_revert.append(functools.partial(self._undelete, group))
            self._ctx.write(partition, journal, functools.partial(settle, groups, ErrorCode.NONE),
                            functools.partial(settle, groups))

    def _undelete(self, group: ClassicGroup) -> None:
        """A deletion was undone: a group that no GroupMetadata value brought back (one of
        only offsets) is Empty again, as replay of its offsets makes it."""
        if group.state is GroupState.DEAD and self._ctx.groups.get(group.group_id) is group:
            group.previous_state = group.state
            group.state = GroupState.EMPTY
            group.state_timestamp = self._ctx.now
            self._ctx.event(group, GroupState.DEAD)


def _deletion_records(
    group: ClassicGroup, commits_in_flight: dict[str, Counter[tuple[str, int]]],
    in_transactions: set[tuple[str, int]],
) -> list[OffsetsRecord]:
    """Tombstones for every offset of `group`, those of commits still in flight included (they
    may land before the deletion does) and those pending in open transactions (as Kafka: the
    tombstone means a later COMMIT marker brings none of them back), then for the group
    itself."""
    pending = commits_in_flight.get(group.group_id, Counter())
    in_flight = {key for key, count in pending.items() if count > 0}
    keys = sorted(set(group.offsets) | in_flight | in_transactions)
    return [offset_record(group.group_id, topic, p, None) for topic, p in keys] + [
        *consumer_group_tombstones(group), *share_group_tombstones(group),
        group_tombstone(group.group_id)
    ]


def _listed(group: ClassicGroup) -> ListedGroup:
    """A consumer- or share-protocol group lists with its own state and type, as Kafka lists
    it."""
    if group.consumer is not None:
        return ListedGroup(group.group_id, "consumer", group.consumer.state(), "consumer")
    if group.share is not None:
        return ListedGroup(group.group_id, "share", group.share.state(), "share")
    return ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
