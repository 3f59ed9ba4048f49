"""OffsetCommit, OffsetFetch, OffsetDelete and periodic offset expiry.

Committed offsets enter memory only when their records are durable
(`ShardContext.write_when_durable`), so OffsetFetch never shows an offset a crash could take back;
commits still in flight are counted per partition so that expiry and deletion never race them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from kgroups.coordinator.classic_groups import validate_member
from kgroups.coordinator.consumer_group import ConsumerGroup, TopicInfo
from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState
from kgroups.coordinator.messages import (
    UNKNOWN_MEMBER_ID,
    FetchedGroup,
    FetchedOffset,
    FetchedTopic,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionError,
    TopicPartitionErrors,
    TxnOffsetCommitRequest,
)
from kgroups.coordinator.persistence import (
    consumer_group_tombstones,
    group_tombstone,
    offset_record,
    streams_group_tombstones,
)
from kgroups.coordinator.streams_offsets import validate_streams_commit, validate_streams_fetch
from kgroups.coordinator.timer_keys import offset_expiry_timer
from kgroups.errors import ErrorCode
from kgroups.records.schema import OffsetCommitKey, OffsetCommitValue, OffsetsRecord


def validate_consumer_commit(
    group: ClassicGroup, req: OffsetCommitRequest | TxnOffsetCommitRequest,
    topics: Mapping[str, TopicInfo],
) -> ErrorCode | None:
    """Kafka 4.3's check for a consumer-protocol group: a commit without member epoch is taken
    only while the group has no members; otherwise the member must exist, commit with
    OffsetCommit v9+ (unless it speaks the classic protocol in the group; TxnOffsetCommit has
    no such floor), and send its member epoch (the generation field carries it) or, KIP-1251,
    an older epoch no older than the epoch each committed partition was assigned to it at. One
    refused partition refuses the commit (STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for a
    classic member and for any TxnOffsetCommit, whose response has no STALE_MEMBER_EPOCH)."""
    consumer = group.consumer
    assert consumer is not None
    if req.generation_id < 0 and not consumer.members:
        return None
    member = consumer.members.get(req.member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    classic = member.classic is not None
    transactional = isinstance(req, TxnOffsetCommitRequest)
    if isinstance(req, OffsetCommitRequest) and req.version < 9 and not classic:
        return ErrorCode.UNSUPPORTED_VERSION
    stale = (ErrorCode.ILLEGAL_GENERATION if classic or transactional
             else ErrorCode.STALE_MEMBER_EPOCH)
    if req.generation_id == member.member_epoch:
        return None
    if req.generation_id > member.member_epoch:
        return stale
    for topic in req.topics:
        info = topics.get(topic.name)
        for part in topic.partitions:
            since = None if info is None else member.epochs.get((info.topic_id, part.partition))
            if since is None or req.generation_id < since:
                return stale
    return None


def validate_consumer_fetch(
    consumer: ConsumerGroup, member_id: str | None, member_epoch: int
) -> ErrorCode | None:
    """Kafka's OffsetFetch check for a consumer-protocol group: no member id and no epoch (an
    admin client, or a client outside the group) is answered; otherwise the member must exist
    and send its member epoch."""
    if member_id is None and member_epoch < 0:
        return None
    member = consumer.members.get(member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return (ErrorCode.ILLEGAL_GENERATION if member.classic is not None
                else ErrorCode.STALE_MEMBER_EPOCH)
    return None


def _utf16_length(text: str) -> int:
    """Java's String.length(), which is what offset.metadata.max.bytes is compared against."""
    return len(text.encode("utf-16-le")) // 2


def sized_partitions(
    topics: Iterable[OffsetCommitTopic], limit: int,
) -> tuple[list[tuple[str, OffsetCommitPartition, str]], set[tuple[str, int]]]:
    """The partitions of a commit whose metadata fits offset.metadata.max.bytes, each with its
    metadata ("" for none), and the (topic, partition) of those that do not (they answer
    OFFSET_METADATA_TOO_LARGE, the rest are written): OffsetCommit's and TxnOffsetCommit's
    rule."""
    fitting: list[tuple[str, OffsetCommitPartition, str]] = []
    too_large: set[tuple[str, int]] = set()
    for topic in topics:
        for part in topic.partitions:
            metadata = part.metadata or ""
            if metadata and _utf16_length(metadata) > limit:
                too_large.add((topic.name, part.partition))
            else:
                fitting.append((topic.name, part, metadata))
    return fitting, too_large


class Offsets:
    """OffsetCommit, OffsetFetch, OffsetDelete and retention over the shard's groups."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx
        # Per group, the OffsetFetches that wait for some of its commits (see `fetch`).
        self._fetches_waiting: dict[str, list[_WaitingFetch]] = {}

    # -- OffsetCommit -------------------------------------------------------------------------

    def commit(self, req: OffsetCommitRequest) -> None:
        error = self._ctx.ownership_error(req.group_id)
        group = self._ctx.groups.get(req.group_id)
        if error is None:
            if group is None:
                if req.generation_id >= 0:
                    error = (
                        ErrorCode.GROUP_ID_NOT_FOUND
                        if req.version >= 9
                        else ErrorCode.ILLEGAL_GENERATION
                    )
            else:
                error = self._validate_commit(group, req)
        if error is not None:
            self._ctx.reply(req.request_id, _commit_response(req, lambda _topic, _p: error))
            return
        if group is not None and group.state in (
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
        ):
            member = group.members.get(req.member_id)
            if member is not None:
                self._ctx.refresh_session(group, member)  # a commit proves the member is alive

        expire = None if req.retention_time_ms < 0 else self._ctx.now + req.retention_time_ms
        fitting, too_large = sized_partitions(req.topics,
                                              self._ctx.config.offset_metadata_max_bytes)
        values: dict[tuple[str, int], OffsetCommitValue] = {}
        for topic_name, part, metadata in fitting:
            commit_ts = self._ctx.now if part.commit_timestamp < 0 else part.commit_timestamp
            values[(topic_name, part.partition)] = OffsetCommitValue(
                offset=part.offset,
                metadata=metadata,
                commit_timestamp=commit_ts,
                # The v1 record that carries an expire timestamp has no leader epoch (and
                # OffsetCommit versions with a retention time never send one).
                leader_epoch=part.leader_epoch if expire is None else -1,
                expire_timestamp=expire,
            )

        def answer(error_for_stored: ErrorCode) -> None:
            def error_of(topic: str, partition: int) -> ErrorCode:
                if (topic, partition) in too_large:
                    return ErrorCode.OFFSET_METADATA_TOO_LARGE
                return error_for_stored

            self._ctx.reply(req.request_id, _commit_response(req, error_of))

        if not values:
            answer(ErrorCode.NONE)
            return
        group_id = req.group_id
        in_flight = self._ctx.commits_in_flight.get(group_id)
        if in_flight is None:  # (not setdefault: a Counter built for every commit costs ~1 µs)
            in_flight = self._ctx.commits_in_flight[group_id] = Counter()
        for key in values:
            in_flight[key] = in_flight.get(key, 0) + 1

        def settle() -> ClassicGroup | None:
            """The group the commit lands in, or None if it was deleted meanwhile. A group whose
            deletion is still in flight takes it: the deletion's tombstones cover it, and if they
            fail, the group comes back with the offset, as the log then has it."""
            self._commit_settled(group_id, values.keys())
            if group is None:
                existing = self._ctx.groups.get(group_id)
                return existing if existing is not None else self._ctx.create_group(group_id)
            if self._ctx.groups.get(group_id) is group or group.state is GroupState.DEAD:
                return group  # a Dead one awaits its deletion, even if replaced meanwhile
            return None

        def succeeded() -> None:
            answer(ErrorCode.NONE)
            if self._fetches_waiting:
                self._fetches_go_on(group_id)

        def failed(write_error: ErrorCode) -> None:
            self._commit_settled(group_id, values.keys())
            answer(write_error)
            if self._fetches_waiting:
                self._fetches_go_on(group_id)

        records = []
        for (topic_name, partition), value in values.items():  # (a loop: no comprehension frame)
            records.append(offset_record(group_id, topic_name, partition, value))
        self._ctx.write_when_durable(
            self._ctx.partition_of(group_id), records, settle, succeeded, failed)

    def _fetches_go_on(self, group_id: str) -> None:
        """One of the group's commits is answered (its offsets applied, or it failed): the
        fetches that waited for none written after them are answered now."""
        waiting = self._fetches_waiting.pop(group_id, None)
        if waiting is None:
            return
        first = self._first_commit_in_flight(group_id)
        still = []
        for fetch in waiting:
            if first is not None and first <= fetch.written_before:
                still.append(fetch)
                continue
            fetch.groups.discard(group_id)
            if not fetch.groups:
                self._answer_fetch(fetch.request)
        if still:
            self._fetches_waiting[group_id] = still

    def _first_commit_in_flight(self, group_id: str) -> int | None:
        """The write id of the group's oldest OffsetCommit still in flight (None: none is).
        Looked for only while fetches wait, so commits pay nothing for it."""
        if group_id not in self._ctx.commits_in_flight:
            return None
        partition = self._ctx.partition_of(group_id)
        for write_id, pending in self._ctx.pending_writes.items():  # in the order written
            if pending.offsets_partition == partition and pending.producer_id < 0 and any(
                    type(record.key) is OffsetCommitKey and record.key.group == group_id
                    for record in pending.records):
                return write_id
        return None

    def _commit_settled(self, group_id: str, keys: Iterable[tuple[str, int]]) -> None:
        """An OffsetCommit's write completed, either way: its keys are no longer in flight."""
        in_flight = self._ctx.commits_in_flight[group_id]
        for key in keys:
            left = in_flight[key] - 1
            if left:
                in_flight[key] = left
            else:
                del in_flight[key]
        if not in_flight:
            del self._ctx.commits_in_flight[group_id]

    def _validate_commit(self, group: ClassicGroup, req: OffsetCommitRequest) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.share is not None:
            return ErrorCode.GROUP_ID_NOT_FOUND  # Kafka: a share group is not a consumer group
        if group.consumer is not None:
            return validate_consumer_commit(group, req, self._ctx.topics)
        if group.streams is not None:
            return validate_streams_commit(group, req)
        if req.generation_id < 0 and group.state is GroupState.EMPTY:
            return None  # admin clients and self-managed consumers commit to an empty group
        if (
            req.generation_id >= 0
            or req.member_id != UNKNOWN_MEMBER_ID
            or req.group_instance_id is not None
        ):
            error = validate_member(group, req.member_id, req.group_instance_id)
            if error is not None:
                return error
            if req.generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        else:
            return ErrorCode.UNKNOWN_MEMBER_ID  # a live group only takes commits from members
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return None

    # -- OffsetFetch --------------------------------------------------------------------------

    def fetch(self, req: OffsetFetchRequest) -> None:
        """Answered at once unless a group it names has commits written and not yet answered:
        then once those are (not later ones), as Kafka, which takes a connection's requests one
        after another, answers a fetch pipelined behind a commit with the commit's offset."""
        in_flight = self._ctx.commits_in_flight
        groups = {wanted.group_id for wanted in req.groups if wanted.group_id in in_flight}
        if not groups:
            self._answer_fetch(req)
            return
        waiting = _WaitingFetch(req, groups, self._ctx.next_write_id)
        for group_id in groups:
            self._fetches_waiting.setdefault(group_id, []).append(waiting)

    def _answer_fetch(self, req: OffsetFetchRequest) -> None:
        self._ctx.reply(req.request_id, OffsetFetchResponse(
            tuple(self._fetch_group(g, req.require_stable) for g in req.groups)))

    def _fetch_group(self, wanted: OffsetFetchGroup, require_stable: bool) -> FetchedGroup:
        error = self._ctx.ownership_error(wanted.group_id)
        if error is not None:
            return FetchedGroup(wanted.group_id, error)
        group = self._ctx.groups.get(wanted.group_id)
        if group is not None and group.consumer is not None \
                and group.state is not GroupState.DEAD:
            error = validate_consumer_fetch(group.consumer, wanted.member_id,
                                            wanted.member_epoch)
            if error is not None:
                return FetchedGroup(wanted.group_id, error)
        if group is not None and group.streams is not None \
                and group.state is not GroupState.DEAD:
            error = validate_streams_fetch(group.streams, wanted.member_id, wanted.member_epoch)
            if error is not None:
                return FetchedGroup(wanted.group_id, error)
        offsets = group.offsets if group is not None else {}
        if wanted.topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(partition)
            requested = [(topic, tuple(parts)) for topic, parts in by_topic.items()]
        else:
            requested = list(wanted.topics)
        topics = []
        txn = self._ctx.txn
        for topic, partitions in requested:
            fetched = []
            for partition in partitions:
                value = offsets.get((topic, partition))
                if require_stable and txn.is_pending(wanted.group_id, topic, partition):
                    fetched.append(FetchedOffset(partition, -1,
                                                 error=ErrorCode.UNSTABLE_OFFSET_COMMIT))
                elif value is None:
                    fetched.append(FetchedOffset(partition, -1))
                else:
                    fetched.append(
                        FetchedOffset(partition, value.offset, value.leader_epoch, value.metadata)
                    )
            topics.append(FetchedTopic(topic, tuple(fetched)))
        return FetchedGroup(wanted.group_id, ErrorCode.NONE, tuple(topics))

    # -- OffsetDelete -------------------------------------------------------------------------

    def delete(self, req: OffsetDeleteRequest) -> None:
        error = self._ctx.ownership_error(req.group_id)
        group = self._ctx.groups.get(req.group_id)
        if error is None and (group is None or group.state is GroupState.DEAD
                              or group.share is not None):  # not a consumer group (Kafka)
            error = ErrorCode.GROUP_ID_NOT_FOUND
        if (
            error is None
            and group is not None
            and group.state is not GroupState.EMPTY
            and group.protocol_type != CONSUMER_PROTOCOL_TYPE
        ):
            error = ErrorCode.NON_EMPTY_GROUP
        if error is not None:
            self._ctx.reply(req.request_id, OffsetDeleteResponse(error))
            return
        assert group is not None
        subscribed = {topic for topic, _ in req.topics if group.is_subscribed_to(topic)}
        doomed = [
            (topic, partition)
            for topic, partitions in req.topics
            if topic not in subscribed
            for partition in partitions
            # A pending transactional offset gets its tombstone too: it then never lands.
            if (topic, partition) in group.offsets
            or self._ctx.txn.is_pending(group.group_id, topic, partition)
        ]

        def answer(top_error: ErrorCode) -> None:
            topics = tuple(
                TopicPartitionErrors(
                    topic,
                    tuple(
                        PartitionError(
                            p,
                            ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                            if topic in subscribed
                            else ErrorCode.NONE,
                        )
                        for p in partitions
                    ),
                )
                for topic, partitions in req.topics
            )
            if top_error is not ErrorCode.NONE:
                topics = ()
            self._ctx.reply(req.request_id, OffsetDeleteResponse(top_error, topics))

        if not doomed:
            answer(ErrorCode.NONE)
            return

        records = [offset_record(group.group_id, t, p, None) for t, p in doomed]
        self._ctx.write_when_durable(
            group.offsets_partition, records, lambda: group, lambda: answer(ErrorCode.NONE), answer
        )

    # -- expiry -------------------------------------------------------------------------------

    def expire(self, offsets_partition: int) -> None:
        """Kafka's periodic cleanup: drop expired offsets, then delete empty groups left with
        none. The tombstones apply at once and a failed write is not reverted (as Kafka does):
        a lost tombstone only means the offset expires again after a restart. Share groups
        never expire (Kafka's ShareGroup.shouldExpire): their offsets live in the share
        coordinator, and an empty one stays until DeleteGroups removes it."""
        retention = self._ctx.config.offsets_retention_ms
        now = self._ctx.now
        records: list[OffsetsRecord] = []
        groups = self._ctx.groups.values()
        for group in [g for g in groups
                      if g.offsets_partition == offsets_partition and g.share is None]:
            expired = self._expired_offsets(group, now, retention)
            self._ctx.offsets_expired_total += len(expired)
            for topic, partition in expired:
                records.append(offset_record(group.group_id, topic, partition, None))
            if (
                group.state is GroupState.EMPTY
                and len(expired) == len(group.offsets)
                and group.group_id not in self._ctx.commits_in_flight
                and not self._ctx.txn.has_pending(group.group_id)
                and (group.consumer is None or not group.consumer.members)
                and (group.streams is None or not group.streams.members)
            ):
                if group.streams is not None:
                    records.extend(streams_group_tombstones(group))
                else:
                    records.extend(consumer_group_tombstones(group))
                    records.append(group_tombstone(group.group_id))
        if records:
            self._ctx.write_tolerated(offsets_partition, records)
        self._ctx.timers.schedule(
            offset_expiry_timer(offsets_partition),
            now + self._ctx.config.offsets_retention_check_interval_ms,
        )

    def _expired_offsets(
        self, group: ClassicGroup, now: int, retention: int
    ) -> list[tuple[str, int]]:
        if group.consumer is not None and group.consumer.members:
            since_empty = False  # a live consumer-protocol group keeps its topics' offsets
            keep: frozenset[str] = group.consumer.subscribed_topics()
        elif group.streams is not None and group.streams.members:
            return []  # a live streams group keeps its offsets
        elif group.protocol_type is None:
            since_empty = False  # a "simple" group: offsets age from their commit
            keep = frozenset()
        elif group.state is GroupState.EMPTY:
            since_empty = group.state_timestamp >= 0
            keep = frozenset()
        elif (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.state is GroupState.STABLE
            and group.subscribed_topics is not None
        ):
            since_empty = False
            keep = group.subscribed_topics
        else:
            return []
        expired = []
        pending = self._ctx.commits_in_flight.get(group.group_id, Counter())
        in_transaction = self._ctx.txn.keys_of(group.group_id)
        for key, value in group.offsets.items():
            # Kafka expires no offset while a transaction holds a pending one of its key.
            if key[0] in keep or pending[key] > 0 or key in in_transaction:
                continue
            if value.expire_timestamp is not None:
                due = now >= value.expire_timestamp
            else:
                base = group.state_timestamp if since_empty else value.commit_timestamp
                due = now - base >= retention
            if due:
                expired.append(key)
        return expired


class _WaitingFetch:
    """An OffsetFetch waiting for the commits of `groups` written before it came (write ids
    up to `written_before`; a group's commits are answered in the order they were written, one
    partition's log taking them in that order)."""

    __slots__ = ("groups", "request", "written_before")

    def __init__(self, request: OffsetFetchRequest, groups: set[str],
                 written_before: int) -> None:
        self.request = request
        self.groups = groups
        self.written_before = written_before


def _commit_response(
    req: OffsetCommitRequest, error_of: Callable[[str, int], ErrorCode]
) -> OffsetCommitResponse:
    topics = []
    for topic in req.topics:  # loops: generator expressions cost each commit two generators
        name = topic.name
        topics.append(TopicPartitionErrors(name, tuple(
            [PartitionError(p.partition, error_of(name, p.partition)) for p in topic.partitions])))
    return OffsetCommitResponse(tuple(topics))
