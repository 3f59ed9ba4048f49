"""Burrow 1.2.1 (Debian's package, a lag monitor in wide use) against a live `kgroups serve`.

Burrow reads every commit from `__consumer_offsets` (with Fetch v2 under the Kafka 0.10.0
client profile of Debian's sample configuration), learns each partition's log end offset
with ListOffsets v0 (Kafka 4 serves neither; kgroups does, as Kafka 3.9 did) and keeps its
state in a ZooKeeper of its own (Debian's package, started here on loopback). It must report
the lag `kgroups groups describe` reports, partition by partition, and a status that agrees:
a member that caught up and now lags a little is OK; a group with no members whose only
commits lag is stopped (Burrow's rules: lag that was never zero, no commit since).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.servers import ServerProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]

BURROW = shutil.which("Burrow")
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
TOPIC = "burrow-events"
CLUSTER = "kgroups"
FIRST, MORE = (10, 10), (3, 7)  # records per partition before and after the live group commits


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait(what: str, probe: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """Poll `probe` until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last answer: {last!r}")


def _zookeeper_serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"srvr")
            return b"Mode:" in conn.recv(4096)
    except OSError:
        return False


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[int]:
    """A standalone ZooKeeper on 127.0.0.1 with its own data dir and no admin server."""
    if not ZOOKEEPER_JAR.exists():
        pytest.fail("Debian's zookeeper package is missing: run `make system-deps`")
    port = _free_port()
    config = tmp_path / "zoo.cfg"
    config.write_text(f"tickTime=2000\ndataDir={tmp_path / 'zk-data'}\nclientPort={port}\n"
                      "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                      "4lw.commands.whitelist=srvr\n")
    with (tmp_path / "zookeeper.log").open("wb") as log:
        process = subprocess.Popen(
            ["java", "-Xmx64m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
             "-Dzookeeper.admin.enableServer=false", "-cp", str(ZOOKEEPER_JAR),
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait("ZooKeeper to serve", lambda: _zookeeper_serving(port), 30)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def kgroups_server(start_kgroups_server: Callable[..., ServerProcess]) -> ServerProcess:
    """No initial rebalance delay: the live member joins at once."""
    return start_kgroups_server("group.initial.rebalance.delay.ms=0")


@pytest.fixture
def topic(kgroups_server: ServerProcess) -> str:
    """The topic with its first records, there before Burrow starts: Burrow counts a consumer
    as recently caught up when any log end offset it read lately is at or below its commit, so
    an empty partition seen first would make every later commit look caught up."""
    bootstrap = kgroups_server.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=15)
    _produce(bootstrap, FIRST)
    return TOPIC


@pytest.fixture
def burrow(tmp_path: Path, zookeeper: int, kgroups_server: ServerProcess,
           topic: str) -> Iterator[Callable[[str], Any]]:
    """Burrow watching kgroups; yields GET of a path under /v3/kafka/<cluster>/ as JSON (None
    while Burrow answers 404)."""
    if BURROW is None:
        pytest.fail("Debian's burrow package is missing: run `make system-deps`")
    http_port = _free_port()
    # The client profile of Debian's sample configuration (Kafka 0.10.0): Burrow fetches
    # with Fetch v2 (message format v1, converted down) and its cluster module asks
    # ListOffsets v0 whatever the profile says. Statuses are evaluated
    # afresh each second (not cached 10 s), and "recently caught up" means within the last
    # 60 broker offsets Burrow read, one a second.
    (tmp_path / "burrow.toml").write_text(f"""
[general]
pidfile="{tmp_path / 'burrow.pid'}"
[logging]
level="info"
[zookeeper]
servers=["127.0.0.1:{zookeeper}"]
timeout=6
root-path="/burrow"
[client-profile.kg]
client-id="burrow-interop"
kafka-version="0.10.0"
[cluster.{CLUSTER}]
class-name="kafka"
servers=["{kgroups_server.bootstrap}"]
client-profile="kg"
topic-refresh=1
offset-refresh=1
[consumer.{CLUSTER}]
class-name="kafka"
cluster="{CLUSTER}"
servers=["{kgroups_server.bootstrap}"]
client-profile="kg"
start-latest=false
[httpserver.default]
address="127.0.0.1:{http_port}"
[evaluator.default]
class-name="caching"
expire-cache=1
[storage.default]
class-name="inmemory"
workers=4
intervals=60
expire-group=604800
min-distance=1
""")
    log_path = tmp_path / "burrow.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([BURROW, "--config-dir", str(tmp_path)], stdout=log,
                                   stderr=subprocess.STDOUT)

    def get(path: str) -> Any:
        url = f"http://127.0.0.1:{http_port}/v3/kafka/{CLUSTER}/{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        except (urllib.error.URLError, ConnectionError):
            assert process.poll() is None, log_path.read_text(errors="replace")[-3000:]
            return None

    try:
        yield get
    finally:
        process.terminate()
        process.wait(timeout=10)
        unsupported = [line for line in kgroups_server.log_text().splitlines()
                       if "unsupported_version" in line]
        assert not unsupported, unsupported


def _produce(bootstrap: str, counts: tuple[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, count in enumerate(counts):
        for index in range(count):
            producer.produce(TOPIC, value=b"r%d" % index, partition=partition)
    assert producer.flush(15) == 0


def _kgroups_describe(bootstrap: str, *groups: str) -> dict[str, Any]:
    """{group: {"state": ..., "lag": {partition: lag}}} from `kgroups groups describe`."""
    args = [sys.executable, "-m", "kgroups.cli", "groups", "--bootstrap-server", bootstrap,
            "--describe", "--output", "json"]
    for group in groups:
        args += ["--group", group]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout
    described = {}
    for group in json.loads(out):
        offsets = [row for row in group["offsets"] if row["topic"] == TOPIC]
        described[group["group"]] = {
            "state": group["state"],
            "lag": {row["partition"]: row["lag"] for row in offsets}}
    return described


def _burrow_lag(get: Callable[[str], Any], group: str) -> dict[str, Any] | None:
    answer = get(f"consumer/{group}/lag")
    if answer is None or answer.get("error"):
        return None
    status = answer["status"]
    return {"status": status["status"], "totallag": status["totallag"],
            "lag": {p["partition"]: p["current_lag"] for p in status["partitions"]},
            "partition_status": {p["partition"]: p["status"] for p in status["partitions"]}}


def test_burrow_reports_the_lag_and_status_kgroups_reports(
        kgroups_server: ServerProcess, burrow: Callable[[str], Any]) -> None:
    bootstrap = kgroups_server.bootstrap
    _wait("Burrow to learn the log end offsets",
          lambda: (burrow(f"topic/{TOPIC}") or {}).get("offsets") == list(FIRST))

    live = Consumer({"bootstrap.servers": bootstrap, "group.id": "live",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 30000})
    try:
        live.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 20
        while seen < sum(FIRST) and time.monotonic() < deadline:
            message = live.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
        assert seen == sum(FIRST)
        live.commit(asynchronous=False)  # caught up: lag 0 on both partitions
        idle = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle"})
        idle.commit(offsets=[TopicPartition(TOPIC, 0, 4), TopicPartition(TOPIC, 1, 2)],
                    asynchronous=False)
        idle.close()
        _wait("Burrow to read both groups' commits",
              lambda: _burrow_lag(burrow, "live") and _burrow_lag(burrow, "idle"))

        _produce(bootstrap, MORE)
        ends = [first + more for first, more in zip(FIRST, MORE, strict=True)]
        _wait("Burrow to learn the new log end offsets",
              lambda: (burrow(f"topic/{TOPIC}") or {}).get("offsets") == ends)
        described = _kgroups_describe(bootstrap, "live", "idle")
        assert described["live"]["lag"] == {0: 3, 1: 7}
        assert described["idle"]["lag"] == {0: 9, 1: 15}

        reported = {}
        for group in ("live", "idle"):
            def same_lag(group: str = group) -> dict[str, Any] | None:
                answer = _burrow_lag(burrow, group)
                return answer if answer and answer["lag"] == described[group]["lag"] else None

            reported[group] = _wait(f"Burrow's lag of {group} to be kgroups'", same_lag)
            assert reported[group]["totallag"] == sum(described[group]["lag"].values())
        # A member that caught up (its lag was zero in Burrow's window) and lags now: OK,
        # with kgroups showing it Stable; commits that lagged from the start and stopped,
        # with no member left: Burrow's STOP on each partition, ERR for the group.
        assert described["live"]["state"] == "Stable"
        assert reported["live"]["partition_status"] == {0: "OK", 1: "OK"}
        assert reported["live"]["status"] == "OK"
        assert described["idle"]["state"] == "Empty"
        assert reported["idle"]["partition_status"] == {0: "STOP", 1: "STOP"}
        assert reported["idle"]["status"] == "ERR"
    finally:
        live.close()
