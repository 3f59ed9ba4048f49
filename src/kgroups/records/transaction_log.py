"""__transaction_state records: the transaction coordinator's one key and one value.

The key (record type 0, not flexible) holds the transactional id. The value says where that id's
transaction stands: version 0 (Kafka writes it under transaction.version 0) or version 1,
flexible, which carries three tagged fields written only when they differ from their defaults
(tag 0 the previous producer id, tag 1 the next producer id, both -1 by default; tag 2 the
client's transaction version, 0 by default). A null value is a tombstone: the transactional id
expired. The partitions of an Empty transaction are written as a null array, as Kafka does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kgroups.log.batch import uvarint
from kgroups.records.wire import (
    INT16,
    INT32,
    INT64,
    RecordDecodeError,
    array_length,
    fail,
    read_compact_string,
    read_int16,
    read_int32,
    read_int64,
    read_string,
    read_tagged_fields,
    read_uvarint,
    write_compact_nullable_string,
    write_string,
)

TRANSACTION_LOG_KEY_TYPE = 0
NO_PRODUCER_ID = -1
_INT8 = struct.Struct(">b")
# The value's transaction status byte, by the names Kafka gives the states (DescribeTransactions,
# ListTransactions, kafka-transactions); readers of the log (the pipeline) name them with it.
TRANSACTION_STATUS_NAMES = {
    0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
    5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence",
}


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One transactional id's state; `partitions` is None for an Empty transaction (a null
    array on the wire) and a tuple of (topic, partition ids) otherwise."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    version: int = 1


def encode_transaction_log_key(key: TransactionLogKey) -> bytes:
    return INT16.pack(TRANSACTION_LOG_KEY_TYPE) + write_string(key.transactional_id)


def decode_transaction_log_key(data: bytes) -> TransactionLogKey:
    key_type, pos = read_int16(data, 0, "TransactionLogKey type")
    if key_type != TRANSACTION_LOG_KEY_TYPE:
        raise fail("TransactionLogKey type", 0, f"{key_type} is not a transaction log key")
    transactional_id, _ = read_string(data, pos, "TransactionLogKey transactionalId")
    return TransactionLogKey(transactional_id)


def encode_transaction_log_value(value: TransactionLogValue) -> bytes:
    if value.version not in (0, 1):
        raise ValueError(f"TransactionLogValue version {value.version} does not exist")
    flexible = value.version == 1
    parts = [INT16.pack(value.version), INT64.pack(value.producer_id),
             INT16.pack(value.producer_epoch), INT32.pack(value.transaction_timeout_ms),
             _INT8.pack(value.transaction_status)]
    parts.append(_encode_partitions(value.partitions, flexible))
    parts += [INT64.pack(value.last_update_timestamp_ms), INT64.pack(value.start_timestamp_ms)]
    if flexible:
        parts.append(_encode_tags(value))
    return b"".join(parts)


def _encode_partitions(partitions: tuple[tuple[str, tuple[int, ...]], ...] | None,
                       flexible: bool) -> bytes:
    if partitions is None:
        return b"\x00" if flexible else INT32.pack(-1)
    parts = [uvarint(len(partitions) + 1) if flexible else INT32.pack(len(partitions))]
    for topic, ids in partitions:
        if flexible:
            parts += [write_compact_nullable_string(topic), uvarint(len(ids) + 1)]
        else:
            parts += [write_string(topic), INT32.pack(len(ids))]
        parts += [INT32.pack(partition) for partition in ids]
        if flexible:
            parts.append(b"\x00")
    return b"".join(parts)


def _encode_tags(value: TransactionLogValue) -> bytes:
    tags: list[tuple[int, bytes]] = []
    if value.previous_producer_id != NO_PRODUCER_ID:
        tags.append((0, INT64.pack(value.previous_producer_id)))
    if value.next_producer_id != NO_PRODUCER_ID:
        tags.append((1, INT64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append((2, INT16.pack(value.client_transaction_version)))
    return uvarint(len(tags)) + b"".join(
        uvarint(tag) + uvarint(len(raw)) + raw for tag, raw in tags)


def decode_transaction_log_value(data: bytes | None) -> TransactionLogValue | None:
    """None for a tombstone."""
    if data is None:
        return None
    what = "TransactionLogValue"
    version, pos = read_int16(data, 0, f"{what} version")
    if version not in (0, 1):
        raise fail(f"{what} version", 0, f"unknown version {version}")
    flexible = version == 1
    producer_id, pos = read_int64(data, pos, f"{what} producerId")
    epoch, pos = read_int16(data, pos, f"{what} producerEpoch")
    timeout, pos = read_int32(data, pos, f"{what} transactionTimeoutMs")
    if pos >= len(data):
        raise RecordDecodeError(f"cannot read {what} transactionStatus at byte {pos}", pos)
    status = _INT8.unpack_from(data, pos)[0]
    partitions, pos = _read_partitions(data, pos + 1, flexible, f"{what} transactionPartitions")
    last_update, pos = read_int64(data, pos, f"{what} transactionLastUpdateTimestampMs")
    start, pos = read_int64(data, pos, f"{what} transactionStartTimestampMs")
    previous = following = NO_PRODUCER_ID
    client_version = 0
    if flexible:
        tags, pos = read_tagged_fields(data, pos, what)
        if 0 in tags:
            previous = read_int64(tags[0], 0, f"{what} previousProducerId")[0]
        if 1 in tags:
            following = read_int64(tags[1], 0, f"{what} nextProducerId")[0]
        if 2 in tags:
            client_version = read_int16(tags[2], 0, f"{what} clientTransactionVersion")[0]
    return TransactionLogValue(producer_id, epoch, timeout, status, partitions, last_update, start,
                               previous, following, client_version, version)


def _read_partitions(data: bytes, pos: int, flexible: bool, what: str
                     ) -> tuple[tuple[tuple[str, tuple[int, ...]], ...] | None, int]:
    if flexible:
        count_plus_one, pos = read_uvarint(data, pos, what)
        if count_plus_one == 0:
            return None, pos
        count = count_plus_one - 1
    else:
        count, pos = read_int32(data, pos, what)
        if count == -1:
            return None, pos
        count, _ = array_length(data, pos - 4, what)
    entries = []
    for index in range(count):
        item = f"{what}[{index}]"
        if flexible:
            topic, pos = read_compact_string(data, pos, f"{item}.topic")
            size, pos = read_uvarint(data, pos, f"{item}.partitionIds")
            size -= 1
            if size < 0:
                raise fail(f"{item}.partitionIds", pos, "null where an array is required")
        else:
            topic, pos = read_string(data, pos, f"{item}.topic")
            size, pos = array_length(data, pos, f"{item}.partitionIds")
        ids = []
        for _ in range(size):
            partition, pos = read_int32(data, pos, f"{item}.partitionIds")
            ids.append(partition)
        if flexible:
            pos = read_tagged_fields(data, pos, item)[1]
        entries.append((topic, tuple(ids)))
    return tuple(entries), pos
