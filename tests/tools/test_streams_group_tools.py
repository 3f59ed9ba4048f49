"""kafka-streams-groups (Kafka's StreamsGroupCommand) and `kgroups groups` on a streams group
(KIP-1071), on kgroups and on Kafka 4.3.1.

On each broker two Kafka Streams instances (tests/java WordCountStreams, group.protocol=streams)
run the word count as one streams group, four tasks between them. Kafka's tool lists and
describes the group (--state, --members, --offsets, with and without --verbose) the same way on
both brokers, member ids, process ids and epochs aside; `kgroups groups` prints Kafka's tool's
tables for it and lists it with type Streams. Once the instances have left, the tool resets the
group's input offsets (dry run, then --execute, which also deletes its internal topics), deletes
its offsets of the input topic and deletes the group alike on both.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka_tools import Side, normalise, on_both, run_tool
from tests.broker.group_interop_helpers import create_topic, produce, wait_until

from java_harness import WordCountStreams
from kgroups.cli import main
from kgroups.tools import admin, streams_admin
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STREAMS_GROUPS = "org.apache.kafka.tools.streams.StreamsGroupCommand"
PARTITIONS = 2
INSTANCES = 2
SETTLE_TIMEOUT_S = 90.0
# Kafka's Uuid as the Java client prints a member id: 22 base64url characters.
_MEMBER_ID = re.compile(r"(?<![\w-])[A-Za-z0-9_-]{22}(?![\w-])")


@dataclass
class StreamsApp:
    """One word count's names, and its instances on one broker."""

    side: Side
    app_id: str
    source: str
    sink: str
    instances: list[WordCountStreams] = field(default_factory=list)

    def described(self) -> streams_admin.StreamsGroupDescription | None:
        host, port = self.side.bootstrap.rsplit(":", 1)
        with KafkaWireClient(host, int(port), client_id="kgroups-tests") as client:
            return streams_admin.describe_streams_group(
                admin.connect_to_coordinator(client, self.app_id), self.app_id)

    def settled(self) -> bool:
        """Every instance running, the group Stable with each member at its target, the four
        tasks held, and every input partition consumed and committed (lag 0)."""
        for streams in self.instances:
            streams.assert_running()
        d = self.described()
        return (d is not None and d.state == "Stable" and len(d.members) == INSTANCES
                and not d.reconciling
                and sum(len(m.assignment.ids("active")) for m in d.members) == 2 * PARTITIONS
                and len(d.partitions) == 2 * PARTITIONS
                and all(lag.lag == 0 for lag in d.partitions))

    def close(self) -> None:
        for streams in self.instances:
            assert streams.close() == 0, streams.log_text()[-3000:]
        self.instances.clear()


def _start(side: Side, tmp_path: Path, tail: str) -> StreamsApp:
    app = StreamsApp(side, f"sg-tools-{tail}", f"sg-lines-{tail}", f"sg-counts-{tail}")
    create_topic(side.bootstrap, app.source, PARTITIONS)
    create_topic(side.bootstrap, app.sink, 1)
    produce(side.bootstrap, app.source, [b"apple banana cherry %d" % n for n in range(40)],
            PARTITIONS)
    for n in range(INSTANCES):
        app.instances.append(WordCountStreams(app.source, app.sink, {
            "bootstrap.servers": side.bootstrap, "application.id": app.app_id,
            "group.protocol": "streams", "state.dir": tmp_path / f"{side.name}-{n}",
            "commit.interval.ms": 100, "consumer.auto.offset.reset": "earliest",
        }, tmp_path / f"{side.name}-{n}.log"))
    return app


@pytest.fixture(scope="module")
def apps(kafka_broker: object, kgroups_broker: object,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, StreamsApp]]:
    """The same word count, two instances, on both brokers, settled."""
    tmp_path = tmp_path_factory.mktemp("streams-tools")
    tail = uuid.uuid4().hex[:6]
    started = {side.name: _start(side, tmp_path, tail)
               for side in (Side("kafka", kafka_broker), Side("kgroups", kgroups_broker))}
    try:
        with ThreadPoolExecutor(len(started)) as pool:
            list(pool.map(lambda app: wait_until(app.settled, f"{app.side.name}: settled",
                                                 timeout_s=SETTLE_TIMEOUT_S),
                          started.values()))
        yield started
    finally:
        for app in started.values():
            for streams in app.instances:
                streams.close()


def _sides(apps: dict[str, StreamsApp]) -> list[Side]:
    return [app.side for app in apps.values()]


def _rows(printed: str, side: Side, group: str,
          epochs: tuple[int, ...] = ()) -> list[list[str]]:
    """The printed table's rows (kafka_tools.normalise) with member ids replaced and the given
    epoch columns of the group's rows blanked (a group's epochs count the changes its
    heartbeats made, which depend on when each instance joined), sorted (Kafka's tool prints
    members in no set order)."""
    rows = [[_MEMBER_ID.sub("MEMBER", token) for token in row]
            for row in normalise(printed, side)]
    for row in rows:
        for column in epochs:
            if row[0] == group and column < len(row):
                row[column] = "EPOCH"
    return sorted(rows)


def _outputs(results: dict[str, Any], sides: list[Side], group: str,
             epochs: tuple[int, ...] = ()) -> dict[str, list[list[str]]]:
    """Each side's rows (see _rows), after checking both exited the same way."""
    codes = {name: result.returncode for name, result in results.items()}
    assert len(set(codes.values())) == 1, (codes, {n: r.stderr[-3000:]
                                                   for n, r in results.items()})
    return {side.name: _rows(results[side.name].stdout, side, group, epochs) for side in sides}


def _same(results: dict[str, Any], sides: list[Side], group: str,
          epochs: tuple[int, ...] = ()) -> list[list[str]]:
    outputs = _outputs(results, sides, group, epochs)
    assert outputs["kgroups"] == outputs["kafka"], (
        results["kafka"].stdout, results["kgroups"].stdout, results["kgroups"].stderr[-3000:])
    return outputs["kafka"]


def test_kafka_tool_lists_the_streams_group_alike(apps: dict[str, StreamsApp]) -> None:
    sides = _sides(apps)
    group = apps["kafka"].app_id
    for options in ((), ("--state",), ("--state", "Stable")):
        results = on_both(sides, STREAMS_GROUPS, ["--list", *options])
        # Both session brokers hold other tests' groups: only this one's rows are compared.
        outputs = {name: [row for row in rows if row[0] in (group, "GROUP")]
                   for name, rows in _outputs(results, sides, group).items()}
        assert outputs["kgroups"] == outputs["kafka"], (results["kafka"].stdout,
                                                        results["kgroups"].stdout)
        assert [group] in [row[:1] for row in outputs["kafka"]], outputs
    # A consumer-group filter does not show it on either broker.
    results = on_both(sides, STREAMS_GROUPS, ["--list", "--state", "Empty"])
    assert all(group not in result.stdout.split() for result in results.values())


# The columns holding epochs in each table (see _rows).
@pytest.mark.parametrize(("options", "epochs"), [
    ((), ()),
    (("--offsets", "--verbose"), ()),
    (("--members",), ()),
    (("--members", "--verbose"), (1, 5)),
    (("--state",), ()),
    (("--state", "--verbose"), (4, 5)),
])
def test_kafka_tool_describes_the_streams_group_alike(
    apps: dict[str, StreamsApp], options: tuple[str, ...], epochs: tuple[int, ...]
) -> None:
    sides = _sides(apps)
    group = apps["kafka"].app_id
    results = on_both(sides, STREAMS_GROUPS, ["--describe", "--group", group, *options])
    if "--offsets" in options:  # kgroups keeps no leader epochs
        for result in results.values():
            result.stdout = re.sub(r"^(\S+\s+\S+\s+\d+\s+\d+\s+)\S+", r"\1-",
                                   result.stdout, flags=re.MULTILINE)
    rows = [row for row in _same(results, sides, group, epochs) if row[0] == group]
    if "--members" not in options and "--state" not in options:
        # Every input partition of the four tasks, consumed to its end.
        repartition = f"{group}-words-repartition"
        assert sorted((row[1], row[2], row[-1]) for row in rows) == [
            (topic, str(p), "0") for topic in sorted((apps["kafka"].source, repartition))
            for p in range(PARTITIONS)], rows
    if "--members" in options:
        # How Kafka's assignor splits four new tasks over two new members: 0_p with 1_p.
        assert sorted(row[-3:] if "--verbose" not in options else row[-6:-3]
                      for row in rows) == [["ACTIVE:", f"0:[{p}];", f"1:[{p}];"]
                                           for p in range(PARTITIONS)], rows
    if "--state" in options:
        assert rows[0][-1] == str(INSTANCES) and "Stable" in rows[0]


@pytest.mark.parametrize(("options", "epochs"), [
    (("--state", "--verbose"), (4, 5)), (("--members", "--verbose"), (1, 5)), (("--offsets",), ()),
    (("--members",), ()),
])
def test_kgroups_groups_prints_what_kafkas_streams_tool_prints(
    apps: dict[str, StreamsApp], capsys: Any, options: tuple[str, ...], epochs: tuple[int, ...]
) -> None:
    for app in apps.values():
        kafka = run_tool(app.side, STREAMS_GROUPS, ["--describe", "--group", app.app_id,
                                                    *options])
        assert main(["groups", "--bootstrap-server", app.side.bootstrap, "--describe",
                     "--group", app.app_id, *options]) == 0
        ours = capsys.readouterr().out
        assert _rows(ours, app.side, app.app_id, epochs) == _rows(
            kafka.stdout, app.side, app.app_id, epochs), (app.side.name, kafka.stdout, ours)


def test_kgroups_groups_lists_and_describes_streams_groups_as_such(
    apps: dict[str, StreamsApp], capsys: Any
) -> None:
    for app in apps.values():
        bootstrap = app.side.bootstrap
        assert main(["groups", "--bootstrap-server", bootstrap, "--list", "--type", "streams",
                     "--state"]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert rows[0] == ["GROUP", "TYPE", "STATE"]
        assert [app.app_id, "Streams", "Stable"] in rows, (app.side.name, rows)
        assert main(["groups", "--bootstrap-server", bootstrap, "--list", "--type",
                     "consumer"]) == 0
        assert app.app_id not in capsys.readouterr().out.split()
        assert main(["groups", "--bootstrap-server", bootstrap, "--describe", "--group",
                     app.app_id, "--output", "json"]) == 0
        (described,) = json.loads(capsys.readouterr().out)
        assert (described["type"], described["state"]) == ("streams", "Stable")
        members = described["members"]
        assert sorted(task for m in members for task in m["tasks"]["active"]) == [
            f"{s}_{p}" for s in (0, 1) for p in range(PARTITIONS)]
        assert all(m["tasks"] == m["target"] and not m["reconciling"]
                   and m["member_epoch"] == described["assignment_epoch"] for m in members)
        assert [[s["source_topics"], s["repartition_source_topics"]]
                for s in described["subtopologies"]] == [
            [[app.source], []], [[], [f"{app.app_id}-words-repartition"]]]


def test_kafka_tool_resets_and_deletes_the_emptied_streams_group_alike(
    apps: dict[str, StreamsApp]
) -> None:
    """Last in this module: the instances leave, then the tool acts on the empty group."""
    sides = _sides(apps)
    group = apps["kafka"].app_id
    for app in apps.values():
        app.close()
        wait_until(lambda app=app: (d := app.described()) is not None and d.state == "Empty",
                   f"{app.side.name}: the group empty", timeout_s=SETTLE_TIMEOUT_S)
    _same(on_both(sides, STREAMS_GROUPS, ["--describe", "--group", group, "--state",
                                          "--verbose"]), sides, group, (4, 5))
    reset = ["--reset-offsets", "--group", group, "--all-input-topics", "--to-earliest"]
    planned = _same(on_both(sides, STREAMS_GROUPS, [*reset, "--dry-run"]), sides, group)
    assert [row[1:] for row in planned if row[0] == group] == [
        [apps["kafka"].source, str(p), "0"] for p in range(PARTITIONS)]
    _same(on_both(sides, STREAMS_GROUPS, [*reset, "--execute"]), sides, group)
    for app in apps.values():
        host, port = app.side.bootstrap.rsplit(":", 1)
        with KafkaWireClient(host, int(port), client_id="kgroups-tests") as client:
            committed = admin.committed_offsets(client, group)
        assert {tp: offset for tp, offset in committed.items() if tp[0] == app.source} == {
            (app.source, p): 0 for p in range(PARTITIONS)}, (app.side.name, committed)
    source = apps["kafka"].source
    dropped = _same(on_both(sides, STREAMS_GROUPS, ["--delete-offsets", "--group", group,
                                                    "--input-topic", source]), sides, group)
    assert [row for row in dropped if row[0] == source] == [
        [source, str(p), "Successful"] for p in range(PARTITIONS)], dropped
    for app in apps.values():
        host, port = app.side.bootstrap.rsplit(":", 1)
        with KafkaWireClient(host, int(port), client_id="kgroups-tests") as client:
            assert source not in {t for t, _ in admin.committed_offsets(client, group)}
    deleted = _same(on_both(sides, STREAMS_GROUPS, ["--delete", "--group", group]), sides, group)
    assert deleted == [["Deletion", "of", "requested", "streams", "groups", f"('{group}')",
                        "was", "successful."]]
    listed = on_both(sides, STREAMS_GROUPS, ["--list"])
    assert all(group not in result.stdout.split() for result in listed.values())
