"""What kgroups does not serve is said once per client in the broker's log (NotServedLog: a
client retrying hundreds of times leaves one line, not none and not hundreds). Transactions and
share groups are served: their coordinator lookups are answered as Kafka answers them
(tests/differential/test_diff_not_served.py, test_diff_share_state.py) and never logged."""

from __future__ import annotations

import datetime
import logging
import shlex
from collections.abc import Iterator

import pytest
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from tests.broker.broker_wire_helpers import request_of
from tests.kafka_harness import run_kafka_tool

import kgroups
from kgroups.broker.not_served import NotServedLog
from kgroups.errors import ErrorCode
from kgroups.tools.wire_client import KafkaWireClient


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def not_served(self) -> list[str]:
        return [line for line in self.lines if line.startswith("not_served ")]


@pytest.fixture
def broker_log() -> Iterator[_Records]:
    """The broker's own log lines, however logging is configured elsewhere in the run."""
    records = _Records()
    logger = logging.getLogger("kgroups.broker")
    previous = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        logger.removeHandler(records)
        logger.setLevel(previous)


def _find_coordinator(client: KafkaWireClient, key_type: int, version: int = 6,
                      key: str = "orders") -> int:
    if version >= 4:
        request = request_of(10, version, key_type=key_type, coordinator_keys=(key,))
        return int(client.call(request).coordinators[0].error_code)
    return int(client.call(request_of(10, version, key_type=key_type, key=key)).error_code)


def test_share_and_transaction_lookups_are_served_and_never_logged_as_not_served(
        broker_log: _Records) -> None:
    """A share-partition key is answered as Kafka 4.3.1 answers it (this broker for a
    well-formed "group:topicId:partition", INVALID_REQUEST for any other text), transactional
    lookups likewise, and neither is logged as not served."""
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
    assert broker_log.not_served() == []


def _field(line: str, name: str) -> str:
    """A field of a `event key=value ...` line (values with spaces are quoted)."""
    fields = dict(word.split("=", 1) for word in shlex.split(line)[1:])
    return fields[name]


def test_memory_stays_bounded_the_longest_quiet_client_is_forgotten(
    broker_log: _Records,
) -> None:
    log = NotServedLog(capacity=2)
    for client_id in ("a", "b", "a", "c", "a", "b"):
        log.report("10.0.0.1", client_id, "transactions", "FindCoordinator(key_type=1) v4")
    # a, b logged; a asked again (now the most recent); c pushed b out, so b is logged again.
    assert [_field(line, "client_id") for line in broker_log.not_served()] == ["a", "b", "c", "b"]


@pytest.mark.interop
def test_a_java_transactional_producer_is_served(broker_log: _Records) -> None:
    """Kafka's own client (ProducerPerformance with a transactional id) finds its transaction
    coordinator, commits, and nothing is logged as not served."""
    with kgroups.serve_in_background() as broker:
        result = run_kafka_tool("org.apache.kafka.tools.ProducerPerformance", [
            "--topic", "orders", "--num-records", "1", "--record-size", "10",
            "--throughput", "-1", "--transactional-id", "orders-tx", "--command-property",
            f"bootstrap.servers={broker.bootstrap}", "max.block.ms=3000",
            "client.id=java-orders"], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert broker_log.not_served() == []
