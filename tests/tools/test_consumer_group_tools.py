"""kafka-consumer-groups and `kgroups groups` on KIP-848 consumer groups, on kgroups and on
Kafka 4.3.1.

Two console consumers with group.protocol=consumer share a group on each broker; Kafka's tool
describes it (--state, --members, --offsets, with and without --verbose) the same way on both,
and `kgroups groups` prints what Kafka's tool prints on either broker. A group caught mid-way
through a rebalance shows which members are still reconciling, and with which epochs and
target assignments.
"""

from __future__ import annotations

import datetime
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_tools import (
    GROUPS,
    TOPICS,
    Side,
    assert_same_output,
    normalise,
    on_both,
    run_tool,
    start_console_consumer,
    stdout_of,
)
from tests.broker.broker_wire_helpers import metadata_request, produce_request

from kgroups.broker.wire import build, request_type, sibling
from kgroups.cli import main
from kgroups.log.batch import build_batch
from kgroups.tools import admin
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka

PARTITIONS = 4
PER_PARTITION = 5
MEMBERS = 2
# The Java client makes its member ids as Kafka's Uuid prints them: 22 base64url characters.
_JAVA_MEMBER_ID = re.compile(r"(?<![\w-])[A-Za-z0-9_-]{22}(?![\w-])")


def _outputs(results: dict[str, Any], sides: list[Side]) -> dict[str, list[list[str]]]:
    """Each side's printed table (see kafka_tools.stdout_of) with member ids replaced."""
    return {name: [[_JAVA_MEMBER_ID.sub("MEMBER", token) for token in row] for row in rows]
            for name, rows in stdout_of(results, sides).items()}


class Names:
    def __init__(self) -> None:
        tail = uuid.uuid4().hex[:6]
        self.topic = f"cg-tools-{tail}"
        self.group = f"cg-tools-group-{tail}"
        self.rebalancing = f"cg-tools-rebalancing-{tail}"


@pytest.fixture(scope="module")
def names() -> Names:
    return Names()


def _client(side: Side) -> KafkaWireClient:
    host, port = side.bootstrap.rsplit(":", 1)
    return KafkaWireClient(host, int(port), client_id="cg-tools")


@pytest.fixture(scope="module")
def sides(kafka_broker: object, kgroups_broker: object, names: Names) -> Iterator[list[Side]]:
    """Both brokers with a filled topic and a consumer group of two console consumers
    (group.protocol=consumer) that consumed all of it and committed, still running."""
    both = [Side("kafka", kafka_broker), Side("kgroups", kgroups_broker)]
    created = on_both(both, TOPICS, ["--create", "--topic", names.topic, "--partitions",
                                     str(PARTITIONS), "--replication-factor", "1"])
    assert_same_output(created, both)
    for side in both:
        with _client(side) as client:
            for partition in range(PARTITIONS):
                batch = build_batch([(None, b"v%d" % i, int(time.time() * 1000))
                                     for i in range(PER_PARTITION)])
                deadline = time.monotonic() + 30
                while int(client.call(produce_request(names.topic, partition, batch))
                          .responses[0].partition_responses[0].error_code) != 0:
                    assert time.monotonic() < deadline, "produce kept failing"
                    time.sleep(0.1)
    consumers = [start_console_consumer(side, names.topic, names.group, [
        "--from-beginning", "--consumer-property", "group.protocol=consumer",
        "--consumer-property", "auto.commit.interval.ms=200"])
        for side in both for _ in range(MEMBERS)]
    try:
        _wait_settled(both, names.group)
        yield both
    finally:
        for consumer in consumers:
            consumer.terminate()
        for consumer in consumers:
            consumer.wait(timeout=60)


def _wait_settled(sides: list[Side], group: str) -> None:
    """Until both groups are Stable with both members at the target and every offset
    committed (lag 0), asked over the wire (kgroups.tools.admin: no tool JVM per poll)."""
    deadline = time.monotonic() + 90
    for side in sides:
        with _client(side) as client:
            while True:
                try:
                    described = admin.describe_group(client, group)
                except admin.GroupNotFoundError:
                    described = None
                if (described is not None and described.state == "Stable"
                        and len(described.members) == MEMBERS and not described.reconciling
                        and len(described.partitions) == PARTITIONS
                        and all(lag.lag == 0 for lag in described.partitions)):
                    break
                assert time.monotonic() < deadline, (side.name, described)
                time.sleep(0.2)


def _rows(printed: list[list[str]], group: str) -> list[list[str]]:
    return sorted(row for row in printed if row[0] == group)


@pytest.mark.parametrize("options", [
    ("--state", "--verbose"), ("--members", "--verbose"), ("--offsets", "--verbose"),
])
def test_kafka_tool_describes_a_consumer_group_alike(sides: list[Side], names: Names,
                                                     options: tuple[str, ...]) -> None:
    results = on_both(sides, GROUPS, ["--describe", "--group", names.group, *options])
    outputs = _outputs(results, sides)
    if options == ("--offsets", "--verbose"):  # kgroups keeps no leader epochs (as classic)
        for rows in outputs.values():
            for row in rows[1:]:
                row[3] = "-"
    assert sorted(outputs["kgroups"]) == sorted(outputs["kafka"]), (
        results["kafka"].stdout, results["kgroups"].stdout)
    rows = _rows(outputs["kafka"], names.group)
    if options == ("--members", "--verbose"):
        # Each member is at the target: its epoch is the target epoch, its assignment the target.
        assert [r[5] == r[7] and r[6] == r[8] for r in rows] == [True] * MEMBERS
        assert sorted(int(r[4]) for r in rows) == [PARTITIONS // MEMBERS] * MEMBERS
    if options == ("--state", "--verbose"):
        assert rows[0][3:5] == ["uniform", "Stable"]


@pytest.mark.parametrize("options", [("--state", "--verbose"), ("--members", "--verbose"),
                                     ("--offsets",)])
def test_kgroups_groups_prints_what_kafkas_tool_prints(sides: list[Side], names: Names,
                                                       capsys: Any,
                                                       options: tuple[str, ...]) -> None:
    for side in sides:
        kafka = run_tool(side, GROUPS, ["--describe", "--group", names.group, *options])
        assert main(["groups", "--bootstrap-server", side.bootstrap, "--describe", "--group",
                     names.group, *options]) == 0
        ours = capsys.readouterr()
        # kgroups' own columns come last: LAST-REBALANCE, REBALANCE-CAUSE with --state,
        # LAG-SECONDS with --offsets.
        extra = 2 if "--state" in options else 1 if "--offsets" in options else 0
        ours_rows = [row[:len(row) - extra] for row in normalise(ours.out, side)]
        assert sorted(ours_rows) == sorted(normalise(kafka.stdout, side)), (
            side.name, kafka.stdout, ours.out)
        assert "reconciling" not in ours.err


def test_kgroups_groups_json_has_epochs_and_targets(sides: list[Side], names: Names,
                                                    capsys: Any) -> None:
    for side in sides:
        assert main(["groups", "--bootstrap-server", side.bootstrap, "--describe", "--group",
                     names.group, "--output", "json"]) == 0
        (described,) = json.loads(capsys.readouterr().out)
        assert described["protocol_type"] == "consumer"
        assert described["group_epoch"] >= described["assignment_epoch"] >= MEMBERS
        members = described["members"]
        assert [m["member_epoch"] for m in members] == [described["assignment_epoch"]] * MEMBERS
        assert [m["partitions"] == m["target"] and not m["reconciling"]
                for m in members] == [True] * MEMBERS


def _heartbeat(client: KafkaWireClient, group: str, member: str, epoch: int,
               owned: list[tuple[uuid.UUID, list[int]]], topic: str) -> Any:
    cls = request_type(68, 1)
    return client.call(build(
        cls, group_id=group, member_id=member, member_epoch=epoch, instance_id=None,
        rack_id=None, rebalance_timeout=datetime.timedelta(milliseconds=30_000),
        subscribed_topic_names=(topic,), subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=tuple(build(sibling(cls, "TopicPartitions"), topic_id=t,
                                     partitions=tuple(ps)) for t, ps in owned)))


def test_kgroups_groups_shows_members_still_reconciling(sides: list[Side], names: Names,
                                                       capsys: Any) -> None:
    """kgroups computes a target in the heartbeat that moves the group epoch once
    group.consumer.assignment.interval.ms (1 s) has passed since the last: member a holds
    every partition, b joins a second later, and until a heartbeats again a must revoke half
    and b waits for them. `kgroups groups --describe --members --verbose` shows both epochs
    and targets, and says on stderr which members are still reconciling."""
    side = sides[1]
    with _client(side) as client:
        (topic,) = client.call(metadata_request(names.topic, auto_create=False)).topics
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        first = _heartbeat(client, names.rebalancing, a, 0, [], names.topic)
        everything = [(topic.topic_id, list(range(PARTITIONS)))]
        held = _heartbeat(client, names.rebalancing, a, int(first.member_epoch), everything,
                          names.topic)
        assert int(held.error_code) == 0
        time.sleep(1.1)  # past the interval: b's join computes the target
        joined = _heartbeat(client, names.rebalancing, b, 0, [], names.topic)
        assert int(joined.error_code) == 0
        assert main(["groups", "--bootstrap-server", side.bootstrap, "--describe", "--group",
                     names.rebalancing, "--members", "--verbose"]) == 0
        printed = capsys.readouterr()
        rows = {row[1]: row for row in (line.split() for line in printed.out.splitlines())
                if row and row[0] == names.rebalancing}
        group_epoch = int(joined.member_epoch)
        assert rows[a][4:] == ["4", str(group_epoch - 1), f"{names.topic}:0,1,2,3",
                               str(group_epoch), rows[a][8]]
        assert rows[b][4:7] == ["0", str(group_epoch), "-"]
        assert sorted(rows[a][8].split(":")[1].split(",") + rows[b][8].split(":")[1]
                      .split(",")) == [str(p) for p in range(PARTITIONS)]
        reconciling = [line for line in printed.err.splitlines() if "still reconciling" in line]
        assert len(reconciling) == 2
        for member in (a, b):
            _heartbeat(client, names.rebalancing, member, -1, [], names.topic)
