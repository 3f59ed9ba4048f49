"""`kgroups records decode` and `kgroups offsets dump`, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgroups.cli import main
from kgroups.log.batch import Compression, build_batch
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import PartitionLog
from kgroups.records.codec import encode_key, encode_value
from kgroups.records.consumer_protocol import encode_assignment, encode_subscription
from kgroups.records.schema import (
    ConsumerAssignment,
    ConsumerSubscription,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicPartitions,
)

COMMIT_KEY = encode_key(OffsetCommitKey("g", "orders", 4))
COMMIT_VALUE = encode_value(OffsetCommitValue(42, "meta", 1_700_000_000_000, leader_epoch=7))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_decode_prints_kafka_field_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "records", "decode", "--key", COMMIT_KEY.hex(), "--value", COMMIT_VALUE.hex()
    )
    assert code == 0
    assert json.loads(out) == {
        "key": {"type": 1, "data": {"group": "g", "topic": "orders", "partition": 4}},
        "value": {
            "version": 3,
            "data": {
                "offset": 42,
                "leaderEpoch": 7,
                "metadata": "meta",
                "commitTimestamp": 1_700_000_000_000,
            },
        },
    }
    assert out.count("\n") == 1


def test_decode_without_a_value_prints_null(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "records", "decode", "--key", "00020001" + "67")
    assert code == 0
    assert json.loads(out) == {"key": {"type": 2, "data": {"group": "g"}}, "value": None}


def test_decode_reads_old_versions_with_only_their_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    subscription = encode_subscription(ConsumerSubscription(("orders",), None, version=0))
    assignment = encode_assignment(ConsumerAssignment((TopicPartitions("orders", (0, 1)),)))
    member = MemberMetadata("m-1", "client", "/10.0.0.1", 10_000, 10_000, subscription, assignment)
    value = encode_value(GroupMetadataValue("consumer", 3, "range", "m-1", -1, (member,)), 0)
    code, out, _ = run(capsys, "records", "decode", "--key", "0002000167", "--value", value.hex())
    assert code == 0
    decoded = json.loads(out)["value"]
    assert decoded["version"] == 0
    assert "currentStateTimestamp" not in decoded["data"]
    assert decoded["data"]["members"] == [
        {
            "memberId": "m-1",
            "clientId": "client",
            "clientHost": "/10.0.0.1",
            "sessionTimeout": 10_000,
            "subscription": {"topics": ["orders"], "userData": None},
            "assignment": {
                "assignedPartitions": [{"topic": "orders", "partitions": [0, 1]}],
                "userData": None,
            },
        }
    ]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--key", "zz"], "--key is not hex"),
        (["--key", COMMIT_KEY[:-2].hex()], "key: cannot read OffsetCommitKey partition at byte"),
        (["--key", COMMIT_KEY.hex(), "--value", COMMIT_VALUE[:18].hex()],
         "value: cannot read OffsetCommitValue v3 metadata at byte 16"),
    ],
)
def test_decode_errors_are_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    code, out, err = run(capsys, "records", "decode", *argv)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert words in err


def _offsets_log(directory: Path) -> PartitionLog:
    log = PartitionLog.open(directory, LogConfig(segment_bytes=300))
    log.append_batch(build_batch([(COMMIT_KEY, COMMIT_VALUE, 11), (COMMIT_KEY, None, 12)]))
    group = encode_value(GroupMetadataValue("consumer", 1, "range", "m", 5))
    log.append_batch(build_batch([(encode_key(GroupMetadataKey("g")), group, 13)],
                                 compression=Compression.ZSTD))
    for i in range(5):
        log.append_batch(build_batch([(COMMIT_KEY, COMMIT_VALUE, 20 + i)]))
    log.flush()
    return log


def test_dump_prints_one_line_per_record_across_segments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "__consumer_offsets-17"
    log = _offsets_log(directory)
    assert len(log.segments()) > 1
    code, out, _ = run(capsys, "offsets", "dump", str(directory))
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["offset"] for line in lines] == list(range(8))
    assert {line["partition"] for line in lines} == {17}
    assert lines[0]["timestamp"] == 11
    assert lines[0]["value"]["data"]["offset"] == 42
    assert lines[1]["value"] is None
    assert lines[2]["key"] == {"type": 2, "data": {"group": "g"}}
    code, out, _ = run(capsys, "offsets", "dump", str(log.segments()[0].log_path))
    assert code == 0 and json.loads(out.splitlines()[0])["partition"] == 17


def test_dump_of_a_torn_segment_prints_what_it_can_then_names_the_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "__consumer_offsets-0"
    first = _offsets_log(directory).segments()[0]
    data = first.log_path.read_bytes()
    first.log_path.write_bytes(data[:-5])
    code, out, err = run(capsys, "offsets", "dump", str(first.log_path))
    assert code == 1
    assert len(out.splitlines()) >= 2
    assert str(first.log_path) in err
    assert "at byte" in err
    assert err.count("\n") == 1


def test_dump_of_a_missing_path_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "__consumer_offsets-0"
    _offsets_log(directory)
    code, out, err = run(capsys, "offsets", "dump", str(directory), str(tmp_path / "nope"))
    assert code == 2
    assert out == ""  # the bad PATH is found before the good one is dumped
    assert err == f"kgroups offsets dump: {tmp_path / 'nope'}: no such file or directory\n"


def test_dump_of_a_data_dir_reads_its_offsets_partitions_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for partition in (10, 2):
        _offsets_log(tmp_path / f"__consumer_offsets-{partition}")
    _offsets_log(tmp_path / "orders-0")  # a data topic: not __consumer_offsets
    _offsets_log(tmp_path / "__consumer_offsets-3.0a1b-delete")  # Kafka deleting a partition
    (tmp_path / "meta.properties").write_text("node.id=1\n")
    code, out, _ = run(capsys, "offsets", "dump", str(tmp_path))
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["partition"], line["offset"]) for line in lines] == [
        (partition, offset) for partition in (2, 10) for offset in range(8)]


def test_dump_of_a_directory_without_segments_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "orders-0").mkdir()
    code, out, err = run(capsys, "offsets", "dump", str(tmp_path))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "__consumer_offsets-<partition>" in err


def test_dump_ignores_a_kafka_brokers_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "__consumer_offsets-3"
    _offsets_log(directory)
    (directory / "00000000000000000000.timeindex").write_bytes(b"\x00" * 12)
    (directory / "00000000000000000000.snapshot").write_bytes(b"\x01\x02")
    (directory / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (directory / "partition.metadata").write_text("version: 0\ntopic_id: abc\n")
    code, out, _ = run(capsys, "offsets", "dump", str(directory))
    assert code == 0
    assert [json.loads(line)["offset"] for line in out.splitlines()] == list(range(8))
