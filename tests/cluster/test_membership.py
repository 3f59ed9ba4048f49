"""Three brokers on one PostgreSQL: every broker answers Metadata and FindCoordinator the same
way, from the leases; a broker that cannot start says why in one line."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v9 import request as metadata
from kio.schema.types import TopicName
from tests.broker.servers import ServerProcess
from tests.cluster.conftest import Cluster

from kgroups.tools.wire_client import KafkaWireClient

pytestmark = [pytest.mark.postgresql, pytest.mark.slow]

OFFSETS = "__consumer_offsets"


def _metadata(cluster: Cluster, node: int) -> Any:
    broker = cluster.brokers[node]
    with KafkaWireClient(broker.host, broker.port, timeout=10) as client:
        return client.call(metadata.MetadataRequest(
            topics=(metadata.MetadataRequestTopic(name=TopicName(OFFSETS)),),
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False))


def _leaders(answer: Any) -> dict[int, tuple[int, int]]:
    (topic,) = answer.topics
    return {int(p.partition_index): (int(p.leader_id), int(p.leader_epoch))
            for p in topic.partitions}


def _agreed(ask: Callable[[int], object], timeout_s: float = 15.0) -> object:
    """What all three brokers answer alike, waiting for their views to converge (a view lags
    the store by up to a heartbeat interval, and leases settle over a few steps)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answers = [ask(node) for node in (1, 2, 3)]
        if all(answer == answers[0] for answer in answers):
            return answers[0]
        assert time.monotonic() < deadline, answers
        time.sleep(0.2)


def test_every_broker_lists_the_three_and_the_same_leaders(cluster: Cluster) -> None:
    brokers = _agreed(lambda node: {(int(b.node_id), int(b.port))
                                    for b in _metadata(cluster, node).brokers})
    assert brokers == {(n, cluster.brokers[n].port) for n in (1, 2, 3)}
    leaders = _agreed(lambda node: _leaders(_metadata(cluster, node)))
    assert isinstance(leaders, dict) and len(leaders) == 50
    assert all(leader in (1, 2, 3) and epoch >= 1 for leader, epoch in leaders.values())
    spread = Counter(leader for leader, _ in leaders.values())
    assert sorted(spread) == [1, 2, 3]
    assert max(spread.values()) - min(spread.values()) <= 1, spread


def test_describe_cluster_lists_the_live_brokers_from_every_broker(cluster: Cluster) -> None:
    def describe(node: int) -> tuple[list[tuple[int, int]], int]:
        admin = AdminClient({"bootstrap.servers": cluster.brokers[node].bootstrap})
        described = admin.describe_cluster(request_timeout=10).result(20)
        return sorted((n.id, n.port) for n in described.nodes), described.controller.id

    assert _agreed(describe) == ([(n, cluster.brokers[n].port) for n in (1, 2, 3)], 1)


def test_find_coordinator_agrees_from_every_broker(cluster: Cluster) -> None:
    groups = [f"group-{index}" for index in range(12)]
    answers = _agreed(lambda node: [cluster.coordinator(group, node) for group in groups])
    assert isinstance(answers, list) and set(answers) == {1, 2, 3}, answers


def test_topics_take_a_replication_factor_up_to_the_live_brokers(cluster: Cluster) -> None:
    """A Kafka client creating topics with replication factor 3 on three brokers (the copies
    are PostgreSQL's) succeeds; 4 is refused as Kafka refuses it."""
    _agreed(lambda node: len(_metadata(cluster, node).brokers))
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    created = admin.create_topics([NewTopic("three-copies", 2, 3), NewTopic("four-copies", 2, 4)])
    assert created["three-copies"].result(30) is None
    with pytest.raises(KafkaException) as refused:
        created["four-copies"].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


def _serve(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kgroups.cli", "serve", "--port", "0",
         "--data-dir", str(tmp_path / "data"), *arguments],
        capture_output=True, text=True, timeout=60)


def test_postgresql_unreachable_at_start_is_one_line_without_the_password(
        tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _serve(tmp_path, "--storage", f"postgresql://kgroups:s3cret@127.0.0.1:{port}/db")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "PostgreSQL" in lines[0]
    assert "s3cret" not in done.stderr + done.stdout


def test_a_node_id_in_use_stops_the_second_broker_in_one_line(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    done = _serve(tmp_path, "--storage", cluster.url, "--override", "node.id=2")
    assert done.returncode == 2
    # The broker had started listening, so its log says it stopped; the error is one line.
    errors = [line for line in done.stderr.splitlines() if line.startswith("kgroups serve:")]
    assert len(errors) == 1 and "node.id 2" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    # The first node 2 serves on: still running, and it names a coordinator (waited for: on a
    # busy machine a lease may be moving between the brokers when it is asked).
    first = cluster.brokers[2].process
    assert first is not None and first.poll() is None
    cluster.wait_coordinator("group-0", 2)


def test_another_offsets_partition_count_is_refused_in_one_line(cluster: Cluster,
                                                                tmp_path: Path) -> None:
    done = _serve(tmp_path, "--storage", cluster.url, "--override", "node.id=4",
                  "--override", "offsets.topic.num.partitions=10")
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("kgroups serve:")]
    assert len(errors) == 1 and "offsets.topic.num.partitions is 10" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_a_broker_whose_node_id_was_taken_over_stops_in_one_line(cluster: Cluster,
                                                                  tmp_path: Path) -> None:
    cluster.signal(2, signal.SIGSTOP)
    with closing(cluster.store()) as store:
        deadline = time.monotonic() + 30
        while 2 in {broker.node_id for broker in store.registry.live_brokers()}:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    successor = ServerProcess(tmp_path / "data", tmp_path / "successor.log",
                              (f"kgroups.storage={cluster.url}", "node.id=2"))
    successor.start()
    try:
        cluster.signal(2, signal.SIGCONT)
        stopped = cluster.brokers[2]
        assert stopped.process is not None and stopped.process.wait(30) == 2
        errors = [line for line in stopped.log_text().splitlines()
                  if line.startswith("kgroups serve:")]
        assert len(errors) == 1 and "node.id 2" in errors[0], stopped.log_text()
        assert successor.process is not None and successor.process.poll() is None
    finally:
        successor.close()
