"""What the coordinator hands back: the __transaction_state record to append, the markers to
write, and the answer once the record is durable."""

from __future__ import annotations

from dataclasses import dataclass

from kgroups.errors import ErrorCode
from kgroups.records.transaction_log import (
    TransactionLogKey,
    encode_transaction_log_key,
    encode_transaction_log_value,
)
from kgroups.transactions.state import NO_PRODUCER_EPOCH, TxnMetadata


@dataclass(frozen=True, slots=True)
class MarkerWrite:
    """One marker for one partition of a transaction, as the broker writes it
    (kgroups.broker.txn_markers) and WriteTxnMarkers carries it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commits: bool
    coordinator_epoch: int
    # 2 (KIP-890's transactions v2): the coordinator bumped the epoch for this marker.
    transaction_version: int = 0


@dataclass(frozen=True, slots=True)
class TxnWrite:
    """A record for a transactional id's partition; `metadata` None is the tombstone that expires
    the id."""

    transactional_id: str
    metadata: TxnMetadata | None

    def key(self) -> bytes:
        return encode_transaction_log_key(TransactionLogKey(self.transactional_id))

    def value(self, log_value_version: int) -> bytes | None:
        if self.metadata is None:
            return None
        return encode_transaction_log_value(self.metadata.to_value(log_value_version))


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to a request: `error` and the producer id and epoch it names are what the
    client gets once `write` (if any) is durable and applied; a failed write changes the answer
    (the runtime maps it the way the group coordinator does)."""

    error: ErrorCode
    write: TxnWrite | None = None
    producer_id: int = -1
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class Completion:
    """The second phase of a transaction whose Prepare record is durable: write `markers`, then
    append `write` (the Complete record)."""

    markers: tuple[MarkerWrite, ...]
    write: TxnWrite
