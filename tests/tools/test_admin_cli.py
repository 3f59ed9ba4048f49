"""`kgroups groups ...` against an in-process broker: what an operator types and reads, including
the refusals (active group, unknown topic, unreachable broker) that must change nothing."""

from __future__ import annotations

import datetime
import socket
import time
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import connect, create_topic, produce_request
from tests.broker.servers import InProcessBroker

from kgroups.broker.coordinator_runtime import read_partition_image
from kgroups.broker.wire import build, request_type, sibling
from kgroups.cli import main
from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import PartitionLog
from kgroups.records.codec import encode_record
from kgroups.records.schema import OffsetCommitKey, OffsetCommitValue, OffsetsRecord
from kgroups.tools.admin import AdminError
from kgroups.tools.offset_reset import parse_datetime_ms

BASE_TS = 1_700_000_000_000


@pytest.fixture
def broker(make_inprocess_broker: Any) -> InProcessBroker:
    """A loaded broker with topic `events` (2 partitions: 10 and 4 records, one per second)
    and group `reader` having committed 6 and 1."""
    started: InProcessBroker = make_inprocess_broker("group.initial.rebalance.delay.ms=0")
    started.call(started.broker.coordinator.wait_loaded)
    with connect(started.port) as client:
        create_topic(client, "events", 2)
        for partition, count in ((0, 10), (1, 4)):
            batch = build_batch([(None, b"v%d" % i, BASE_TS + i * 1000) for i in range(count)])
            client.call(produce_request("events", partition, batch))
        _commit(client, "reader", {0: 6, 1: 1})
    return started


def _commit(client: Any, group: str, offsets: dict[int, int]) -> None:
    commit = request_type(8, 8)
    (topic,) = client.call(build(commit, group_id=group, generation_id_or_member_epoch=-1,
                                 member_id="", group_instance_id=None, topics=(build(
                                     sibling(commit, "OffsetCommitRequestTopic"), name="events",
                                     partitions=tuple(build(
                                         sibling(commit, "OffsetCommitRequestPartition"),
                                         partition_index=p, committed_offset=o,
                                         committed_leader_epoch=-1, committed_metadata="")
                                         for p, o in offsets.items())),))).topics
    assert all(p.error_code == 0 for p in topic.partitions)


def _run(broker: InProcessBroker, capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(["groups", "--bootstrap-server", f"127.0.0.1:{broker.port}", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(output: str, first_column: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.startswith(first_column)]


def test_list_and_describe_show_state_offsets_and_lag(broker: InProcessBroker, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _run(broker, capsys, "list")
    assert code == 0
    assert out.splitlines() == ["reader"]

    code, out, err = _run(broker, capsys, "describe", "reader")
    assert code == 0
    assert err == "Consumer group 'reader' has no active members.\n"
    # group, topic, partition, committed, log end, lag, and no consumer
    rows = _rows(out, "reader ")
    assert [row[:9] for row in rows] == [
        ["reader", "events", "0", "6", "10", "4", "-", "-", "-"],
        ["reader", "events", "1", "1", "4", "3", "-", "-", "-"],
    ]
    # LAG-SECONDS, last: the age of the first unconsumed record (record i has BASE_TS + i s).
    now = time.time()
    for row, first_unconsumed in zip(rows, (6, 1), strict=True):
        assert abs(float(row[9]) - (now - BASE_TS / 1000 - first_unconsumed)) < 5


def test_reset_offsets_is_a_dry_run_unless_executed(broker: InProcessBroker, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _run(broker, capsys, "reset-offsets", "reader", "--topic", "events",
                          "--to-earliest")
    assert code == 0
    assert "Dry run" in err
    assert _rows(out, "reader") == [["reader", "events", "0", "6", "0"],
                                    ["reader", "events", "1", "1", "0"]]
    _, out, _ = _run(broker, capsys, "describe", "reader")
    assert [row[3] for row in _rows(out, "reader ")] == ["6", "1"]  # unchanged

    code, out, _ = _run(broker, capsys, "reset-offsets", "reader", "--topic", "events:1",
                        "--to-latest", "--execute")
    assert code == 0
    assert _rows(out, "reader") == [["reader", "events", "1", "1", "4"]]
    _, out, _ = _run(broker, capsys, "describe", "reader")
    assert [row[3] for row in _rows(out, "reader ")] == ["6", "4"]


def test_reset_to_offset_clamps_and_to_datetime_finds_the_first_later_record(
    broker: InProcessBroker, capsys  # type: ignore[no-untyped-def]
) -> None:
    _, out, err = _run(broker, capsys, "reset-offsets", "reader", "--topic", "events",
                       "--to-offset", "7")
    assert [row[4] for row in _rows(out, "reader")] == ["7", "4"]  # 7 is past partition 1's end
    assert ("New offset (7) is higher than latest offset for topic partition events-1. "
            "Value will be set to 4") in err

    # Records are one second apart from BASE_TS: 2.5 s later is offset 3 (and past the end of
    # nothing); a time after everything resets to the log end.
    moment = "2023-11-14T22:13:22.500+00:00"
    assert parse_datetime_ms(moment) == BASE_TS + 2500
    _, out, _ = _run(broker, capsys, "reset-offsets", "reader", "--topic", "events",
                     "--to-datetime", moment)
    assert [row[4] for row in _rows(out, "reader")] == ["3", "3"]
    _, out, _ = _run(broker, capsys, "reset-offsets", "reader", "--topic", "events",
                     "--to-datetime", "2099-01-01T00:00:00")
    assert [row[4] for row in _rows(out, "reader")] == ["10", "4"]


def test_reset_refuses_an_active_group_and_unknown_topics(broker: InProcessBroker, capsys) -> None:  # type: ignore[no-untyped-def]
    join = request_type(11, 9)
    with connect(broker.port) as client:
        joined = client.call(build(
            join, group_id="active", session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id="",
            group_instance_id="only", protocol_type="consumer", reason=None,
            protocols=(build(sibling(join, "JoinGroupRequestProtocol"), name="range",
                             metadata=b""),)))
        assert joined.error_code == 0
    code, out, err = _run(broker, capsys, "reset-offsets", "active", "--topic", "events",
                          "--to-earliest", "--execute")
    assert code == 1
    assert "inactive" in err and "CompletingRebalance" in err

    code, _, err = _run(broker, capsys, "reset-offsets", "reader", "--topic", "nope",
                        "--to-earliest", "--execute")
    assert code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = _run(broker, capsys, "reset-offsets", "reader", "--topic", "events:0,9",
                        "--to-earliest", "--execute")
    assert (code, 'The partitions "events-9" do not exist' in err) == (1, True)
    _, out, _ = _run(broker, capsys, "describe", "reader")
    assert [row[3] for row in _rows(out, "reader ")] == ["6", "1"]


def test_delete_group_then_it_is_gone(broker: InProcessBroker, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _run(broker, capsys, "delete", "reader")[0] == 0
    code, _, err = _run(broker, capsys, "delete", "reader")
    assert (code, "GROUP_ID_NOT_FOUND" in err) == (1, True)
    code, out, err = _run(broker, capsys, "describe", "reader")
    assert (code, out) == (1, "")
    assert err == "Error: Consumer group 'reader' does not exist.\n"


def test_bootstrap_server_may_follow_the_action(broker: InProcessBroker, capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["groups", "describe", "reader", "--bootstrap-server", f"127.0.0.1:{broker.port}"])
    out = capsys.readouterr().out
    assert code == 0
    assert "reader  events" in out


def test_unreachable_broker_and_bad_arguments_give_clear_errors(capsys) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    assert main(["groups", "--bootstrap-server", f"127.0.0.1:{free_port}", "list"]) == 1
    assert "cannot connect" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["groups", "--bootstrap-server", "no-port", "list"])
    with pytest.raises(SystemExit):
        main(["groups", "reset-offsets", "g", "--topic", "t:x", "--to-earliest"])
    assert main(["groups", "reset-offsets", "g", "--topic", "t"]) == 2  # no --to-* given
    assert "choose one reset specification" in capsys.readouterr().err
    with pytest.raises(AdminError):
        parse_datetime_ms("yesterday")


def test_timeout_bounds_the_wait_for_a_silent_broker(capsys) -> None:  # type: ignore[no-untyped-def]
    """A listener that accepts and never answers: --timeout (kafka-consumer-groups' option,
    in ms) ends the wait with one line, not the 30 s socket default or a hang."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()
        code = main(["groups", "--bootstrap-server", f"127.0.0.1:{port}", "--list",
                     "--timeout", "300"])
        waited = time.monotonic() - started
    assert code == 1
    assert capsys.readouterr().err == f"Error: 127.0.0.1:{port} did not answer within 0.3 s\n"
    assert waited < 5
    with pytest.raises(SystemExit):
        main(["groups", "--list", "--timeout", "0"])
    assert "not a positive number of ms" in capsys.readouterr().err


def test_replay_skips_undecodable_records_and_keeps_the_rest(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", LogConfig())
    good = OffsetsRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(5, "", BASE_TS))
    key, value = encode_record(good)
    log.append_batch(build_batch([(key, value, BASE_TS), (b"\x00\x01\xff", b"junk", BASE_TS),
                                  (None, b"keyless", BASE_TS)]))
    image, count, skipped = read_partition_image(log)
    assert (count, skipped) == (3, 1)
    assert image.offsets == {("g", "t", 0): good.value}


def test_describe_shows_members_whose_assignment_does_not_decode(
    broker: InProcessBroker, capsys  # type: ignore[no-untyped-def]
) -> None:
    join, sync = request_type(11, 9), request_type(14, 5)
    with connect(broker.port) as client:
        joined = client.call(build(
            join, group_id="odd", session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id="",
            group_instance_id="odd-one", protocol_type="consumer", reason=None,
            protocols=(build(sibling(join, "JoinGroupRequestProtocol"), name="range",
                             metadata=b""),)))
        synced = client.call(build(
            sync, group_id="odd", generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id="odd-one", protocol_type="consumer", protocol_name="range",
            assignments=(build(sibling(sync, "SyncGroupRequestAssignment"),
                               member_id=joined.member_id, assignment=b"\x00\x00\xff\xff\xff"),)))
        assert synced.error_code == 0
    code, out, _ = _run(broker, capsys, "--describe", "--group", "odd", "--state")
    assert code == 0
    # ... STATE #MEMBERS, then kgroups' LAST-REBALANCE and REBALANCE-CAUSE
    assert _rows(out, "odd")[0][-4:-2] == ["Stable", "1"]
    assert _rows(out, "odd")[0][-1] == "new_member_joined"
    code, out, _ = _run(broker, capsys, "--describe", "--group", "odd", "--members")
    (member_row,) = _rows(out, "odd")
    assert member_row[1:] == [joined.member_id, "odd-one", "/127.0.0.1", "broker-tests", "0"]
