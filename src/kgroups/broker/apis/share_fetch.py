"""ShareFetch (78) and ShareAcknowledge (79) v1-2: the data path of share groups (KIP-932).

A ShareFetch first steps its member's share session (kgroups.share.sessions), then applies the
acknowledgements it carries, then acquires records for the member from every partition of the
session: each share partition says where to read (its first available record, else past
everything in flight), the log is read as Fetch reads it (apis/fetch.read_partition), and the
response carries the whole log batches holding the acquired records with the acquired ranges
and their delivery counts. Until MinBytes can be read from where the partitions would acquire,
and while nothing is acquired, it waits (up to MaxWait), trying again on what Kafka 4.3.1 tries
again on: an append to one of its partitions, or their share partition marked fetchable (a lock
timed out, the start offset moved: `SharePartitionManager.wakes`). Records a member released
without the start moving do not end the wait; the next try takes them.
A session just opened answers every partition; later ones only those with records, errors or
acknowledgement results, as Kafka 4.3.1 answers. A session ends with the
client connection that opened it (the broker's connections tell `connection_closed`).

ShareAcknowledge steps the session (epoch 0 is refused: only a ShareFetch opens one) and
answers each partition's acknowledgement result. Epoch -1 on either closes the session after
its acknowledgements, releasing what the member still holds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.apis.fetch import read_partition
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.share_partitions import SharePartitionManager, now_ms
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.batch import CONTROL, LOG_OVERHEAD, TRANSACTIONAL, read_header
from kgroups.log.txn_index import AbortedTransaction
from kgroups.share.acknowledgements import AckBatch
from kgroups.share.partition import AckOutcome, AcquiredRange, LogBatch, SharePartition
from kgroups.share.persisted import SharePartitionKey
from kgroups.share.sessions import INITIAL_EPOCH, TopicPartitionId

Names = dict[uuid.UUID, str]


@dataclass(slots=True)
class _Answer:
    """One partition's part of a ShareFetch response."""

    error: ErrorCode = ErrorCode.NONE
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)
    ack: AckOutcome | None = None


def _topic_names(ctx: RequestContext) -> Names:
    topics = ctx.broker.topics
    return {topic_id: name for name in topics.partition_counts()
            if (topic_id := topics.topic_id(name)) is not None}


def _batches(raw: Any) -> list[AckBatch]:
    return [AckBatch(int(b.first_offset), int(b.last_offset),
                     tuple(int(t) for t in b.acknowledge_types)) for b in raw]


def _topic_id(topic: Any) -> uuid.UUID:
    """The topic's id; the all-zero id (which kio reads as null) names no topic, as in Kafka."""
    return topic.topic_id if topic.topic_id is not None else uuid.UUID(int=0)


async def _acknowledge_all(ctx: RequestContext, request: Any, names: Names,
                           renew_allowed: bool = False) -> dict[TopicPartitionId, AckOutcome]:
    """Each partition's acknowledgements applied and written (partitions without any left out)."""
    manager: SharePartitionManager = ctx.broker.share_partitions
    outcomes: dict[TopicPartitionId, AckOutcome] = {}
    for topic in request.topics:
        name = names.get(_topic_id(topic))
        for partition in topic.partitions:
            if not partition.acknowledgement_batches:
                continue
            tp = (_topic_id(topic).bytes, int(partition.partition_index))
            if name is None:
                outcomes[tp] = AckOutcome(ErrorCode.UNKNOWN_TOPIC_ID)
                continue
            key = SharePartitionKey(request.group_id, tp[0], tp[1])
            outcomes[tp] = await manager.acknowledge(
                key, name, request.member_id, _batches(partition.acknowledgement_batches),
                renew_allowed)
    return outcomes


def _log_batches(records: bytes, aborted: list[AbortedTransaction] | None) -> list[LogBatch]:
    """The batches read, each marked aborted when read_committed must skip it: data of an
    aborted transaction, or a transaction marker."""
    batches, position = [], 0
    pending = sorted(aborted or (), key=lambda a: a.first_offset)
    open_aborts: set[int] = set()
    while position < len(records):
        header = read_header(records, position)
        last = header.base_offset + header.last_offset_delta
        while pending and pending[0].first_offset <= last:
            open_aborts.add(pending.pop(0).producer_id)
        control = bool(header.attributes & CONTROL)
        skipped = aborted is not None and (control or (
            bool(header.attributes & TRANSACTIONAL) and header.producer_id in open_aborts))
        if control:
            open_aborts.discard(header.producer_id)
        batches.append(LogBatch(header.base_offset, last, skipped))
        position += LOG_OVERHEAD + header.length
    return batches


def _slice(records: bytes, acquired: Sequence[AcquiredRange]) -> bytes:
    """The log batches from the first holding an acquired record to the last holding one."""
    if not acquired:
        return b""
    first, last = acquired[0].first_offset, acquired[-1].last_offset
    start = stop = None
    position = 0
    while position < len(records):
        header = read_header(records, position)
        end = position + LOG_OVERHEAD + header.length
        if header.base_offset + header.last_offset_delta >= first and start is None:
            start = position
        if header.base_offset <= last:
            stop = end
        position = end
    return records[start or 0:stop or 0]


async def _acquire(ctx: RequestContext, request: Any, tp: TopicPartitionId, names: Names,
                   budget: dict[str, int]) -> _Answer:
    manager: SharePartitionManager = ctx.broker.share_partitions
    name = names[uuid.UUID(bytes=tp[0])]
    share_partition = await manager.partition(SharePartitionKey(request.group_id, *tp), name)
    if isinstance(share_partition, ErrorCode):
        return _Answer(share_partition)
    if budget["records"] <= 0 or not share_partition.can_acquire():
        return _Answer()
    return _read_and_acquire(ctx, request, name, tp[1], share_partition, budget)


def _read_and_acquire(ctx: RequestContext, request: Any, topic: str, index: int,
                      share_partition: SharePartition, budget: dict[str, int]) -> _Answer:
    log = ctx.broker.topics.log(topic, index)
    if log is not None:
        share_partition.move_start_to(log.log_start_offset)
    committed = share_partition.settings.read_committed
    read = read_partition(ctx, topic, index, share_partition.next_fetch_offset(),
                          budget["bytes"], budget["bytes"], min_one=True, committed=committed)
    if read.error != ErrorCode.NONE:
        return _Answer(read.error)
    acquired = share_partition.acquire(
        request.member_id, _log_batches(read.records, read.aborted if committed else None),
        max_records=budget["records"], batch_size=max(1, int(request.batch_size)),
        now_ms=now_ms(), record_limit=int(getattr(request, "share_acquire_mode", 0)) == 1)
    if not acquired:
        return _Answer()
    ctx.broker.share_partitions.acquired()
    records = _slice(read.records, acquired)
    budget["records"] -= sum(r.last_offset - r.first_offset + 1 for r in acquired)
    budget["bytes"] = max(0, budget["bytes"] - len(records))
    return _Answer(records=records, acquired=acquired)


async def _readable_bytes(ctx: RequestContext, request: Any,
                          partitions: list[TopicPartitionId], names: Names) -> int:
    """How many bytes the partitions hold from where each would acquire next (MinBytes is
    measured on these before anything is acquired); an error counts as enough, to be answered."""
    manager: SharePartitionManager = ctx.broker.share_partitions
    limit = min(int(request.max_bytes), ctx.broker.config.fetch_max_bytes)
    total = 0
    for topic_id, index in partitions:
        name = names[uuid.UUID(bytes=topic_id)]
        share_partition = await manager.partition(
            SharePartitionKey(request.group_id, topic_id, index), name)
        if isinstance(share_partition, ErrorCode):
            return limit
        if share_partition.can_acquire():
            read = read_partition(ctx, name, index, share_partition.next_fetch_offset(), limit,
                                  limit - total, min_one=total == 0,
                                  committed=share_partition.settings.read_committed)
            if read.error != ErrorCode.NONE:
                return limit
            total += len(read.records)
    return total


async def _fetch_all(ctx: RequestContext, request: Any, partitions: list[TopicPartitionId],
                     names: Names) -> dict[TopicPartitionId, _Answer]:
    """Acquire from every partition once MinBytes can be read (or MaxWait has passed); with
    nothing acquired and no error, wait for news of the partitions, up to MaxWait."""
    deadline = time.monotonic() + request.max_wait.total_seconds()
    min_bytes = max(1, int(request.min_bytes))
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or await _readable_bytes(ctx, request, partitions, names) >= min_bytes:
            budget = {"records": max(1, int(request.max_records)),
                      "bytes": min(int(request.max_bytes), ctx.broker.config.fetch_max_bytes)}
            answers = {tp: await _acquire(ctx, request, tp, names, budget) for tp in partitions}
            if deadline <= time.monotonic() or any(a.acquired or a.error != ErrorCode.NONE
                                                   for a in answers.values()):
                return answers
        await _wait_for_news(ctx, request.group_id, partitions, names, deadline)


def _news(ctx: RequestContext, group_id: str, partitions: list[TopicPartitionId],
          names: Names) -> tuple[int, ...]:
    """What a waiting fetch tries again on when it changes: each partition's log end (an append)
    and how often its share partition was marked fetchable."""
    manager: SharePartitionManager = ctx.broker.share_partitions
    marks: list[int] = []
    for topic_id, index in partitions:
        try:
            log = ctx.broker.topics.log(names[uuid.UUID(bytes=topic_id)], index)
        except OSError:  # answered by the next read
            log = None
        marks += [-1 if log is None else log.log_end_offset,
                  manager.wakes(SharePartitionKey(group_id, topic_id, index))]
    return tuple(marks)


async def _wait_for_news(ctx: RequestContext, group_id: str, partitions: list[TopicPartitionId],
                         names: Names, deadline: float) -> None:
    """Until `_news` changes or the deadline passes: appends elsewhere (another topic, the
    internal logs) and other share partitions' wakes do not end the wait."""
    manager: SharePartitionManager = ctx.broker.share_partitions
    seen = _news(ctx, group_id, partitions, names)
    while (remaining := deadline - time.monotonic()) > 0:
        waits = [asyncio.ensure_future(ctx.broker.appends.wait(remaining)),
                 asyncio.ensure_future(manager.fetchable.wait(remaining))]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()
        if _news(ctx, group_id, partitions, names) != seen:
            return


def _fetch_response(ctx: RequestContext, order: list[TopicPartitionId],
                    answers: dict[TopicPartitionId, _Answer], lock_ms: int) -> Any:
    response_cls = response_type(ApiKey.SHARE_FETCH, ctx.api_version)
    topic_cls = sibling(response_cls, "ShareFetchableTopicResponse")
    partition_cls = sibling(response_cls, "PartitionData")
    leader_cls = sibling(response_cls, "LeaderIdAndEpoch")
    acquired_cls = sibling(response_cls, "AcquiredRecords")
    by_topic: dict[bytes, list[Any]] = {}
    for tp in order:
        answer = answers[tp]
        ack = answer.ack or AckOutcome()
        by_topic.setdefault(tp[0], []).append(build(
            partition_cls, partition_index=tp[1], error_code=kio_error(answer.error),
            error_message=None, acknowledge_error_code=int(ack.error),
            acknowledge_error_message=ack.message,
            current_leader=build(leader_cls, leader_id=0, leader_epoch=0),
            records=answer.records, acquired_records=tuple(
                build(acquired_cls, first_offset=r.first_offset, last_offset=r.last_offset,
                      delivery_count=r.delivery_count) for r in answer.acquired)))
    return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(ErrorCode.NONE),
                 error_message=None, acquisition_lock_timeout=_millis(lock_ms),
                 responses=tuple(build(topic_cls, topic_id=uuid.UUID(bytes=topic_id),
                                       partitions=tuple(parts))
                                 for topic_id, parts in by_topic.items()),
                 node_endpoints=())


def _millis(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _error_response(ctx: RequestContext, error: ErrorCode) -> Any:
    return build(response_type(ctx.api_key, ctx.api_version), throttle_time=NO_THROTTLE,
                 error_code=kio_error(error), error_message=None,
                 acquisition_lock_timeout=NO_THROTTLE, responses=(), node_endpoints=())


@handles(api_key=ApiKey.SHARE_FETCH, min_version=1, max_version=2)
async def share_fetch(ctx: RequestContext, request: Any) -> Any:
    manager: SharePartitionManager = ctx.broker.share_partitions
    epoch = int(request.share_session_epoch)
    with_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    # Kafka 4.3.1 takes renewals (IsRenewAck, v2) in ShareAcknowledge only: a ShareFetch
    # declaring them is refused before its session is stepped.
    if (not request.group_id or not request.member_id or getattr(request, "is_renew_ack", False)
            or (epoch == INITIAL_EPOCH and with_acks)):
        return _error_response(ctx, ErrorCode.INVALID_REQUEST)
    requested = [(_topic_id(t).bytes, int(p.partition_index))
                 for t in request.topics for p in t.partitions]
    forgotten = [(_topic_id(t).bytes, int(p))
                 for t in request.forgotten_topics_data for p in t.partitions]
    step = manager.sessions.fetch(request.group_id, request.member_id, epoch, requested,
                                  forgotten, ctx.session)
    if step.session is None:
        return _error_response(ctx, step.error)
    names = _topic_names(ctx)
    acks = await _acknowledge_all(ctx, request, names)
    if step.closing:
        await manager.close_session(step.session)
        answers = {tp: _Answer(ack=outcome) for tp, outcome in acks.items()}
        order = list(acks)
    else:
        partitions = list(step.session.partitions)
        if any(uuid.UUID(bytes=topic_id) not in names for topic_id, _ in partitions):
            # Kafka 4.3.1 fails the whole fetch of a session holding an unknown topic id
            # (every later one too, until a new session), its epoch still counted.
            return _error_response(ctx, ErrorCode.UNKNOWN_SERVER_ERROR)
        answers = await _fetch_all(ctx, request, partitions, names)
        for tp, outcome in acks.items():
            answers.setdefault(tp, _Answer()).ack = outcome
        order = partitions + [tp for tp in acks if tp not in partitions]
        if not step.full:  # only the partitions with news
            order = [tp for tp in order if answers[tp].acquired or tp in acks
                     or answers[tp].error != ErrorCode.NONE]
    return _fetch_response(ctx, order, answers,
                           manager.settings.record_lock_duration_ms)


@handles(api_key=ApiKey.SHARE_ACKNOWLEDGE, min_version=1, max_version=2)
async def share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    manager: SharePartitionManager = ctx.broker.share_partitions
    if not request.group_id or not request.member_id:
        return _error_response(ctx, ErrorCode.INVALID_REQUEST)
    step = manager.sessions.acknowledge(request.group_id, request.member_id,
                                        int(request.share_session_epoch))
    if step.session is None:
        return _error_response(ctx, step.error)
    acks = await _acknowledge_all(ctx, request, _topic_names(ctx),
                                  renew_allowed=bool(getattr(request, "is_renew_ack", False)))
    if step.closing:
        await manager.close_session(step.session)
    response_cls = response_type(ApiKey.SHARE_ACKNOWLEDGE, ctx.api_version)
    topic_cls = sibling(response_cls, "ShareAcknowledgeTopicResponse")
    partition_cls = sibling(response_cls, "PartitionData")
    leader_cls = sibling(response_cls, "LeaderIdAndEpoch")
    by_topic: dict[bytes, list[Any]] = {}
    for (topic_id, index), outcome in acks.items():
        by_topic.setdefault(topic_id, []).append(build(
            partition_cls, partition_index=index, error_code=kio_error(outcome.error),
            error_message=outcome.message,
            current_leader=build(leader_cls, leader_id=0, leader_epoch=0)))
    return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(ErrorCode.NONE),
                 error_message=None,
                 acquisition_lock_timeout=_millis(manager.settings.record_lock_duration_ms),
                 responses=tuple(build(topic_cls, topic_id=uuid.UUID(bytes=topic_id),
                                       partitions=tuple(parts))
                                 for topic_id, parts in by_topic.items()),
                 node_endpoints=())


def install(registry: HandlerRegistry) -> None:
    registry.register(share_fetch)
    registry.register(share_acknowledge)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
async def _authorize_share(ctx: RequestContext, request: Any, inner: authz.Inner,
                           check: authz.Check) -> Any:
    """Group READ, else the whole request fails; topics without READ answer
    TOPIC_AUTHORIZATION_FAILED for their partitions, the others are served."""
    if not check.group(Operation.READ, request.group_id or ""):
        return _error_response(ctx, authz.GROUP_DENIED)
    names = _topic_names(ctx)
    allowed, denied = authz.split(request.topics, lambda t: _topic_id(t) not in names
                                  or check.topic(Operation.READ, names[_topic_id(t)]))
    response = await inner(ctx, dataclasses.replace(request, topics=allowed))
    if not denied or response.error_code != kio_error(ErrorCode.NONE):
        return response
    partition_fields: dict[str, Any] = {"error_code": kio_error(authz.TOPIC_DENIED),
                                        "error_message": None,
                                        "current_leader": authz.nested(
                                            ctx, "LeaderIdAndEpoch", leader_id=0,
                                            leader_epoch=0)}
    if ctx.api_key == ApiKey.SHARE_FETCH:
        partition_fields.update(acknowledge_error_code=0, acknowledge_error_message=None,
                                records=b"", acquired_records=())
    topic_class = ("ShareFetchableTopicResponse" if ctx.api_key == ApiKey.SHARE_FETCH
                   else "ShareAcknowledgeTopicResponse")
    denied_topics = tuple(authz.nested(ctx, topic_class, topic_id=t.topic_id, partitions=tuple(
        authz.nested(ctx, "PartitionData", partition_index=p.partition_index, **partition_fields)
        for p in t.partitions)) for t in denied)
    return dataclasses.replace(response, responses=tuple(response.responses) + denied_topics)
