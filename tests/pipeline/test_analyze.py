"""`kgroups analyze` on a hand-built data directory in Kafka's layout: every table checked
against the events the scenario declares (commits, offset and group tombstones, static-member
rewrites, transactions, generations), plus the time window and the report."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.pipeline.chromium import layout
from tests.pipeline.logdata import OffsetsLogBuilder, write_topic_log

from kgroups.cli import main
from kgroups.log.batch import peek_batch_header
from kgroups.pipeline.job import AnalysisResult, run_analysis

pytestmark = pytest.mark.spark

T = 1_700_000_000_000  # 2023-11-14T22:13:20Z
SECOND = 1000
EVENTS = [("events", p) for p in range(4)]
EVENTS_END = 40  # each events-N partition: batches of 25 then 15 records
BILLING_END = 10


@dataclass
class Scenario:
    data_dir: Path
    expected_committed: dict[tuple[str, str, int], int]


def build_scenario(data_dir: Path) -> Scenario:
    log = OffsetsLogBuilder()
    # orders: three generations, an offset deleted, a segment roll in between.
    log.generation("orders", 1, {"m1": EVENTS}, T)
    log.commit("orders", dict.fromkeys(EVENTS, 10), T + 1 * SECOND)
    log.roll("orders")
    log.generation("orders", 2, {"m1": EVENTS[:2], "m2": EVENTS[2:]}, T + 60 * SECOND)
    log.commit("orders", dict.fromkeys(EVENTS, 20), T + 61 * SECOND)
    log.delete_offsets("orders", [("events", 3)], T + 62 * SECOND)
    log.generation("orders", 3, {"m2": EVENTS}, T + 120 * SECOND)
    log.commit("orders", {("events", 0): 30}, T + 121 * SECOND)
    # billing: a static member replaced within generation 5, then a real rebalance.
    billing = [("billing", 0), ("billing", 1)]
    log.generation("billing", 5, {"a-1": billing}, T + 10 * SECOND, instance_ids={"a-1": "a"})
    log.generation("billing", 5, {"a-2": billing}, T + 20 * SECOND, instance_ids={"a-2": "a"})
    log.generation("billing", 6, {"a-2": billing[:1], "b-1": billing[1:]}, T + 30 * SECOND,
                   instance_ids={"a-2": "a", "b-1": "b"})
    log.commit("billing", {("billing", 0): 7}, T + 31 * SECOND)
    # old: deleted; only the offset committed after the deletion survives.
    log.commit("old", {("events", 0): 5}, T + 5 * SECOND)
    log.delete_group("old", T + 40 * SECOND)
    log.commit("old", {("events", 1): 8}, T + 50 * SECOND)
    # simple: a standalone consumer that only commits.
    log.commit("simple", {("events", 0): 3}, T + 6 * SECOND)
    # txn: committed, aborted and still-open transactional offset commits.
    log.commit("txn", {("events", 0): 100}, T + 70 * SECOND, transactional=True,
               producer_id=7, producer_epoch=0)
    log.transaction_marker("txn", 7, commit=True, ts=T + 71 * SECOND)
    log.commit("txn", {("events", 1): 200}, T + 72 * SECOND, transactional=True,
               producer_id=8, producer_epoch=0)
    log.transaction_marker("txn", 8, commit=False, ts=T + 73 * SECOND)
    log.commit("txn", {("events", 2): 300}, T + 74 * SECOND, transactional=True,
               producer_id=9, producer_epoch=0)
    log.write(data_dir)
    for topic, partition in EVENTS:
        write_topic_log(data_dir, topic, partition, [(25, T), (15, T + 100 * SECOND)])
    for partition in (0, 1):
        write_topic_log(data_dir, "billing", partition, [(BILLING_END, T)])
    return Scenario(
        data_dir=data_dir,
        expected_committed={
            ("orders", "events", 0): 30,
            ("orders", "events", 1): 20,
            ("orders", "events", 2): 20,
            ("billing", "billing", 0): 7,
            ("old", "events", 1): 8,
            ("simple", "events", 0): 3,
            ("txn", "events", 0): 100,
        },
    )


def table(out: Path, name: str) -> list[dict]:
    return pq.read_table(out / name).to_pylist()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Scenario:
    return build_scenario(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def full_run(spark, scenario, tmp_path_factory) -> tuple[Path, AnalysisResult]:
    out = tmp_path_factory.mktemp("out")
    return out, run_analysis(spark, [str(scenario.data_dir)], str(out))


def test_committed_offsets_are_what_a_coordinator_would_serve(full_run, scenario):
    out, _ = full_run
    found = {(r["group"], r["topic"], r["partition"]): r["offset"]
             for r in table(out, "committed_offsets")}
    assert found == scenario.expected_committed


def test_offset_commits_hold_every_applied_commit(full_run):
    out, result = full_run
    commits = table(out, "offset_commits")
    per_group = {}
    for row in commits:
        per_group[row["group"]] = per_group.get(row["group"], 0) + 1
    assert per_group == {"orders": 9, "billing": 1, "old": 2, "simple": 1, "txn": 1}
    first = min((r for r in commits if r["group"] == "orders"), key=lambda r: r["log_offset"])
    assert first["commit_ts"].timestamp() * 1000 == T + 1 * SECOND
    # 17 offset records (1 tombstone, 3 transactional) + 7 group records (1 tombstone).
    assert result.records == 24
    assert result.errors == 0


def test_transactional_commits_by_outcome(full_run):
    """txn's three transactional commits: one committed, one aborted, one with no marker."""
    out, result = full_run
    assert [(r["group"], r["outcome"], r["transactions"], r["offsets"])
            for r in table(out, "transactional_commits")] == [
        ("txn", "aborted", 1, 1), ("txn", "committed", 1, 1), ("txn", "pending", 1, 1)]
    # No __transaction_state segment under the data dir: an empty transactions table.
    assert "transactions" in result.tables and table(out, "transactions") == []


def test_group_generations_one_row_per_group_record(full_run):
    out, _ = full_run
    generations = sorted(table(out, "group_generations"), key=lambda r: (r["group"], r["ts"]))
    assert [(r["group"], r["generation"], r["member_count"]) for r in generations] == [
        ("billing", 5, 1), ("billing", 5, 1), ("billing", 6, 2),
        ("orders", 1, 1), ("orders", 2, 2), ("orders", 3, 1),
    ]
    orders_2 = generations[4]
    owned = {m["member_id"]: sorted((p["topic"], p["partition"]) for p in m["partitions"])
             for m in orders_2["members"]}
    assert owned == {"m1": EVENTS[:2], "m2": EVENTS[2:]}
    assert orders_2["protocol_type"] == "consumer" and orders_2["leader"] == "m1"
    assert [m["instance_id"] for m in generations[2]["members"]] == ["a", "b"]


def test_rebalances_follow_generation_changes(full_run):
    out, _ = full_run
    found = sorted(table(out, "rebalances"), key=lambda r: (r["group"], r["to_generation"]))
    assert [(r["group"], r["from_generation"], r["to_generation"], r["members_joined"],
             r["members_left"], r["partitions_moved"], r["partitions_kept"],
             r["seconds_since_previous"]) for r in found] == [
        ("billing", 5, 6, 1, 0, 1, 1, 20.0),
        ("orders", 1, 2, 1, 0, 2, 2, 60.0),
        ("orders", 2, 3, 0, 1, 2, 2, 60.0),
    ]


def test_lag_against_topic_log_ends_with_burrow_status(full_run, scenario):
    out, _ = full_run
    rows = table(out, "lag")
    found = {(r["group"], r["topic"], r["partition"]): (r["log_end_offset"], r["lag"])
             for r in rows}
    ends = {"events": EVENTS_END, "billing": BILLING_END}
    assert found == {
        key: (ends[key[1]], max(ends[key[1]] - offset, 0))
        for key, offset in scenario.expected_committed.items()
    }
    group_status = {r["group"]: r["group_status"] for r in rows}
    # billing committed once, 90 s before the log's last record: Burrow's STOP, which makes
    # its group ERR.
    assert [r["status"] for r in rows if r["group"] == "billing"] == ["STOP"]
    assert group_status["billing"] == "ERR"
    # txn is ahead of the log end: no lag, OK whatever its history.
    assert group_status["txn"] == "OK"
    # orders' lag shrank within every partition's window.
    assert group_status["orders"] == "OK"


def test_lag_over_time_of_a_consumer_that_stopped_grows_with_its_topic(full_run):
    out, _ = full_run
    rows = [r for r in table(out, "partition_lag_minutes") if r["group"] == "simple"]
    # simple committed 3 once, at T+6 s; events-0 held 25 records then, 40 from T+100 s.
    assert {(r["topic"], r["partition"]) for r in rows} == {("events", 0)}
    assert rows[0]["lag"] == 25 - 3 and rows[-1]["lag"] == EVENTS_END - 3
    assert {r["committed_offset"] for r in rows} == {3}
    assert [r["lag"] for r in rows] == sorted(r["lag"] for r in rows)


def test_group_summary_one_row_per_group(full_run):
    out, _ = full_run
    summary = {r["group"]: r for r in table(out, "group_summary")}
    assert set(summary) == {"orders", "billing", "old", "simple", "txn"}
    orders = summary["orders"]
    assert (orders["state"], orders["generation"], orders["member_count"], orders["generations"],
            orders["rebalances"], orders["partitions_moved"], orders["committed_partitions"],
            orders["commits"]) == ("Stable", 3, 1, 3, 2, 4, 3, 9)
    assert orders["total_lag"] == 10 + 20 + 20
    assert summary["billing"]["state"] == "Stable" and summary["billing"]["rebalances"] == 1
    assert summary["old"]["state"] == "Empty" and summary["old"]["generation"] is None
    assert summary["simple"]["state"] == "Empty" and summary["simple"]["committed_partitions"] == 1


def test_report_is_self_contained(full_run):
    out, _ = full_run
    page = (out / "report.html").read_text()
    # commits, lag in records and in seconds, rebalance timeline, partitions moved, rebalance
    # causes, and the lag over time of the partitions of each group behind (billing, old,
    # orders, simple; not txn), and who held which partition over time (orders, billing)
    assert page.count("data:image/png;base64,") == 6 + 4 + 2
    lagging = page.split("<h2>Lag per partition</h2>")[1].split("<h2>")[0]
    assert lagging.split("<b>txn</b>")[1].split("</details>")[0].count("<img") == 0
    # Who held which partition: orders' and billing's generations.
    owners = page.split("<h2>Who held which partition</h2>")[1].split("<h2>")[0]
    assert "<b>orders</b>: 4 partition(s), 2 member(s)" in owners
    pictured = re.findall(r"<figure class=owners><figcaption><b>([^<]+)</b>", owners)
    assert sorted(pictured) == ["billing", "orders"]
    assert "Why groups rebalance" in page
    assert "src=\"http" not in page and "<link" not in page
    for group in ("orders", "billing", "old", "simple", "txn"):
        assert f'<td class="name">{group}</td>' in page
    assert "No damaged segments" in page


@pytest.mark.browser
def test_report_shows_every_column_at_1400_px(full_run):
    out, _ = full_run
    found = layout(out / "report.html", 1400)
    assert found.off == [] and found.scroll_width <= 1400
    assert {"status", "total_lag", "last_commit_ts", "lag"} <= set(found.headers)
    page = (out / "report.html").read_text()
    assert re.search(r">\s*(None|nan|NaN|NaT|<NA>)\s*<", page) is None
    assert re.search(r">\d+\.0<", page) is None  # generations and lags are whole numbers


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def test_cli_time_window_and_damaged_segment(spark, scenario, tmp_path, capsys, caplog):
    """`kgroups analyze` (in this process: the command reuses the running SparkSession and
    leaves it running) covers --since/--until and damage."""
    data_dir = tmp_path / "data"
    shutil.copytree(scenario.data_dir, data_dir)
    broken = OffsetsLogBuilder()
    broken.commit("broken", {("t", 0): 1}, T + 35 * SECOND)
    broken.commit("broken", {("t", 0): 2}, T + 36 * SECOND)
    [segment] = broken.write(tmp_path / "broken")
    target = data_dir / segment.parent.name / segment.name
    assert not target.exists()  # "broken" must not share a partition with the scenario
    target.parent.mkdir(exist_ok=True)
    data = bytearray(segment.read_bytes())
    damaged_at = peek_batch_header(bytes(data), 0)[2]
    data[damaged_at + 70] ^= 0xFF
    target.write_bytes(bytes(data))
    out = tmp_path / "out"
    code = main(["analyze", str(data_dir), "--out", str(out), "--quiet",
                 "--since", iso(T + 30 * SECOND), "--until", iso(T + 61 * SECOND + 500)])
    assert code == 0
    captured = capsys.readouterr()
    assert "1 damaged region(s) skipped" in captured.err
    assert re.search(r"records from \d+ segments in [\d.]+ s \(Spark job [\d.]+ s\)", captured.out)
    assert f"skipped {target} at byte {damaged_at}" in caplog.text
    assert not spark.sparkContext._jsc.sc().isStopped()  # the shared session still runs
    page = (out / "report.html").read_text()
    assert str(target) in page and f'<td class="num">{damaged_at}</td>' in page

    committed = {(r["group"], r["topic"], r["partition"]): r["offset"]
                 for r in table(out, "committed_offsets")}
    # The damaged segment's first batch is intact and kept.
    assert committed[("broken", "t", 0)] == 1
    # As of until: orders' second commit is in, its offset deletion (T+62 s) is not yet.
    assert {k: v for k, v in committed.items() if k[0] == "orders"} == {
        ("orders", "events", p): 20 for p in range(4)
    }
    assert committed[("old", "events", 1)] == 8 and ("old", "events", 0) not in committed
    # History inside [since, until]: orders x4, billing, old, broken.
    assert len(table(out, "offset_commits")) == 7
    assert sorted((r["group"], r["generation"]) for r in table(out, "group_generations")) == [
        ("billing", 6), ("orders", 2)
    ]
    assert sorted((r["group"], r["to_generation"]) for r in table(out, "rebalances")) == [
        ("billing", 6), ("orders", 2)
    ]
    # simple: Empty, lag 37, its one commit before --since: stopped, as Burrow (which holds
    # the commits older than any window) says.
    [simple_lag] = [r for r in table(out, "lag") if r["group"] == "simple"]
    assert (simple_lag["lag"], simple_lag["status"]) == (EVENTS_END - 3, "STOP")
    summary = {r["group"]: r for r in table(out, "group_summary")}
    assert (summary["simple"]["state"], summary["simple"]["status"]) == ("Empty", "ERR")


def test_cli_prints_the_time_its_user_waited(scenario, tmp_path):
    """A fresh `kgroups analyze`: the seconds it prints run from its process's start (Python,
    imports, the JVM's launch) to the report written, the moment the line comes out."""
    started = time.monotonic()
    with (tmp_path / "stderr").open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "kgroups.cli", "analyze", str(scenario.data_dir), "--out",
             str(tmp_path / "out"), "--quiet", "--master", "local[1]"],
            stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
        line = process.stdout.readline()
        waited = time.monotonic() - started
        process.communicate(timeout=300)
    assert process.returncode == 0, (tmp_path / "stderr").read_text()
    found = re.search(r" in ([\d.]+) s \(Spark job ([\d.]+) s\)", line)
    assert found, line
    printed, job = float(found[1]), float(found[2])
    # Printed to a tenth (rounding adds up to 0.05 s); the kernel counts the start in whole
    # clock ticks, so it may read up to one tick earlier than it was.
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert waited - 0.5 <= printed <= waited + 0.05 + tick
    assert printed > job + 1.0  # the JVM's launch and the imports are in it


@pytest.mark.slow
def test_cli_first_run_says_what_it_pays_and_shows_each_step(scenario, tmp_path):
    """The first `kgroups analyze` on a machine (an empty cache: no class archive yet), its
    stderr a file as under CI or cron: before the JVM's wait it says what the wait is and what
    the first run pays once, then one line as each step starts and ends, then the archive."""
    environment = {**os.environ, "KGROUPS_CACHE_DIR": str(tmp_path / "cache")}
    completed = subprocess.run(
        [sys.executable, "-m", "kgroups.cli", "analyze", str(scenario.data_dir), "--out",
         str(tmp_path / "out"), "--master", "local[1]"],
        capture_output=True, text=True, timeout=600, check=False, env=environment)
    assert completed.returncode == 0, completed.stderr
    ours = [line for line in completed.stderr.splitlines()
            if line.startswith("kgroups analyze: ")]
    expected = [
        r"starting Spark \(its driver JVM",
        r"first run on this machine: .* class archive .* about 20-30 s more, once",
        r"Spark started in [\d.]+ s$",
        r"reading topic partition logs \.\.\.$",
        r"reading topic partition logs: \d+ Spark tasks, [\d.]+ s$",
        r"analysing __consumer_offsets partitions \.\.\.$",
        r"analysing __consumer_offsets partitions: \d+ Spark tasks, [\d.]+ s$",
        r"writing tables \.\.\.$", r"writing tables: [\d.]+ s$",
        r"report \.\.\.$", r"report: [\d.]+ s$",
        r"saving Spark's classes",
    ]
    assert len(ours) == len(expected), ours
    for line, pattern in zip(ours, expected, strict=True):
        assert re.search(pattern, line.removeprefix("kgroups analyze: ")), (pattern, line)
    assert list((tmp_path / "cache").glob("spark-driver-*.jsa"))  # what the wait was for
    assert "\x1b[" not in completed.stderr  # plain lines, no terminal codes


def test_cli_rejects_missing_path_before_starting_spark(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "kgroups.cli", "analyze", str(tmp_path / "missing"), "--out",
         str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert completed.returncode == 2
    assert "no such file or directory" in completed.stderr
    assert not (tmp_path / "out").exists()
