"""Every topic setting Kafka 4.3.1 accepts is accepted, and those that change what one node
does act as on Kafka: max.message.bytes (MESSAGE_TOO_LARGE), compression.type (a codec has
batches stored in it, `producer` keeps them), message.timestamp.before/after.max.ms
(INVALID_TIMESTAMP per record), min.insync.replicas (no refusal of acks=all on one replica,
as Kafka 4.3.1 answers). Each test runs on Kafka and on kgroups (`any_broker`)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from broker_wire_helpers import create_topic, fetch_request, produce_request
from config_wire_helpers import alter, alter_legacy, describe, own_settings

from kgroups.broker.topic_configs import SET, TOPIC_SETTINGS
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, decode_batch
from kgroups.log.compression import Compression
from kgroups.tools.wire_client import KafkaWireClient

TOPIC = 2
HOUR_MS = 3_600_000
_NO_LEADER_YET = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _topic(client: KafkaWireClient, **configs: str) -> str:
    name = f"settings-{uuid.uuid4().hex[:10]}"
    create_topic(client, name, 1, configs={k.replace("_", "."): v for k, v in configs.items()})
    return name


def _produce(client: KafkaWireClient, topic: str, batch: bytes, acks: int = 1) -> Any:
    """The partition's answer, once the topic has a leader (Kafka elects it just after
    CreateTopics answers)."""
    deadline = time.monotonic() + 15
    while True:
        answer = client.call(produce_request(topic, 0, batch, acks=acks)) \
            .responses[0].partition_responses[0]
        if answer.error_code not in _NO_LEADER_YET or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def _stored(client: KafkaWireClient, topic: str) -> Any:
    records = client.call(fetch_request(topic, 0, 0)).responses[0].partitions[0].records
    batch, _ = decode_batch(records)
    return batch


def test_max_message_bytes_refuses_larger_batches(any_broker: Any) -> None:
    now = int(time.time() * 1000)
    with KafkaWireClient(any_broker.host, any_broker.port) as client:
        small = _topic(client, max_message_bytes="1000")
        assert _produce(client, small, build_batch([(b"k", b"x" * 1100, now)])).error_code \
            == ErrorCode.MESSAGE_TOO_LARGE
        assert _produce(client, small, build_batch([(b"k", b"x" * 100, now)])).error_code \
            == ErrorCode.NONE
        # Larger than the broker's message.max.bytes (1048588): the topic's own limit wins.
        large = _topic(client, max_message_bytes="3000000")
        answer = _produce(client, large, build_batch([(b"k", b"x" * 2_000_000, now)]))
        assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)


def test_compression_type_recompresses_or_keeps(any_broker: Any) -> None:
    now = int(time.time() * 1000)
    rows = [(b"k%d" % i, b"value %d" % i, now + i) for i in range(5)]
    with KafkaWireClient(any_broker.host, any_broker.port) as client:
        gzip = _topic(client, compression_type="gzip", min_insync_replicas="2")
        # acks=all with min.insync.replicas 2 on a single replica: Kafka 4.3.1 appends it.
        assert _produce(client, gzip, build_batch(rows), acks=-1).error_code == ErrorCode.NONE
        stored = _stored(client, gzip)
        assert stored.compression == Compression.GZIP
        assert [(r.key, r.value, r.timestamp) for r in stored.records] == rows
        kept = _topic(client)  # compression.type=producer
        assert _produce(client, kept, build_batch(rows, compression=Compression.LZ4)) \
            .error_code == ErrorCode.NONE
        assert _stored(client, kept).compression == Compression.LZ4
        plain = _topic(client, compression_type="uncompressed")
        assert _produce(client, plain, build_batch(rows, compression=Compression.ZSTD)) \
            .error_code == ErrorCode.NONE
        stored = _stored(client, plain)
        assert (stored.compression, len(stored.records)) == (Compression.NONE, 5)


def test_timestamps_out_of_bounds_are_refused(any_broker: Any) -> None:
    now = int(time.time() * 1000)
    with KafkaWireClient(any_broker.host, any_broker.port) as client:
        topic = _topic(client, message_timestamp_before_max_ms=str(HOUR_MS))
        # Kafka's default message.timestamp.after.max.ms is one hour.
        future = _produce(client, topic, build_batch([(b"k", b"v", now),
                                                      (b"k", b"v", now + 2 * HOUR_MS)]))
        assert future.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [e.batch_index for e in future.record_errors] == [1]
        assert "of message with offset 1 is out of range" in \
            future.record_errors[0].batch_index_error_message
        past = _produce(client, topic, build_batch([(b"k", b"v", now - 2 * HOUR_MS)]))
        assert (past.error_code, [e.batch_index for e in past.record_errors]) == (
            ErrorCode.INVALID_TIMESTAMP, [0])
        assert _produce(client, topic, build_batch([(b"k", b"v", now)])).error_code \
            == ErrorCode.NONE
        # LogAppendTime topics take any timestamp: the broker's clock replaces it.
        stamped = _topic(client, message_timestamp_type="LogAppendTime")
        assert _produce(client, stamped, build_batch([(b"k", b"v", now + 2 * HOUR_MS)])) \
            .error_code == ErrorCode.NONE


def test_every_topic_setting_is_accepted_and_described(any_broker: Any) -> None:
    with KafkaWireClient(any_broker.host, any_broker.port) as client:
        topic = _topic(client)
        shown = describe(client, TOPIC, topic, known_within=15)
        assert set(shown) == set(TOPIC_SETTINGS)
        changes = [("segment.ms", SET, "3600000"), ("preallocate", SET, "true"),
                   ("min.cleanable.dirty.ratio", SET, "0.25"), ("compression.zstd.level", SET,
                                                                "5"),
                   ("leader.replication.throttled.replicas", SET, "0:1"),
                   ("max.message.bytes", SET, "5000"), ("compression.type", SET, "zstd")]
        assert alter(client, (TOPIC, topic, changes)) == [(ErrorCode.NONE, None)]
        _eventually(lambda: {name: shown[:2] for name, shown in describe(client, TOPIC, topic)
                             .items() if name in dict((n, v) for n, _, v in changes)},
                    {name: (value, 1) for name, _, value in changes})


def test_legacy_alter_configs_replaces_the_whole_set(any_broker: Any) -> None:
    with KafkaWireClient(any_broker.host, any_broker.port) as client:
        topic = _topic(client, retention_ms="5000", segment_ms="7000")
        _eventually(lambda: own_settings(client, topic),
                    {"retention.ms": "5000", "segment.ms": "7000"})
        assert alter_legacy(client, (TOPIC, topic, [("cleanup.policy", "compact")])) == [
            (ErrorCode.NONE, None)]
        _eventually(lambda: own_settings(client, topic), {"cleanup.policy": "compact"})
        assert alter_legacy(client, (TOPIC, topic, [("retention.ms", "1")]),
                            validate_only=True) == [(ErrorCode.NONE, None)]
        assert alter_legacy(client, (TOPIC, topic, [("retention.ms", "9000")]), version=0) \
            == [(ErrorCode.NONE, None)]
        _eventually(lambda: own_settings(client, topic), {"retention.ms": "9000"})
        assert alter_legacy(
            client, (TOPIC, topic, [("retention.ms", "abc")]), (TOPIC, topic + "-none", []),
            (TOPIC, f"{topic}-x", [("retention.ms", None)])) == [
            (ErrorCode.INVALID_CONFIG,
             "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}-none' does not exist."),
            (ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms")]
        assert alter_legacy(client, (TOPIC, topic, [])) == [(ErrorCode.NONE, None)]
        _eventually(lambda: own_settings(client, topic), {})


def _eventually(read: Any, expected: Any) -> None:
    """Kafka applies a config change through its metadata log, a moment after answering."""
    deadline = time.monotonic() + 10
    while read() != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert read() == expected
