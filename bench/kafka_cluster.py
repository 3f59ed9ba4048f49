"""Three Apache Kafka 4.3.1 KRaft nodes as one cluster, the peer of a kgroups cluster.

Each node is a combined controller+broker JVM (`process.roles=broker,controller`) with its data
under `workdir/node-N`; the three form the controller quorum (`controller.quorum.voters`), so
one node can die and the cluster goes on, as the seeds' failover section describes. Topics are
replicated three times with `min.insync.replicas=2`: an acks=all write is on two disks at least
before it is acknowledged, Kafka's own durability promise for the loss of one broker.

API
- `KafkaCluster(workdir, size=3, settings=..., jvm_options=...)`; `start()` formats each node
  (first start only), starts the JVMs together and returns when every live node answers
  FindCoordinator; `bootstrap` (all client listeners, comma-separated), `nodes` (id -> node),
  `kill(node_id)` (SIGKILL), `close()`.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.kafka_harness import (
    STARTUP_TIMEOUT_S,
    _cluster_id,
    _free_port,
    _log_options,
    java_command,
    kafka_classpath,
    wait_for_group_coordinator,
)

REPLICATED: Mapping[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass
class KafkaNode:
    """One combined controller+broker of a `KafkaCluster`."""

    node_id: int
    workdir: Path
    port: int
    controller_port: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kafka.log"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class KafkaCluster:
    """`size` KRaft nodes forming one quorum (see the module doc)."""

    workdir: Path
    size: int = 3
    settings: Mapping[str, str] = field(default_factory=dict)
    jvm_options: Sequence[str] = ("-Xmx512m", "-Xms512m", "-XX:+UseSerialGC")
    nodes: dict[int, KafkaNode] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values() if node.alive())

    def start(self) -> None:
        if not self.nodes:
            self.nodes = {
                node_id: KafkaNode(node_id, self.workdir / f"node-{node_id}", _free_port(),
                                   _free_port())
                for node_id in range(1, self.size + 1)}
        cluster_id = _cluster_id()
        voters = ",".join(f"{node.node_id}@127.0.0.1:{node.controller_port}"
                          for node in self.nodes.values())
        for node in self.nodes.values():
            node.workdir.mkdir(parents=True, exist_ok=True)
            properties = node.workdir / "server.properties"
            properties.write_text("".join(f"{key}={value}\n" for key, value in {
                "process.roles": "broker,controller",
                "node.id": str(node.node_id),
                "listeners": f"PLAINTEXT://127.0.0.1:{node.port},"
                             f"CONTROLLER://127.0.0.1:{node.controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "controller.quorum.voters": voters,
                "log.dirs": str(node.workdir / "data"),
                **REPLICATED,
                **self.settings,
            }.items()))
            if not (node.workdir / "data" / "meta.properties").exists():
                self._format(node, properties, cluster_id)
        for node in self.nodes.values():
            console = (node.workdir / "console.out").open("ab")
            node.process = subprocess.Popen(
                [java_command(), *self.jvm_options, *_log_options(node.log_path),
                 "-cp", kafka_classpath(), "kafka.Kafka", str(node.workdir / "server.properties")],
                stdout=console, stderr=subprocess.STDOUT)
            console.close()
        try:
            for node in self.nodes.values():
                assert node.process is not None
                wait_for_group_coordinator("127.0.0.1", node.port, node.process,
                                           STARTUP_TIMEOUT_S * 2,
                                           lambda node=node: f"see {node.log_path}")
        except BaseException:
            self.close()
            raise

    def _format(self, node: KafkaNode, properties: Path, cluster_id: str) -> None:
        result = subprocess.run(
            [java_command(), "-Xmx256m", *_log_options(node.log_path), "-cp", kafka_classpath(),
             "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
             "--config", str(properties)],
            capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{result.stdout}{result.stderr}")

    def kill(self, node_id: int) -> None:
        process = self.nodes[node_id].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def close(self) -> None:
        for node in self.nodes.values():
            if node.alive():
                assert node.process is not None
                node.process.kill()
                node.process.wait(timeout=30)
