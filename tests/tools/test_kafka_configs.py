"""kafka-configs against kgroups and Kafka 4.3.1, and the produce-side effects of topic settings
(LogAppendTime, keyless records on a compacted topic), the same actions on both brokers with
the answers compared."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka_tools import KAFKA_ONLY_CONFIGS, Side, assert_same_output, on_both, stdout_of
from tests.broker.broker_wire_helpers import create_topic, fetch_request, produce_request
from tests.broker.config_wire_helpers import alter, describe

from kgroups.broker.topic_configs import APPEND, SUBTRACT
from kgroups.errors import ErrorCode
from kgroups.log.batch import TIMESTAMP_LOG_APPEND, build_batch, decode_batch
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka

CONFIGS = "kafka.admin.ConfigCommand"  # bin/kafka-configs.sh
TOPIC_RESOURCE = 2
# What a broker answers while a new topic's leader is being elected (Kafka only).
_NOT_READY = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
              ErrorCode.NOT_LEADER_OR_FOLLOWER}


@pytest.fixture(scope="module")
def topic() -> str:
    return f"configs-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def sides(kafka_broker: object, kgroups_broker: object, topic: str) -> list[Side]:
    both = [Side("kafka", kafka_broker), Side("kgroups", kgroups_broker)]
    for side in both:
        with _client(side) as client:
            assert create_topic(client, topic, 1).error_code == ErrorCode.NONE
    return both


def _client(side: Side) -> KafkaWireClient:
    host, port = side.bootstrap.rsplit(":", 1)
    return KafkaWireClient(host, int(port), client_id="configs-tests", timeout=15)


def _configs(sides: list[Side], topic: str, *args: str) -> list[list[str]]:
    return assert_same_output(
        on_both(sides, CONFIGS, [*args, "--entity-type", "topics", "--entity-name", topic]),
        sides)


def test_alter_and_describe_print_the_same(sides: list[Side], topic: str) -> None:
    assert _configs(sides, topic, "--alter", "--add-config",
                    "retention.ms=1000,message.timestamp.type=LogAppendTime,"
                    "cleanup.policy=[compact,delete]") == [
        ["Completed", "updating", "config", "for", "topic", f"{topic}."]]
    described = _configs(sides, topic, "--describe")
    assert described[0] == ["Dynamic", "configs", "for", "topic", topic, "are:"]
    assert [line[0] for line in described[1:]] == [
        "cleanup.policy=compact,delete", "message.timestamp.type=LogAppendTime",
        "retention.ms=1000"]
    _configs(sides, topic, "--alter", "--delete-config", "retention.ms,message.timestamp.type")
    assert [line[0] for line in _configs(sides, topic, "--describe")[1:]] == [
        "cleanup.policy=compact,delete"]


def test_offsets_topic_settings_print_the_same(sides: list[Side]) -> None:
    """The settings Kafka creates `__consumer_offsets` with (compacted, 100 MiB segments), with
    their synonyms; Kafka's compression.type=producer has no kgroups counterpart."""
    outputs = stdout_of(on_both(sides, CONFIGS, [
        "--describe", "--entity-type", "topics", "--entity-name", "__consumer_offsets"]), sides)
    kept = {name: [line for line in lines
                   if line[0].split("=", 1)[0] not in KAFKA_ONLY_CONFIGS]
            for name, lines in outputs.items()}
    assert kept["kgroups"] == kept["kafka"]
    assert [line[0] for line in kept["kafka"][1:]] == [
        "cleanup.policy=compact", "segment.bytes=104857600"]


# One unknown name, one bad value (the in-process tests check every message Kafka gives).
@pytest.mark.parametrize("config", ["no.such.key=1", "retention.ms=abc"])
def test_refused_settings_name_the_same_cause(sides: list[Side], topic: str,
                                              config: str) -> None:
    results = on_both(sides, CONFIGS, ["--alter", "--entity-type", "topics", "--entity-name",
                                       topic, "--add-config", config])
    causes = {name: [line for line in result.stderr.splitlines()
                     if line.startswith("Caused by:")] for name, result in results.items()}
    assert all(r.returncode == 1 for r in results.values())
    assert causes["kafka"] and causes["kgroups"] == causes["kafka"]


def test_unknown_topic_is_refused_the_same(sides: list[Side]) -> None:
    results = on_both(sides, CONFIGS, ["--alter", "--entity-type", "topics", "--entity-name",
                                       "no-such-topic", "--add-config", "retention.ms=5"])
    causes = {name: [line for line in result.stderr.splitlines()
                     if line.startswith("Caused by:")] for name, result in results.items()}
    assert causes["kgroups"] == causes["kafka"] == [
        "Caused by: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
        "The topic 'no-such-topic' does not exist."]


def _without_node_id(line: list[str], node_id: str) -> list[str]:
    """"... config for broker N." and "... configs for broker N are:" with N as ID."""
    if "broker" not in line[:5]:
        return line
    at = line.index("broker") + 1
    if line[at].rstrip(".") != node_id:
        return line
    return [*line[:at], "ID" + line[at][len(node_id):], *line[at + 1:]]


def test_dynamic_broker_settings_print_the_same(sides: list[Side]) -> None:
    """A dynamic broker setting per broker and as the cluster default, described with its
    synonyms, then deleted. The value set is Kafka's default, so the brokers the other tests
    share behave as before."""
    node_ids = {"kafka": "1", "kgroups": "0"}

    def broker(*args: str) -> Any:
        return lambda side: [*args, "--entity-type", "brokers", "--entity-name",
                             node_ids[side.name]]

    def default(*args: str) -> list[str]:
        return [*args, "--entity-type", "brokers", "--entity-default"]

    def same(results: Any) -> list[list[str]]:
        """Both outputs, the node id in "... for broker N" and Kafka-only settings (KRaft's
        cluster-default min.insync.replicas) left out, are equal; returns Kafka's."""
        kept = {}
        for name, lines in stdout_of(results, sides).items():
            kept[name] = [_without_node_id(line, node_ids[name]) for line in lines
                          if line[0].split("=", 1)[0] not in KAFKA_ONLY_CONFIGS]
        assert kept["kgroups"] == kept["kafka"]
        return kept["kafka"]

    setting = "log.index.interval.bytes=4096"
    same(on_both(sides, CONFIGS, broker("--alter", "--add-config", setting)))
    same(on_both(sides, CONFIGS, default("--alter", "--add-config", setting)))
    try:
        assert same(on_both(sides, CONFIGS, broker("--describe"))) == [
            ["Dynamic", "configs", "for", "broker", "ID", "are:"],
            [setting, "sensitive=false", f"synonyms={{DYNAMIC_BROKER_CONFIG:{setting},",
             f"DYNAMIC_DEFAULT_BROKER_CONFIG:{setting},", f"DEFAULT_CONFIG:{setting}}}"]]
        assert same(on_both(sides, CONFIGS, default("--describe"))) == [
            ["Default", "configs", "for", "brokers", "in", "the", "cluster", "are:"],
            [setting, "sensitive=false", f"synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{setting}}}"]]
    finally:
        same(on_both(sides, CONFIGS, broker("--alter", "--delete-config",
                                            "log.index.interval.bytes")))
        same(on_both(sides, CONFIGS, default("--alter", "--delete-config",
                                             "log.index.interval.bytes")))


def _on_each(sides: list[Side], action: Any) -> dict[str, Any]:
    answers = {}
    for side in sides:
        with _client(side) as client:
            answers[side.name] = action(client)
    return answers


def test_append_and_subtract_give_the_same_settings(sides: list[Side]) -> None:
    name = f"lists-{uuid.uuid4().hex[:6]}"

    def act(client: KafkaWireClient) -> Any:
        create_topic(client, name, 1)
        before = describe(client, TOPIC_RESOURCE, name, known_within=15)["cleanup.policy"]
        appended = alter(client, (TOPIC_RESOURCE, name, [("cleanup.policy", APPEND, "compact")]))
        after_append = _policy_once_changed(client, name, before)
        subtracted = alter(client, (TOPIC_RESOURCE, name,
                                    [("cleanup.policy", SUBTRACT, "delete")]))
        return [appended, after_append, subtracted,
                _policy_once_changed(client, name, after_append),
                alter(client, (TOPIC_RESOURCE, name, [("retention.ms", APPEND, "5")]))]

    answers = _on_each(sides, act)
    assert answers["kgroups"] == answers["kafka"]
    assert answers["kafka"][1][0] == "delete,compact"


def _policy_once_changed(client: KafkaWireClient, name: str,
                         before: tuple[str, int, list[str]]) -> tuple[str, int, list[str]]:
    """The topic's cleanup.policy as described once it differs from `before`: Kafka's broker
    answers DescribeConfigs from its metadata image, which takes the controller's change a moment
    after AlterConfigs returned (kgroups answers the new value at once)."""
    deadline = time.monotonic() + 15
    while True:
        policy = describe(client, TOPIC_RESOURCE, name)["cleanup.policy"]
        if policy != before or time.monotonic() > deadline:
            return policy
        time.sleep(0.05)


def _produce(client: KafkaWireClient, topic: str, batch: bytes) -> Any:
    deadline = time.monotonic() + 30
    while True:
        answer = client.call(produce_request(topic, 0, batch)).responses[0] \
            .partition_responses[0]
        if int(answer.error_code) not in _NOT_READY or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def test_keyless_records_on_a_compacted_topic_are_refused_the_same(sides: list[Side]) -> None:
    name = f"compacted-{uuid.uuid4().hex[:6]}"
    batch = build_batch([(b"k", b"v", 1000), (None, b"v", 1001), (b"k", b"w", 1002),
                         (None, b"x", 1003), (None, b"y", 1004), (None, b"z", 1005)])

    def act(client: KafkaWireClient) -> Any:
        create_topic(client, name, 1, configs={"cleanup.policy": "compact"})
        answer = _produce(client, name, batch)
        return (int(answer.error_code), int(answer.base_offset), answer.log_append_time,
                int(answer.log_start_offset), answer.error_message,
                [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors])

    answers = _on_each(sides, act)
    assert answers["kgroups"] == answers["kafka"]
    assert answers["kafka"][0] == ErrorCode.INVALID_RECORD
    assert len(answers["kafka"][5]) == 4


def test_log_append_time_is_stamped_the_same(sides: list[Side]) -> None:
    """The batch comes back with the timestamp-type bit and the broker's time as its max
    timestamp, the one the produce response gave, and every record reads as stamped then."""
    name = f"append-time-{uuid.uuid4().hex[:6]}"

    def act(client: KafkaWireClient) -> Any:
        create_topic(client, name, 1, configs={"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        answer = _produce(client, name, build_batch([(b"k", b"v", 1000), (b"k", b"w", 1500)]))
        stamp = int(answer.log_append_time.timestamp() * 1000)
        records = client.call(fetch_request(name, 0, 0)).responses[0].partitions[0].records
        stored, _ = decode_batch(records)
        return {"stamp in the window": before <= stamp <= int(time.time() * 1000),
                "type bit": bool(stored.attributes & TIMESTAMP_LOG_APPEND),
                "max timestamp is the stamp": stored.max_timestamp == stamp,
                "base timestamp": stored.base_timestamp,
                "records read at the stamp": [r.timestamp == stamp for r in stored.records]}

    answers = _on_each(sides, act)
    assert answers["kgroups"] == answers["kafka"]
    assert answers["kafka"]["type bit"] and answers["kafka"]["max timestamp is the stamp"]
