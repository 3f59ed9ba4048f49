"""IncrementalAlterConfigs, DescribeConfigs' synonyms, message.timestamp.type and keyless
records on compacted topics, over the wire on an in-process broker (tests/tools compares the
same with Kafka itself)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from broker_wire_helpers import connect, create_topic, fetch_request, produce_request
from config_wire_helpers import alter, alter_legacy, describe
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.servers import InProcessBroker, ServerProcess

from kgroups.broker.dynamic_configs import DYNAMIC_SETTINGS
from kgroups.broker.topic_configs import APPEND, DELETE, SET, SUBTRACT
from kgroups.errors import ErrorCode
from kgroups.log.batch import TIMESTAMP_LOG_APPEND, build_batch, decode_batch

TOPIC, BROKER = 2, 4


@pytest.fixture
def broker(make_inprocess_broker: Any) -> InProcessBroker:
    started: InProcessBroker = make_inprocess_broker("log.retention.ms=86400000")
    with connect(started.port) as client:
        create_topic(client, "settings", 2)
    return started


def test_set_delete_append_subtract(broker: InProcessBroker) -> None:
    with connect(broker.port) as client:
        assert alter(client, (TOPIC, "settings", [("retention.ms", SET, "1000"),
                                                  ("cleanup.policy", APPEND, "compact")])) \
            == [(0, None)]
        shown = describe(client, TOPIC, "settings")
        # Kafka's synonyms: the topic's own value, then the broker's from start-up, then
        # Kafka's defaults, from the setting's first broker name on.
        assert shown["retention.ms"] == ("1000", 1, [
            "1:retention.ms=1000", "4:log.retention.ms=86400000", "5:log.retention.hours=168"])
        # APPEND starts from Kafka's default of the setting (delete), as Kafka does.
        assert shown["cleanup.policy"] == ("delete,compact", 1, [
            "1:cleanup.policy=delete,compact", "5:log.cleanup.policy=delete"])
        assert shown["segment.bytes"] == ("1073741824", 5, ["5:log.segment.bytes=1073741824"])
        assert alter(client, (TOPIC, "settings", [("cleanup.policy", SUBTRACT, "delete"),
                                                  ("retention.ms", DELETE, None)])) \
            == [(0, None)]
        shown = describe(client, TOPIC, "settings")
        assert shown["cleanup.policy"][:2] == ("compact", 1)
        assert shown["retention.ms"] == ("86400000", 4, [
            "4:log.retention.ms=86400000", "5:log.retention.hours=168"])


def test_refusals_name_the_problem_as_kafka_does(broker: InProcessBroker) -> None:
    with connect(broker.port) as client:
        answers = alter(
            client,
            (TOPIC, "missing", [("retention.ms", SET, "5")]),
            (TOPIC, "settings", [("no.such", SET, "5")]),
            (BROKER, "0", [("group.initial.rebalance.delay.ms", SET, "5")]),
            (BROKER, "7", [("log.retention.ms", SET, "5")]),
        )
        assert answers == [
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'missing' does not exist."),
            (ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such"),
            (ErrorCode.INVALID_REQUEST, "kgroups applies only these broker settings "
             "dynamically: compression.type, log.cleaner.delete.retention.ms, "
             "log.cleanup.policy, log.flush.interval.messages, log.flush.interval.ms, "
             "log.index.interval.bytes, log.message.timestamp.after.max.ms, "
             "log.message.timestamp.before.max.ms, log.message.timestamp.type, "
             "log.retention.bytes, log.retention.hours, log.retention.minutes, "
             "log.retention.ms, log.segment.bytes, message.max.bytes; set "
             "[group.initial.rebalance.delay.ms] at start-up (kgroups serve --override "
             "NAME=VALUE)"),
            (ErrorCode.INVALID_REQUEST,
             "Unexpected broker id, expected 0 or empty string, but received 7"),
        ]
        cases = {
            ("retention.ms", SET, "abc"):
                "Invalid value abc for configuration retention.ms: Not a number of type LONG",
            ("segment.bytes", SET, "5"):
                "Invalid value 5 for configuration segment.bytes: Value must be at least "
                "1048576",
            ("cleanup.policy", SET, "foo"):
                "Invalid value foo for configuration cleanup.policy: String must be one of: "
                "compact, delete",
            ("message.timestamp.type", SET, "Foo"):
                "Invalid value Foo for configuration message.timestamp.type: String must be "
                "one of: CreateTime, LogAppendTime",
            ("retention.ms", APPEND, "5"):
                "Can't APPEND to key retention.ms because its type is not LIST.",
            # Kafka 4.3.1's answers to the settings kgroups keeps without acting on them,
            # and to those it honours beyond the log's (as probed on Kafka itself).
            ("compression.type", SET, "ZSTD"):
                "Invalid value ZSTD for configuration compression.type: String must be one "
                "of: uncompressed, zstd, lz4, snappy, gzip, producer",
            ("max.message.bytes", SET, "-1"):
                "Invalid value -1 for configuration max.message.bytes: Value must be at "
                "least 0",
            ("min.cleanable.dirty.ratio", SET, "2"):
                "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be "
                "no more than 1",
            ("min.cleanable.dirty.ratio", SET, "x"):
                "Invalid value x for configuration min.cleanable.dirty.ratio: Not a number of "
                "type DOUBLE",
            ("preallocate", SET, "maybe"):
                "Invalid value maybe for configuration preallocate: Expected value to be "
                "either true or false",
            ("follower.replication.throttled.replicas", SET, "bad"):
                "Invalid value [bad] for configuration follower.replication.throttled."
                "replicas: follower.replication.throttled.replicas must be the literal '*' or "
                "a list of replicas in the following format: [partitionId]:[brokerId],"
                "[partitionId]:[brokerId],...",
            ("compression.gzip.level", SET, "0"):
                "Invalid value 0 for configuration compression.gzip.level: Value must be "
                "between 1 and 9 or equal to -1",
            ("segment.ms", SET, "0"):
                "Invalid value 0 for configuration segment.ms: Value must be at least 1",
            ("remote.storage.enable", SET, "true"):
                "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                "configured with remote log storage.",
        }
        for change, message in cases.items():
            assert alter(client, (TOPIC, "settings", [change])) == [
                (ErrorCode.INVALID_CONFIG, message)]
        accepted = [("compression.type", SET, " gzip"), ("preallocate", SET, "TRUE"),
                    ("follower.replication.throttled.replicas", SET, "0:1"),
                    ("compression.gzip.level", SET, "-1"), ("retention.bytes", SET, "-5"),
                    ("min.insync.replicas", SET, "2"), ("local.retention.ms", SET, "5")]
        for change in accepted:
            assert alter(client, (TOPIC, "settings", [change]), validate_only=True) == [
                (ErrorCode.NONE, None)], change
        assert alter(client, (TOPIC, "settings", [("retention.ms", SET, "1"),
                                                  ("retention.ms", DELETE, None)])) == [
            (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")]
        assert alter(client, (TOPIC, "settings", [("retention.ms", SET, None)])) == [
            (ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms")]
        twice = [("retention.ms", SET, "1")]
        assert alter(client, (TOPIC, "settings", twice), (TOPIC, "settings", twice)) == [
            (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")] * 2
        # Nothing above changed the topic.
        assert describe(client, TOPIC, "settings")["retention.ms"][1] == 4


def test_dynamic_broker_settings_change_every_topic_default(broker: InProcessBroker) -> None:
    """The cluster default, then this broker's own value over it, as Kafka layers them; a
    topic's own setting still wins; the open log takes the new value at once."""
    with connect(broker.port) as client:
        create_topic(client, "own", 1, configs={"retention.ms": "5000"})
        _produce_one(client, "settings", 1000)  # opens partition 0
        assert alter(client, (BROKER, "", [("log.retention.ms", SET, "3000")]),
                     (BROKER, "0", [("log.retention.ms", SET, "2000")])) == [(0, None)] * 2
        shown = describe(client, TOPIC, "settings")["retention.ms"]
        assert shown == ("2000", 2, [
            "2:log.retention.ms=2000", "3:log.retention.ms=3000",
            "4:log.retention.ms=86400000", "5:log.retention.hours=168"])
        assert describe(client, TOPIC, "own")["retention.ms"][:2] == ("5000", 1)
        assert describe(client, BROKER, "0")["log.retention.ms"][:2] == ("2000", 2)
        assert describe(client, BROKER, "") == {
            "log.retention.ms": ("3000", 3, ["3:log.retention.ms=3000"])}
        assert broker.broker.topics.log("settings", 0).config.retention_ms == 2000  # type: ignore[union-attr]
        assert alter(client, (BROKER, "0", [("log.retention.ms", DELETE, None),
                                            ("log.cleanup.policy", APPEND, "compact")])) \
            == [(0, None)]
        # APPEND starts from Kafka's default (delete) where no dynamic value is set.
        assert describe(client, TOPIC, "settings")["cleanup.policy"][:2] == (
            "delete,compact", 2)
        assert describe(client, TOPIC, "settings")["retention.ms"][0] == "3000"
        assert alter(client, (BROKER, "0", [("log.retention.ms", SET, "abc")]),
                     (BROKER, "", [("log.retention.ms", APPEND, "5")])) == [
            (ErrorCode.INVALID_REQUEST,
             "Invalid value abc for configuration log.retention.ms: Not a number of type LONG"),
            (ErrorCode.INVALID_CONFIG,
             "Config value append is not allowed for config key: log.retention.ms")]


def test_legacy_alter_configs_replaces_a_broker_layer(broker: InProcessBroker) -> None:
    with connect(broker.port) as client:
        assert alter(client, (BROKER, "", [("log.retention.ms", SET, "1000"),
                                           ("log.segment.bytes", SET, "2000000")])) \
            == [(0, None)]
        assert alter_legacy(client, (BROKER, "", [("log.cleanup.policy", "compact")])) \
            == [(0, None)]
        assert {name: shown[0] for name, shown in describe(client, BROKER, "").items()} == {
            "log.cleanup.policy": "compact"}
        assert describe(client, TOPIC, "settings")["retention.ms"][:2] == ("86400000", 4)
        assert alter_legacy(client, (BROKER, "0", [("group.initial.rebalance.delay.ms", "5")]),
                            (BROKER, "", [])) == [
            (ErrorCode.INVALID_REQUEST, "kgroups applies only these broker settings "
             f"dynamically: {', '.join(sorted(DYNAMIC_SETTINGS))}; set "
             "[group.initial.rebalance.delay.ms] at start-up (kgroups serve --override "
             "NAME=VALUE)"), (0, None)]
        assert describe(client, BROKER, "") == {}


def test_validate_only_changes_nothing(broker: InProcessBroker) -> None:
    with connect(broker.port) as client:
        assert alter(client, (TOPIC, "settings", [("retention.ms", SET, "1000")]),
                     (BROKER, "", [("log.retention.ms", SET, "1000")]),
                     validate_only=True) == [(0, None)] * 2
        assert describe(client, TOPIC, "settings")["retention.ms"][:2] == ("86400000", 4)
        assert describe(client, BROKER, "") == {}


def test_broker_resource_lists_start_up_settings(broker: InProcessBroker) -> None:
    with connect(broker.port) as client:
        shown = describe(client, BROKER, "0")
        assert shown["log.retention.ms"] == ("86400000", 4, [
            "4:log.retention.ms=86400000", "5:log.retention.hours=168"])
        assert describe(client, BROKER, "") == {}


def _produce_one(client: Any, topic: str, timestamp: int, key: bytes | None = b"k") -> Any:
    batch = build_batch([(key, b"v", timestamp)])
    return client.call(produce_request(topic, 0, batch)).responses[0].partition_responses[0]


def _stored_batch(client: Any, topic: str, offset: int) -> Any:
    fetched = client.call(fetch_request(topic, 0, offset))
    records = fetched.responses[0].partitions[0].records
    batch, _ = decode_batch(records)
    return batch


def test_log_append_time_set_on_a_live_topic_stamps_later_batches(
        broker: InProcessBroker) -> None:
    with connect(broker.port) as client:
        before = _produce_one(client, "settings", 1000)
        assert before.log_append_time is None  # CreateTime: -1 on the wire
        assert alter(client, (TOPIC, "settings",
                              [("message.timestamp.type", SET, "LogAppendTime")])) == [(0, None)]
        after = _produce_one(client, "settings", 1000)
        assert after.error_code == ErrorCode.NONE
        stamp = int(after.log_append_time.timestamp() * 1000)
        old, new = _stored_batch(client, "settings", 0), _stored_batch(client, "settings", 1)
        assert (old.attributes & TIMESTAMP_LOG_APPEND, old.max_timestamp) == (0, 1000)
        assert new.attributes & TIMESTAMP_LOG_APPEND
        assert new.max_timestamp == stamp > 1000


def test_keyless_record_on_a_compacted_topic_is_refused(broker: InProcessBroker) -> None:
    with connect(broker.port) as client:
        create_topic(client, "compacted", 1, configs={"cleanup.policy": "compact"})
        batch = build_batch([(b"k", b"v", 1000), (None, b"v", 1001), (None, b"w", 1002)])
        answer = client.call(produce_request("compacted", 0, batch)) \
            .responses[0].partition_responses[0]
        message = "Compacted topic cannot accept message without key in topic partition " \
                  "compacted-0"
        assert answer.error_code == ErrorCode.INVALID_RECORD
        assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] \
            == [(1, message), (2, message)]
        assert answer.error_message == (
            "One or more records have been rejected due to 2 record errors in total, and "
            "only showing the first three errors at most: ["
            f"RecordError(batchIndex=1, message='{message}'), "
            f"RecordError(batchIndex=2, message='{message}')]")
        assert _produce_one(client, "compacted", 1000).error_code == ErrorCode.NONE
        assert _produce_one(client, "settings", 1000, key=None).error_code == ErrorCode.NONE


@pytest.mark.slow
def test_altered_settings_survive_a_restart(kgroups_server: ServerProcess) -> None:
    with connect(kgroups_server.port) as client:
        create_topic(client, "kept", 1)
        assert alter(client, (TOPIC, "kept", [("retention.ms", SET, "1234"),
                                              ("cleanup.policy", SET, "compact")]),
                     (BROKER, "", [("log.segment.bytes", SET, "2097152")])) == [(0, None)] * 2
    kgroups_server.stop()
    kgroups_server.start()
    with connect(kgroups_server.port) as client:
        shown = describe(client, TOPIC, "kept")
        assert shown["retention.ms"][:2] == ("1234", 1)
        assert shown["cleanup.policy"][:2] == ("compact", 1)
        assert shown["segment.bytes"] == ("2097152", 3, [
            "3:log.segment.bytes=2097152", "5:log.segment.bytes=1073741824"])
        assert _produce_one(client, "kept", 1000, key=None).error_code == \
            ErrorCode.INVALID_RECORD


@pytest.mark.interop
def test_a_real_consumer_sees_log_append_time(kgroups_server: ServerProcess) -> None:
    """librdkafka reads the timestamp type from the batch and every record's time from its
    max timestamp: the producer's old timestamp is replaced by the broker's clock."""
    bootstrap = kgroups_server.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic("append-time", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
        NewTopic("create-time", 1, 1)])
    for future in futures.values():
        future.result(timeout=15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent_at = int(time.time() * 1000)
    for topic in ("append-time", "create-time"):
        producer.produce(topic, key=b"k", value=b"v", timestamp=1000)
    assert producer.flush(15) == 0
    seen = {}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "timestamps"})
    consumer.assign([TopicPartition("append-time", 0, 0), TopicPartition("create-time", 0, 0)])
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen[message.topic()] = message.timestamp()
    consumer.close()
    kind, stamp = seen["append-time"]
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    assert sent_at - 1000 <= stamp <= int(time.time() * 1000)
    assert seen["create-time"] == (TIMESTAMP_CREATE_TIME, 1000)
