"""A transactional id's state, as the coordinator keeps it and as __transaction_state stores it.

The state ids are Kafka's (the value's TransactionStatus byte), and so are the names
DescribeTransactions and ListTransactions answer with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from kgroups.records.transaction_log import (
    NO_PRODUCER_ID,
    TRANSACTION_STATUS_NAMES,
    TransactionLogValue,
)

NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        return _NAMES[self]


_NAMES = {TxnState(status): name for status, name in TRANSACTION_STATUS_NAMES.items()}
STATE_BY_NAME = {name: state for state, name in _NAMES.items()}
COMPLETE_STATES = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARE_STATES = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})

Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id. `last_producer_epoch` is memory-only, as in Kafka: it lets a
    KIP-360 retry of a successful InitProducerId get the same epoch back."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[Partition]
    start_timestamp_ms: int
    last_update_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    client_transaction_version: int = 0

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    def moved(self, **changes: object) -> TxnMetadata:
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_value(self, log_value_version: int) -> TransactionLogValue:
        grouped: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            grouped.setdefault(topic, []).append(partition)
        partitions = (None if self.state is TxnState.EMPTY
                      else tuple((topic, tuple(ids)) for topic, ids in grouped.items()))
        return TransactionLogValue(
            self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state), partitions,
            self.last_update_timestamp_ms, self.start_timestamp_ms, self.previous_producer_id,
            self.next_producer_id, self.client_transaction_version, log_value_version)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch free for fencing: an id at MAX-1 must rotate."""
    return epoch >= MAX_EPOCH - 1


def metadata_of(transactional_id: str, value: TransactionLogValue) -> TxnMetadata:
    partitions = frozenset(
        (topic, partition) for topic, ids in (value.partitions or ()) for partition in ids)
    state = TxnState(value.transaction_status)
    return TxnMetadata(
        transactional_id, value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
        state, partitions if state is not TxnState.EMPTY else frozenset(),
        value.start_timestamp_ms, value.last_update_timestamp_ms, value.previous_producer_id,
        value.next_producer_id, NO_PRODUCER_EPOCH, value.client_transaction_version)
