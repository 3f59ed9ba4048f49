"""Coordinator lookups of every kind a Kafka 4.3.1 client sends are answered: transactional ids
and share-partitions as Kafka answers them (tests/differential/test_diff_not_served.py and
test_diff_share_state.py compare the answers side by side)."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from tests.broker.broker_wire_helpers import request_of
from tests.kafka_harness import run_kafka_tool

import kgroups
from kgroups.errors import ErrorCode
from kgroups.tools.wire_client import KafkaWireClient


def _find_coordinator(client: KafkaWireClient, key_type: int, version: int = 6,
                      key: str = "orders") -> int:
    if version >= 4:
        request = request_of(10, version, key_type=key_type, coordinator_keys=(key,))
        return int(client.call(request).coordinators[0].error_code)
    return int(client.call(request_of(10, version, key_type=key_type, key=key)).error_code)


def test_share_and_transaction_lookups_are_served() -> None:
    """A share-partition key is answered as Kafka 4.3.1 answers it (this broker for a
    well-formed "group:topicId:partition", INVALID_REQUEST for any other text), transactional
    lookups likewise."""
    with kgroups.serve_in_background() as broker:
        with KafkaWireClient("127.0.0.1", broker.port, client_id="share-app") as client:
            malformed = {_find_coordinator(client, 2) for _ in range(50)}
            share = _find_coordinator(client, 2, key="orders:AAAAAAAAAAAAAAAAAAAAAA:0")
        with KafkaWireClient("127.0.0.1", broker.port, client_id="orders-producer") as other:
            transactional = {_find_coordinator(other, 1, version) for version in (3, 4)}
            initialised = other.call(InitProducerIdRequest(
                transactional_id="orders-tx", transaction_timeout=datetime.timedelta(minutes=1),
                producer_id=-1, producer_epoch=-1))
    assert malformed == {ErrorCode.INVALID_REQUEST}
    assert share == ErrorCode.NONE
    assert transactional == {ErrorCode.NONE}
    assert int(initialised.error_code) == ErrorCode.NONE


@pytest.mark.interop
def test_a_java_transactional_producer_is_served() -> None:
    """Kafka's own client (ProducerPerformance with a transactional id) finds its transaction
    coordinator, commits, and nothing is logged as not served."""
    with kgroups.serve_in_background() as broker:
        result = run_kafka_tool("org.apache.kafka.tools.ProducerPerformance", [
            "--topic", "orders", "--num-records", "1", "--record-size", "10",
            "--throughput", "-1", "--transactional-id", "orders-tx", "--command-property",
            f"bootstrap.servers={broker.bootstrap}", "max.block.ms=3000",
            "client.id=java-orders"], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
