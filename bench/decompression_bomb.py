"""One compressed batch of many empty records (about a megabyte of zstd for 1.25 M records), as
an attacker or a broken producer sends it, against kgroups and Apache Kafka 4.3.1 in one run.

Per broker: the seconds until the Produce of the batch to a compacted topic is answered (every
record lacks a key, so the answer is INVALID_RECORD), the number of record errors the answer
lists, and the worst wait of a bystander sending all-topics Metadata every 10 ms meanwhile; for
kgroups also a Fetch v0 of the same batch from a plain topic (down-converted to the old message
format; Kafka 4 no longer serves Fetch below v4). A broker that takes longer than --timeout
seconds to answer is reported as such.

Run: .venv/bin/python bench/decompression_bomb.py [--records 1250000] [--no-kafka]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from broker import kafka_broker, kgroups_broker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "broker"))
from broker_wire_helpers import create_topic, metadata_request, produce_request

from kgroups.broker.legacy_schemas import nested
from kgroups.broker.wire import request_type
from kgroups.log.batch import _assemble, _varint
from kgroups.log.compression import Compression, compress
from kgroups.tools.wire_client import KafkaWireClient, WireError


def empty_records_batch(count: int) -> bytes:
    body = b"".join(_varint(len(record)) + record for record in (
        b"\x00\x00" + _varint(offset_delta) + b"\x01\x01\x00" for offset_delta in range(count)))
    return _assemble(body=compress(Compression.ZSTD, body), base_offset=0,
                     partition_leader_epoch=-1, attributes=int(Compression.ZSTD),
                     last_offset_delta=count - 1, base_timestamp=1, max_timestamp=1,
                     producer_id=-1, producer_epoch=-1, base_sequence=-1, count=count)


@contextlib.contextmanager
def bystander(port: int) -> Iterator[list[float]]:
    waits: list[float] = []
    stop = threading.Event()

    def run() -> None:
        with KafkaWireClient("127.0.0.1", port, timeout=120) as client:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    client.call(metadata_request(all_topics=True))
                except WireError:
                    waits.append(float("inf"))
                    return
                waits.append(time.monotonic() - began)
                time.sleep(0.01)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)
    try:
        yield waits
    finally:
        stop.set()
        thread.join()


def timed(port: int, request: object, timeout: float) -> tuple[float | None, object | None]:
    began = time.monotonic()
    try:
        with KafkaWireClient("127.0.0.1", port, timeout=timeout) as client:
            answer = client.call(request)
    except WireError:
        return None, None
    return time.monotonic() - began, answer


def fetch_v0(topic: str) -> object:
    request_cls = request_type(1, 0)
    topic_cls = nested(request_cls, "topics")
    partition_cls = nested(topic_cls, "partitions")
    return request_cls(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, topics=(
        topic_cls(topic=topic, partitions=(partition_cls(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),))


def measure(name: str, port: int, batch: bytes, timeout: float, with_fetch_v0: bool) -> None:
    with KafkaWireClient("127.0.0.1", port, timeout=30) as client:
        create_topic(client, "compacted", configs={"cleanup.policy": "compact"})
        create_topic(client, "plain")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # Kafka's broker learns of topics a moment later
            topics = client.call(metadata_request("compacted", "plain", auto_create=False)).topics
            if all(int(topic.error_code) == 0 and topic.partitions for topic in topics):
                break
            time.sleep(0.1)
        client.call(produce_request("plain", 0, batch))
    figures = []
    with bystander(port) as waits:
        seconds, answer = timed(port, produce_request("compacted", 0, batch), timeout)
        if answer is None:
            figures.append(f"produce (compacted) no answer in {timeout:.0f} s")
        else:
            partition = answer.responses[0].partition_responses[0]  # type: ignore[attr-defined]
            figures.append(f"produce (compacted) {seconds:.2f} s, error "
                           f"{int(partition.error_code)}, {len(partition.record_errors)} "
                           "record errors listed")
        if with_fetch_v0:
            seconds, answer = timed(port, fetch_v0("plain"), timeout)
            figures.append("fetch v0 no answer" if answer is None else f"fetch v0 {seconds:.2f} s")
    worst = max(waits) if waits else float("nan")
    figures.append(f"bystander Metadata worst wait {worst:.2f} s over {len(waits)} requests")
    print(f"{name}: " + "; ".join(figures), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_250_000)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--no-kafka", action="store_true")
    args = parser.parse_args()
    batch = empty_records_batch(args.records)
    print(f"batch: {args.records} records, {len(batch)} bytes (zstd)", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        with kgroups_broker(Path(scratch) / "kgroups", 0, False) as port:
            measure("kgroups", port, batch, args.timeout, with_fetch_v0=True)
        if not args.no_kafka:
            with kafka_broker(Path(scratch) / "kafka", 0, False) as port:
                measure("kafka", port, batch, args.timeout, with_fetch_v0=False)
    with open("/proc/loadavg") as loadavg:
        print(f"load average: {loadavg.read().split()[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
