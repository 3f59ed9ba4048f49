"""TxnOffsetCommit and the end of a transaction in a __consumer_offsets partition.

A transactional producer's offsets are written as its transactional batch and stay pending
(`pending_txn`) until the transaction coordinator's marker for that producer is written to the
same partition (`complete`): COMMIT applies them to their groups, ABORT drops them. OffsetFetch
does not show them before (with require_stable it answers UNSTABLE_OFFSET_COMMIT for them).

The group checks are Kafka's for transactional commits (KIP-447): a classic group checks the
member, its instance id and generation, but neither its state nor (without member fields,
TxnOffsetCommit v0-v2) its membership; a consumer-protocol group checks the member and its
epoch, answering ILLEGAL_GENERATION where OffsetCommit would say STALE_MEMBER_EPOCH. A group
that does not exist is created as an empty classic group when no generation is given (kept
only if the write succeeds), else the commit is refused with ILLEGAL_GENERATION.
"""

from __future__ import annotations

from collections.abc import Callable

from kgroups.coordinator.classic_groups import validate_member
from kgroups.coordinator.context import ShardContext
from kgroups.coordinator.effects import TxnMarker
from kgroups.coordinator.group import ClassicGroup, GroupState
from kgroups.coordinator.journal import Journal
from kgroups.coordinator.messages import (
    UNKNOWN_MEMBER_ID,
    CompleteTransactionRequest,
    CompleteTransactionResponse,
    PartitionError,
    TopicPartitionErrors,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kgroups.coordinator.offsets import sized_partitions, validate_consumer_commit
from kgroups.coordinator.persistence import offset_record
from kgroups.coordinator.streams_offsets import validate_streams_commit
from kgroups.errors import ErrorCode
from kgroups.records.schema import OffsetCommitValue, OffsetsRecord

ErrorOf = Callable[[str, int], ErrorCode]


def _validate_classic(group: ClassicGroup, req: TxnOffsetCommitRequest) -> ErrorCode | None:
    """Kafka's ClassicGroup check for a transactional commit."""
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if req.generation_id < 0 and group.state is GroupState.EMPTY:
        return None
    if (req.generation_id >= 0 or req.member_id != UNKNOWN_MEMBER_ID
            or req.group_instance_id is not None):
        error = validate_member(group, req.member_id, req.group_instance_id)
        if error is not None:
            return error
        if req.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
    return None


class TxnOffsets:
    """TxnOffsetCommit and transaction completion over the shard's groups."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx

    def commit(self, req: TxnOffsetCommitRequest) -> None:
        ctx = self._ctx
        partition = ctx.partition_of(req.group_id)
        error = ctx.ownership_error(req.group_id)
        group = ctx.groups.get(req.group_id)
        journal = Journal()
        if error is None:
            if group is None:
                if req.generation_id < 0:
                    group = ctx.create_group(req.group_id, journal)
                else:
                    error = ErrorCode.ILLEGAL_GENERATION
            elif group.share is not None:
                error = ErrorCode.GROUP_ID_NOT_FOUND  # Kafka: not a consumer group
            elif group.consumer is not None and group.state is not GroupState.DEAD:
                error = validate_consumer_commit(group, req, ctx.topics)
            elif group.streams is not None and group.state is not GroupState.DEAD:
                error = validate_streams_commit(group, req)
            else:
                error = _validate_classic(group, req)
        if error is None:
            held_epoch = ctx.txn.producer_epoch(partition, req.producer_id)
            if held_epoch is not None and req.producer_epoch < held_epoch:
                error = ErrorCode.INVALID_PRODUCER_EPOCH  # a zombie of the producer
        if error is not None:
            ctx.reply(req.request_id, _response(req, lambda _t, _p: error))
            return

        fitting, too_large = sized_partitions(req.topics, ctx.config.offset_metadata_max_bytes)
        records: list[OffsetsRecord] = [
            offset_record(req.group_id, topic_name, part.partition, OffsetCommitValue(
                offset=part.offset, metadata=metadata, commit_timestamp=ctx.now,
                leader_epoch=part.leader_epoch))
            for topic_name, part, metadata in fitting]

        def answer(stored: ErrorCode) -> None:
            ctx.reply(req.request_id, _response(
                req, lambda t, p: ErrorCode.OFFSET_METADATA_TOO_LARGE if (t, p) in too_large
                else stored))

        def failed(write_error: ErrorCode) -> None:
            ctx.roll_back(journal)  # a group made for this commit goes again
            answer(write_error)

        if not records:
            ctx.roll_back(journal)
            answer(ErrorCode.NONE)
            return
        ctx.write_transactional(partition, req.producer_id, req.producer_epoch, records,
                                lambda: answer(ErrorCode.NONE), failed)

    def complete(self, req: CompleteTransactionRequest) -> None:
        """Write the marker in the partition's write order; its success commits or drops the
        producer's pending offsets there (`ShardContext.write_marker`)."""
        ctx = self._ctx
        error: ErrorCode | None = None
        if req.offsets_partition in ctx.loading:
            error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        elif req.offsets_partition not in ctx.owned:
            error = ErrorCode.NOT_COORDINATOR
        else:
            held_epoch = ctx.txn.producer_epoch(req.offsets_partition, req.producer_id)
            if held_epoch is not None and req.producer_epoch < held_epoch:
                error = ErrorCode.INVALID_PRODUCER_EPOCH
        if error is not None:
            ctx.reply(req.request_id, CompleteTransactionResponse(error))
            return
        ctx.write_marker(
            req.offsets_partition, req.producer_id, req.producer_epoch,
            TxnMarker(req.commits, req.coordinator_epoch),
            lambda: ctx.reply(req.request_id, CompleteTransactionResponse(ErrorCode.NONE)),
            lambda write_error: ctx.reply(req.request_id,
                                          CompleteTransactionResponse(write_error)))


def _response(req: TxnOffsetCommitRequest, error_of: ErrorOf) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(tuple(
        TopicPartitionErrors(topic.name, tuple(
            PartitionError(p.partition, error_of(topic.name, p.partition))
            for p in topic.partitions))
        for topic in req.topics))
