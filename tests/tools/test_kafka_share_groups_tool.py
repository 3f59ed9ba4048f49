"""Kafka's `kafka-share-groups` (ShareGroupCommand) against kgroups and against Kafka 4.3.1: the
same commands on both, the printed tables and messages compared after normalising addresses,
node ids and member ids.

A share group's life as an operator drives it: `--reset-offsets --to-earliest --execute` on a
group that does not exist yet creates it with its start offsets (so what follows is the same on
both brokers, whatever the timing); a Java KafkaShareConsumer joins and accepts every record;
`--describe` (offsets, `--members`, `--state`, `--verbose`) and `--list` show it; resets, offset
deletion and group deletion are refused while it has a member; once it has left, resets to the
latest offset and to a datetime, offset deletion (a topic that exists and one that does not) and
the group's deletion go through; a group that does not exist is reported as Kafka reports it."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka_tools import Side, normalise, on_both
from tests.broker.group_interop_helpers import create_topic, produce
from tests.broker.share_members import DeliveryLog, JavaShareMember

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
PARTITIONS = 2
RECORDS = 10
TIMEOUT_S = 60.0


class Names:
    def __init__(self) -> None:
        tail = uuid.uuid4().hex[:6]
        self.topic = f"share-tool-{tail}"
        self.group = f"share-tool-group-{tail}"
        self.missing = f"share-tool-missing-{tail}"


@pytest.fixture(scope="module")
def names() -> Names:
    return Names()


@pytest.fixture(scope="module")
def sides(kafka_broker: object, kgroups_broker: object, names: Names) -> list[Side]:
    """Both brokers with the topic and its records (five a partition)."""
    both = [Side("kafka", kafka_broker), Side("kgroups", kgroups_broker)]
    for side in both:
        create_topic(side.bootstrap, names.topic, PARTITIONS)
        produce(side.bootstrap, names.topic, [f"record-{i}".encode() for i in range(RECORDS)],
                PARTITIONS)
    return both


def _messages(stderr: str) -> list[str]:
    """What the tool told its user on stderr, without a stack trace's frames and causes."""
    return [line.strip() for line in stderr.splitlines()
            if line.strip() and not line.startswith(("\t", "Caused by:"))
            and not line.lstrip().startswith("at ")
            and not line.startswith("java.") and not line.startswith("org.apache.")]


def _run(sides: list[Side], *args: str, sort_rows: bool = False, member_ids: bool = False,
         only: str | None = None) -> list[list[str]]:
    """The command on both; the same exit status, stdout (table rows sorted where Kafka's order
    comes from a hash map; of a listing of every group only the header and the groups named
    `only...`, as the session brokers hold other tests' groups) and messages; returns Kafka's
    normalised stdout."""
    results = on_both(sides, SHARE_GROUPS, list(args))
    printed = {side.name: _normalised(results[side.name], side, sort_rows, member_ids)
               for side in sides}
    if only is not None:  # one header (each group described has its own), `only`'s rows and
        # messages (other groups' "has no active members" among them left out)
        printed = {name: (code, [line for line in lines if line[0] == "GROUP"][:1]
                          + [line for line in lines if line[0].startswith(only)],
                          [note for note in notes if "group '" not in note or only in note])
                   for name, (code, lines, notes) in printed.items()}
    assert printed["kgroups"] == printed["kafka"], _both(results)
    return printed["kafka"][1]


def _normalised(result: subprocess.CompletedProcess[str], side: Side, sort_rows: bool,
                member_ids: bool) -> tuple[int, list[list[str]], list[str]]:
    lines = normalise(result.stdout, side)
    if member_ids:  # the member ids the clients chose: the second column of a members table
        lines = [line if line[0] == "GROUP" else [line[0], "MEMBER", *line[2:]]
                 for line in lines]
    if sort_rows:
        lines = sorted(lines, key=lambda line: line[0] != "GROUP")[:1] + sorted(
            line for line in lines if line[0] != "GROUP")
    messages = [message.replace(side.bootstrap, "BROKER") for message in _messages(result.stderr)]
    return result.returncode, lines, messages


def _both(results: dict[str, subprocess.CompletedProcess[str]]) -> str:
    return "".join(f"\n--- {name} (exit {r.returncode})\n{r.stdout}\n--- {name} stderr\n"
                   f"{r.stderr[-3000:]}" for name, r in results.items())


@pytest.fixture(scope="module")
def members(sides: list[Side], names: Names, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[dict[str, JavaShareMember]]:
    """The group created by a reset to the earliest offsets (compared), then one Java share
    consumer on each broker that has accepted every record."""
    printed = _run(sides, "--reset-offsets", "--group", names.group, "--to-earliest",
                   "--topic", names.topic, "--execute", sort_rows=True)
    assert printed[1:] == [[names.group, names.topic, str(p), "0"] for p in range(PARTITIONS)]
    logs = tmp_path_factory.mktemp("share-tool-members")
    started = {}
    for side in sides:  # the same client id on both: the members tables show it
        (logs / side.name).mkdir()
        started[side.name] = JavaShareMember("tool-member", side.bootstrap, names.group,
                                             names.topic, logs / side.name)
    try:
        for member in started.values():
            _accept_everything(member)
        yield started
    finally:
        for member in started.values():
            member.close()


def _accept_everything(member: JavaShareMember) -> None:
    log = DeliveryLog()
    deadline = time.monotonic() + TIMEOUT_S
    while len(log.deliveries) < RECORDS:
        assert time.monotonic() < deadline, f"{member.name}: {len(log.deliveries)} records"
        deliveries = member.poll(200)
        if deliveries:
            member.acknowledge([(d, "ACCEPT") for d in deliveries])
            assert all(e is None for e in member.commit().values())
            log.deliveries.extend(deliveries)
    assert sorted(d.value for d in log.deliveries) == sorted(f"record-{i}" for i in range(RECORDS))


def test_a_group_with_a_member(sides: list[Side], names: Names,
                               members: dict[str, JavaShareMember]) -> None:
    del members  # joined and consumed: what follows describes that
    group = names.group
    printed = _run(sides, "--describe", "--group", group)
    assert printed[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert [row[:3] for row in printed[1:]] == [[group, names.topic, str(p)]
                                                for p in range(PARTITIONS)]
    _run(sides, "--describe", "--group", group, "--offsets", "--verbose")
    printed = _run(sides, "--describe", "--group", group, "--members", member_ids=True)
    assert printed[1][-2:] == ["2", f"{names.topic}:0,1"]
    _run(sides, "--describe", "--group", group, "--members", "--verbose", member_ids=True)
    assert _run(sides, "--describe", "--group", group, "--state")[1][-2:] == ["Stable", "1"]
    _run(sides, "--describe", "--group", group, "--state", "--verbose")
    _run(sides, "--describe", "--all-groups", "--state", only=group)
    assert _run(sides, "--list", only=group) == [[group]]
    assert _run(sides, "--list", "--state", only=group) == [["GROUP", "STATE"],
                                                            [group, "Stable"]]
    assert _run(sides, "--list", "--state", "Empty", only=group) == [["GROUP", "STATE"]]
    # What a member forbids.
    _run(sides, "--reset-offsets", "--group", group, "--to-earliest", "--all-topics", "--dry-run")
    _run(sides, "--delete-offsets", "--group", group, "--topic", names.topic)
    _run(sides, "--delete", "--group", group)


def test_an_empty_group(sides: list[Side], names: Names,
                        members: dict[str, JavaShareMember]) -> None:
    for member in members.values():
        member.close()
    group = names.group
    _wait_empty(sides, group)
    _run(sides, "--describe", "--group", group, "--members")
    _run(sides, "--reset-offsets", "--group", group, "--to-datetime", "2020-01-01T00:00:00.000",
         "--all-topics", "--dry-run", sort_rows=True)
    printed = _run(sides, "--reset-offsets", "--group", group, "--to-latest", "--all-topics",
                   "--execute", sort_rows=True)
    assert printed[1:] == [[group, names.topic, str(p), str(RECORDS // PARTITIONS)]
                           for p in range(PARTITIONS)]
    _run(sides, "--reset-offsets", "--group", group, "--to-earliest", "--topic",
         f"{names.topic}:1", "--execute")
    _run(sides, "--describe", "--group", group)
    _run(sides, "--delete-offsets", "--group", group, "--topic", names.topic, "--topic",
         "no-such-topic", sort_rows=True)
    _run(sides, "--describe", "--group", group)
    _run(sides, "--delete", "--group", group)
    assert _run(sides, "--list", only=group) == []
    _run(sides, "--describe", "--group", names.missing)
    _run(sides, "--delete", "--group", names.missing)


def _wait_empty(sides: list[Side], group: str) -> None:
    """Until both brokers describe the group Empty (a member's leave is a heartbeat away)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        results = on_both(sides, SHARE_GROUPS, ["--describe", "--group", group, "--state"])
        states = {name: normalise(r.stdout, side)[1:] for (name, r), side
                  in zip(results.items(), sides, strict=True)}
        if all(rows and rows[0][-2] == "Empty" for rows in states.values()):
            return
        assert time.monotonic() < deadline, _both(results)
        time.sleep(0.5)
