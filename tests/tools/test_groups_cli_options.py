"""`kgroups groups` with kafka-consumer-groups' own options, one test per option family, against
an in-process broker: what an operator types, what they read, and what changed on the broker."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import connect, create_topic, produce_request
from tests.broker.servers import InProcessBroker

from kgroups.broker.wire import build, request_type, sibling
from kgroups.cli import build_parser, main
from kgroups.log.batch import build_batch
from kgroups.records.consumer_protocol import encode_assignment
from kgroups.records.schema import ConsumerAssignment, TopicPartitions
from kgroups.tools import admin

BASE_TS = 1_700_000_000_000  # 2023-11-14T22:13:20Z; records one second apart


@pytest.fixture
def broker(make_inprocess_broker: Any) -> InProcessBroker:
    """Topics `events` (2 partitions: 10 and 4 records) and `other` (1 partition: 5 records);
    group `reader` committed events 6 and 1, other 2; group `second` committed events-0 at 1."""
    started: InProcessBroker = make_inprocess_broker("group.initial.rebalance.delay.ms=0")
    started.call(started.broker.coordinator.wait_loaded)
    with connect(started.port) as client:
        create_topic(client, "events", 2)
        create_topic(client, "other", 1)
        for topic, partition, count in (("events", 0, 10), ("events", 1, 4), ("other", 0, 5)):
            batch = build_batch([(None, b"v%d" % i, BASE_TS + i * 1000) for i in range(count)])
            client.call(produce_request(topic, partition, batch))
        _commit(client, "reader", "events", {0: 6, 1: 1})
        _commit(client, "reader", "other", {0: 2})
        _commit(client, "second", "events", {0: 1})
    return started


def _commit(client: Any, group: str, topic: str, offsets: dict[int, int]) -> None:
    commit = request_type(8, 8)
    client.call(build(commit, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                      group_instance_id=None, topics=(build(
                          sibling(commit, "OffsetCommitRequestTopic"), name=topic,
                          partitions=tuple(build(
                              sibling(commit, "OffsetCommitRequestPartition"),
                              partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                              committed_metadata="") for p, o in offsets.items())),)))


def _run(broker: InProcessBroker, capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(["groups", "--bootstrap-server", f"127.0.0.1:{broker.port}", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(output: str, first: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.split()[:1] == [first]]


def _committed(broker: InProcessBroker, group: str) -> dict[tuple[str, int], int]:
    with connect(broker.port) as client:
        return admin.committed_offsets(client, group)


def _join_live_member(client: Any) -> str:
    """A member of group `live` holding events-0 and events-1; returns its member id."""
    join, sync = request_type(11, 9), request_type(14, 5)
    joined = client.call(build(
        join, group_id="live", session_timeout=datetime.timedelta(seconds=30),
        rebalance_timeout=datetime.timedelta(seconds=30), member_id="", group_instance_id=None,
        protocol_type="consumer", reason=None,
        protocols=(build(sibling(join, "JoinGroupRequestProtocol"), name="range",
                         metadata=b""),)))
    if joined.error_code == 79:  # MEMBER_ID_REQUIRED: join again with the id given
        joined = client.call(build(
            join, group_id="live", session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id=joined.member_id,
            group_instance_id=None, protocol_type="consumer", reason=None,
            protocols=(build(sibling(join, "JoinGroupRequestProtocol"), name="range",
                             metadata=b""),)))
    assignment = encode_assignment(ConsumerAssignment((TopicPartitions("events", (0, 1)),)))
    synced = client.call(build(
        sync, group_id="live", generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=(build(sibling(sync, "SyncGroupRequestAssignment"),
                           member_id=joined.member_id, assignment=assignment),)))
    assert synced.error_code == 0
    return str(joined.member_id)


# ---------------------------------------------------------------------------------- --list

def test_list_plain_with_state_and_type_columns_and_filters(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _run(broker, capsys, "--list")[1].split() == ["reader", "second"]
    code, out, _ = _run(broker, capsys, "--list", "--state")
    assert (code, out.splitlines()[0].split()) == (0, ["GROUP", "STATE"])
    assert _rows(out, "reader") == [["reader", "Empty"]]
    _, out, _ = _run(broker, capsys, "--list", "--state", "stable,EMPTY")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["reader", "second"]
    _, out, _ = _run(broker, capsys, "--list", "--state", "Stable")
    assert out.splitlines()[1:] == []
    _, out, _ = _run(broker, capsys, "--list", "--type")
    assert _rows(out, "second") == [["second", "Classic"]]
    _, out, _ = _run(broker, capsys, "--list", "--type", "consumer")
    assert out.splitlines()[1:] == []


def test_list_refuses_unknown_states_and_types_as_kafka(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _run(broker, capsys, "--list", "--state", "bogus")
    assert (code, out) == (2, "")
    assert ("Invalid state list 'bogus'. Valid states are: Stable, Dead, PreparingRebalance, "
            "CompletingRebalance, Assigning, Reconciling, Empty") in err
    code, _, err = _run(broker, capsys, "list", "--type", "classic,bogus")
    assert code == 2
    assert "Invalid type list 'bogus'. Valid types are: Consumer, Classic, Share, Streams" in err


# ------------------------------------------------------------------------------ --describe

def test_describe_several_groups_all_groups_and_a_missing_one(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _run(broker, capsys, "--describe", "--group", "reader", "--group", "second")
    assert code == 0
    assert err.splitlines() == ["Consumer group 'reader' has no active members.",
                                "Consumer group 'second' has no active members."]
    assert [row[:2] for row in _rows(out, "reader") + _rows(out, "second")] == [
        ["reader", "events"], ["reader", "events"], ["reader", "other"], ["second", "events"]]

    def offsets(text: str) -> list[list[str]]:  # LAG-SECONDS (last) grows between runs
        return [row[:-1] for row in _rows(text, "reader") + _rows(text, "second")]

    assert offsets(_run(broker, capsys, "--describe", "--all-groups")[1]) == offsets(out)
    assert offsets(_run(broker, capsys, "describe", "reader", "second")[1]) == offsets(
        out)  # older form

    code, out, err = _run(broker, capsys, "--describe", "--group", "nosuch", "--group", "second")
    assert code == 1
    assert offsets(out) == [["second", "events", "0", "1", "10", "9", "-", "-", "-"]]
    assert err.splitlines()[-1] == "Error: Consumer group 'nosuch' does not exist."


def test_describe_offsets_verbose_adds_leader_epochs(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    _, out, _ = _run(broker, capsys, "--describe", "--group", "reader", "--offsets", "--verbose")
    assert "LEADER-EPOCH" in out.splitlines()[1]
    assert _rows(out, "reader")[0][:10] == ["reader", "events", "0", "-", "6", "10", "4", "-",
                                            "-", "-"]


def test_describe_members_and_state_of_a_live_group(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    with connect(broker.port) as client:
        member = _join_live_member(client)
        code, out, _ = _run(broker, capsys, "--describe", "--group", "live", "--members")
        assert code == 0
        assert out.splitlines()[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID",
                                               "#PARTITIONS"]
        assert _rows(out, "live") == [["live", member, "/127.0.0.1", "broker-tests", "2"]]
        _, out, _ = _run(broker, capsys, "--describe", "--group", "live", "--members",
                         "--verbose")
        assert _rows(out, "live")[0][-4:] == ["-", "events:0,1", "-", "-"]
        _, out, _ = _run(broker, capsys, "--describe", "--group", "live", "--state")
        (row,) = _rows(out, "live")
        assert row[:6] == ["live", f"127.0.0.1:{broker.port}", "(0)", "range", "Stable", "1"]
        assert row[7] == "new_member_joined"  # LAST-REBALANCE (a time), REBALANCE-CAUSE
        _, out, _ = _run(broker, capsys, "--describe", "--group", "live")
        assert _rows(out, "live")[0][:7] == ["live", "events", "0", "-", "10", "-", member]


@pytest.mark.parametrize("options", [("--members", "--state"), ("--offsets", "--members"),
                                     ("--state", "Stable")])
def test_describe_refuses_options_that_do_not_go_together(broker, capsys, options) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _run(broker, capsys, "--describe", "--group", "reader", *options)
    assert (code, out) == (2, "")
    assert "kgroups groups: error:" in err


def test_options_of_another_action_and_no_action_are_refused(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    for args, message in (((), "exactly one action"),
                          (("--list", "--describe"), "exactly one action"),
                          (("--list", "--members"), "--describe only"),
                          (("--describe", "--group", "g", "--to-earliest"), "--reset-offsets"),
                          (("--describe", "--group", "g", "--type"),
                           "--describe only as --type share"),
                          (("--delete", "--group", "g", "--type", "share"),
                           "--list or --describe only"),
                          (("--describe",), "--all-groups")):
        code, _, err = _run(broker, capsys, *args)
        assert code == 2 and message in err, (args, err)


# ------------------------------------------------------------------------- --reset-offsets

def _reset(broker: InProcessBroker, capsys: Any, *args: str) -> tuple[int, list[list[str]], str]:
    code, out, err = _run(broker, capsys, "--reset-offsets", "--group", "reader", *args)
    return code, _rows(out, "reader"), err


def test_reset_scopes_repeated_topics_partitions_and_all_topics(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    _, rows, err = _reset(broker, capsys, "--topic", "events:1", "--topic", "other",
                          "--to-earliest")
    assert [r[1:] for r in rows] == [["events", "1", "1", "0"], ["other", "0", "2", "0"]]
    assert "Dry run" in err
    _, rows, _ = _reset(broker, capsys, "--all-topics", "--to-latest")
    assert [r[1:] for r in rows] == [["events", "0", "6", "10"], ["events", "1", "1", "4"],
                                     ["other", "0", "2", "5"]]
    assert _committed(broker, "reader")[("events", 0)] == 6  # dry run by default
    _, rows, _ = _reset(broker, capsys, "--all-topics", "--to-latest", "--dry-run")
    assert _committed(broker, "reader")[("events", 0)] == 6
    code, _, err = _reset(broker, capsys, "--to-latest")
    assert code == 2 and "One of the reset scopes should be defined" in err
    code, _, err = _reset(broker, capsys, "--all-topics", "--topic", "events", "--to-latest")
    assert code == 2


def test_reset_to_current_and_shift_by_report_targets_outside_the_log(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    _, rows, _ = _reset(broker, capsys, "--all-topics", "--to-current")
    assert [r[4] for r in rows] == ["6", "1", "2"]
    _, rows, err = _reset(broker, capsys, "--all-topics", "--shift-by", "-3")
    assert [r[4] for r in rows] == ["3", "0", "0"]
    assert err.splitlines()[:2] == [
        "New offset (-2) is lower than earliest offset for topic partition events-1. "
        "Value will be set to 0",
        "New offset (-1) is lower than earliest offset for topic partition other-0. "
        "Value will be set to 0"]
    _, rows, err = _reset(broker, capsys, "--topic", "events", "--shift-by", "5")
    assert [r[4] for r in rows] == ["10", "4"]
    assert "New offset (11) is higher than latest offset for topic partition events-0" in err
    code, _, err = _run(broker, capsys, "--reset-offsets", "--group", "second", "--topic",
                        "events", "--shift-by", "1")
    assert code == 1 and "no current committed offset" in err  # second has none on events-1


def test_reset_by_time_states_the_zone_and_by_duration(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    _, rows, err = _reset(broker, capsys, "--topic", "events", "--to-datetime",
                          "2023-11-14T22:13:22.500Z")
    assert [r[4] for r in rows] == ["3", "3"]
    assert "is 2023-11-14T22:13:22.500+00:00 (the zone given)" in err
    _, rows, err = _reset(broker, capsys, "--topic", "events", "--to-datetime",
                          "2023-11-14T23:13:22.500+01:00")
    assert [r[4] for r in rows] == ["3", "3"]
    _, _, err = _reset(broker, capsys, "--topic", "events", "--to-datetime",
                       "2023-11-14T22:13:22.500")
    assert "no zone given: read in this machine's zone" in err
    # Everything is older than an hour: nothing at or after now-1h, so the log end, with
    # Kafka's warning; a duration reaching before the first record gives the first offset.
    _, rows, err = _reset(broker, capsys, "--topic", "events", "--by-duration", "PT1H")
    assert [r[4] for r in rows] == ["10", "4"]
    assert "Warn: Partition 0 from topic events is empty. Falling back to latest known " \
           "offset." in err
    days = (time.time() * 1000 - BASE_TS) // 86_400_000 + 1
    _, rows, _ = _reset(broker, capsys, "--topic", "events", "--by-duration", f"P{days:.0f}D")
    assert [r[4] for r in rows] == ["0", "0"]
    code, _, err = _reset(broker, capsys, "--topic", "events", "--by-duration", "1 hour")
    assert code == 1 and "PnDTnHnMnS" in err


def test_export_then_from_file_round_trips_and_executes(broker, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _run(broker, capsys, "--reset-offsets", "--group", "reader", "--all-topics",
                        "--to-offset", "3", "--export")
    assert (code, out) == (0, "events,0,3\nevents,1,3\nother,0,3\n")
    plan = tmp_path / "plan.csv"
    plan.write_text(out.replace("events,1,3", "events,1,9"))  # 9 is past events-1's end (4)
    code, out, err = _run(broker, capsys, "--reset-offsets", "--group", "reader", "--from-file",
                          str(plan), "--execute")
    assert code == 0
    assert "Dry run" not in err
    assert "New offset (9) is higher than latest offset for topic partition events-1" in err
    assert _committed(broker, "reader") == {("events", 0): 3, ("events", 1): 4, ("other", 0): 3}
    plan.write_text("events,0\n")
    code, _, err = _run(broker, capsys, "--reset-offsets", "--group", "reader", "--from-file",
                        str(plan))
    assert code == 1 and "line 1" in err


def test_reset_refuses_dry_run_with_execute_and_several_modes(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = _reset(broker, capsys, "--all-topics", "--to-latest", "--dry-run",
                          "--execute")
    assert code == 2 and "--dry-run and --execute" in err
    code, _, err = _reset(broker, capsys, "--all-topics", "--to-latest", "--to-earliest")
    assert code == 2 and "choose one reset specification" in err


# ------------------------------------------------------------------- --delete-offsets, --delete

def test_delete_offsets_of_a_topic_and_an_unknown_topic(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _run(broker, capsys, "--delete-offsets", "--group", "reader", "--topic",
                        "events")
    assert code == 0
    assert out.splitlines()[0] == "Request succeeded for deleting offsets from group reader."
    assert _rows(out, "events") == [["events", "0", "Successful"], ["events", "1", "Successful"]]
    assert _committed(broker, "reader") == {("other", 0): 2}
    code, out, _ = _run(broker, capsys, "--delete-offsets", "--group", "reader", "--topic",
                        "nosuch")
    assert code == 1
    assert _rows(out, "nosuch") == [["nosuch", "-", "Error:", "UNKNOWN_TOPIC_OR_PARTITION"]]
    code, _, err = _run(broker, capsys, "--delete-offsets", "--group", "reader")
    assert code == 2 and "--topic" in err


def test_delete_several_groups(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _run(broker, capsys, "--delete", "--group", "reader", "--group", "second")
    assert code == 0
    assert out == ("Deletion of requested consumer groups ('reader', 'second') was "
                   "successful.\n")
    assert _run(broker, capsys, "--list")[1] == ""


# -------------------------------------------------------------------------- --output json

def test_json_output_for_scripts(broker, capsys) -> None:  # type: ignore[no-untyped-def]
    listed = json.loads(_run(broker, capsys, "--list", "--output", "json")[1])
    assert listed[0] == {"group": "reader", "state": "Empty", "type": "Classic",
                         "protocol_type": ""}
    (described,) = json.loads(_run(broker, capsys, "--describe", "--group", "reader",
                                    "--output", "json")[1])
    assert described["state"] == "Empty"
    assert described["offsets"][0].pop("lag_seconds") > 0
    assert described["offsets"][0] == {"topic": "events", "partition": 0, "current_offset": 6,
                                       "log_end_offset": 10, "lag": 4, "consumer_id": None,
                                       "host": None, "client_id": None}
    planned = json.loads(_run(broker, capsys, "--reset-offsets", "--group", "reader",
                              "--topic", "other", "--to-earliest", "--output", "json")[1])
    assert planned == [{"group": "reader", "topic": "other", "partition": 0,
                        "current_offset": 2, "new_offset": 0}]


# ------------------------------------------------------------------------- pipes and help

def test_a_reader_that_stops_early_ends_the_command_quietly(broker) -> None:  # type: ignore[no-untyped-def]
    command = [sys.executable, "-m", "kgroups.cli", "groups", "--bootstrap-server",
               f"127.0.0.1:{broker.port}", "--describe", "--all-groups"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # as `| head -0` would, before the command writes
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0
    assert "BrokenPipeError" not in err and "Traceback" not in err


def test_every_argument_has_help_and_defaults_are_shown() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    groups = subparsers.choices["groups"]  # type: ignore[attr-defined]
    for action in groups._actions:
        assert action.help, action.option_strings or action.dest
    text = " ".join(groups.format_help().split())
    assert "broker to connect to (default: 127.0.0.1:9092)" in text
    assert "(default: text)" in text
    assert "(default: None)" not in text and "(default: False)" not in text
