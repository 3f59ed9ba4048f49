"""The harness itself: Kafka starts, answers group requests, restarts on its data, and its tools
run; `any_broker` reaches both brokers the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.list_groups.v4.request import ListGroupsRequest

from kafka_harness import KafkaBroker, run_kafka_tool
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka


def test_kafka_restarts_on_its_data_and_tools_see_its_topics(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "kafka")
    broker.start()
    try:
        assert broker.start_seconds < 30, f"Kafka took {broker.start_seconds:.1f}s to start"
        created = run_kafka_tool("org.apache.kafka.tools.TopicCommand",
                                 ["--bootstrap-server", broker.bootstrap, "--create",
                                  "--topic", "harness-topic", "--partitions", "2"])
        assert created.returncode == 0, created.stderr
        assert broker.stop() in (0, 143)
        broker.start()
        listed = run_kafka_tool("org.apache.kafka.tools.TopicCommand",
                                ["--bootstrap-server", broker.bootstrap, "--list"])
        assert "harness-topic" in listed.stdout.split()
        assert "Kafka Server started" in broker.log_text()
    finally:
        broker.close()


def test_any_broker_answers_list_groups(any_broker: object) -> None:
    host, port = any_broker.bootstrap.rsplit(":", 1)  # type: ignore[attr-defined]
    with KafkaWireClient(host, int(port)) as client:
        response = client.call(ListGroupsRequest(states_filter=()))
    assert int(response.error_code) == 0
