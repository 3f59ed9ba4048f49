"""Fetch with Kafka's long poll: answer when min_bytes are available or max_wait has passed.

Waiting is event driven (the broker's AppendNotifier fires on every append), so an idle consumer
costs nothing between appends and a new record reaches a waiting consumer at once. Fetch
sessions (KIP-227) are not kept: every response is a full one with session id 0, which clients
accept as "no session".

In a cluster a partition another broker leads answers NOT_LEADER_OR_FOLLOWER naming the leader
(`current_leader`, v12+), and a `current_leader_epoch` (v9+) older than this leader's answers
FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH, as Kafka's leader checks it. Only the
leader appends to its partitions, so the local append notifier wakes every long poll there is.

With isolation_level 1 (read_committed, v4+) a partition answers the records below its last
stable offset only, with the aborted transactions they overlap, for the consumer to drop
(kgroups.log.transaction_state keeps both); every version with the field answers the LSO as
last_stable_offset, read_uncommitted too. A marker wakes long polls as an append does.

v0-v3, removed in Kafka 4 (KIP-896), are served for tools older than Kafka 0.11 (Burrow 1.2 with
its sample configuration): the same reads, with the batches converted down to the message
format those versions carry (down_convert.py), as Kafka 3.9 did.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.down_convert import down_convert, fetch_magic
from kgroups.broker.events import log_event
from kgroups.broker.leader_hints import NO_EPOCH, epoch_error, leader_fields, node_endpoint_fields
from kgroups.broker.legacy_schemas import nested
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.topic_storage import NotLeaderHint
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.batch import peek_batch_header
from kgroups.log.partition_log import OffsetOutOfRangeError
from kgroups.log.txn_index import AbortedTransaction

logger = logging.getLogger("kgroups.fetch")
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@dataclass(slots=True)
class PartitionRead:
    partition: int
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    fetch_offset: int = -1
    max_bytes: int = 0
    leader: NotLeaderHint | None = None  # with NOT_LEADER_OR_FOLLOWER: who leads instead
    last_stable_offset: int = -1
    # read_committed only: the aborted transactions the records overlap (None otherwise)
    aborted: list[AbortedTransaction] | None = None


def _below(records: bytes, bound: int) -> bytes:
    """The whole batches of `records` that start below offset `bound` (the LSO: a batch of an
    open transaction starts at or after it)."""
    position = 0
    while position < len(records):
        base, _last, size = peek_batch_header(records, position)
        if base >= bound:
            break
        position += size
    return records[:position]


def _upper_bound(records: bytes, otherwise: int) -> int:
    """The offset after the last batch of `records` (`otherwise` when there is none)."""
    position, bound = 0, otherwise
    while position < len(records):
        _base, last, size = peek_batch_header(records, position)
        position, bound = position + size, last + 1
    return bound


def read_partition(ctx: RequestContext, topic: str, index: int, offset: int,
                   partition_max_bytes: int, budget: int, min_one: bool, committed: bool,
                   current_leader_epoch: int = NO_EPOCH) -> PartitionRead:
    """The partition's batches from `offset` within its partition_max_bytes and what is left
    of the request's max_bytes (`budget`); with `min_one` (no partition before it returned
    data), its first batch whole even if larger, as Kafka answers. `committed`
    (read_committed) reads below the last stable offset only, and lists the aborted
    transactions read. ShareFetch reads the logs this way too (apis/share_fetch.py)."""
    topics = ctx.broker.topics
    try:
        log = topics.log(topic, index)
    except OSError:  # the partition's log could not be opened (logged once, there)
        return PartitionRead(index, ErrorCode.KAFKA_STORAGE_ERROR)
    if log is None:
        hint = topics.elsewhere(topic, index)
        if hint is None:
            return PartitionRead(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return PartitionRead(index, ErrorCode.NOT_LEADER_OR_FOLLOWER, leader=hint)
    fenced = epoch_error(topics.leader_epoch(topic, index), current_leader_epoch)
    if fenced != ErrorCode.NONE:
        return PartitionRead(index, fenced)
    start, end = log.log_start_offset, log.log_end_offset
    if offset < start or offset > end:  # Kafka answers no watermarks beside this error
        return PartitionRead(index, ErrorCode.OFFSET_OUT_OF_RANGE)
    stable = log.transactions.last_stable_offset(end)
    upper = stable if committed else end
    if offset >= upper or budget <= 0:
        return PartitionRead(index, ErrorCode.NONE, end, start, last_stable_offset=stable,
                             aborted=[] if committed else None)
    limit = min(partition_max_bytes, budget)
    try:
        records = log.read(offset, max(limit, 1), min_one=min_one)
    except OffsetOutOfRangeError:  # retention moved the start between the check and the read
        return PartitionRead(index, ErrorCode.OFFSET_OUT_OF_RANGE)
    except OSError as exc:
        log_event(logger, logging.ERROR, "read_failed", topic=topic, partition=index, error=exc)
        return PartitionRead(index, ErrorCode.KAFKA_STORAGE_ERROR, end, start)
    if not committed:
        return PartitionRead(index, ErrorCode.NONE, end, start, records, offset, limit,
                             last_stable_offset=stable)
    records = _below(records, stable)
    aborted = log.transactions.aborted_between(offset, _upper_bound(records, offset))
    return PartitionRead(index, ErrorCode.NONE, end, start, records, offset, limit,
                         last_stable_offset=stable, aborted=aborted)


def _read_all(ctx: RequestContext, request: Any) -> tuple[list[tuple[str, list[PartitionRead]]],
                                                          int, bool]:
    """Every requested partition once: (results, bytes gathered, whether any partition errs).
    The answer stays within the request's max_bytes and each partition's partition_max_bytes,
    except for the first batch of the first partition with data, which goes whole."""
    budget = min(int(getattr(request, "max_bytes", 2**31 - 1)), ctx.broker.config.fetch_max_bytes)
    total = 0
    failed = False
    results = []
    committed = int(getattr(request, "isolation_level", READ_UNCOMMITTED)) == READ_COMMITTED
    for topic in request.topics:
        reads = []
        for request_partition in topic.partitions:
            read = read_partition(
                ctx, topic.topic, int(request_partition.partition),
                int(request_partition.fetch_offset), int(request_partition.partition_max_bytes),
                budget - total, min_one=total == 0, committed=committed,
                current_leader_epoch=int(getattr(request_partition, "current_leader_epoch",
                                                 NO_EPOCH)))
            total += len(read.records)
            failed = failed or read.error != ErrorCode.NONE
            reads.append(read)
        results.append((topic.topic, reads))
    return results, total, failed


def _legacy_response(version: int, results: list[tuple[str, list[PartitionRead]]]) -> Any:
    """Fetch v0-v3: the records as old-format messages, no log start offset or session."""
    response_cls = response_type(ApiKey.FETCH, version)
    topic_cls = nested(response_cls, "responses")
    partition_cls = nested(topic_cls, "partitions")
    magic = fetch_magic(version)
    responses = tuple(
        topic_cls(topic=name, partitions=tuple(
            partition_cls(partition_index=read.partition, error_code=kio_error(read.error),
                          high_watermark=read.high_watermark,
                          records=down_convert(read.records, magic, read.fetch_offset,
                                               read.max_bytes) if read.records else b"")
            for read in reads))
        for name, reads in results)
    if version == 0:
        return response_cls(responses=responses)
    return response_cls(throttle_time=NO_THROTTLE, responses=responses)


@handles(api_key=ApiKey.FETCH, min_version=0, max_version=12)
async def fetch(ctx: RequestContext, request: Any) -> Any:
    deadline = time.monotonic() + request.max_wait.total_seconds()
    min_bytes = int(request.min_bytes)
    while True:
        results, total, failed = _read_all(ctx, request)
        remaining = deadline - time.monotonic()
        if total >= min_bytes or failed or remaining <= 0:
            break
        await ctx.broker.appends.wait(remaining)
        # An append wakes every waiting Fetch at once: each reads only when the memory budget
        # has room, so a crowd of unread long polls cannot all answer past it.
        await ctx.broker.memory.wait_for(lambda: ctx.broker.memory.allows(0, light=False))

    if ctx.api_version <= 3:
        return _legacy_response(ctx.api_version, results)
    response_cls = response_type(ApiKey.FETCH, ctx.api_version)
    topic_cls = sibling(response_cls, "FetchableTopicResponse")
    partition_cls = sibling(response_cls, "PartitionData")
    module = sys.modules[response_cls.__module__]
    leader_cls = getattr(module, "LeaderIdAndEpoch", None)  # v12+
    aborted_cls = sibling(response_cls, "AbortedTransaction")
    responses = tuple(
        build(topic_cls, topic=name, partitions=tuple(
            build(partition_cls, partition_index=read.partition,
                  error_code=kio_error(read.error), high_watermark=read.high_watermark,
                  last_stable_offset=read.last_stable_offset,
                  log_start_offset=read.log_start_offset,
                  aborted_transactions=None if read.aborted is None else tuple(
                      build(aborted_cls, producer_id=a.producer_id, first_offset=a.first_offset)
                      for a in read.aborted),
                  preferred_read_replica=-1, records=read.records,
                  **leader_fields(leader_cls, read.leader))
            for read in reads))
        for name, reads in results
    )
    hints = [read.leader for _, reads in results for read in reads if read.leader is not None]
    return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(ErrorCode.NONE),
                 session_id=0, responses=responses, **node_endpoint_fields(module, hints))


def install(registry: HandlerRegistry) -> None:
    registry.register(fetch)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.FETCH)
async def _authorize_fetch(ctx: RequestContext, request: Any, inner: authz.Inner,
                           check: authz.Check) -> Any:
    responses, denied = await authz.answer_allowed_topics(
        ctx, request, inner, lambda t: check.topic(Operation.READ, t.topic),
        lambda response: response.responses)
    denied_topics = tuple(authz.nested(
        ctx, "FetchableTopicResponse", topic=t.topic, partitions=tuple(authz.nested(
            ctx, "PartitionData", partition_index=p.partition,
            error_code=kio_error(authz.TOPIC_DENIED), high_watermark=-1, last_stable_offset=-1,
            log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
            records=None) for p in t.partitions)) for t in denied)
    return authz.response(ctx, error_code=kio_error(ErrorCode.NONE), session_id=0,
                          responses=responses + denied_topics)
