"""Versions Kafka 4 removed that kgroups still serves for tools in wide use: ListOffsets v0
(Burrow 1.2), answered as Kafka 3.9 did."""

from __future__ import annotations

from broker_wire_helpers import connect, create_topic, produce_request
from kio.schema.api_versions.v3 import request as api_versions

from conftest import InProcessBroker
from kgroups.broker import legacy_schemas as v0
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch


def _list_offsets_v0(client, *asks: tuple[str, int, int, int]):  # type: ignore[no-untyped-def]
    """(topic, partition, timestamp, max offsets) -> (error, offsets) per ask."""
    response = client.call(v0.ListOffsetsRequest(replica_id=-1, topics=tuple(
        v0.ListOffsetsTopic(name=topic, partitions=(v0.ListOffsetsPartition(
            partition_index=partition, timestamp=timestamp, max_num_offsets=count),))
        for topic, partition, timestamp, count in asks)))
    return [(int(p.error_code), list(p.old_style_offsets))
            for t in response.topics for p in t.partitions]


def test_list_offsets_v0_answers_as_kafka_3_9(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "old", 2)
        for _ in range(3):
            batch = build_batch([(None, b"v", 1000), (None, b"w", 1001)])
            assert client.call(produce_request("old", 0, batch)).responses[0] \
                .partition_responses[0].error_code == ErrorCode.NONE
        answers = _list_offsets_v0(
            client, ("old", 0, -1, 1), ("old", 0, -1, 5), ("old", 0, -2, 5),
            ("old", 1, -1, 1), ("old", 0, 0, 5), ("missing", 0, -1, 1), ("old", 0, -1, -1))
    assert answers == [
        (0, [6]),  # Burrow's question: the log end offset
        (0, [6, 0]),  # every candidate newest first: log end, then the one segment's base
        (0, [0]),
        (0, [0]),  # an empty partition: its segment's base only
        (0, []),  # nothing was modified at or before 1970
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
        (ErrorCode.UNKNOWN_SERVER_ERROR, []),
    ]


def test_api_versions_advertise_list_offsets_v0(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        response = client.call(api_versions.ApiVersionsRequest(
            client_software_name="t", client_software_version="1"))
    (list_offsets,) = [k for k in response.api_keys if k.api_key == 2]
    assert (list_offsets.min_version, list_offsets.max_version) == (0, 11)
