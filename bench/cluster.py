"""Coordinator failover and cluster throughput: three Kafka 4.3.1 brokers beside three kgroups
brokers on one PostgreSQL, the same clients and the same SIGKILL in the same run.

Kafka runs three combined KRaft nodes with replication factor 3 and min.insync.replicas 2; the
kgroups brokers keep everything in one throwaway PostgreSQL (the database is their replication).
For each cluster: produce and consume throughput with acks=all, synchronous OffsetCommits per
second from one consumer, then a group of three static librdkafka consumers committing every
record while a producer writes, and SIGKILL of the broker that coordinates the group: seconds
until the group's first commit sent after the kill is answered, and until the group is Stable
again on another coordinator, with the records and commits checked afterwards (none lost, no
committed offset going back).

Run: .venv/bin/python bench/cluster.py [--messages N] [--only kafka|kgroups]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from tests.storage.postgres_server import PostgresServer

import cluster_workload
from broker_data import free_port, wait_for_port
from kafka_cluster import KafkaCluster

SIZE = 3
OFFSETS_PARTITIONS = 12


class KgroupsCluster:
    """`SIZE` `kgroups serve` processes on one PostgreSQL, node ids 1..SIZE."""

    def __init__(self, workdir: Path, url: str) -> None:
        self.workdir = workdir
        self.url = url
        self.ports = {node: free_port() for node in range(1, SIZE + 1)}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for node, port in self.ports.items()
                        if self.processes[node].poll() is None)

    def start(self) -> None:
        for node, port in self.ports.items():
            self.processes[node] = subprocess.Popen(
                [sys.executable, "-m", "kgroups.cli", "serve", "--port", str(port),
                 "--data-dir", str(self.workdir / f"node-{node}"), "--storage", self.url,
                 "--log-level", "WARNING",
                 "--override", f"node.id={node}",
                 "--override", f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}",
                 "--override", "group.initial.rebalance.delay.ms=0"],
                stdout=subprocess.DEVNULL)
        for node, port in self.ports.items():
            wait_for_port(port, self.processes[node])

    def kill(self, node: int) -> None:
        self.processes[node].send_signal(signal.SIGKILL)
        self.processes[node].wait(timeout=30)

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=60)


@contextlib.contextmanager
def kafka_cluster(workdir: Path) -> Iterator[tuple[str, KafkaCluster]]:
    cluster = KafkaCluster(workdir, SIZE,
                           {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})
    cluster.start()
    try:
        yield cluster.bootstrap, cluster
    finally:
        cluster.close()


@contextlib.contextmanager
def kgroups_cluster(workdir: Path) -> Iterator[tuple[str, KgroupsCluster]]:
    database = PostgresServer.start(fsync=True)
    try:
        cluster = KgroupsCluster(workdir, database.url)
        cluster.start()
        try:
            yield cluster.bootstrap, cluster
        finally:
            cluster.close()
    finally:
        database.stop()


def run(name: str, bootstrap: str, cluster: KafkaCluster | KgroupsCluster,
        messages: int) -> dict[str, float]:
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    cluster_workload.create_topic(bootstrap, f"tput-{stamp}", SIZE)
    speed = cluster_workload.throughput(bootstrap, f"tput-{stamp}", messages)
    cluster_workload.create_topic(bootstrap, f"fail-{stamp}", SIZE)
    failover = cluster_workload.failover(bootstrap, f"fail-{stamp}", cluster.kill)
    print(f"{name:8} produce {speed.produce_msgs_per_s:>9,.0f} msg/s  consume "
          f"{speed.consume_msgs_per_s:>9,.0f} msg/s  commits {speed.commits_per_s:>7,.0f}/s  "
          f"| killed node {failover.killed_node}: "
          f"first commit after {failover.first_commit_s:.2f} s,"
          f" Stable after {failover.stable_s:.2f} s; {failover.produced} records acknowledged,"
          f" {failover.lost_records} lost, {failover.commits} commits,"
          f" {len(failover.offsets_went_back)} partitions whose offset went back", flush=True)
    return {"produce": speed.produce_msgs_per_s, "consume": speed.consume_msgs_per_s,
            "commits": speed.commits_per_s, "first_commit": failover.first_commit_s,
            "stable": failover.stable_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--only", choices=("kafka", "kgroups"))
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.only in (None, "kafka"):
            with kafka_cluster(Path(scratch) / "kafka") as (bootstrap, cluster):
                results["kafka"] = run("kafka", bootstrap, cluster, args.messages)
        if args.only in (None, "kgroups"):
            with kgroups_cluster(Path(scratch) / "kgroups") as (bootstrap, cluster):
                results["kgroups"] = run("kgroups", bootstrap, cluster, args.messages)
    if len(results) == 2:
        kafka, kgroups = results["kafka"], results["kgroups"]
        print("kgroups / Kafka: "
              + "  ".join(f"{key} {kgroups[key] / kafka[key]:.2f}x" for key in kafka))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
