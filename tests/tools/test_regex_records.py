"""The ConsumerGroupRegularExpression records (type 16) kgroups writes for a regex subscription
decode in Kafka 4.3.1's DumpLogSegments exactly as `kgroups offsets dump` prints them: the
resolved regex with its topics, version and timestamp, and its tombstone once the last member
using it left. (kgroups reading the records Kafka writes: test_diff_consumer_protocol.py.)"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pytest
from test_log_files import assert_same_records
from tests.broker.broker_wire_helpers import create_topic
from tests.broker.servers import ServerProcess

from kgroups.broker.wire import build, request_type
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka


def _heartbeat(client: KafkaWireClient, epoch: int, **fields: object) -> Any:
    return client.call(build(
        request_type(68, 1), group_id="rx", member_id="m1", member_epoch=epoch,
        instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(milliseconds=30_000 if epoch == 0 else -1),
        subscribed_topic_names=None, server_assignor=None,
        topic_partitions=() if epoch == 0 else None, **fields))


def test_kafka_decodes_the_regex_records_kgroups_writes(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log",
                           ("offsets.topic.num.partitions=1",))
    server.start()
    try:
        with KafkaWireClient("127.0.0.1", server.port, client_id="rx") as client:
            for topic in ("logs-rx-a", "logs-rx-b", "other"):
                create_topic(client, topic, 1)
            deadline = time.monotonic() + 30
            while int(_heartbeat(client, 0, subscribed_topic_regex="logs-rx-.*").error_code):
                assert time.monotonic() < deadline, "the coordinator never answered"
                time.sleep(0.1)  # loading __consumer_offsets, or not yet its coordinator
            assert int(_heartbeat(client, -1, subscribed_topic_regex=None).error_code) == 0
    finally:
        server.close()
    records = assert_same_records(tmp_path / "data" / "__consumer_offsets-0")
    regex_records = [r for r in records if r["key"]["type"] == 16]
    assert [r["key"]["data"] for r in regex_records] == [
        {"groupId": "rx", "regularExpression": "logs-rx-.*"}] * 2
    resolved, tombstone = (r["value"] for r in regex_records)
    assert resolved is not None and tombstone is None
    assert resolved["data"]["topics"] == ["logs-rx-a", "logs-rx-b"]
