"""KIP-890 verification: before a partition takes a transactional write of a producer that has
no transaction open there, the transaction coordinator is asked whether the partition is in the
producer's ongoing transaction (Kafka's `transaction.partition.verification.enable`, on by
default in 4.3.1).

Without it, a producer whose transaction was aborted behind its back (a timeout, a newer
instance) could open a fresh, unlisted transaction in the partition with a late batch; no
marker would ever close it and the partition's last stable offset would stay there for good.

Produce and TxnOffsetCommit ask it alike; what they do with the answer depends on the request
version, as in Kafka: old versions (Produce v0-v10, TxnOffsetCommit v0-v3) hear
INVALID_TXN_STATE where newer ones hear TRANSACTION_ABORTABLE, and transaction version 2
clients (Produce v12+, TxnOffsetCommit v5+) have the partition added to their transaction
instead of verified. A fenced producer hears INVALID_PRODUCER_EPOCH, one the coordinator does
not know INVALID_PRODUCER_ID_MAPPING (all checked against Kafka 4.3.1 in
tests/differential/test_diff_transactions.py).

The coordinator is reached in-process (`broker.transactions`); a broker that is not the
coordinator of the transactional id (cluster mode) skips the check (docs/compatibility.md).
"""

from __future__ import annotations

import enum

from kgroups.broker.transaction_runtime import TransactionRuntime, wall_clock_ms
from kgroups.errors import ErrorCode
from kgroups.transactions.coordinator import TRANSACTION_VERSION_2


class TxnWriteKind(enum.Enum):
    """What the request version lets the coordinator do and the client understand (Kafka's
    TransactionSupportedOperation)."""

    DEFAULT_ERROR = "default"  # verify; an unlisted partition is INVALID_TXN_STATE
    GENERIC_ERROR = "generic"  # verify; an unlisted partition is TRANSACTION_ABORTABLE
    ADD_PARTITION = "add"  # transaction version 2: add the partition to the transaction


# The first version of each request in the second and third kinds.
PRODUCE_KINDS_SINCE = ((12, TxnWriteKind.ADD_PARTITION), (11, TxnWriteKind.GENERIC_ERROR))
TXN_OFFSET_COMMIT_KINDS_SINCE = ((5, TxnWriteKind.ADD_PARTITION),
                                 (4, TxnWriteKind.GENERIC_ERROR))

# Coordinator answers that only mean "not now": Kafka turns them into an error every client
# retries without a metadata refresh (Produce: NOT_ENOUGH_REPLICAS; the group coordinator
# then normalises that to COORDINATOR_NOT_AVAILABLE for TxnOffsetCommit).
RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


def kind_of(version: int, kinds_since: tuple[tuple[int, TxnWriteKind], ...]) -> TxnWriteKind:
    for since, kind in kinds_since:
        if version >= since:
            return kind
    return TxnWriteKind.DEFAULT_ERROR


async def verify_write(runtime: TransactionRuntime, transactional_id: str, producer_id: int,
                       producer_epoch: int, topic: str, partition: int, kind: TxnWriteKind
                       ) -> ErrorCode:
    """Whether the producer may write transactionally to the partition: NONE, or the error the
    client gets (before the request's own mapping of RETRIABLE). NONE, unchecked, when this
    broker is not the id's coordinator."""
    if not runtime.coordinates(transactional_id):
        return ErrorCode.NONE
    if not runtime.available:  # __transaction_state not created yet: no such producer
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    wanted = [(topic, partition)]
    if kind is TxnWriteKind.ADD_PARTITION:
        decision = await runtime.run(runtime.coordinator.add_partitions(
            transactional_id, producer_id, producer_epoch, wanted, wall_clock_ms(),
            client_transaction_version=TRANSACTION_VERSION_2))
        error = decision.error
    else:
        (error,) = runtime.coordinator.verify_partitions(
            transactional_id, producer_id, producer_epoch, wanted).values()
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error is ErrorCode.TRANSACTION_ABORTABLE and kind is TxnWriteKind.DEFAULT_ERROR:
        return ErrorCode.INVALID_TXN_STATE
    return error
