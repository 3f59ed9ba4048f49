"""What network processes (num.network.threads) give `kgroups serve` when its clients are light.

bench/broker.py drives the broker from Python clients that decode every answer: on a 2-core
machine they take most of the second core, so any layout that wants that core for the broker
loses there. Real clients mostly run on other machines. This script models that with a load
generator that costs little per request: each connection keeps `depth` copies of one encoded
request in flight and counts answers by their size prefix, comparing each with the first answer
(which is decoded and must carry no error; a broker gives the same request the same bytes).

For Heartbeat, OffsetCommit (one partition) and Metadata (one topic), over PLAINTEXT and TLS,
with num.network.threads 0 (one process) and 1 (a network process beside it): requests per
second, and CPU microseconds per request of the broker process, the network processes and the
load generator itself. Configurations alternate, --repeat times.

Run: .venv/bin/python bench/network_processes.py [--seconds S] [--connections C] [--depth D]
     [--threads 0,1] [--repeat R] [--no-tls]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import uvloop

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from tests.broker.security_helpers import Certificates, make_certificates

from broker import (
    PipelinedConnection,
    check_answer,
    client_tls,
    commit,
    form_group,
    heartbeats_of,
    metadata,
    negotiate,
    wait_coordinator_ready,
)
from kgroups.broker.wire import decode_response, encode_request
from kgroups.broker.wire import response_type as response_schema
from request_path import broker, cpu_seconds

KINDS = ("heartbeat", "commit", "metadata")
CORRELATION_ID = 1
SIZE_PREFIX = 4


class Lane(asyncio.Protocol):
    """One connection keeping `depth` copies of one request in flight."""

    def __init__(self, frame: bytes, schema: type[Any], depth: int) -> None:
        self._frame = frame
        self._schema = schema
        self._depth = depth
        self._buffer = bytearray()
        self._expected: bytes | None = None
        self._transport: asyncio.Transport | None = None
        self.answered = 0
        self.stopping = False
        self.idle = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.write(self._frame * self._depth)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        offset, answers, length = 0, 0, len(buffer)
        while length - offset >= SIZE_PREFIX:
            end = offset + SIZE_PREFIX + int.from_bytes(buffer[offset:offset + SIZE_PREFIX])
            if end > length:
                break
            answer = bytes(buffer[offset:end])
            if answer != self._expected:
                self._check_first(answer)
            offset = end
            answers += 1
        del buffer[:offset]
        self.answered += answers
        if self.stopping:
            self._depth -= answers
            if self._depth == 0 and not self.idle.done():
                self.idle.set_result(None)
        elif answers:
            assert self._transport is not None
            self._transport.write(self._frame * answers)

    def _check_first(self, answer: bytes) -> None:
        """The first answer is decoded and must be error-free; every later one must equal it."""
        if self._expected is not None:
            raise RuntimeError("an answer differs from the first one to the same request")
        check_answer(decode_response(self._schema, answer[SIZE_PREFIX:])[1])
        self._expected = answer

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.idle.done():
            self.idle.set_exception(exc or ConnectionError("connection closed"))

    def close(self) -> None:
        assert self._transport is not None
        self._transport.close()


@dataclass(frozen=True)
class Figures:
    per_second: float
    broker_us: float
    network_us: float
    client_us: float


async def load(port: int, tls: ssl.SSLContext | None, kind: str, process: Any,
               args: argparse.Namespace) -> Figures:
    """Requests per second of `kind` and CPU per request of each process, after a warm-up."""
    versions = await negotiate(port, tls)
    members = [await PipelinedConnection.open(port, versions, tls)
               for _ in range(args.connections)]
    _, joins = await form_group(members, "bench-heartbeat")
    makers = {"heartbeat": heartbeats_of(joins), "commit": commit, "metadata": metadata}
    requests = [makers[kind](index, member) for index, member in enumerate(members)]
    for member in members:
        await member.close()

    loop = asyncio.get_running_loop()
    lanes: list[Lane] = []
    for request in requests:
        frame = encode_request(CORRELATION_ID, "bench", request)
        schema = response_schema(int(request.__api_key__), int(request.__version__))
        _, lane = await loop.create_connection(
            lambda frame=frame, schema=schema: Lane(frame, schema, args.depth),
            "127.0.0.1", port, ssl=tls)
        lanes.append(lane)
    await asyncio.sleep(args.seconds / 3)  # warm-up
    answered_before = sum(lane.answered for lane in lanes)
    broker_before, network_before = cpu_seconds(process)
    client_before, started = time.process_time(), time.perf_counter()
    await asyncio.sleep(args.seconds)
    answered = sum(lane.answered for lane in lanes) - answered_before
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_before
    broker_after, network_after = cpu_seconds(process)
    for lane in lanes:
        lane.stopping = True
    await asyncio.gather(*(lane.idle for lane in lanes))
    for lane in lanes:
        lane.close()
    return Figures(answered / elapsed, (broker_after - broker_before) / answered * 1e6,
                   (network_after - network_before) / answered * 1e6,
                   client_cpu / answered * 1e6)


def run(threads: int, certificates: Certificates | None,
        args: argparse.Namespace) -> dict[str, Figures]:
    """One broker with `threads` network processes; every kind measured on it."""
    _, tls = client_tls(certificates)
    figures = {}
    with tempfile.TemporaryDirectory() as data_dir, \
            broker(Path(data_dir), None, threads, certificates) as (port, process):
        uvloop.run(wait_coordinator_ready(port, tls))
        for kind in KINDS:
            figures[kind] = uvloop.run(load(port, tls, kind, process, args))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--threads", type=lambda text: [int(n) for n in text.split(",")],
                        default=[0, 1], help="num.network.threads values to compare")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-tls", action="store_true", help="PLAINTEXT only")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as cert_dir:
        securities: dict[str, Certificates | None] = {"plaintext": None}
        if not args.no_tls:
            securities["tls"] = make_certificates(Path(cert_dir))
        results: dict[tuple[str, int, str], list[Figures]] = {}
        for _ in range(args.repeat):
            for security, certificates in securities.items():
                for threads in args.threads:
                    for kind, figures in run(threads, certificates, args).items():
                        results.setdefault((security, threads, kind), []).append(figures)

    print(f"{args.connections} connections x {args.depth} in flight, {args.seconds:g} s per "
          f"kind, {args.repeat} alternating runs (median; runs in brackets)")
    print(f"  {'security':<10} {'threads':>7} {'kind':<10} {'req/s':>9}  {'runs':<20}"
          f" {'broker':>8} {'network':>8} {'client':>8}  (CPU µs per request)")
    for (security, threads, kind), runs in results.items():
        rates = [f.per_second for f in runs]
        base = results[(security, args.threads[0], kind)]
        ratio = statistics.median(rates) / statistics.median(f.per_second for f in base)
        print(f"  {security:<10} {threads:>7} {kind:<10} {statistics.median(rates):>9,.0f}  "
              f"{'(' + ', '.join(f'{r / 1000:.1f}k' for r in rates) + ')':<20}"
              f" {statistics.median(f.broker_us for f in runs):>8.1f}"
              f" {statistics.median(f.network_us for f in runs):>8.1f}"
              f" {statistics.median(f.client_us for f in runs):>8.1f}"
              f"  x{ratio:.2f} of threads={args.threads[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
