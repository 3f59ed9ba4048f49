"""__transaction_state records: kgroups' encoding read back, and read by Kafka 4.3.1's
DumpLogSegments --transaction-log-decoder (the tagged fields of version 1 included)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.records.segment_dump import dump_segment

from kgroups.coordinator.placement import partition_for
from kgroups.log.batch import iter_batches
from kgroups.records.transaction_log import (
    TransactionLogKey,
    TransactionLogValue,
    decode_transaction_log_key,
    decode_transaction_log_value,
    encode_transaction_log_key,
    encode_transaction_log_value,
)
from kgroups.records.wire import RecordDecodeError

ONGOING = TransactionLogValue(
    1000, 3, 60000, 1, (("orders", (0, 2)), ("__consumer_offsets", (7,))),
    1_700_000_000_123, 1_700_000_000_000, previous_producer_id=999, next_producer_id=1001,
    client_transaction_version=2)
EMPTY_V0 = TransactionLogValue(1000, 3, 60000, 0, None, 1_700_000_000_123, -1, version=0)
COMPLETE_V1 = TransactionLogValue(5, 0, 60000, 4, (), 1, 2)
ONGOING_V0 = TransactionLogValue(7, 1, 1000, 1, (("t", (4,)),), 10, 9, version=0)
RECORDS: list[tuple[TransactionLogKey, TransactionLogValue | None]] = [
    (TransactionLogKey("tx-1"), ONGOING), (TransactionLogKey("tx-1"), EMPTY_V0),
    (TransactionLogKey("tx-2"), COMPLETE_V1), (TransactionLogKey("tx-3"), ONGOING_V0),
    (TransactionLogKey("tx-2"), None)]


@pytest.mark.parametrize("value", [ONGOING, EMPTY_V0, COMPLETE_V1, ONGOING_V0])
def test_values_read_back_as_written(value: TransactionLogValue) -> None:
    raw = encode_transaction_log_value(value)
    assert decode_transaction_log_value(raw) == value
    assert encode_transaction_log_value(decode_transaction_log_value(raw)) == raw  # type: ignore[arg-type]


def test_default_tagged_fields_are_not_written() -> None:
    """A version 1 value with every tagged field at its default ends in an empty tag section,
    as Kafka's generated writer does: 8+2+4+1 fixed bytes, a compact empty array, two int64s."""
    raw = encode_transaction_log_value(COMPLETE_V1)
    assert len(raw) == 2 + 15 + 1 + 16 + 1
    assert raw[-1] == 0


def test_key_and_tombstone() -> None:
    key = encode_transaction_log_key(TransactionLogKey("my-tx"))
    assert key == b"\x00\x00\x00\x05my-tx"
    assert decode_transaction_log_key(key) == TransactionLogKey("my-tx")
    assert decode_transaction_log_value(None) is None


def test_damaged_bytes_say_where() -> None:
    raw = encode_transaction_log_value(ONGOING)
    with pytest.raises(RecordDecodeError, match="transactionPartitions"):
        decode_transaction_log_value(raw[:20])
    with pytest.raises(RecordDecodeError, match="unknown version 2"):
        decode_transaction_log_value(b"\x00\x02" + raw[2:])
    with pytest.raises(RecordDecodeError, match="not a transaction log key"):
        decode_transaction_log_key(b"\x00\x01\x00\x01x")


@pytest.mark.kafka
def test_kafka_decodes_what_kgroups_encodes(tmp_path: Path) -> None:
    dumped = dump_segment(tmp_path, "__transaction_state", "--transaction-log-decoder", [
        (encode_transaction_log_key(key),
         None if value is None else encode_transaction_log_value(value))
        for key, value in RECORDS])
    assert [json.loads(key)["data"]["transactionalId"] for _, key, _ in dumped] == [
        key.transactional_id for key, _ in RECORDS]
    assert dumped[-1][2] == "<DELETE>"
    assert [_value_of(json.loads(payload)) for _, _, payload in dumped[:-1]] == [
        value for _, value in RECORDS[:-1]]


def _value_of(printed: dict[str, object]) -> TransactionLogValue:
    """DumpLogSegments' JSON of a value, as the value kgroups encoded."""
    data: dict = printed["data"]  # type: ignore[assignment]
    partitions = data["transactionPartitions"]
    return TransactionLogValue(
        data["producerId"], data["producerEpoch"], data["transactionTimeoutMs"],
        data["transactionStatus"],
        None if partitions is None
        else tuple((p["topic"], tuple(p["partitionIds"])) for p in partitions),
        data["transactionLastUpdateTimestampMs"], data["transactionStartTimestampMs"],
        data.get("previousProducerId", -1), data.get("nextProducerId", -1),
        data.get("clientTransactionVersion", 0), int(printed["version"]))  # type: ignore[call-overload]


@pytest.mark.kafka
def test_kgroups_reads_what_kafka_writes(kafka_broker: Any) -> None:
    """A confluent-kafka transactional producer commits and aborts on Kafka 4.3.1; every
    record of the id in Kafka's __transaction_state segments decodes and re-encodes to
    Kafka's bytes, and they tell the transaction's story."""
    tx = f"codec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_topics([NewTopic(tx, 2)])[tx].result(30)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": tx})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(tx, b"kept", partition=0)
    producer.produce(tx, b"kept", partition=1)
    producer.commit_transaction(60)
    producer.begin_transaction()
    producer.produce(tx, b"dropped", partition=1)
    producer.flush(30)
    producer.abort_transaction(60)
    directory = kafka_broker.data_dir / f"__transaction_state-{partition_for(tx, 50)}"
    key = encode_transaction_log_key(TransactionLogKey(tx))
    deadline = time.monotonic() + 30
    while True:  # the Complete record follows the answer to EndTxn
        values = [record.value for segment in sorted(directory.glob("*.log"))
                  for batch in iter_batches(segment.read_bytes())
                  for record in batch.records if record.key == key]
        decoded = [decode_transaction_log_value(v) for v in values]
        if (decoded and decoded[-1] is not None and decoded[-1].transaction_status == 5) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert decode_transaction_log_key(key) == TransactionLogKey(tx)
    assert [encode_transaction_log_value(v) for v in decoded] == values  # type: ignore[arg-type]
    assert [v.transaction_status for v in decoded] == [0, 1, 2, 4, 1, 3, 5]  # type: ignore[union-attr]
    # The partitions as the producer added them: librdkafka may add 1 before 0.
    [(topic, partitions)] = decoded[2].partitions  # type: ignore[union-attr]
    assert topic == tx and sorted(partitions) == [0, 1]
    assert {v.version for v in decoded} == {1}  # type: ignore[union-attr]
