"""KIP-890 verification on an in-process broker: a transactional batch for a partition the
producer's transaction does not hold is refused before it is appended, so a late batch of a
producer whose transaction was aborted cannot leave an open transaction that no marker closes
(read_committed consumers would stop at it for good). Kafka 4.3.1's answers for the same
requests are compared in tests/differential/test_diff_transactions.py."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from broker_wire_helpers import connect, create_topic, nested_of, request_of
from read_committed_helpers import READ_COMMITTED, fetch_partition, txn_batch

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.errors import ErrorCode
from kgroups.tools.wire_client import KafkaWireClient

E = ErrorCode
TX = "verified-tx"


def _init(client: KafkaWireClient) -> tuple[int, int]:
    answer = client.call(request_of(
        ApiKey.INIT_PRODUCER_ID, 5, transactional_id=TX,
        transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert answer.error_code == E.NONE
    return int(answer.producer_id), int(answer.producer_epoch)


def _produce(client: KafkaWireClient, version: int, producer: tuple[int, int], value: bytes,
             sequence: int = 0, transactional_id: str | None = TX) -> ErrorCode:
    api = ApiKey.PRODUCE
    batch = txn_batch(producer[0], value, epoch=producer[1], sequence=sequence)
    answer = client.call(request_of(
        api, version, transactional_id=transactional_id, acks=-1,
        timeout=datetime.timedelta(seconds=5), topic_data=(nested_of(
            api, version, "TopicProduceData", name="t", partition_data=(nested_of(
                api, version, "PartitionProduceData", index=0, records=batch),)),)))
    return ErrorCode(int(answer.responses[0].partition_responses[0].error_code))


def _end(client: KafkaWireClient, producer: tuple[int, int], commit: bool) -> None:
    answer = client.call(request_of(ApiKey.END_TXN, 4, transactional_id=TX,
                                    producer_id=producer[0], producer_epoch=producer[1],
                                    committed=commit))
    assert answer.error_code == E.NONE


def _partitions(inprocess_broker: Any) -> frozenset[tuple[str, int]]:
    txn = inprocess_broker.broker.transactions.coordinator.get(TX)
    return txn.partitions


@pytest.mark.parametrize(("version", "refused"), [(3, E.INVALID_TXN_STATE),
                                                  (10, E.INVALID_TXN_STATE),
                                                  (11, E.TRANSACTION_ABORTABLE)])
def test_a_batch_outside_the_transaction_is_refused(inprocess_broker: Any, version: int,
                                                    refused: ErrorCode) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "t", 1)
        producer = _init(client)
        assert _produce(client, version, producer, b"outside") == refused
        assert _produce(client, version, (producer[0], producer[1] + 1), b"x") \
            == E.INVALID_PRODUCER_EPOCH
        assert _produce(client, version, (producer[0] + 1, 0), b"x") \
            == E.INVALID_PRODUCER_ID_MAPPING
        # Nothing was appended: no transaction holds the last stable offset back.
        read = fetch_partition(client, "t", 0, READ_COMMITTED)
        assert (read.high_watermark, read.last_stable_offset) == (0, 0)
        # A batch without a transactional id is not verified (an idempotent producer's).
        assert _produce(client, version, (producer[0] + 2, 0), b"plain",
                        transactional_id=None) == E.NONE


def test_a_late_batch_after_the_abort_cannot_reopen_the_transaction(
        inprocess_broker: Any) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "t", 1)
        producer = _init(client)
        added = client.call(request_of(
            ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=TX,
            v3_and_below_producer_id=producer[0], v3_and_below_producer_epoch=producer[1],
            v3_and_below_topics=(nested_of(ApiKey.ADD_PARTITIONS_TO_TXN, 3,
                                           "AddPartitionsToTxnTopic", name="t",
                                           partitions=(0,)),)))
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0] \
            .partition_error_code == E.NONE
        assert _produce(client, 11, producer, b"in") == E.NONE
        _end(client, producer, commit=False)
        deadline = time.monotonic() + 10  # the markers follow EndTxn's answer
        while fetch_partition(client, "t", 0, READ_COMMITTED).last_stable_offset != 2:
            assert time.monotonic() < deadline  # the data batch and its ABORT marker
            time.sleep(0.02)
        assert _produce(client, 11, producer, b"late", sequence=1) == E.TRANSACTION_ABORTABLE
        read = fetch_partition(client, "t", 0, READ_COMMITTED)
        assert (read.high_watermark, read.last_stable_offset) == (2, 2)


def test_produce_v12_adds_the_partition(inprocess_broker: Any) -> None:
    """Transaction version 2: the partition joins the transaction with the first batch."""
    with connect(inprocess_broker.port) as client:
        create_topic(client, "t", 1)
        producer = _init(client)
        assert _produce(client, 12, producer, b"added") == E.NONE
        assert _partitions(inprocess_broker) == {("t", 0)}
        read = fetch_partition(client, "t", 0, READ_COMMITTED)
        assert (read.high_watermark, read.last_stable_offset) == (1, 0)
