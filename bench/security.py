"""What TLS and SASL cost: connection set-up rate and OffsetCommit round trips per second over
PLAINTEXT and over SASL_SSL (SCRAM-SHA-256), kgroups (`kgroups serve`) and Apache Kafka 4.3.1
side by side, in one run.

Set-up: connect, (TLS handshake, SaslHandshake, two SaslAuthenticate), ApiVersions, close; the
client is Python (kgroups.tools.client_security), the same for both brokers, and its own
PBKDF2 (4096 iterations) is part of every SCRAM set-up. OffsetCommit: one connection, one
partition, sequential round trips (a simple commit, generation -1).

Run: .venv/bin/python bench/security.py [--connections N] [--commits N] [--warm-up N]
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from tests.broker.broker_wire_helpers import create_topic, nested_of, request_of
from tests.broker.security_helpers import add_scram_user, jaas_users, make_certificates

from broker_data import free_port
from kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker
from kgroups.tools.client_security import ClientSecurity
from kgroups.tools.wire_client import KafkaWireClient
from startup import wait_ready

PLAINTEXT = ClientSecurity()


def settings(certs_dir: Path) -> dict[str, str]:
    certs = make_certificates(certs_dir)
    return {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas_users(admin="admin-secret"),
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        **KAFKA_TEST_SETTINGS,
    }


def scram_client(ca: Path) -> ClientSecurity:
    return ClientSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-256", username="bench",
                          password="bench-secret", truststore=str(ca))


def set_up_rate(port: int, security: ClientSecurity, count: int) -> float:
    began = time.perf_counter()
    for _ in range(count):
        security.connect("127.0.0.1", port, client_id="security-bench").close()
    return count / (time.perf_counter() - began)


def commit_rate(port: int, security: ClientSecurity, count: int) -> float:
    commit = request_of(8, 8, group_id="security-bench", generation_id_or_member_epoch=-1,
                        member_id="", group_instance_id=None, topics=(nested_of(
                            8, 8, "OffsetCommitRequestTopic", name="bench", partitions=(nested_of(
                                8, 8, "OffsetCommitRequestPartition", partition_index=0,
                                committed_offset=1, committed_leader_epoch=-1,
                                committed_metadata=""),)),))
    with security.connect("127.0.0.1", port, client_id="security-bench") as client:
        (topic,) = client.call(commit).topics
        assert int(topic.partitions[0].error_code) == 0, topic
        began = time.perf_counter()
        for _ in range(count):
            client.call(commit)
        return count / (time.perf_counter() - began)


def measure(plain_port: int, sasl_port: int, ca: Path, args: argparse.Namespace
            ) -> dict[str, float]:
    with KafkaWireClient("127.0.0.1", plain_port) as admin:
        add_scram_user(admin, "bench", "bench-secret")
        create_topic(admin, "bench")
    time.sleep(1)  # Kafka applies the credential through its metadata log
    scram = scram_client(ca)
    # A fresh JVM runs interpreted at first: warm both paths before measuring either broker.
    for _ in range(args.warm_up):
        set_up_rate(plain_port, PLAINTEXT, 20)
        set_up_rate(sasl_port, scram, 20)
        commit_rate(plain_port, PLAINTEXT, 500)
        commit_rate(sasl_port, scram, 500)
    return {
        "set-ups/s PLAINTEXT": set_up_rate(plain_port, PLAINTEXT, args.connections),
        "set-ups/s SASL_SSL SCRAM-SHA-256": set_up_rate(sasl_port, scram, args.connections),
        "OffsetCommit/s PLAINTEXT": commit_rate(plain_port, PLAINTEXT, args.commits),
        "OffsetCommit/s SASL_SSL": commit_rate(sasl_port, scram, args.commits),
    }


def run_kgroups(workdir: Path, common: dict[str, str], args: argparse.Namespace
                ) -> dict[str, float]:
    plain_port, sasl_port = free_port(), free_port()
    overrides = {**common, "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},"
                                        f"SASL_SSL://127.0.0.1:{sasl_port}"}
    command = [sys.executable, "-m", "kgroups.cli", "serve", "--data-dir", str(workdir / "data"),
               *(arg for key, value in overrides.items()
                 for arg in ("--override", f"{key}={value}"))]
    with (workdir / "kgroups.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready("127.0.0.1", plain_port, process)
        return measure(plain_port, sasl_port, workdir / "certs" / "ca.pem", args)
    finally:
        process.terminate()
        process.wait(timeout=30)


def run_kafka(workdir: Path, common: dict[str, str], args: argparse.Namespace
              ) -> dict[str, float]:
    broker = KafkaBroker(workdir / "kafka", settings=common, extra_listeners=("SASL_SSL",),
                         jvm_options=("-Xmx1g", "-Xms1g"))
    broker.start()
    try:
        return measure(broker.port, broker.listener_ports["SASL_SSL"],
                       workdir / "certs" / "ca.pem", args)
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--warm-up", type=int, default=3, help="rounds before measuring")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="security-bench-") as tmp:
        workdir = Path(tmp)
        common = settings(workdir / "certs")
        runs: dict[str, Callable[[Path, dict[str, str], argparse.Namespace],
                                 dict[str, float]]] = {"kgroups": run_kgroups,
                                                       "kafka": run_kafka}
        results = {name: run(workdir, common, args) for name, run in runs.items()}
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
          f"{args.connections} set-ups and {args.commits} commits per figure")
    print("| figure | kgroups | Kafka 4.3.1 | kgroups / Kafka |\n|---|---:|---:|---:|")
    for figure in results["kgroups"]:
        ours, theirs = results["kgroups"][figure], results["kafka"][figure]
        print(f"| {figure} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
