"""What one request costs `kgroups serve`, from the bytes arriving to the answer written.

For Heartbeat, OffsetCommit (one partition), Metadata (one topic) and a JoinGroup + SyncGroup
pair (a one-member group rebalancing), the broker's own CPU time over many pipelined requests
divided by their number: microseconds of broker CPU per request, socket to socket. CPU time of
the broker process (not wall time) keeps the figure honest on a shared machine, and includes
everything the request costs: reading and checking the frame, decoding, the coordinator, the log
write, encoding, the event loop.

With --profile the broker runs under cProfile and the functions with the most own time are
printed per request kind (the broker is restarted per kind, so each profile holds one kind).

Run: .venv/bin/python bench/request_path.py [--requests N] [--profile] [--top K]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pstats
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from tests.broker.security_helpers import Certificates, make_certificates

from broker import (
    SYNC,
    PipelinedConnection,
    check_answer,
    client_tls,
    commit,
    form_group,
    heartbeats_of,
    join_group,
    metadata,
    negotiate,
    ssl_listener_overrides,
)
from broker_data import free_port, wait_for_port
from kgroups.errors import ErrorCode

CONNECTIONS = 4
DEPTH = 8

RequestMaker = Callable[[int, PipelinedConnection], Any]

# `kgroups` under cProfile timed by CPU time (python -m cProfile times by the wall clock, which
# charges the event loop's idle waits to whatever coroutine was suspended); argv[1] is the file.
PROFILED = """
import cProfile, sys, time
from kgroups.cli import main
out = sys.argv.pop(1)
profile = cProfile.Profile(time.process_time)
try:
    profile.runcall(main)
except SystemExit:
    pass
finally:
    profile.dump_stats(out)
"""


def create_bench_topic(port: int, certificates: Certificates | None) -> None:
    """The topic commits name (the admin client is gone once this returns, before the broker
    stops, so it does not log reconnect attempts)."""
    over_tls, _ = client_tls(certificates)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **over_tls})
    admin.create_topics([NewTopic("bench", num_partitions=1, replication_factor=1)])[
        "bench"].result(timeout=30)


@contextlib.contextmanager
def broker(data_dir: Path, profile_to: Path | None, network_threads: int,
           certificates: Certificates | None) -> Iterator[tuple[int, psutil.Process]]:
    port = free_port()
    command = [sys.executable]
    command += ["-m", "kgroups.cli"] if profile_to is None else ["-c", PROFILED, str(profile_to)]
    command += ["serve", "--port", str(port), "--data-dir", str(data_dir),
                "--log-level", "WARNING", "--override", "group.initial.rebalance.delay.ms=0",
                "--override", f"num.network.threads={network_threads}"]
    if certificates is not None:
        command += ssl_listener_overrides(port, certificates)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        create_bench_topic(port, certificates)
        yield port, psutil.Process(process.pid)
    finally:
        process.terminate()  # `kgroups serve` stops cleanly on SIGTERM, so cProfile writes
        process.wait(timeout=60)


async def pipelined(connections: list[PipelinedConnection], make: RequestMaker,
                    total: int) -> None:
    """`total` requests, DEPTH in flight per connection; every answer must be error-free."""
    per_lane = total // (len(connections) * DEPTH)

    async def lane(index: int, connection: PipelinedConnection) -> None:
        for _ in range(per_lane):
            check_answer(await connection.send(make(index, connection)))

    await asyncio.gather(*(lane(i, c) for i, c in enumerate(connections) for _ in range(DEPTH)))


async def rebalances(connection: PipelinedConnection, count: int) -> None:
    """A one-member group's leader rejoining: JoinGroup (the group rebalances at once) and
    SyncGroup with its assignment, `count` times, one pair at a time."""
    member_id = ""
    for _ in range(count):
        join = await join_group(connection, "bench-rebalance", member_id)
        if join.error_code != ErrorCode.NONE:
            raise RuntimeError(f"JoinGroup: {ErrorCode(int(join.error_code)).name}")
        member_id = join.member_id
        check_answer(await connection.send(connection.request(
            SYNC, group_id="bench-rebalance", generation_id=join.generation_id,
            member_id=member_id, group_instance_id=None, protocol_type="consumer",
            protocol_name=join.protocol_name, assignments=())))


def cpu_seconds(process: psutil.Process) -> tuple[float, float]:
    """User + system CPU of the broker process and of its network processes."""
    network = sum(sum(child.cpu_times()[:2]) for child in process.children())
    return sum(process.cpu_times()[:2]), network


async def cost(port: int, kind: str, requests: int, process: psutil.Process,
               tls: ssl.SSLContext | None) -> tuple[float, float]:
    """Broker-process and network-process CPU microseconds per request of `kind`, after a
    warm-up of a tenth as many."""
    versions = await negotiate(port, tls)
    connections = [await PipelinedConnection.open(port, versions, tls)
                   for _ in range(CONNECTIONS)]
    _, joins = await form_group(connections, "bench-heartbeat")

    makers: dict[str, RequestMaker] = {"heartbeat": heartbeats_of(joins), "commit": commit,
                                       "metadata": metadata}

    async def run(count: int) -> int:
        if kind == "join+sync":
            await rebalances(connections[0], count // 20)
            return count // 20 * 2
        await pipelined(connections, makers[kind], count)
        return count // (CONNECTIONS * DEPTH) * CONNECTIONS * DEPTH

    await run(requests // 10)
    broker_before, network_before = cpu_seconds(process)
    done = await run(requests)
    broker_after, network_after = cpu_seconds(process)
    for connection in connections:
        await connection.close()
    return ((broker_after - broker_before) / done * 1e6,
            (network_after - network_before) / done * 1e6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument("--profile", action="store_true",
                        help="run the broker under cProfile and print where the time goes")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--network-threads", type=int, default=0,
                        help="num.network.threads of the broker (0: sockets served in the "
                             "broker process, as measured before network processes existed)")
    parser.add_argument("--tls", action="store_true",
                        help="serve and connect over one SSL listener (PEM certificates made "
                             "for the run)")
    args = parser.parse_args()
    kinds = ("heartbeat", "commit", "metadata", "join+sync")
    figures: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        certificates = make_certificates(Path(scratch) / "certs") if args.tls else None
        _, tls = client_tls(certificates)
        for kind in kinds:
            profile_to = Path(scratch) / f"{kind}.prof" if args.profile else None
            with broker(Path(scratch) / kind, profile_to, args.network_threads,
                        certificates) as (port, process):
                figures[kind] = asyncio.run(cost(port, kind, args.requests, process, tls))
            if profile_to is not None:
                print(f"== {kind}: functions with the most own time")
                pstats.Stats(str(profile_to)).sort_stats("tottime").print_stats(args.top)
    profiled = " (under cProfile: inflated, read the split not the total)" if args.profile else ""
    print(f"CPU per request, {args.requests:,} requests per kind, "
          f"num.network.threads={args.network_threads}{' over TLS' if args.tls else ''}"
          f"{profiled}")
    print(f"  {'kind':<12} {'broker':>10} {'network':>10} {'total':>10}")
    for kind, (in_broker, in_network) in figures.items():
        print(f"  {kind:<12} {in_broker:8.1f} µs {in_network:7.1f} µs "
              f"{in_broker + in_network:7.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
