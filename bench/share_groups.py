"""Share groups (KIP-932): records acknowledged per second by 1, 4 and 16 Java KafkaShareConsumers
on one partition, `kgroups serve` beside Apache Kafka 4.3.1 in the same run.

Per broker and consumer count: a new one-partition topic filled with --records records (100 bytes
each), a new share group created with its start offset at 0 (AlterShareGroupOffsets), then the
consumers (threads of one JVM, tests/java ShareConsumerBench, `make java-harness`; implicit
acknowledgement, so each poll accepts the previous poll's records) drain it. The figure is
records / seconds from the consumers' start (group join included) until every record has been
delivered and every consumer has closed, its last acknowledgements sent. Redeliveries (a record
delivered twice) are counted: with 30 s acquisition locks there should be none.

Both brokers run with 500 ms share heartbeats (group.share.heartbeat.interval.ms and its
minimum, lowered from 5 s on both) and one __share_group_state partition; Kafka keeps its other
defaults (500 records a fetch, 2000 in-flight records a partition).

Run: .venv/bin/python bench/share_groups.py [--records 20000] [--consumers 1,4,16] [--no-kafka]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from tests.broker.servers import ServerProcess

from java_harness import harness_command
from kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker, kgroups_overrides

SETTINGS = {
    **KAFKA_TEST_SETTINGS,
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "share.coordinator.state.topic.num.partitions": "1",
}
BENCH_TIMEOUT_S = 900


@contextlib.contextmanager
def kgroups_serve(workdir: Path) -> Iterator[str]:
    workdir.mkdir(parents=True)
    server = ServerProcess(workdir / "data", workdir / "server.log", kgroups_overrides(SETTINGS))
    server.start()
    try:
        yield server.bootstrap
    finally:
        server.close()


@contextlib.contextmanager
def kafka_serve(workdir: Path) -> Iterator[str]:
    broker = KafkaBroker(workdir, settings=SETTINGS,
                         jvm_options=("-Xmx1g", "-Xms1g", "-XX:+UseG1GC"))
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.close()


def fill(bootstrap: str, topic: str, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    value = b"x" * 100
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0


def drain(bootstrap: str, consumers: int, records: int) -> dict[str, Any]:
    tail = uuid.uuid4().hex[:8]
    topic, group = f"bench-share-{consumers}-{tail}", f"bench-share-group-{tail}"
    fill(bootstrap, topic, records)
    command = harness_command("kgroups.harness.ShareConsumerBench", bootstrap, group, topic,
                              str(consumers), str(records), log_level="warn")
    command.remove("-XX:TieredStopAtLevel=1")  # a long run: let the JIT optimise fully
    done = subprocess.run(command, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ShareConsumerBench failed:\n{done.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--consumers", default="1,4,16")
    parser.add_argument("--no-kafka", action="store_true")
    args = parser.parse_args()
    counts = [int(c) for c in args.consumers.split(",")]
    brokers = {"kgroups": kgroups_serve, **({} if args.no_kafka else {"kafka": kafka_serve})}
    print(f"{'broker':8} {'consumers':>9} {'records/s':>10} {'seconds':>8} {'redelivered':>11}"
          "  per consumer")
    with tempfile.TemporaryDirectory(prefix="bench-share-") as scratch:
        for name, serve in brokers.items():
            with serve(Path(scratch) / name) as bootstrap:
                for consumers in counts:
                    run = drain(bootstrap, consumers, args.records)
                    print(f"{name:8} {consumers:9d} {run['records'] / run['seconds']:10.0f} "
                          f"{run['seconds']:8.2f} {run['deliveries'] - run['distinct']:11d}  "
                          f"{run['per_consumer']}", flush=True)


if __name__ == "__main__":
    main()
