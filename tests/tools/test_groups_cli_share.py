"""`kgroups groups --type share` on a share group a Java KafkaShareConsumer is in, on Kafka 4.3.1
and on kgroups: it is listed with its type, and each `--describe` prints what Kafka's own
`kafka-share-groups --describe` prints on the same broker (offsets, members, state, with and
without --verbose); a plain `--describe` finds it without being told its type; once the member
has left, the notes of an empty group; a group that is not there is reported missing."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_tools import TOOL_JVM
from tests.broker.group_interop_helpers import create_topic, produce
from tests.broker.share_members import DeliveryLog, JavaShareMember

from kafka_harness import run_kafka_tool
from kgroups.cli import main

pytestmark = [pytest.mark.interop, pytest.mark.slow]

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
TIMEOUT_S = 60.0
DESCRIBE_OPTIONS = [("--members",), ("--members", "--verbose"), ("--state",),
                    ("--state", "--verbose"), (), ("--offsets", "--verbose")]


class Group:
    """A share group with one member that has accepted every record it was given."""

    def __init__(self, bootstrap: str, logs: Path) -> None:
        tail = uuid.uuid4().hex[:6]
        self.bootstrap, self.topic, self.id = bootstrap, f"cli-share-{tail}", f"cli-share-g-{tail}"
        create_topic(bootstrap, self.topic, 2)
        self.member = JavaShareMember("cli-member", bootstrap, self.id, self.topic, logs)
        log = DeliveryLog()
        deadline = time.monotonic() + TIMEOUT_S
        while len(log.deliveries) < 4:  # the group reads from the log end it first sees
            assert time.monotonic() < deadline, "no record delivered to the share group"
            produce(bootstrap, self.topic, [b"one", b"two"], 2)
            for _ in range(3):
                deliveries = self.member.poll(200)
                if deliveries:
                    self.member.acknowledge([(d, "ACCEPT") for d in deliveries])
                    assert all(e is None for e in self.member.commit().values())
                    log.deliveries.extend(deliveries)


@pytest.fixture
def group(any_broker: Any, tmp_path: Path) -> Iterator[Group]:
    made = Group(any_broker.bootstrap, tmp_path)
    yield made
    made.member.close()


def _kgroups(capsys: Any, group: Group, *args: str) -> tuple[int, str, str]:
    code = main(["groups", "--bootstrap-server", group.bootstrap, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _kafka(group: Group, *args: str) -> tuple[int, str, str]:
    done = run_kafka_tool(SHARE_GROUPS, ["--bootstrap-server", group.bootstrap, *args],
                          jvm_options=TOOL_JVM)
    return done.returncode, done.stdout, done.stderr


def _tokens(text: str) -> list[list[str]]:
    """Lines as tokens: column widths follow the widest value, which may differ."""
    return [line.split() for line in text.splitlines() if line.strip()]


def test_listed_as_a_share_group(group: Group, capsys: Any) -> None:
    code, out, _ = _kgroups(capsys, group, "--list", "--type", "share")
    assert code == 0 and [group.id, "Share"] in _tokens(out)
    code, out, _ = _kgroups(capsys, group, "--list", "--type", "share", "--state")
    assert [group.id, "Share", "Stable"] in _tokens(out)
    code, out, _ = _kgroups(capsys, group, "--list", "--type", "consumer,classic")
    assert code == 0 and group.id not in out


def test_describe_prints_what_kafka_share_groups_prints(group: Group, capsys: Any) -> None:
    for options in DESCRIBE_OPTIONS:
        code, ours, _ = _kgroups(capsys, group, "--describe", "--type", "share", "--group",
                                 group.id, *options)
        kafka_code, theirs, _ = _kafka(group, "--describe", "--group", group.id, *options)
        assert (code, _tokens(ours)) == (kafka_code, _tokens(theirs)), options
        # Told nothing of its type, kgroups finds the share group all the same.
        assert _kgroups(capsys, group, "--describe", "--group", group.id, *options)[1] == ours
    code, out, _ = _kgroups(capsys, group, "--describe", "--type", "share", "--group", group.id,
                            "--output", "json")
    (described,) = json.loads(out)
    assert (described["type"], described["state"]) == ("Share", "Stable")
    assert [(m["client_id"], m["partitions"]) for m in described["members"]] == [
        ("cli-member", [[group.topic, 0], [group.topic, 1]])]
    assert {(o["topic"], o["partition"]) for o in described["offsets"]} == {
        (group.topic, 0), (group.topic, 1)}


def test_an_empty_share_group_and_a_missing_one(group: Group, capsys: Any) -> None:
    group.member.close()
    deadline = time.monotonic() + TIMEOUT_S
    while "Empty" not in _kgroups(capsys, group, "--list", "--type", "share", "--state")[1]:
        assert time.monotonic() < deadline, "the member never left"
        time.sleep(0.5)
    for options in (("--members",), ("--state",)):
        code, ours, our_notes = _kgroups(capsys, group, "--describe", "--type", "share",
                                         "--group", group.id, *options)
        kafka_code, theirs, their_notes = _kafka(group, "--describe", "--group", group.id,
                                                 *options)
        assert (code, _tokens(ours)) == (kafka_code, _tokens(theirs)), options
        assert f"Share group '{group.id}' has no active members." in our_notes
        assert f"Share group '{group.id}' has no active members." in their_notes
    missing = f"{group.id}-missing"
    code, out, err = _kgroups(capsys, group, "--describe", "--type", "share", "--group", missing)
    assert (code, out) == (1, "") and f"Share group '{missing}' does not exist" in err
    code, out, err = _kgroups(capsys, group, "--describe", "--group", missing)
    assert (code, out) == (1, "") and f"Consumer group '{missing}' does not exist." in err
