"""ListOffsets: earliest, latest, the record with the largest timestamp, or the first offset at
or after a timestamp (with that record's own timestamp, as Kafka answers offsetsForTimes).

v7 added MAX_TIMESTAMP and v8-v11 the tiered-storage lookups (earliest local, latest tiered,
earliest pending upload); kgroups keeps every segment locally, so it answers those as a Kafka
broker without remote storage does: the earliest local offset is the log start, and nothing
is tiered or waiting for upload (offset -1).

v0, removed in Kafka 4 (KIP-896), is still served because Burrow 1.2 sends it for every log
end offset it reads. It is answered as Kafka 3.9 did (its legacyFetchOffsetsBefore): the
candidates are each segment's base offset, stamped with the segment file's modification time,
plus the log end offset stamped now when the active segment holds data; the answer is up to
`max_num_offsets` of them, newest first, from the last one at or before the timestamp
(-1: the log end offset first; -2: the log start offset only). A cluster's PostgreSQL log has no
segment files: it is answered as one segment from the log start, dated by its largest record
timestamp (the time its newest data was written, for a LogAppendTime topic; now when empty),
which is what Kafka answers for a partition that never rolled a segment.

In a cluster a partition another broker leads answers NOT_LEADER_OR_FOLLOWER, and a
`current_leader_epoch` (v4+) other than this leader's FENCED_LEADER_EPOCH or
UNKNOWN_LEADER_EPOCH; the latest offset comes with the leader's epoch.

With isolation_level 1 (read_committed, v2+) the latest offset is the last stable offset, and a
lookup by time finds records below it only, as Kafka answers."""

from __future__ import annotations

import os
import time
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.leader_hints import NO_EPOCH, epoch_error
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.batch import decode_batch
from kgroups.log.partition_log import PartitionLog
from kgroups.storage.log_seam import PartitionLogSeam

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
NOT_FOUND = -1
READ_COMMITTED = 1
NO_TIMESTAMP = -1


def _record_timestamp(log: PartitionLogSeam, offset: int) -> int:
    """The timestamp of the record at `offset` (the read starts at the batch holding it)."""
    batch, _ = decode_batch(log.read(offset, 1))
    return next((r.timestamp for r in batch.records if r.offset >= offset), NO_TIMESTAMP)


def _lookup(
    ctx: RequestContext, topic: str, partition: int, timestamp: int, current_epoch: int,
    committed: bool,
) -> tuple[ErrorCode, int, int, int]:
    """(error, offset, timestamp, leader epoch) for one partition; `committed`
    (read_committed) answers the last stable offset for LATEST, and finds by timestamp below
    it only."""
    topics = ctx.broker.topics
    try:
        log = topics.log(topic, partition)
    except OSError:  # the partition's log could not be opened (logged once, there)
        return ErrorCode.KAFKA_STORAGE_ERROR, NOT_FOUND, NO_TIMESTAMP, NO_EPOCH
    if log is None:
        return topics.unserved_error(topic, partition), NOT_FOUND, NO_TIMESTAMP, NO_EPOCH
    leader_epoch = topics.leader_epoch(topic, partition)
    fenced = epoch_error(leader_epoch, current_epoch)
    if fenced != ErrorCode.NONE:
        return fenced, NOT_FOUND, NO_TIMESTAMP, NO_EPOCH
    fetchable = (log.transactions.last_stable_offset(log.log_end_offset) if committed
                 else log.log_end_offset)
    if timestamp == LATEST_TIMESTAMP:
        return (ErrorCode.NONE, fetchable, NO_TIMESTAMP,
                NO_EPOCH if leader_epoch is None else leader_epoch)
    error, offset, found_at = _lookup_in(log, timestamp)
    if timestamp >= 0 and offset >= fetchable:
        return error, NOT_FOUND, NO_TIMESTAMP, NO_EPOCH
    return error, offset, found_at, NO_EPOCH


def _lookup_in(log: PartitionLogSeam, timestamp: int) -> tuple[ErrorCode, int, int]:
    """(error, offset, timestamp) in a log this broker serves, for any timestamp but
    LATEST."""
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return ErrorCode.NONE, log.log_start_offset, NO_TIMESTAMP
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return ErrorCode.NONE, NOT_FOUND, NO_TIMESTAMP
    if timestamp == MAX_TIMESTAMP:
        stamped = log.max_timestamp_offset()
        if stamped is None:
            return ErrorCode.NONE, NOT_FOUND, NO_TIMESTAMP
        return ErrorCode.NONE, stamped[1], stamped[0]
    if timestamp < 0:
        return ErrorCode.INVALID_REQUEST, NOT_FOUND, NO_TIMESTAMP
    found = log.offset_for_timestamp(timestamp)
    if found is None:
        return ErrorCode.NONE, NOT_FOUND, NO_TIMESTAMP
    return ErrorCode.NONE, found, _record_timestamp(log, found)


def _segment_candidates(log: PartitionLog, now_ms: int) -> list[tuple[int, int]]:
    """(offset, time) candidates of a file log: each segment's base, dated by its file."""
    segments = log.segments()
    candidates = [(max(s.base_offset, log.log_start_offset),
                   os.fstat(s.fd).st_mtime_ns // 1_000_000) for s in segments]
    if segments[-1].size > 0:
        candidates.append((log.log_end_offset, now_ms))
    return candidates


def _single_segment_candidates(log: PartitionLogSeam, timestamp: int,
                               now_ms: int) -> list[tuple[int, int]]:
    """The candidates of a log without segment files (PostgreSQL): one segment from the log
    start, dated by its largest record timestamp (an empty one: now, as a segment just made),
    read only when a time was asked for."""
    dated = log.max_timestamp_offset() if timestamp >= 0 else None
    candidates = [(log.log_start_offset, now_ms if dated is None else dated[0])]
    if log.log_end_offset > log.log_start_offset:
        candidates.append((log.log_end_offset, now_ms))
    return candidates


def legacy_offsets_before(candidates: list[tuple[int, int]], timestamp: int,
                          max_num_offsets: int) -> list[int]:
    """The offsets ListOffsets v0 returns for one partition, newest first, from its (offset,
    time) candidates in offset order."""
    if timestamp == LATEST_TIMESTAMP:
        start = len(candidates) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        start = next((i for i in range(len(candidates) - 1, -1, -1)
                      if candidates[i][1] <= timestamp), -1)
    chosen = [candidates[i][0] for i in range(start, start - min(max_num_offsets, start + 1), -1)]
    return sorted(chosen, reverse=True)


def _lookup_v0(ctx: RequestContext, topic: str, partition: int, timestamp: int,
               max_num_offsets: int) -> tuple[ErrorCode, tuple[int, ...]]:
    topics = ctx.broker.topics
    try:
        log = topics.log(topic, partition)
    except OSError:
        return ErrorCode.KAFKA_STORAGE_ERROR, ()
    if log is None:
        return topics.unserved_error(topic, partition), ()
    if max_num_offsets < 0:  # Kafka 3.9 failed to size its array: an unknown server error
        return ErrorCode.UNKNOWN_SERVER_ERROR, ()
    now_ms = int(time.time() * 1000)
    candidates = (_segment_candidates(log, now_ms) if isinstance(log, PartitionLog)
                  else _single_segment_candidates(log, timestamp, now_ms))
    return ErrorCode.NONE, tuple(legacy_offsets_before(candidates, timestamp, max_num_offsets))


def _answer_v0(ctx: RequestContext, topic: str, entry: Any, _committed: bool
               ) -> dict[str, Any]:
    """v0 asks for up to `max_num_offsets` offsets before a time, and gets a list of them."""
    error, offsets = _lookup_v0(ctx, topic, int(entry.partition_index), int(entry.timestamp),
                                int(entry.max_num_offsets))
    return {"error_code": kio_error(error), "old_style_offsets": offsets}


def _answer(ctx: RequestContext, topic: str, entry: Any, committed: bool) -> dict[str, Any]:
    """v1 on ask for one offset (and its timestamp and epoch) at a time."""
    error, offset, found_at, epoch = _lookup(
        ctx, topic, int(entry.partition_index), int(entry.timestamp),
        int(getattr(entry, "current_leader_epoch", NO_EPOCH)), committed)
    return {"error_code": kio_error(error), "timestamp": found_at, "offset": offset,
            "leader_epoch": epoch}


@handles(api_key=ApiKey.LIST_OFFSETS, min_version=0, max_version=11)
async def list_offsets(ctx: RequestContext, request: Any) -> Any:
    answer = _answer_v0 if ctx.api_version == 0 else _answer
    response_cls = response_type(ApiKey.LIST_OFFSETS, ctx.api_version)
    topic_cls = sibling(response_cls, "ListOffsetsTopicResponse")
    partition_cls = sibling(response_cls, "ListOffsetsPartitionResponse")
    committed = int(getattr(request, "isolation_level", 0)) == READ_COMMITTED
    topics = []
    for topic in request.topics:
        partitions = tuple(build(partition_cls, partition_index=entry.partition_index,
                                 **answer(ctx, topic.name, entry, committed))
                           for entry in topic.partitions)
        topics.append(build(topic_cls, name=topic.name, partitions=partitions))
    return build(response_cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def install(registry: HandlerRegistry) -> None:
    registry.register(list_offsets)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.LIST_OFFSETS)
async def _authorize_list_offsets(ctx: RequestContext, request: Any, inner: authz.Inner,
                                  check: authz.Check) -> Any:
    topics, denied = await authz.answer_allowed_topics(
        ctx, request, inner, lambda t: check.topic(Operation.DESCRIBE, t.name),
        lambda response: response.topics)
    # v0 answers a list of offsets; later versions one offset and its timestamp.
    unknown: dict[str, Any] = ({"old_style_offsets": ()} if ctx.api_version == 0 else
                               {"timestamp": -1, "offset": -1, "leader_epoch": -1})
    denied_topics = tuple(authz.nested(ctx, "ListOffsetsTopicResponse", name=t.name, partitions=(
        authz.partition_entries(ctx, "ListOffsetsPartitionResponse", t, authz.TOPIC_DENIED,
                                **unknown)))
        for t in denied)
    return authz.response(ctx, topics=topics + denied_topics)
