"""`kgroups topics` with kafka-topics' options against an in-process broker, the
CreatePartitions API behind `--alter --partitions`, and `--delete-records`
(kafka-delete-records)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import connect, create_topic, produce_request
from tests.broker.servers import InProcessBroker

from kgroups.broker.wire import build, request_type, sibling
from kgroups.cli import build_parser, main
from kgroups.log.batch import build_batch


@pytest.fixture
def broker(make_inprocess_broker: Any) -> InProcessBroker:
    started: InProcessBroker = make_inprocess_broker("auto.create.topics.enable=false")
    started.call(started.broker.coordinator.wait_loaded)
    return started


def _run(broker: InProcessBroker, capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(["topics", "--bootstrap-server", f"127.0.0.1:{broker.port}", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _partition_lines(out: str) -> list[dict[str, str]]:
    return [dict(field.split(": ", 1) for field in line.strip().split("\t"))
            for line in out.splitlines() if line.startswith("\t")]


def test_create_with_partitions_and_configs_then_describe(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _run(broker, capsys, "--create", "--topic", "events", "--partitions", "3",
                        "--config", "retention.ms=60000", "--config", "cleanup.policy=compact")
    assert (code, out) == (0, "Created topic events.\n")
    with connect(broker.port) as client:
        client.call(produce_request("events", 1, build_batch([(b"k", b"v", 1), (b"k", b"w", 2)])))
    code, out, _ = _run(broker, capsys, "--describe", "--topic", "events")
    assert code == 0
    header = dict(field.split(": ", 1) for field in out.splitlines()[0].split("\t"))
    assert header["Topic"] == "events"
    assert header["PartitionCount"] == "3"
    assert header["ReplicationFactor"] == "1"
    assert header["Configs"] == "cleanup.policy=compact,retention.ms=60000"
    assert header["TopicId"] != "-" and len(header["TopicId"]) == 22  # Kafka's base64 form
    partitions = _partition_lines(out)
    assert [(p["Partition"], p["Leader"], p["Replicas"], p["Isr"]) for p in partitions] == [
        ("0", "0", "0", "0"), ("1", "0", "0", "0"), ("2", "0", "0", "0")]
    assert [(p["LogStartOffset"], p["LogEndOffset"]) for p in partitions] == [
        ("0", "0"), ("0", "2"), ("0", "0")]


def test_create_refusals_are_kafkas_messages(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _run(broker, capsys, "--create", "--topic", "events")[0] == 0
    code, _, err = _run(broker, capsys, "--create", "--topic", "events")
    assert (code, err) == (1, "Error while executing topic command : Topic 'events' already "
                              "exists.\n")
    assert _run(broker, capsys, "--create", "--topic", "events", "--if-not-exists")[0] == 0
    code, _, err = _run(broker, capsys, "--create", "--topic", "x", "--partitions", "0")
    assert code == 1 and "Number of partitions must be larger than 0." in err
    code, _, err = _run(broker, capsys, "--create", "--topic", "x", "--config", "segment.bytes=1")
    assert code == 1 and "segment.bytes" in err
    code, _, err = _run(broker, capsys, "--create", "--topic", "x", "--replication-factor", "3")
    assert code == 1 and "Replication factor: 3 larger than available brokers: 1." in err


def test_list_with_and_without_internal_topics(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    _run(broker, capsys, "--create", "--topic", "b")
    _run(broker, capsys, "--create", "--topic", "a")
    assert _run(broker, capsys, "--list", "--exclude-internal")[1] == "a\nb\n"
    assert "__consumer_offsets" in _run(broker, capsys, "--list")[1].split()
    assert json.loads(_run(broker, capsys, "--list", "--exclude-internal", "--output",
                           "json")[1]) == ["a", "b"]


def test_alter_partitions_grows_the_topic_and_refuses_a_decrease(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    _run(broker, capsys, "--create", "--topic", "events", "--partitions", "2")
    assert _run(broker, capsys, "--alter", "--topic", "events", "--partitions", "4") == (0, "",
                                                                                         "")
    _, out, _ = _run(broker, capsys, "--describe", "--topic", "events")
    assert [p["Partition"] for p in _partition_lines(out)] == ["0", "1", "2", "3"]
    with connect(broker.port) as client:  # the new partitions take data
        produced = client.call(produce_request("events", 3, build_batch([(None, b"v", 1)])))
        assert produced.responses[0].partition_responses[0].error_code == 0
    code, _, err = _run(broker, capsys, "--alter", "--topic", "events", "--partitions", "2")
    assert (code, err) == (1, "Error while executing topic command : The topic events currently "
                              "has 4 partition(s); 2 would not be an increase.\n")
    code, _, err = _run(broker, capsys, "--alter", "--topic", "nosuch", "--partitions", "2")
    assert code == 1 and "The topic 'nosuch' does not exist." in err
    assert _run(broker, capsys, "--alter", "--topic", "nosuch", "--partitions", "2",
                "--if-exists")[0] == 0
    code, _, err = _run(broker, capsys, "--alter", "--topic", "events")
    assert code == 2 and "--partitions" in err


def test_delete_then_describe_says_it_does_not_exist(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    _run(broker, capsys, "--create", "--topic", "events")
    assert _run(broker, capsys, "--delete", "--topic", "events") == (0, "", "")
    code, _, err = _run(broker, capsys, "--describe", "--topic", "events")
    assert (code, err) == (1, "Error while executing topic command : Topic 'events' does not "
                              "exist as expected\n")
    assert _run(broker, capsys, "--delete", "--topic", "events", "--if-exists")[0] == 0
    code, _, err = _run(broker, capsys, "--delete", "--topic", "events")
    assert code == 1 and "This server does not host this topic-partition." in err


def test_describe_all_topics_and_json(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    _run(broker, capsys, "--create", "--topic", "events", "--partitions", "2")
    _, out, _ = _run(broker, capsys, "--describe", "--exclude-internal")
    assert [line.split("\t")[0] for line in out.splitlines() if not line.startswith("\t")] == [
        "Topic: events"]
    (described,) = json.loads(_run(broker, capsys, "--describe", "--topic", "events",
                                   "--output", "json")[1])
    assert described["partitions"][1] == {"partition": 1, "leader": 0, "replicas": [0],
                                          "isr": [0], "log_start_offset": 0,
                                          "log_end_offset": 0}


@pytest.mark.parametrize("args", [(), ("--list", "--create"), ("--create",),
                                  ("--list", "--partitions", "3"),
                                  ("--describe", "--config", "a=b"), ("--delete-records",),
                                  ("--list", "--offset-json-file", "x.json"),
                                  ("--delete-records", "--offset-json-file", "x.json",
                                   "--topic", "t")])
def test_usage_mistakes_exit_2(broker, capsys, args) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _run(broker, capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith("kgroups topics: error:")


def test_create_partitions_api_checks(broker) -> None:  # type: ignore[no-untyped-def]
    request = request_type(37, 3)
    topic_type = sibling(request, "CreatePartitionsTopic")
    assignment = sibling(request, "CreatePartitionsAssignment")

    def grow(*topics: Any, validate_only: bool = False) -> list[tuple[str, int, str | None]]:
        with connect(broker.port) as client:
            response = client.call(build(request, topics=topics, validate_only=validate_only,
                                         timeout=datetime.timedelta(seconds=10)))
        return [(r.name, int(r.error_code), r.error_message) for r in response.results]

    with connect(broker.port) as client:
        create_topic(client, "t", 1)
    assert grow(build(topic_type, name="t", count=3, assignments=None),
                validate_only=True) == [("t", 0, None)]
    assert broker.broker.topics.partition_count("t") == 1  # validate only
    assert grow(build(topic_type, name="t", count=2, assignments=(
        build(assignment, broker_ids=(5,)),)))[0][1] == 39  # INVALID_REPLICA_ASSIGNMENT
    assert grow(build(topic_type, name="t", count=3, assignments=(
        build(assignment, broker_ids=(0,)),)))[0][1] == 39  # one assignment for two partitions
    assert grow(build(topic_type, name="t", count=2, assignments=(
        build(assignment, broker_ids=(0,)),))) == [("t", 0, None)]
    assert grow(build(topic_type, name="t", count=2, assignments=None)) == [
        ("t", 37, "Topic already has 2 partition(s).")]
    assert grow(build(topic_type, name="__consumer_offsets", count=99, assignments=None))[0][1] \
        == 42  # INVALID_REQUEST
    assert [code for _, code, _ in grow(build(topic_type, name="t", count=5, assignments=None),
                                        build(topic_type, name="t", count=6,
                                              assignments=None))] == [42, 42]
    assert broker.broker.topics.partition_count("t") == 2
    # More than 10,000 new partitions at once: refused whole, before any is made.
    assert grow(build(topic_type, name="t", count=10_003, assignments=None)) == [
        ("t", 44, "Excessively large number of partitions per request.")]  # POLICY_VIOLATION
    assert broker.broker.topics.partition_count("t") == 2


def test_create_topics_refuses_what_kafka_calls_an_excessively_large_request(broker) -> None:  # type: ignore[no-untyped-def]
    """Kafka 4.3.1's answers: over 10,000 partitions, or over 10,000 records with the topic's
    own and its configs'; nothing is created (a request that size would hold ~20,000 files)."""
    request = request_type(19, 7)
    topic_type = sibling(request, "CreatableTopic")
    config_type = sibling(request, "CreatableTopicConfig")

    def create(name: str, partitions: int, configs: int = 0) -> tuple[int, str | None]:
        topic = build(topic_type, name=name, num_partitions=partitions, replication_factor=1,
                      assignments=(), configs=tuple(
                          build(config_type, name=key, value="600000")
                          for key in ("retention.ms", "segment.ms")[:configs]))
        with connect(broker.port) as client:
            response = client.call(build(request, topics=(topic,), validate_only=True,
                                         timeout=datetime.timedelta(seconds=10)))
        (result,) = response.topics
        return int(result.error_code), result.error_message

    assert create("huge", 10_001) == (44, "Excessively large number of partitions per request.")
    assert create("huge", 10_000) == (44, "Unable to perform excessively large batch operation.")
    assert create("huge", 9_998, configs=2) == (44, "Unable to perform excessively large batch "
                                                     "operation.")
    assert create("huge", 9_999) == (0, None)  # validate only: nothing made
    assert broker.broker.topics.partition_count("huge") is None


def test_every_argument_has_help() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    topics = subparsers.choices["topics"]  # type: ignore[attr-defined]
    for action in topics._actions:
        assert action.help, action.option_strings
    assert "(default: 127.0.0.1:9092)" in " ".join(topics.format_help().split())


def _offset_file(tmp_path: Any, text: str) -> str:
    path = tmp_path / "offsets.json"
    path.write_text(text)
    return str(path)


def test_delete_records_prints_what_kafkas_tool_prints(broker, capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _run(broker, capsys, "--create", "--topic", "trim", "--partitions", "3")[0] == 0
    with connect(broker.port) as client:
        for partition in (0, 1):
            client.call(produce_request("trim", partition, build_batch(
                [(b"k", b"v", 1), (b"k", b"w", 2), (b"k", b"x", 3)])))
    offsets = {"partitions": [{"topic": "trim", "partition": 1, "offset": -1},
                              {"topic": "trim", "partition": 0, "offset": 2},
                              {"topic": "trim", "partition": 2, "offset": 5}], "version": 1}
    code, out, err = _run(broker, capsys, "--delete-records", "--offset-json-file",
                          _offset_file(tmp_path, json.dumps(offsets)))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: trim-0\tlow_watermark: 2",
        "partition: trim-1\tlow_watermark: 3",
        "partition: trim-2\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
        "The requested offset is not within the range of offsets maintained by the server.",
    ]
    _, described, _ = _run(broker, capsys, "--describe", "--topic", "trim")
    assert [(p["LogStartOffset"], p["LogEndOffset"]) for p in _partition_lines(described)] == [
        ("2", "3"), ("3", "3"), ("0", "0")]


@pytest.mark.parametrize("text, message", [
    ("{", "The input string is not a valid JSON"),
    ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
    ('{"version": 1}', "Missing partitions field"),
    ('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}',
     "partitions[0]: 'partition' must be an integer"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
     ' {"topic": "t", "partition": 0, "offset": 2}]}',
     "Offset json file contains duplicate topic partitions: t-0"),
])
def test_delete_records_refuses_a_bad_file_before_sending(broker, capsys, tmp_path, text,  # type: ignore[no-untyped-def]
                                                          message) -> None:
    code, out, err = _run(broker, capsys, "--delete-records", "--offset-json-file",
                          _offset_file(tmp_path, text))
    assert (code, out, err) == (1, "", f"kgroups topics: error: {message}\n")


def test_delete_records_names_a_missing_file(broker, capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "nope.json"
    code, out, err = _run(broker, capsys, "--delete-records", "--offset-json-file", str(missing))
    assert (code, out) == (1, "")
    assert err == f"kgroups topics: error: cannot read {missing}: No such file or directory\n"
