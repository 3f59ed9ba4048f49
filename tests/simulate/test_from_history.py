"""`kgroups simulate --from-history`: a group's real history rebuilt into a schedule.

The history row must count what the pipeline counts (one rebalance per generation), and the
variant running the recorded settings must rebalance as often as the group really did: on logs
written by the project's encoders (tests/pipeline/logdata.py), and on the logs of a real
Kafka 4.3.1 broker and of `kgroups serve` after real librdkafka consumers joined, left and
were killed."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.pipeline.logdata import OffsetsLogBuilder, coordinator_partition
from tests.pipeline.test_consumer_history import TOPIC_ID, _two_members_reconcile
from tests.pipeline.test_consumer_history import G as CONSUMER_GROUP
from tests.storage.conftest import postgres_server, postgres_url

from kgroups.cli import main
from kgroups.log.topic_ids import write_partition_metadata
from kgroups.pipeline.group_log import OffsetsLog

__all__ = ["postgres_server", "postgres_url"]  # the storage tests' PostgreSQL fixtures

T = 1_700_000_000_000
SECOND = 1000
T0, T1, T2, T3 = ("t", 0), ("t", 1), ("t", 2), ("t", 3)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _report(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = _run(capsys, *argv, "--output", "json")
    assert code == 0, err
    return dict(json.loads(out))


def _pipeline_generations(logs: Path, group: str) -> tuple[int, int]:
    """The group's generations as the pipeline's partition analysis (what every Spark task of
    `kgroups analyze` runs) counts them: the summary's `generations`, and the distinct
    generation numbers of group_generations."""
    log = OffsetsLog.open(str(logs))
    try:
        results = [log.read(p).result for p in log.partitions]
    finally:
        log.close()
    (summary,) = [r for result in results for r in result.summary.to_pylist()
                  if r["group"] == group]
    numbers = {r["generation"] for result in results
               for r in result.group_generations.to_pylist()
               if r["group"] == group and r["generation"] > 0}
    return int(summary["generations"]), len(numbers)


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["variant"]: v for v in report["variants"]}


def _written(tmp_path: Path, build: OffsetsLogBuilder) -> Path:
    data = tmp_path / "data"
    build.write(data)
    return data


def _joins_leaves_and_a_crash() -> OffsetsLogBuilder:
    log = OffsetsLogBuilder()
    log.generation("g", 1, {"a": [T0, T1, T2, T3]}, T)
    log.generation("g", 2, {"a": [T0, T1], "b": [T2, T3]}, T + 20 * SECOND)
    log.commit("g", {T0: 5, T1: 5, T2: 5, T3: 5}, T + 21 * SECOND)
    log.generation("g", 3, {"a": [T0, T1, T2, T3]}, T + 40 * SECOND)  # b left
    log.generation("g", 4, {"a": [T0, T1], "c": [T2, T3]}, T + 60 * SECOND)
    log.commit("g", {T0: 9, T2: 1}, T + 70 * SECOND)
    # a and c silent for 60 s (over their 45 s session timeout); d joined meanwhile.
    log.generation("g", 5, {"d": [T0, T1, T2, T3]}, T + 130 * SECOND)
    return log


def test_the_history_row_counts_the_generations_and_the_real_settings_match_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _written(tmp_path, _joins_leaves_and_a_crash())
    report = _report(capsys, "--from-history", str(data), "--group", "g")
    rows = _rows(report)
    assert list(rows)[:2] == ["history", "real-settings"]
    assert rows["history"]["recorded"] and rows["history"]["commits_refused"] is None
    summary_count, distinct = _pipeline_generations(data, "g")
    assert rows["history"]["rebalances"] == summary_count == distinct == 5
    assert rows["real-settings"]["rebalances"] == 5
    history = report["from_history"]
    assert history["settings"]["protocol"] == "eager"
    assert history["settings"]["assignor"] == "range"
    assert history["settings"]["session_timeout_ms"] == 45000
    actions = [(e["action"], e["members"]) for e in history["schedule"]]
    assert actions == [("join", ["client-b"]), ("leave", ["client-b"]), ("join", ["client-c"]),
                       ("crash", ["client-a"]), ("crash", ["client-c"]),
                       ("join", ["client-d"])]
    # Eager: every rebalance took all four partitions from their owners (gen 2, 3, 4), and
    # the crashed members' partitions went without an owner from their last commit on.
    assert rows["history"]["partitions_revoked"] == 12 + 4
    assert rows["history"]["longest_gap_seconds"] >= 60


def test_a_static_member_back_within_its_session_is_no_rebalance(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = OffsetsLogBuilder()
    static = {"s-1": "s", "s-2": "s", "r-1": "r"}
    log.generation("g", 1, {"s-1": [T0, T1], "r-1": [T2, T3]}, T,
                   protocol="cooperative-sticky", instance_ids=static)
    # s restarted: the coordinator replaced its member id without a rebalance.
    log.generation("g", 1, {"s-2": [T0, T1], "r-1": [T2, T3]}, T + 30 * SECOND,
                   protocol="cooperative-sticky", instance_ids=static)
    data = _written(tmp_path, log)
    report = _report(capsys, "--from-history", str(data), "--group", "g",
                     "--variant", "name=dynamic,protocol=cooperative")
    rows = _rows(report)
    assert report["from_history"]["settings"] == {
        **report["from_history"]["settings"], "protocol": "cooperative", "static": True}
    assert [(e["action"], e["members"]) for e in report["from_history"]["schedule"]] == [
        ("leave", ["s"]), ("join", ["s"])]
    assert rows["history"]["rebalances"] == rows["real-settings"]["rebalances"] == 1
    assert rows["dynamic"]["rebalances"] > 1  # without static membership the restart costs


def test_bad_input_gets_one_line_and_exit_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _written(tmp_path, _joins_leaves_and_a_crash())
    code, out, err = _run(capsys, "--from-history", str(data), "--group", "nobody")
    assert code == 1 and not out
    assert err.count("\n") == 1 and "no group 'nobody'" in err
    partition = coordinator_partition("nobody")
    if partition == coordinator_partition("g"):
        assert "generations of: g" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run(capsys, "--from-history", str(empty), "--group", "g")
    assert code == 1 and err.count("\n") == 1 and "__consumer_offsets" in err
    code, _, err = _run(capsys, "--from-history", str(tmp_path / "missing"), "--group", "g")
    assert code == 1 and err.count("\n") == 1 and "no such file or directory" in err
    code, _, err = _run(capsys, "--from-history", str(data))
    assert code == 1 and err.count("\n") == 1 and "--group" in err
    code, _, err = _run(capsys, "--from-history",
                        "postgresql://kgroups:secret@127.0.0.1:1/none", "--group", "g")
    assert code == 1 and err.count("\n") == 1 and "secret" not in err


# -- real brokers, real librdkafka consumers -------------------------------------------------

# A consumer that commits what it holds every second (its commits are how the pipeline tells
# a member that left from one whose session expired).
CONSUMER = """
import signal, sys, time
from confluent_kafka import Consumer, KafkaException, TopicPartition
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                     "session.timeout.ms": 6000, "enable.auto.commit": False})
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
consumer.subscribe([sys.argv[3]])
print("started", flush=True)
committed = time.monotonic()
while not stopping:
    consumer.poll(0.2)
    held = consumer.assignment()
    if held and time.monotonic() - committed >= 1.0:
        committed = time.monotonic()
        try:
            consumer.commit(offsets=[TopicPartition(t.topic, t.partition, 0) for t in held],
                            asynchronous=False)
        except KafkaException:
            pass  # a rebalance in progress: the next turn commits
consumer.close()
"""


class _Group:
    """librdkafka consumers in their own processes, so one can be killed without a word."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.processes: list[subprocess.Popen[str]] = []

    def start(self) -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, "-c", CONSUMER, self.bootstrap, self.group,
                                    self.topic], stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline() == "started\n"
        self.processes.append(process)
        return process

    def settle(self, members: int, timeout: float = 60.0) -> None:
        """Until the group is Stable with `members` members (Empty with none), and a few
        seconds more: steps further apart than a rebalance takes (the simulated members learn
        of one from their next heartbeat, 3 s apart)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            (future,) = self.admin.describe_consumer_groups([self.group]).values()
            described = future.result(10)
            state = str(described.state).rsplit(".", 1)[-1].upper()
            if len(described.members) == members and state == ("STABLE" if members else "EMPTY"):
                time.sleep(5.0)
                return
            time.sleep(0.3)
        raise AssertionError(f"{self.group} did not settle at {members} members")

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)
            if process.stdout is not None:
                process.stdout.close()


@pytest.fixture
def real_history(any_broker: Any, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A group whose members joined one by one, one left cleanly, one was killed (its
    session expired) and the last one left: the broker's log directory, copied."""
    from confluent_kafka.admin import NewTopic

    tail = uuid.uuid4().hex[:6]
    topic, group_id = f"hist-{tail}", f"hist-group-{tail}"
    group = _Group(any_broker.bootstrap, group_id, topic)
    group.admin.create_topics([NewTopic(topic, 4)])[topic].result(30)
    try:
        first = group.start()
        group.settle(1)
        killed = group.start()
        group.settle(2)
        leaving = group.start()
        group.settle(3)
        leaving.send_signal(signal.SIGTERM)
        leaving.wait(30)
        group.settle(2)
        killed.kill()
        killed.wait(10)
        group.settle(1)
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        group.settle(0)
    finally:
        group.close()
    logs = tmp_path / "logs"
    for found in Path(any_broker.data_dir).iterdir():
        if found.name.startswith("__consumer_offsets-") or found.name.startswith(f"{topic}-"):
            shutil.copytree(found, logs / found.name,
                            ignore=shutil.ignore_patterns("*.index", "*.timeindex", "*.lock"))
    yield logs, group_id


@pytest.mark.interop
@pytest.mark.slow
def test_a_real_brokers_history_reproduces_its_generations(
        real_history: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    logs, group = real_history
    report = _report(capsys, "--from-history", str(logs), "--group", group,
                     "--initial-rebalance-delay-ms", "0")
    rows = _rows(report)
    summary_count, distinct = _pipeline_generations(logs, group)
    assert distinct >= 6  # three joins, a leave, a session expiry, the last leave
    assert rows["history"]["rebalances"] == distinct
    assert summary_count in (distinct, distinct + 1)  # the summary counts generation 0 too
    assert rows["real-settings"]["rebalances"] == rows["history"]["rebalances"]
    settings = report["from_history"]["settings"]
    assert settings["session_timeout_ms"] == 6000 and settings["client"] == "librdkafka"
    actions = [e["action"] for e in report["from_history"]["schedule"]]
    assert actions.count("crash") == 1 and actions.count("leave") == 2
    # Three processes (Kafka's generation 0 has none: the first one joins it).
    assert report["members_at_start"] + actions.count("join") == 3
    assert report["partitions"] == 4


@pytest.mark.postgresql
def test_a_store_gives_the_history_its_segment_files_give(
        tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = _written(tmp_path, _joins_leaves_and_a_crash())
    assert main(["storage", "import", str(data), "--to", postgres_url]) == 0
    capsys.readouterr()
    from_files = _report(capsys, "--from-history", str(data), "--group", "g")
    from_store = _report(capsys, "--from-history", postgres_url, "--group", "g")
    assert from_store["variants"] == from_files["variants"]
    assert from_store["from_history"]["schedule"] == from_files["from_history"]["schedule"]
    assert from_store["from_history"]["source"] != from_files["from_history"]["source"]


def test_a_consumer_protocol_group_replays_under_the_consumer_protocol(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = OffsetsLogBuilder()
    _two_members_reconcile(log)  # a, then b (epoch 2), then a leaves (epoch 3)
    data = _written(tmp_path, log)
    (data / "t-0").mkdir()
    write_partition_metadata(data / "t-0", TOPIC_ID)
    report = _report(capsys, "--from-history", str(data), "--group", CONSUMER_GROUP)
    rows = _rows(report)
    settings = report["from_history"]["settings"]
    assert (settings["protocol"], settings["assignor"]) == ("consumer", "uniform")
    assert report["from_history"]["group_type"] == "consumer"
    assert [(e["action"], e["members"]) for e in report["from_history"]["schedule"]] == [
        ("join", ["client-b"]), ("leave", ["client-a"])]
    assert rows["history"]["rebalances"] == rows["real-settings"]["rebalances"] == 3
    assert report["partitions"] == 4


def test_help_says_how_to_replay_a_history(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "--from-history DIR|URL" in out and "--group G" in out and "real-settings" in out
