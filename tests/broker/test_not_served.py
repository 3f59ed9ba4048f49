"""What kgroups does not serve yet is said once per client in the broker's log: a client that
retries FindCoordinator for a transactional id hundreds of times (the Java producer: ~290 in
30 s) leaves one WARNING line, not none and not hundreds, and the answers are Kafka's for an
unavailable feature (tests/differential/test_diff_not_served.py checks them against Kafka)."""

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


def _find_transaction_coordinator(client: KafkaWireClient, version: int = 4) -> int:
    if version >= 4:
        request = request_of(10, version, key_type=1, coordinator_keys=("orders-tx",))
        return int(client.call(request).coordinators[0].error_code)
    return int(client.call(request_of(10, version, key_type=1, key="orders-tx")).error_code)


def test_a_transactional_client_is_told_once_in_the_log(broker_log: _Records) -> None:
    with kgroups.serve_in_background() as broker:
        with KafkaWireClient("127.0.0.1", broker.port, client_id="orders-producer") as client:
            errors = {_find_transaction_coordinator(client) for _ in range(300)}
            errors.add(_find_transaction_coordinator(client, version=3))
            initialised = client.call(InitProducerIdRequest(
                transactional_id="orders-tx", transaction_timeout=datetime.timedelta(minutes=1),
                producer_id=-1, producer_epoch=-1))
        # The same client on a new connection is the same client: nothing more is said.
        with KafkaWireClient("127.0.0.1", broker.port, client_id="orders-producer") as again:
            _find_transaction_coordinator(again)
        with KafkaWireClient("127.0.0.1", broker.port, client_id="streams-app") as other:
            _find_transaction_coordinator(other)
            share = other.call(request_of(10, 6, key_type=2, coordinator_keys=("g",)))
    assert errors == {ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert int(initialised.error_code) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert int(share.coordinators[0].error_code) == ErrorCode.INVALID_REQUEST
    lines = broker_log.not_served()
    assert [(_field(line, "client_id"), _field(line, "feature")) for line in lines] == [
        ("orders-producer", "transactions"), ("streams-app", "transactions"),
        ("streams-app", "share groups")]
    assert all("README: not served yet" in line for line in lines)


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
def test_a_java_transactional_producer_times_out_and_is_named_once(
    broker_log: _Records,
) -> None:
    """Kafka's own client (ProducerPerformance with a transactional id): initTransactions()
    retries coordinator discovery until max.block.ms, then fails; the broker says why once."""
    with kgroups.serve_in_background() as broker:
        result = run_kafka_tool("org.apache.kafka.tools.ProducerPerformance", [
            "--topic", "orders", "--num-records", "1", "--record-size", "10",
            "--throughput", "-1", "--transactional-id", "orders-tx", "--command-property",
            f"bootstrap.servers={broker.bootstrap}", "max.block.ms=3000",
            "client.id=java-orders"], timeout=120)
    assert result.returncode != 0
    assert "Timeout expired after 3000ms while awaiting InitProducerId" in result.stderr
    [line] = broker_log.not_served()
    assert (_field(line, "client_id"), _field(line, "feature")) == ("java-orders", "transactions")
