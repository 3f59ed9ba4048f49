"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets in the core.

The coordinator's part is the checks and the share-partition metadata record (type 15), as
Kafka 4.3.1 does them: an alter or a delete needs an empty share group (NON_EMPTY_GROUP, "The
group is not empty."), an alter of a group that does not exist makes it (with that record only);
altered partitions are recorded initializing until the broker has initialized them in the share
coordinator at their new start offsets, deleted topics are recorded deleting until the broker
has deleted their state. Topics or partitions that do not exist are answered
UNKNOWN_TOPIC_OR_PARTITION (listed first by an alter, last by a delete). The broker does the
reading and writing of share state (`broker/apis/share_offsets.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.group import ClassicGroup, GroupState
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.share_group import ShareGroup, SharePartitions, merged, without
from kgroups.coordinator.share_messages import (
    AlterShareOffsetsRequest,
    AlterShareOffsetsResponse,
    DeleteShareOffsetsRequest,
    DeleteShareOffsetsResponse,
    DescribeShareOffsetsRequest,
    DescribeShareOffsetsResponse,
    ShareGroupInitializedResponse,
    ShareStateDeletedRequest,
    ShareTopicResult,
)
from kgroups.errors import KAFKA_MESSAGES, ErrorCode
from kgroups.records.share_group import ShareGroupStatePartitionMetadataKey

NOT_HOSTED = KAFKA_MESSAGES[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
NOT_EMPTY_MESSAGE = "The group is not empty."
INVALID_GROUP_MESSAGE = "The group id is invalid."


class ShareOffsets:
    """The share-group offsets admin APIs over the shard's groups (`ShardContext`)."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx

    def describe(self, req: DescribeShareOffsetsRequest) -> None:
        """The share-partitions to describe: those asked for (unknown ones in error), or every
        one the group has state for; a group that does not exist has none."""
        error = self._ctx.ownership_error(req.group_id) if req.group_id else None
        if error is not None:
            self._ctx.reply(req.request_id, DescribeShareOffsetsResponse(error))
            return
        group = self._ctx.groups.get(req.group_id)
        share = None if group is None else group.share
        if req.topics is None:
            held = {} if share is None else share.initialized
            topics = tuple(ShareTopicResult(name, topic_id, tuple(
                (p, ErrorCode.NONE, None) for p in sorted(parts)))
                for topic_id, (name, parts) in held.items())
        else:
            topics = tuple(self._checked(name, parts) for name, parts in req.topics)
        self._ctx.reply(req.request_id, DescribeShareOffsetsResponse(ErrorCode.NONE, topics))

    def _checked(self, name: str, partitions: tuple[int, ...]) -> ShareTopicResult:
        info = self._ctx.topics.get(name)
        return ShareTopicResult(name, None if info is None else info.topic_id, tuple(
            (p, ErrorCode.NONE, None) if info is not None and 0 <= p < info.partitions
            else (p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NOT_HOSTED)
            for p in partitions))

    def _empty_share_group(self, group_id: str, create: bool,
                           journal: Journal) -> tuple[ClassicGroup, ShareGroup] | _Refused:
        """The group's share part if the group may have its offsets changed, else the
        error to answer."""
        if not group_id:
            return _Refused(ErrorCode.INVALID_GROUP_ID, INVALID_GROUP_MESSAGE)
        error = self._ctx.ownership_error(group_id)
        if error is not None:
            return _Refused(error)
        group = self._ctx.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            if not create:
                return _Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
            group = self._ctx.create_group(group_id, journal)
        if group.share is None:
            if group.consumer is not None or group.members or group.offsets:
                return _Refused(ErrorCode.GROUP_ID_NOT_FOUND,
                                f"Group {group_id} is not a share group.")
            return group, self._ctx.open_share_part(group, journal)
        if group.share.members:
            return _Refused(ErrorCode.NON_EMPTY_GROUP, NOT_EMPTY_MESSAGE)
        return group, group.share

    def alter(self, req: AlterShareOffsetsRequest) -> None:
        journal = Journal()
        found = self._empty_share_group(req.group_id, True, journal)
        if isinstance(found, _Refused):
            self._ctx.roll_back(journal)
            self._ctx.reply(req.request_id, AlterShareOffsetsResponse(
                found.error, found.message))
            return
        group, share = found
        results = [self._checked(name, tuple(p for p, _ in parts)) for name, parts in req.topics]
        offsets = {(name, p): offset for name, parts in req.topics for p, offset in parts}
        initialize = tuple(
            (result.topic_id, result.topic_name, p, offsets[(result.topic_name, p)])
            for result in results if result.topic_id is not None
            for p, error, _ in result.partitions if error == ErrorCode.NONE)
        altered: SharePartitions = {}
        for topic_id, name, partition, _ in initialize:
            _, have = altered.get(topic_id, (name, frozenset()))
            altered[topic_id] = (name, have | {partition})
        if altered:
            self._ctx.record(group, journal, ShareGroupStatePartitionMetadataKey(group.group_id),
                             share.state_metadata_value(merged(share.initializing, altered),
                                                        share.initialized, share.deleting))
        response = AlterShareOffsetsResponse(
            ErrorCode.NONE, None, _errors_first(results), initialize, share.group_epoch)
        self._ctx.reply_when_written(group.offsets_partition, journal, req.request_id,
                                     response, AlterShareOffsetsResponse)

    def delete(self, req: DeleteShareOffsetsRequest) -> None:
        journal = Journal()
        found = self._empty_share_group(req.group_id, False, journal)
        if isinstance(found, _Refused):
            self._ctx.reply(req.request_id, DeleteShareOffsetsResponse(found.error,
                                                                       found.message))
            return
        group, share = found
        results = []
        gone: SharePartitions = {}
        for name in req.topics:
            info = self._ctx.topics.get(name)
            if info is None:
                results.append(ShareTopicResult(name, None, (
                    (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NOT_HOSTED),)))
                continue
            results.append(ShareTopicResult(name, info.topic_id, ((-1, ErrorCode.NONE, None),)))
            held = (share.initialized.get(info.topic_id, (name, frozenset()))[1]
                    | share.initializing.get(info.topic_id, (name, frozenset()))[1])
            gone[info.topic_id] = (name, held)
        delete = tuple((t, name, tuple(sorted(ps))) for t, (name, ps) in gone.items() if ps)
        if gone:
            self._ctx.record(group, journal, ShareGroupStatePartitionMetadataKey(group.group_id),
                             share.state_metadata_value(
                                 without(share.initializing, gone),
                                 without(share.initialized, gone),
                                 {**share.deleting, **{t: n for t, (n, _) in gone.items()}}))
        # Unlike an alter's, a delete's answer lists the topics that exist first.
        known_first = tuple(sorted(results, key=lambda r: r.topic_id is None))
        response = DeleteShareOffsetsResponse(ErrorCode.NONE, None, known_first, delete)
        self._ctx.reply_when_written(group.offsets_partition, journal, req.request_id,
                                     response, DeleteShareOffsetsResponse)

    def state_deleted(self, req: ShareStateDeletedRequest) -> None:
        """The broker deleted the state of the topics: they are no longer being deleted."""
        group = self._ctx.groups.get(req.group_id)
        share = None if group is None else group.share
        if group is None or share is None:
            self._ctx.reply(req.request_id, ShareGroupInitializedResponse(
                ErrorCode.GROUP_ID_NOT_FOUND))
            return
        journal = Journal()
        self._ctx.record(group, journal, ShareGroupStatePartitionMetadataKey(group.group_id),
                         share.state_metadata_value(
                             share.initializing, share.initialized,
                             {t: n for t, n in share.deleting.items()
                              if t not in req.topic_ids}))
        self._ctx.reply_when_written(group.offsets_partition, journal, req.request_id,
                                     ShareGroupInitializedResponse(ErrorCode.NONE),
                                     ShareGroupInitializedResponse)


@dataclass(frozen=True, slots=True)
class _Refused:
    """An offsets change refused before any partition is looked at: Kafka's error and text."""

    error: ErrorCode
    message: str | None = None


def _errors_first(results: list[ShareTopicResult]) -> tuple[ShareTopicResult, ...]:
    """Topics that do not exist first, as Kafka lists them."""
    return tuple(sorted(results, key=lambda r: r.topic_id is not None))
