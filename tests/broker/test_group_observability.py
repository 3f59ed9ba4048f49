"""Metrics, lag in seconds and rebalance causes, read as an operator reads them: the Prometheus
endpoint through prometheus_client's text parser, and `kgroups groups describe`, against state
made by real clients and wire requests on one in-process broker (restarted once, for the cause
only a restart shows)."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import math
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_wire_helpers import (
    connect,
    create_topic,
    list_offsets_request,
    nested_of,
    produce_request,
    request_of,
)
from confluent_kafka import Consumer
from prometheus_client.parser import text_string_to_metric_families

from kgroups.broker.broker import Broker
from kgroups.broker.config import BrokerConfig, ConfigError
from kgroups.cli import main
from kgroups.log.batch import build_batch
from kgroups.records.consumer_protocol import encode_subscription
from kgroups.records.schema import ConsumerSubscription
from kgroups.tools.wire_client import KafkaWireClient

SETTINGS = ("kgroups.metrics.port=0", "group.initial.rebalance.delay.ms=0",
            "group.min.session.timeout.ms=100", "log.retention.check.interval.ms=50")
NOW_MS = int(time.time() * 1000)
ORDERS_TS = NOW_MS - 600_000  # orders record i was produced at ORDERS_TS + i s
DAY_AGO = NOW_MS - 24 * 3600 * 1000


class Running:
    """A Broker on its own event loop thread."""

    def __init__(self, data_dir: Path, *overrides: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        config = BrokerConfig.build(port=0, data_dir=data_dir, overrides=overrides)

        async def start() -> Broker:
            broker = Broker(config)
            await broker.start()
            await broker.coordinator.wait_loaded()
            return broker

        self.broker = self.run(start)

    def run(self, make: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result(timeout=30)

    @property
    def port(self) -> int:
        return self.broker.port

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of the endpoint, by name and labels."""
        port = self.broker.coordinator.metrics_server.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def stop(self) -> None:
        self.run(self.broker.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    data_dir = tmp_path_factory.mktemp("observed")
    broker = Running(data_dir, *SETTINGS)
    with connect(broker.port) as client:
        create_topic(client, "orders", 2)
        for partition, count in ((0, 10), (1, 4)):
            batch = build_batch([(None, b"o%d" % i, ORDERS_TS + i * 1000) for i in range(count)])
            client.call(produce_request("orders", partition, batch))
        # "aged": retention deletes its day-old records, but not the newest. Each 600 KB
        # record fills a segment of its own (Kafka's smallest segment.bytes is 1 MiB).
        create_topic(client, "aged", 1, configs={"segment.bytes": "1048576",
                                                 "retention.ms": "3600000"})
        for i in range(10):
            stamp = DAY_AGO + i * 1000 if i < 9 else NOW_MS - 30_000
            client.call(produce_request("aged", 0, build_batch([(None, b"a" * 600_000,
                                                                  stamp)])))
        commit(client, "audit", {("orders", 0): 6, ("orders", 1): 4, ("aged", 0): 6})
    yield broker
    broker.stop()


def commit(client: KafkaWireClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """An admin's OffsetCommit (generation -1), as `kgroups groups --reset-offsets` sends."""
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(nested_of(
            8, 8, "OffsetCommitRequestPartition", partition_index=partition,
            committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))
    answer = client.call(request_of(
        8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=tuple(
            nested_of(8, 8, "OffsetCommitRequestTopic", name=name, partitions=tuple(parts))
            for name, parts in topics.items())))
    assert all(p.error_code == 0 for t in answer.topics for p in t.partitions)


def describe(broker: Running, capsys: pytest.CaptureFixture[str], group: str) -> dict[str, Any]:
    code = main(["groups", "--bootstrap-server", f"127.0.0.1:{broker.port}", "--describe",
                 "--group", group, "--output", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    (described,) = json.loads(out)
    return described  # type: ignore[no-any-return]


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _earliest(client: KafkaWireClient, topic: str) -> int:
    (answered,) = client.call(list_offsets_request(topic, 0, -2)).topics
    return int(answered.partitions[0].offset)


def test_offsets_lag_and_lag_seconds_match_the_log(running: Running,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with connect(running.port) as client:
        deadline = time.monotonic() + 10
        while (start := _earliest(client, "aged")) < 9 and time.monotonic() < deadline:
            time.sleep(0.05)
    # Each day-old record had a segment of its own: retention deletes all nine.
    assert start == 9, "retention should have deleted aged's day-old records"
    samples = running.scrape()
    now = time.time()
    audit = {"group": "audit"}
    # Record 6 of orders-0 is the first unconsumed: 600 s - 6 s old.
    assert sample(samples, "kafka_consumergroup_group_offset", **audit, topic="orders",
                  partition="0") == 6
    assert sample(samples, "kafka_consumergroup_group_lag", **audit, topic="orders",
                  partition="0") == 4
    lag_seconds = sample(samples, "kafka_consumergroup_group_lag_seconds", **audit,
                         topic="orders", partition="0")
    assert lag_seconds == pytest.approx(now - (ORDERS_TS / 1000 + 6), abs=5)
    assert sample(samples, "kafka_partition_latest_offset", topic="orders", partition="0") == 10
    # Caught up: no lag, in records or in time.
    assert sample(samples, "kafka_consumergroup_group_lag", **audit, topic="orders",
                  partition="1") == 0
    assert sample(samples, "kafka_consumergroup_group_lag_seconds", **audit, topic="orders",
                  partition="1") == 0
    # Record 6 of aged is gone: the estimate is the age of the first record still held.
    first_held = NOW_MS - 30_000
    aged_seconds = sample(samples, "kafka_consumergroup_group_lag_seconds", **audit,
                          topic="aged", partition="0")
    assert aged_seconds == pytest.approx(now - first_held / 1000, abs=5)
    assert sample(samples, "kafka_group_coordinator_group_count", protocol="classic",
                  state="Empty") is not None
    assert sample(samples, "kafka_consumergroup_members", group="audit", protocol="classic") == 0

    # describe reads the same figures over the wire (a Fetch at the committed offset).
    offsets = {(o["topic"], o["partition"]): o for o in describe(running, capsys,
                                                                   "audit")["offsets"]}
    assert offsets[("orders", 0)]["lag_seconds"] == pytest.approx(lag_seconds, abs=5)
    assert offsets[("orders", 1)]["lag_seconds"] == 0
    assert offsets[("aged", 0)]["lag_seconds"] == pytest.approx(aged_seconds, abs=5)


def test_expired_offsets_are_counted_and_leave_the_figures(tmp_path: Path) -> None:
    # Its own broker: a quick expiry check would also delete the other tests' empty groups.
    running = Running(tmp_path, "kgroups.metrics.port=0",
                      "offsets.retention.check.interval.ms=100")
    try:
        _expire_one(running)
    finally:
        running.stop()


def _expire_one(running: Running) -> None:
    with connect(running.port) as client:
        create_topic(client, "orders", 1)
        # OffsetCommit v2 sets a retention time of its own.
        answer = client.call(request_of(
            8, 2, group_id="brief", generation_id_or_member_epoch=-1, member_id="",
            retention_time=datetime.timedelta(milliseconds=1), topics=(nested_of(
                8, 2, "OffsetCommitRequestTopic", name="orders", partitions=(nested_of(
                    8, 2, "OffsetCommitRequestPartition", partition_index=0,
                    committed_offset=3, committed_metadata=""),)),)))
        assert answer.topics[0].partitions[0].error_code == 0
    deadline = time.monotonic() + 10
    while True:
        samples = running.scrape()
        expired = sample(samples, "kafka_group_coordinator_offset_expiration_total")
        if expired == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert expired == 1
    assert sample(samples, "kafka_consumergroup_group_offset", group="brief", topic="orders",
                  partition="0") is None


def test_a_real_consumer_is_counted_and_its_join_and_leave_are_causes(
        running: Running, capsys: pytest.CaptureFixture[str]) -> None:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{running.port}", "group.id": "live",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000})
    consumer.subscribe(["orders"])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    assert consumer.assignment()
    samples = running.scrape()
    assert sample(samples, "kafka_consumergroup_members", group="live", protocol="classic") == 1
    assert sample(samples, "kafka_group_coordinator_group_rebalance_total", group="live",
                  cause="new_member_joined") == 1
    assert (sample(samples, "kafka_group_coordinator_group_count", protocol="classic",
                   state="Stable") or 0) >= 1
    assert (sample(samples, "kafka_network_request_total_time_seconds_count",
                   request="JoinGroup") or 0) >= 1
    assert (sample(samples, "kafka_network_request_total_time_seconds_count",
                   request="Heartbeat") or 0) + (sample(
                       samples, "kafka_network_request_total_time_seconds_count",
                       request="SyncGroup") or 0) >= 1
    assert (sample(samples, "kafka_group_coordinator_rebalance_duration_seconds_count")
            or 0) >= 1
    assert describe(running, capsys, "live")["last_rebalance"]["cause"] == "new_member_joined"
    consumer.close()  # LeaveGroup
    samples = running.scrape()
    assert sample(samples, "kafka_group_coordinator_group_rebalance_total", group="live",
                  cause="member_left") == 1
    assert sample(samples, "kafka_consumergroup_members", group="live", protocol="classic") == 0
    assert describe(running, capsys, "live")["last_rebalance"]["cause"] == "member_left"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_assigned_partitions_never_committed_have_series_with_unknown_lag(
        running: Running, protocol: str) -> None:
    """As kafka-lag-exporter reports them: every partition of the group's current assignment
    has its series, NaN where nothing was committed (where the consumer starts is its
    auto.offset.reset, unknown to the broker), beside the partition's log start and end."""
    group = f"fresh-{protocol}"
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{running.port}", "group.id": group,
                         "group.protocol": protocol, "enable.auto.commit": False,
                         "auto.offset.reset": "latest"})
    consumer.subscribe(["orders"])
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert len(consumer.assignment()) == 2
        samples = running.scrape()
    finally:
        consumer.close()
    for partition in ("0", "1"):
        names = {"group": group, "topic": "orders", "partition": partition}
        for metric in ("kafka_consumergroup_group_offset", "kafka_consumergroup_group_lag",
                       "kafka_consumergroup_group_lag_seconds"):
            value = sample(samples, metric, **names)
            assert value is not None and math.isnan(value), (metric, partition, value)
        assert sample(samples, "kafka_partition_earliest_offset", topic="orders",
                      partition=partition) == 0
    assert sample(samples, "kafka_partition_latest_offset", topic="orders", partition="1") == 4
    # A committed partition keeps its figures beside them.
    assert sample(samples, "kafka_consumergroup_group_lag", group="audit", topic="orders",
                  partition="0") == 4


# -- one rebalance of each cause, by wire requests ------------------------------------------------

def join(client: KafkaWireClient, group: str, member_id: str = "", *, version: int = 9,
         instance: str | None = None, topics: tuple[str, ...] = ("orders",),
         session_ms: int = 30_000, rebalance_ms: int = 30_000, reason: str | None = None) -> Any:
    """One JoinGroup (answered when the rebalance completes); a v4+ member without an id gets
    MEMBER_ID_REQUIRED first and rejoins with the id it was given, as clients do."""
    metadata = encode_subscription(ConsumerSubscription(topics=topics))
    answer = client.call(request_of(
        11, version, group_id=group, session_timeout=datetime.timedelta(milliseconds=session_ms),
        rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms), member_id=member_id,
        group_instance_id=instance, protocol_type="consumer", reason=reason,
        protocols=(nested_of(11, version, "JoinGroupRequestProtocol", name="range",
                             metadata=metadata),)))
    if answer.error_code == 79:  # MEMBER_ID_REQUIRED
        return join(client, group, answer.member_id, version=version, instance=instance,
                    topics=topics, session_ms=session_ms, rebalance_ms=rebalance_ms,
                    reason=reason)
    assert answer.error_code == 0, answer
    return answer


def sync(client: KafkaWireClient, group: str, joined: Any, instance: str | None = None) -> None:
    answer = client.call(request_of(
        14, 5, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=instance, protocol_type="consumer", protocol_name="range",
        assignments=(nested_of(14, 5, "SyncGroupRequestAssignment",
                               member_id=joined.member_id, assignment=b""),)))
    assert answer.error_code == 0, answer


def leave(client: KafkaWireClient, group: str, member_id: str, instance: str | None = None,
          reason: str | None = None) -> None:
    answer = client.call(request_of(13, 5, group_id=group, members=(nested_of(
        13, 5, "MemberIdentity", member_id=member_id, group_instance_id=instance,
        reason=reason),)))
    assert answer.error_code == 0 and all(m.error_code == 0 for m in answer.members), answer


def last_cause(broker: Running, capsys: pytest.CaptureFixture[str], group: str,
               within_s: float = 0.0) -> dict[str, Any]:
    """describe's last rebalance of `group`, waiting up to `within_s` for it to change."""
    deadline = time.monotonic() + within_s
    first = describe(broker, capsys, group)["last_rebalance"]
    while time.monotonic() < deadline:
        time.sleep(0.1)
        latest = describe(broker, capsys, group)["last_rebalance"]
        if latest != first:
            return latest  # type: ignore[no-any-return]
    return first  # type: ignore[no-any-return]


def rebalances(broker: Running, group: str) -> dict[str, float]:
    return {dict(labels)["cause"]: value for (name, labels), value in broker.scrape().items()
            if name == "kafka_group_coordinator_group_rebalance_total"
            and dict(labels)["group"] == group}


def test_each_cause_in_describe_and_metrics(running: Running, capsys: pytest.CaptureFixture[str],
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kgroups.coordinator")
    seen: list[str] = []
    with connect(running.port) as client:
        joined = join(client, "causes", reason="starting up")
        sync(client, "causes", joined)
        note = last_cause(running, capsys, "causes")
        assert note["cause"] == "new_member_joined"
        assert note["detail"].endswith("client reason: starting up")
        seen.append(note["cause"])
        # The leader rejoins unchanged: it saw the topics' metadata change.
        joined = join(client, "causes", joined.member_id)
        sync(client, "causes", joined)
        seen.append(last_cause(running, capsys, "causes")["cause"])
        # It rejoins with another subscription.
        joined = join(client, "causes", joined.member_id, topics=("orders", "aged"))
        sync(client, "causes", joined)
        seen.append(last_cause(running, capsys, "causes")["cause"])
        leave(client, "causes", joined.member_id, reason="the consumer is being closed")
        note = last_cause(running, capsys, "causes")
        assert note["detail"].endswith("client reason: the consumer is being closed")
        seen.append(note["cause"])
        assert seen == ["new_member_joined", "metadata_change", "member_metadata_changed",
                        "member_left"]
        # Kafka's "Preparing to rebalance group ... in state ... with old generation ...
        # (reason: ...)", as one structured event.
        assert (f"preparing_rebalance group=causes state=Stable old_generation=1 "
                f"cause=metadata_change reason=\"Leader {joined.member_id} re-joining group "
                f"during Stable\"") in caplog.messages
        assert rebalances(running, "causes") == {cause: 1 for cause in seen}
        deleted = main(["groups", "--bootstrap-server", f"127.0.0.1:{running.port}",
                        "--delete", "--group", "causes"])
        capsys.readouterr()
        assert deleted == 0
        assert rebalances(running, "causes") == {}  # a deleted group takes its counts along

        # No heartbeat within the session timeout.
        joined = join(client, "expiring", session_ms=300)
        sync(client, "expiring", joined)
        assert last_cause(running, capsys, "expiring", within_s=5)["cause"] == "session_timeout"
        # Joined, never synced within the rebalance timeout.
        join(client, "slow", rebalance_ms=300)
        assert last_cause(running, capsys, "slow", within_s=5)["cause"] == "rebalance_timeout"
        # A static member's instance rejoins while the leader would be assigning.
        join(client, "static", instance="i1")
        join(client, "static", instance="i1")
        assert last_cause(running, capsys, "static")["cause"] == "static_member_replaced"
        # An admin removes a static member by its instance id.
        joined = join(client, "admin", instance="i1")
        sync(client, "admin", joined, instance="i1")
        leave(client, "admin", "", instance="i1", reason="member was removed by an admin")
        assert last_cause(running, capsys, "admin")["cause"] == "admin_removal"
    for group, cause in (("expiring", "session_timeout"), ("slow", "rebalance_timeout"),
                         ("static", "static_member_replaced"), ("admin", "admin_removal")):
        assert rebalances(running, group)[cause] == 1


def test_group_loaded_over_group_max_size(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    first = Running(tmp_path, "group.initial.rebalance.delay.ms=1500")  # both join in it
    try:
        answers: list[Any] = []

        def member() -> None:
            with connect(first.port) as client:
                answers.append(join(client, "crowd", version=3))

        threads = [threading.Thread(target=member) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert len({a.generation_id for a in answers}) == 1 and len(answers) == 2
        with connect(first.port) as client:
            leader = next(a for a in answers if a.leader == a.member_id)
            sync(client, "crowd", leader)
    finally:
        first.stop()
    again = Running(tmp_path, "kgroups.metrics.port=0", "group.max.size=1")
    try:
        note = describe(again, capsys, "crowd")["last_rebalance"]
        assert note["cause"] == "group_max_size"
        assert "over capacity (2 members, group.max.size 1)" in note["detail"]
        assert rebalances(again, "crowd") == {"group_max_size": 1}
    finally:
        again.stop()


# -- the setting ------------------------------------------------------------------------------

def test_metrics_are_off_by_default_and_the_port_is_checked() -> None:
    assert BrokerConfig.build().metrics_address is None
    assert BrokerConfig.build(overrides=["kgroups.metrics.port=9404"]).metrics_address == (
        "127.0.0.1", 9404)
    with pytest.raises(ConfigError, match=r"kgroups\.metrics\.port must be -1"):
        BrokerConfig.build(overrides=["kgroups.metrics.port=70000"])


def test_serve_metrics_port_prints_where_it_listens(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "kgroups.cli", "serve", "--port", "0", "--metrics-port", "0",
         "--data-dir", str(tmp_path), "--override", "offsets.topic.num.partitions=3"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(b"listening 127.0.0.1:")
        host, port = process.stdout.readline().decode().split()[1].rsplit(":", 1)
        assert host == "127.0.0.1"
        deadline = time.monotonic() + 20
        while True:  # the __consumer_offsets partitions load in the background
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
                families = {f.name: f for f in text_string_to_metric_families(
                    answer.read().decode())}
            loads = families["kafka_group_coordinator_partition_load_time_seconds"].samples
            if len(loads) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len(loads) == 3
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://{host}:{port}/other", timeout=10)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
