"""Produce: validate each RecordBatch, append it, and answer once it is durable.

A batch is checked (magic, CRC, framing, record count, size) before anything is written, so a
corrupt or oversized batch is refused with Kafka's error for that partition and loses nothing
already stored. The records inside a CRC-valid batch are not parsed one by one: doing so in
Python costs ~9 us per record and capped produce throughput, while the client's CRC already
vouches for the bytes; only a compacted topic's records are read, for their keys, and a
batch's whose header timestamps are out of the topic's bounds, to name the refused records
(record_policy.py, which also stamps LogAppendTime topics' batches). A batch over the topic's
max.message.bytes is refused; a topic whose compression.type names a codec gets its batches
recompressed into it (the records section only, never parsed). For
acks=1 and acks=all the response waits for an fsync shared with concurrent producers
(GroupCommit); acks=0 gets no response at all, as in Kafka, and when it fails the connection is
closed, the only signal such a producer gets.

A transactional batch of a producer with no transaction open in the partition is first
verified with the transaction coordinator (KIP-890, kgroups.broker.txn_verification).

A disk error answers KAFKA_STORAGE_ERROR, as Kafka does for a partition on a failed log dir: a
failed write leaves the log as it was (nothing half-written), and a failed fsync is never
acknowledged. Producers retry the error; the partition takes writes again once the disk does.

In a cluster a partition another broker leads answers NOT_LEADER_OR_FOLLOWER with that leader
and its endpoint (KIP-951, v10+), so the producer goes there without a Metadata round; so does
an append the store fenced (this broker lost the lease without knowing yet): nothing of it was
written. A store that cannot be reached answers KAFKA_STORAGE_ERROR like a failed disk: the
write did not commit, and Kafka's clients retry that error after refreshing metadata, which
also finds a leader that moved meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import CloseConnection, HandlerRegistry, RequestContext, handles
from kgroups.broker.append_gates import gate_of
from kgroups.broker.events import log_event
from kgroups.broker.leader_hints import leader_fields, node_endpoint_fields
from kgroups.broker.producer_state import BatchIdentity, Verdict, last_sequence
from kgroups.broker.record_policy import (
    RecordError,
    keyless_record_errors,
    record_errors_message,
    stamp_log_append_time,
    timestamp_errors,
)
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation, ResourceType
from kgroups.broker.topic_storage import NotLeaderHint
from kgroups.broker.topics import INTERNAL_TOPICS
from kgroups.broker.txn_verification import (
    PRODUCE_KINDS_SINCE,
    RETRIABLE,
    kind_of,
    verify_write,
)
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.batch import (
    ATTRIBUTES_AT,
    CONTROL,
    MAGIC,
    MAGIC_AT,
    RECORDS_COUNT_AT,
    TRANSACTIONAL,
    BatchCorruptError,
    check_batch,
    recompress_batch,
)
from kgroups.log.compression import Compression, CompressionError
from kgroups.log.partition_log import PartitionLog
from kgroups.storage.log_seam import PartitionLogSeam
from kgroups.storage.postgresql import FencedError

logger = logging.getLogger("kgroups.produce")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
# Batches holding more records than this that must be read or recompressed are, in a worker
# thread (~0.5 us a record read: a few ms on the loop at most, otherwise).
RECORDS_READ_ON_THE_LOOP = 5_000

VALID_ACKS = (-1, 0, 1)
# compression.type's codecs; "producer" keeps each batch as the producer compressed it.
STORED_CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP,
                 "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
INVALID_TIMESTAMP_MESSAGE = "One or more records have been rejected due to invalid timestamp"


@dataclass(slots=True)
class PartitionOutcome:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: list[RecordError] = field(default_factory=list)
    log_append_time: int = -1
    leader: NotLeaderHint | None = None  # with NOT_LEADER_OR_FOLLOWER: who leads instead


def split_batches(
    records: bytes, max_batch_bytes: int
) -> list[tuple[bytes, BatchIdentity]] | PartitionOutcome:
    """The record set as one bytes object per v2 batch (with its producer identity), or the
    error that refuses all of it."""
    if not records:
        return PartitionOutcome(ErrorCode.CORRUPT_MESSAGE, message="empty record set")
    batches: list[tuple[bytes, BatchIdentity]] = []
    position = 0
    while position < len(records):
        magic_at = position + MAGIC_AT
        if magic_at < len(records) and records[magic_at] != MAGIC:
            return PartitionOutcome(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                                    message="only RecordBatch v2 (magic 2) is accepted")
        try:
            header, next_position = check_batch(records, position)
        except BatchCorruptError as exc:
            return PartitionOutcome(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        last_offset_delta, record_count = header.last_offset_delta, header.records_count
        if record_count < 1 or record_count != last_offset_delta + 1:
            return PartitionOutcome(
                ErrorCode.INVALID_RECORD,
                message=f"batch holds {record_count} records but its last offset delta is "
                        f"{last_offset_delta}")
        if header.attributes & CONTROL:
            return PartitionOutcome(ErrorCode.INVALID_RECORD,
                                    message="clients may not write control records")
        if next_position - position > max_batch_bytes:
            return PartitionOutcome(
                ErrorCode.MESSAGE_TOO_LARGE,
                message=f"batch of {next_position - position} bytes exceeds the topic's "
                        f"max.message.bytes {max_batch_bytes}")
        identity = BatchIdentity(header.producer_id, header.producer_epoch, header.base_sequence,
                                 last_sequence(header.base_sequence, last_offset_delta))
        batches.append((records[position:next_position], identity))
        position = next_position
    return batches


async def _append(ctx: RequestContext, transactional_id: str | None, topic: str,
                  partition: int, records: bytes | None,
                  appended: list[tuple[PartitionLogSeam, PartitionOutcome]]) -> PartitionOutcome:
    """A large batch that must be read (a compacted topic's keys, timestamps) or recompressed
    is, in a worker thread, so the event loop serves other clients meanwhile; appends to a log
    pass its gate in arrival order, so a request waiting for its check is never overtaken by a
    later one (an uncontended gate costs no wait)."""
    if topic in INTERNAL_TOPICS:
        return PartitionOutcome(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                message=f"cannot produce to internal topic {topic}")
    try:
        log = ctx.broker.topics.log(topic, partition)
    except OSError as exc:  # the partition's log could not be opened (logged once, there)
        return PartitionOutcome(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
    if log is None:
        hint = ctx.broker.topics.elsewhere(topic, partition)
        if hint is None:
            return PartitionOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return PartitionOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER, leader=hint)
    async with gate_of(log):
        return await _append_to(ctx, log, transactional_id, topic, partition, records,
                                appended)


async def _append_to(
        ctx: RequestContext, log: PartitionLogSeam, transactional_id: str | None, topic: str,
        partition: int, records: bytes | None,
        appended: list[tuple[PartitionLogSeam, PartitionOutcome]],
) -> PartitionOutcome:
    broker = ctx.broker
    split = split_batches(bytes(records or b""), log.config.max_message_bytes)
    batches = (split if isinstance(split, PartitionOutcome)
               else await _apply_topic_policy(log, topic, partition, split))
    if isinstance(batches, PartitionOutcome):
        log_event(logger, logging.INFO, "produce_rejected", topic=topic, partition=partition,
                  error=batches.error.name, client=ctx.client_id)
        return batches
    append_time = batches[0][2]
    base_offset = -1
    producers = broker.producer_states
    try:
        for batch, identity, _ in batches:
            verdict = producers.check(log, identity)
            if verdict.error == ErrorCode.NONE and verdict.duplicate_of is None:
                verdict = Verdict(transaction_error(log, identity, batch))
            if verdict.error == ErrorCode.NONE and verdict.duplicate_of is None \
                    and transactional_id is not None and _opens_transaction(log, identity, batch):
                verdict = Verdict(await _verified(ctx, transactional_id, identity, topic,
                                                  partition))
            if verdict.error != ErrorCode.NONE:
                log_event(logger, logging.INFO, "produce_rejected", topic=topic,
                          partition=partition, error=verdict.error.name, client=ctx.client_id,
                          producer_id=identity.producer_id)
                return PartitionOutcome(verdict.error)
            if verdict.duplicate_of is not None:
                first = verdict.duplicate_of
            else:
                first, _ = log.append_batch(batch)
                producers.record(log, identity, first)
            if base_offset < 0:
                base_offset = first
    except FencedError as exc:
        log_event(logger, logging.WARNING, "append_fenced", topic=topic, partition=partition,
                  error=exc)
        broker.topics.leadership_lost(topic, partition)
        return PartitionOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER, message=str(exc),
                                leader=broker.topics.elsewhere(topic, partition))
    except OSError as exc:
        log_event(logger, logging.ERROR, "append_failed", topic=topic, partition=partition,
                  error=exc)
        return PartitionOutcome(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
    outcome = PartitionOutcome(ErrorCode.NONE, base_offset, log.log_start_offset,
                               log_append_time=append_time)
    appended.append((log, outcome))
    return outcome


def transaction_error(log: PartitionLogSeam, identity: BatchIdentity, batch: bytes) -> ErrorCode:
    """Kafka's checks of a producer's batch against its state in the partition (markers
    included, which the idempotence table does not see): an epoch older than the producer's
    last one is fenced (INVALID_PRODUCER_EPOCH, in every version since Kafka 2.7); a
    non-transactional batch while its transaction is open is INVALID_TXN_STATE. A
    transactional batch opens the producer's transaction when appended
    (kgroups.log.transaction_state)."""
    attributes = _INT16.unpack_from(batch, ATTRIBUTES_AT)[0]
    producer = log.transactions.producers.get(identity.producer_id)
    if producer is None:
        return ErrorCode.NONE
    if identity.producer_epoch < producer.epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if not attributes & TRANSACTIONAL and producer.txn_start_offset >= 0:
        return ErrorCode.INVALID_TXN_STATE
    return ErrorCode.NONE


def _opens_transaction(log: PartitionLogSeam, identity: BatchIdentity, batch: bytes) -> bool:
    """A transactional batch of a producer with no transaction open in the partition at its
    epoch: the writes KIP-890 verifies with the transaction coordinator."""
    if not _INT16.unpack_from(batch, ATTRIBUTES_AT)[0] & TRANSACTIONAL:
        return False
    producer = log.transactions.producers.get(identity.producer_id)
    return producer is None or producer.txn_start_offset < 0 \
        or producer.epoch != identity.producer_epoch


async def _verified(ctx: RequestContext, transactional_id: str, identity: BatchIdentity,
                    topic: str, partition: int) -> ErrorCode:
    """The coordinator's verdict (kgroups.broker.txn_verification), its retriable answers as
    NOT_ENOUGH_REPLICAS, which every producer retries without refreshing metadata (Kafka's
    choice)."""
    error = await verify_write(ctx.broker.transactions, transactional_id, identity.producer_id,
                               identity.producer_epoch, topic, partition,
                               kind_of(ctx.api_version, PRODUCE_KINDS_SINCE))
    return ErrorCode.NOT_ENOUGH_REPLICAS if error in RETRIABLE else error


async def _apply_topic_policy(
    log: PartitionLogSeam, topic: str, partition: int,
    batches: list[tuple[bytes, BatchIdentity]],
) -> list[tuple[bytes, BatchIdentity, int]] | PartitionOutcome:
    """The batches as the topic's settings want them stored (in the codec its
    compression.type names), each with its LogAppendTime stamp (-1 for CreateTime), or the
    refusal of all of them: a compacted topic takes no record without a key (INVALID_RECORD),
    a CreateTime topic none timestamped outside its message.timestamp.*.max.ms bounds
    (INVALID_TIMESTAMP), with one error per record, as Kafka answers (the first
    MAX_RECORD_ERRORS of them). Batches of more than RECORDS_READ_ON_THE_LOOP records that
    must be read or recompressed are, in a worker thread."""
    config = log.config
    now_ms = int(time.time() * 1000)
    raw = [batch for batch, _ in batches]
    heavy = (config.compacted or config.message_timestamp_type != "LogAppendTime"
             or STORED_CODECS.get(config.compression_type) is not None) and sum(
        _INT32.unpack_from(batch, RECORDS_COUNT_AT)[0] for batch in raw) \
        > RECORDS_READ_ON_THE_LOOP
    if heavy:
        stored = await asyncio.to_thread(_stored_form, log, topic, partition, batches, now_ms)
    else:
        stored = _stored_form(log, topic, partition, batches, now_ms)
    if isinstance(stored, PartitionOutcome):
        return stored
    if config.message_timestamp_type != "LogAppendTime":
        return [(batch, identity, -1) for batch, identity in stored]
    return [(stamp_log_append_time(batch, now_ms), identity, now_ms)
            for batch, identity in stored]


def _stored_form(log: PartitionLogSeam, topic: str, partition: int,
                 batches: list[tuple[bytes, BatchIdentity]], now_ms: int,
                 ) -> list[tuple[bytes, BatchIdentity]] | PartitionOutcome:
    """The checks and the recompression of `_apply_topic_policy`, safe off the event loop
    (it reads only the batches and the log's settings)."""
    config = log.config
    raw = [batch for batch, _ in batches]
    try:
        if config.compacted:
            total, errors = keyless_record_errors(raw, topic, partition)
            if errors:
                return PartitionOutcome(ErrorCode.INVALID_RECORD, log_start_offset=0,
                                        message=record_errors_message(errors, total),
                                        record_errors=errors)
        if config.message_timestamp_type != "LogAppendTime":
            errors = timestamp_errors(raw, now_ms, config.message_timestamp_before_max_ms,
                                      config.message_timestamp_after_max_ms)
            if errors:
                return PartitionOutcome(ErrorCode.INVALID_TIMESTAMP,
                                        log_start_offset=log.log_start_offset,
                                        message=INVALID_TIMESTAMP_MESSAGE, record_errors=errors)
        codec = STORED_CODECS.get(config.compression_type)
        if codec is not None:
            batches = [(recompress_batch(batch, codec), identity) for batch, identity in batches]
    except (BatchCorruptError, CompressionError) as exc:
        return PartitionOutcome(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
    return batches


async def _settle(ctx: RequestContext,
                  appended: list[tuple[PartitionLogSeam, PartitionOutcome]]) -> None:
    """Wait until each touched file log may acknowledge (an fsync shared per log where its
    flush.messages asks for one); a partition whose fsync fails is not acknowledged. A
    PostgreSQL log has nothing to wait for: its append returned once committed."""
    logs = {id(log): log for log, _ in appended if isinstance(log, PartitionLog)}
    results = await asyncio.gather(
        *(ctx.broker.group_commit.settle(log) for log in logs.values()),
        return_exceptions=True,
    )
    failed = {key for key, result in zip(logs, results, strict=True)
              if isinstance(result, Exception)}
    for log, outcome in appended:
        if id(log) in failed:
            log_event(logger, logging.ERROR, "fsync_failed", directory=logs[id(log)].directory)
            outcome.error = ErrorCode.KAFKA_STORAGE_ERROR
            outcome.base_offset = -1


def _append_time(ms: int) -> datetime | None:
    """The response's log_append_time: the stamp of a LogAppendTime topic, else -1 (None)."""
    return None if ms < 0 else datetime.fromtimestamp(ms / 1000, UTC)


@handles(api_key=ApiKey.PRODUCE, min_version=3, max_version=12)
async def produce(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    acks = int(request.acks)
    outcomes: list[tuple[str, list[tuple[int, PartitionOutcome]]]] = []
    appended: list[tuple[PartitionLogSeam, PartitionOutcome]] = []
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            if acks not in VALID_ACKS:
                outcome = PartitionOutcome(ErrorCode.INVALID_REQUIRED_ACKS)
            else:
                outcome = await _append(ctx, request.transactional_id, topic.name,
                                        int(data.index), data.records, appended)
            partitions.append((int(data.index), outcome))
        outcomes.append((topic.name, partitions))
    if appended and acks != 0:
        await _settle(ctx, appended)
    if appended:
        broker.appends.notify()
    if acks == 0:
        if any(o.error != ErrorCode.NONE for _, partitions in outcomes for _, o in partitions):
            raise CloseConnection("acks0_produce_failed")
        return None
    response_cls = response_type(ApiKey.PRODUCE, ctx.api_version)
    topic_cls = sibling(response_cls, "TopicProduceResponse")
    partition_cls = sibling(response_cls, "PartitionProduceResponse")
    module = sys.modules[response_cls.__module__]
    error_cls = getattr(module, "BatchIndexAndErrorMessage", None)
    leader_cls = getattr(module, "LeaderIdAndEpoch", None)  # v10+ (KIP-951)
    hints = [o.leader for _, partitions in outcomes for _, o in partitions
             if o.leader is not None]
    responses = tuple(
        build(topic_cls, name=name, partition_responses=tuple(
            build(partition_cls, index=index, error_code=kio_error(outcome.error),
                  base_offset=outcome.base_offset,
                  log_append_time=_append_time(outcome.log_append_time),
                  log_start_offset=outcome.log_start_offset,
                  record_errors=tuple(
                      error_cls(batch_index=i, batch_index_error_message=m)
                      for i, m in outcome.record_errors) if error_cls else (),
                  error_message=outcome.message,
                  **leader_fields(leader_cls, outcome.leader))
            for index, outcome in partitions))
        for name, partitions in outcomes
    )
    return build(response_cls, responses=responses, throttle_time=NO_THROTTLE,
                 **node_endpoint_fields(module, hints))


def install(registry: HandlerRegistry) -> None:
    registry.register(produce)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.PRODUCE)
async def _authorize_produce(ctx: RequestContext, request: Any, inner: authz.Inner,
                             check: authz.Check) -> Any:
    if request.transactional_id is not None and not check(
            Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        if int(request.acks) == 0:
            raise CloseConnection("produce_transactional_id_unauthorized")
        return authz.response(ctx, responses=tuple(_produce_topic(ctx, t, authz.TXN_DENIED)
                                                   for t in request.topic_data))
    allowed, denied = authz.split(request.topic_data,
                                  lambda t: check.topic(Operation.WRITE, t.name))
    if denied and int(request.acks) == 0:
        raise CloseConnection("produce_topic_unauthorized")  # acks=0 learns of errors so
    responses: tuple[Any, ...] = ()
    if allowed:
        response = await inner(ctx, dataclasses.replace(request, topic_data=allowed))
        if response is None:
            return None
        responses = tuple(response.responses)
    return authz.response(ctx, responses=responses + tuple(
        _produce_topic(ctx, t, authz.TOPIC_DENIED) for t in denied))


def _produce_topic(ctx: RequestContext, topic: Any, error: ErrorCode) -> Any:
    return authz.nested(ctx, "TopicProduceResponse", name=topic.name, partition_responses=tuple(
        authz.nested(ctx, "PartitionProduceResponse", index=p.index, error_code=kio_error(error),
                     base_offset=-1, log_append_time=None, log_start_offset=-1, record_errors=(),
                     error_message=None) for p in topic.partition_data))
