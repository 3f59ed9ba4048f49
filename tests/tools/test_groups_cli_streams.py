"""`kgroups groups` on a streams group (KIP-1071) of an in-process broker: light members speak
StreamsGroupHeartbeat themselves (no Kafka Streams JVM), then the operator lists the group,
describes its members and their tasks (current and target), its state and offsets, in text and
JSON, including a member still reconciling and the group once its members have left.
tests/tools/test_streams_group_tools.py checks the same tables against Kafka's own tool."""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import connect, create_topic
from tests.broker.servers import InProcessBroker

from kgroups.broker.wire import build, request_type, sibling
from kgroups.cli import main
from kgroups.tools.wire_client import KafkaWireClient

APP = "word-app"
TOPIC = "words"
HEARTBEAT = request_type(88, 0)


def _nested(name: str, **fields: Any) -> Any:
    return build(sibling(HEARTBEAT, name), **fields)


class Member:
    """One streams member heartbeating by hand: `epoch`, and the active tasks it holds (it
    takes what it is given at once and reports it in its next heartbeat)."""

    def __init__(self, client: KafkaWireClient) -> None:
        self.client = client
        self.member_id = str(uuid.uuid4())
        self.process_id = str(uuid.uuid4())
        self.epoch = 0
        self.active: tuple[int, ...] = ()

    def heartbeat(self) -> Any:
        joining = self.epoch == 0
        answer = self.client.call(build(
            HEARTBEAT, group_id=APP, member_id=self.member_id, member_epoch=self.epoch,
            endpoint_information_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(milliseconds=30_000 if joining else -1),
            topology=_nested("Topology", epoch=0, subtopologies=(_nested(
                "Subtopology", subtopology_id="0", source_topics=(TOPIC,),
                source_topic_regex=(), state_changelog_topics=(), repartition_sink_topics=(),
                repartition_source_topics=(), copartition_groups=()),)) if joining else None,
            active_tasks=(_nested("TaskIds", subtopology_id="0", partitions=self.active),)
            if self.active else (),
            standby_tasks=(), warmup_tasks=(),
            process_id=self.process_id if joining else None, user_endpoint=None,
            client_tags=() if joining else None, task_offsets=None, task_end_offsets=None,
            shutdown_application=False))
        assert int(answer.error_code) == 0, answer
        self.epoch = int(answer.member_epoch)
        if answer.active_tasks is not None:
            self.active = tuple(sorted(int(p) for t in answer.active_tasks
                                       for p in t.partitions))
        return answer

    def leave(self) -> None:
        self.epoch = -1
        self.client.call(build(
            HEARTBEAT, group_id=APP, member_id=self.member_id, member_epoch=-1,
            endpoint_information_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(milliseconds=-1), topology=None,
            active_tasks=None, standby_tasks=None, warmup_tasks=None, process_id=None,
            user_endpoint=None, client_tags=None, task_offsets=None, task_end_offsets=None,
            shutdown_application=False))


@pytest.fixture
def broker(make_inprocess_broker: Any) -> InProcessBroker:
    started: InProcessBroker = make_inprocess_broker(
        "group.streams.initial.rebalance.delay.ms=0", "group.streams.assignment.interval.ms=0")
    started.call(started.broker.coordinator.wait_loaded)
    with connect(started.port) as client:
        create_topic(client, TOPIC, 2)
    return started


def _run(broker: InProcessBroker, capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(["groups", "--bootstrap-server", f"127.0.0.1:{broker.port}", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def _settle(members: list[Member]) -> None:
    """Heartbeats until every member holds its tasks and the two tasks are held once."""
    for _ in range(20):
        for member in members:
            member.heartbeat()
        held = sorted(p for m in members for p in m.active)
        if held == [0, 1] and all(m.active for m in members):
            return
    raise AssertionError([(m.epoch, m.active) for m in members])


def test_a_streams_group_is_listed_and_described_with_its_tasks(
    broker: InProcessBroker, capsys: Any
) -> None:
    with connect(broker.port) as client:
        members = [Member(client), Member(client)]
        _settle(members)
        code, out, _ = _run(broker, capsys, "--list", "--type", "--state")
        assert code == 0 and [APP, "Streams", "Stable"] in _rows(out), out
        code, out, _ = _run(broker, capsys, "--list", "--type", "streams")
        assert (code, _rows(out)) == (0, [["GROUP", "TYPE"], [APP, "Streams"]])
        code, out, _ = _run(broker, capsys, "--list", "--type", "consumer")
        assert (code, _rows(out)) == (0, [["GROUP", "TYPE"]])

        code, out, _ = _run(broker, capsys, "--describe", "--group", APP, "--members")
        rows = _rows(out)
        assert code == 0 and rows[0] == ["GROUP", "MEMBER", "PROCESS", "CLIENT-ID",
                                         "ASSIGNMENTS"]
        assert sorted(row[1:3] + row[4:] for row in rows[1:]) == sorted(
            [m.member_id, m.process_id, "ACTIVE:", f"0:[{m.active[0]}];"] for m in members)

        code, out, _ = _run(broker, capsys, "--describe", "--group", APP, "--state",
                            "--verbose")
        (header, row) = _rows(out)
        assert header == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH",
                          "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        epoch = members[0].epoch
        assert row[3:] == ["Stable", str(epoch), str(epoch), "2"]

        # A third member joins: the target moves a task to it, which the others still hold
        # until they heartbeat again.
        third = Member(client)
        third.heartbeat()
        code, out, err = _run(broker, capsys, "--describe", "--group", APP, "--output", "json")
        (described,) = json.loads(out)
        assert (described["type"], described["state"], len(described["members"])) == (
            "streams", "Reconciling", 3)
        by_id = {m["member_id"]: m for m in described["members"]}
        assert [by_id[m.member_id]["tasks"]["active"] for m in members] == [
            [f"0_{m.active[0]}"] for m in members]
        assert any(m["reconciling"] for m in described["members"])
        assert sorted(t for m in described["members"] for t in m["target"]["active"]) == [
            "0_0", "0_1"]

        for member in (*members, third):
            member.leave()
    code, out, err = _run(broker, capsys, "--describe", "--group", APP, "--members")
    assert (code, out.strip(), err.strip()) == (
        0, "", f"Streams group '{APP}' has no active members.")
    code, out, _ = _run(broker, capsys, "--describe", "--group", APP, "--state")
    assert _rows(out)[1][3:] == ["Empty", "0"]
