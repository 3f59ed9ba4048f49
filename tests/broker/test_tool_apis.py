"""The APIs Kafka's command-line tools need beyond the group ones (found missing by
tests/tools/, which runs the tools themselves): CreateTopics' config list, DescribeConfigs for
topics, and ListOffsets v7-v11's special timestamps."""

from __future__ import annotations

import datetime

from broker_wire_helpers import connect, create_topic, produce_request
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.list_offsets.v11 import request as list_offsets
from tests.broker.servers import InProcessBroker

from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch

TOPIC_CONFIG = 1  # Kafka's ConfigSource DYNAMIC_TOPIC_CONFIG
DEFAULT_CONFIG = 5


def _describe(client, *resources: tuple[int, str]):  # type: ignore[no-untyped-def]
    return client.call(describe_configs.DescribeConfigsRequest(resources=tuple(
        describe_configs.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                                 configuration_keys=None)
        for kind, name in resources), include_synonyms=False, include_documentation=False))


def test_created_topics_report_their_settings(inprocess_broker: InProcessBroker) -> None:
    """Kafka's admin client reads the config list of every created topic (v5+): a null list
    failed `kafka-topics --create` with a NullPointerException."""
    with connect(inprocess_broker.port) as client:
        result = create_topic(client, "cfg", 2, configs={"retention.ms": "1234"})
        configs = {c.name: (c.value, int(c.config_source)) for c in result.configs}
        assert configs["retention.ms"] == ("1234", TOPIC_CONFIG)
        assert configs["cleanup.policy"] == ("delete", DEFAULT_CONFIG)
        checked = create_topic(client, "cfg-check", 1, validate_only=True,
                               configs={"cleanup.policy": "compact"})
        assert {c.name: c.value for c in checked.configs}["cleanup.policy"] == "compact"


def test_describe_configs_of_topics(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "described", 1, configs={"retention.ms": "1234"})
        response = _describe(client, (2, "described"), (2, "__consumer_offsets"),
                             (2, "missing"), (8, "kgroups"))
        own, offsets, missing, broker_logger = response.results
        assert own.error_code == ErrorCode.NONE
        shown = {c.name: (c.value, int(c.config_source)) for c in own.configs}
        assert shown["retention.ms"] == ("1234", TOPIC_CONFIG)
        assert shown["segment.bytes"][1] == DEFAULT_CONFIG
        compacted = {c.name: (c.value, int(c.config_source)) for c in offsets.configs}
        assert compacted["cleanup.policy"] == ("compact", TOPIC_CONFIG)
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert broker_logger.error_code == ErrorCode.INVALID_REQUEST


def test_list_offsets_max_timestamp_and_tiered_lookups(inprocess_broker: InProcessBroker) -> None:
    """MAX_TIMESTAMP is the first record holding the largest timestamp, not the last offset;
    the tiered-storage lookups answer as Kafka without remote storage."""
    with connect(inprocess_broker.port) as client:
        create_topic(client, "times", 2)
        for stamps in ([1000, 9000, 2000], [9000, 3000]):
            batch = build_batch([(None, b"v", stamp) for stamp in stamps])
            response = client.call(produce_request("times", 0, batch))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE

        def lookup(partition: int, timestamp: int) -> tuple[int, int]:
            response = client.call(list_offsets.ListOffsetsRequest(
                replica_id=-1, isolation_level=0, timeout=datetime.timedelta(seconds=1),
                topics=(list_offsets.ListOffsetsTopic(name="times", partitions=(
                    list_offsets.ListOffsetsPartition(partition_index=partition,
                                                      timestamp=timestamp),)),)))
            (answer,) = response.topics[0].partitions
            assert answer.error_code == ErrorCode.NONE
            return int(answer.offset), int(answer.timestamp)

        assert lookup(0, -3) == (1, 9000)
        assert lookup(1, -3) == (-1, -1)  # empty
        assert lookup(0, -4) == (0, -1)
        assert lookup(0, -5) == (-1, -1)
        assert lookup(0, -6) == (-1, -1)
