"""All-topics Metadata on a broker with many topics: kgroups beside Kafka 4.3.1, in one run.

A consumer with a regex subscription (librdkafka, the Java client) asks for every topic before it
joins its group and again at every metadata refresh; with ~1,000 topics the answer is ~100 KB.
Over loopback, with raw Kafka frames (no client library in the way), on one broker of each kind
holding TOPICS topics of PARTITIONS partitions:
- latency of one all-topics Metadata v12 answer, sequential on one connection (median, p99),
  from sending the request to the answer's last byte;
- the same with two clients asking at once (time until both answers are in), as two consumers
  starting together do;
- the first answer after a topic is created (what kgroups re-encodes then).
kgroups runs as shipped (`kgroups serve`, its defaults); Kafka 4.3.1 as bench/broker.py starts it
(single KRaft node, 1 GiB heap). `make kafka` must have fetched Kafka's jars (`make test` does).

Run: .venv/bin/python bench/metadata.py [--topics 1000] [--partitions 3] [--requests 300]
     [--no-kafka]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from broker import kafka_broker, kgroups_broker
from kgroups.broker.wire import build, decode_response, encode_request, request_type
from kgroups.broker.wire import response_type as response_schema

METADATA, VERSION = 3, 12
CREATE_BATCH = 100
CHANGES = 10
ALL_TOPICS = encode_request(1, "bench-regex-consumer", build(
    request_type(METADATA, VERSION), topics=None, allow_auto_topic_creation=False,
    include_topic_authorized_operations=False))


def create_topics(admin: AdminClient, names: list[str], partitions: int) -> None:
    for start in range(0, len(names), CREATE_BATCH):
        batch = [NewTopic(name, num_partitions=partitions, replication_factor=1)
                 for name in names[start:start + CREATE_BATCH]]
        for future in admin.create_topics(batch, operation_timeout=60).values():
            future.result(timeout=120)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _exactly(sock, 4))
    return _exactly(sock, size)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the broker")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def timed_answer(sock: socket.socket) -> tuple[float, bytes]:
    started = time.perf_counter()
    sock.sendall(ALL_TOPICS)
    frame = read_frame(sock)
    return (time.perf_counter() - started) * 1000, frame


def topic_count(frame: bytes) -> int:
    _, answer = decode_response(response_schema(METADATA, VERSION), frame)
    return sum(1 for topic in answer.topics if not topic.name.startswith("__"))


def measure(port: int, bootstrap: str, topics: int, partitions: int,
            requests: int) -> dict[str, float]:
    names = [f"crowd_{index:04d}" for index in range(topics)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    create_topics(admin, names, partitions)
    created_s = time.monotonic() - started
    with connect(port) as one, connect(port) as other:
        deadline = time.monotonic() + 120
        while True:  # Kafka lists a created topic once its metadata image has it
            _, frame = timed_answer(one)
            if topic_count(frame) >= topics or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert topic_count(frame) >= topics, f"{topic_count(frame)} topics listed"
        for _ in range(10):
            timed_answer(one)
        sequential = [timed_answer(one)[0] for _ in range(requests)]
        together = []
        for _ in range(requests // 4):
            began = time.perf_counter()
            one.sendall(ALL_TOPICS)
            other.sendall(ALL_TOPICS)
            read_frame(one)
            read_frame(other)
            together.append((time.perf_counter() - began) * 1000)
        after_change = []
        for index in range(CHANGES):
            create_topics(admin, [f"late_{index:02d}"], partitions)
            while True:
                elapsed, frame = timed_answer(one)
                if topic_count(frame) > topics + index:
                    break
            after_change.append(elapsed)
    return {"answer bytes": float(len(frame) + 4),
            "create topics s": created_s,
            "median ms": statistics.median(sequential),
            "p99 ms": _p99(sequential),
            "two at once median ms": statistics.median(together),
            "two at once p99 ms": _p99(together),
            "after a create median ms": statistics.median(after_change)}


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--no-kafka", action="store_true", help="skip Apache Kafka")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        runs = [("kgroups", kgroups_broker(Path(scratch) / "kgroups", 0, False))]
        if not args.no_kafka:
            runs.append(("kafka", kafka_broker(Path(scratch) / "kafka", 0, False)))
        for name, started in runs:
            with started as port:
                results[name] = measure(port, f"127.0.0.1:{port}", args.topics,
                                        args.partitions, args.requests)
    print(f"{args.topics} topics x {args.partitions} partitions, Metadata v{VERSION} for every "
          f"topic, {args.requests} sequential answers; load average {os.getloadavg()}")
    print(f"{'figure':26}" + "".join(f"{name:>12}" for name in results)
          + ("      kgroups/kafka" if "kafka" in results else ""))
    for figure in results["kgroups"]:
        values = "".join(f"{results[name][figure]:12.2f}" for name in results)
        ratio = (f"{results['kgroups'][figure] / results['kafka'][figure]:19.2f}"
                 if "kafka" in results and results["kafka"][figure] else "")
        print(f"{figure:26}{values}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
