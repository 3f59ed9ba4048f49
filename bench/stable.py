"""Time to a Stable group (bench/broker.py's figure) alone, repeated, with the broker's CPU time.

bench/broker.py measures each group size once, after its throughput figures; this measures only
the formation of classic groups of N members (one connection each, `form_group` of
bench/broker.py: JoinGroup with MEMBER_ID_REQUIRED, the leader's SyncGroup with the assignment,
everyone's SyncGroup, heartbeats while waiting), several rounds per size, so a change to the
join path can be compared run against run on a shared machine. Per formation it prints the
seconds to Stable (the same clock as bench/broker.py: up to the SyncGroup answer that
completes the group) and the broker's CPU seconds meanwhile (kgroups only: the
user + system time of the broker's processes, which other jobs on the machine inflate far
less than the wall time).
Each size gets a fresh group; connections are opened before the clock starts. Both brokers run
with group.initial.rebalance.delay.ms=0 (bench/broker.py --initial-delay-ms 0).

With --kafka the same rounds run against Apache Kafka 4.3.1 (bench/broker.py's settings, a
fresh JVM: its first rounds include JIT warm-up, read the later ones). With --profile kgroups
runs under cProfile timed by CPU time and the functions with the most own time are printed.
With --core no broker runs: the same formation (every member's MEMBER_ID_REQUIRED round, their
joins, the first member's early generation and rejoin, the syncs, the leader's assignment and
its write) goes straight through the sans-IO GroupCoordinator, and its CPU time is printed.

Run: .venv/bin/python bench/stable.py [--members 10,100,1000] [--rounds 5] [--kafka]
     [--profile] [--top K] [--core] [--network-threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil

from broker import (
    ASSIGNMENT,
    SUBSCRIPTION,
    PipelinedConnection,
    form_group,
    kafka_broker,
    negotiate,
    wait_coordinator_ready,
)
from broker_data import free_port, wait_for_port
from kgroups.coordinator import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    JoinGroupRequest,
    SyncGroupRequest,
)
from kgroups.errors import ErrorCode
from request_path import PROFILED, create_bench_topic


@contextlib.contextmanager
def kgroups_broker(data_dir: Path, profile_to: Path | None, network_threads: int | None = None,
                   ) -> Iterator[tuple[int, psutil.Process]]:
    """`kgroups serve` with its defaults but no initial rebalance delay (under cProfile when
    `profile_to` names the output; with `network_threads` network processes when given), with
    the bench topic created."""
    port = free_port()
    command = [sys.executable]
    command += ["-m", "kgroups.cli"] if profile_to is None else ["-c", PROFILED, str(profile_to)]
    command += ["serve", "--port", str(port), "--data-dir", str(data_dir),
                "--log-level", "WARNING", "--override", "group.initial.rebalance.delay.ms=0"]
    if network_threads is not None:
        command += ["--override", f"num.network.threads={network_threads}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        create_bench_topic(port, None)
        yield port, psutil.Process(process.pid)
    finally:
        process.terminate()  # a clean stop, so cProfile writes its file
        process.wait(timeout=60)


def cpu_seconds(process: psutil.Process) -> float:
    """User + system time of the broker and any processes it started (network processes)."""
    total = 0.0
    for each in (process, *process.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += sum(each.cpu_times()[:2])
    return total


async def rounds(port: int, member_counts: list[int], count: int,
                 process: psutil.Process | None) -> dict[int, list[tuple[float, float | None]]]:
    """(seconds to Stable, broker CPU seconds or None) per formation, by group size."""
    await wait_coordinator_ready(port)
    versions = await negotiate(port)
    figures: dict[int, list[tuple[float, float | None]]] = {n: [] for n in member_counts}
    for round_index in range(count):
        for members in member_counts:
            connections = [await PipelinedConnection.open(port, versions) for _ in range(members)]
            before = cpu_seconds(process) if process is not None else 0.0
            elapsed, _ = await form_group(connections, f"stable-{members}-{round_index}")
            cpu = cpu_seconds(process) - before if process is not None else None
            figures[members].append((elapsed, cpu))
            for connection in connections:
                await connection.close()
    return figures


def core_formation(members: int) -> float:
    """CPU seconds of the sans-IO coordinator forming one group as `form_group`'s clients do
    (writes confirmed at once, as with Kafka's default durability)."""
    config = GroupCoordinatorConfig.from_properties({"group.initial.rebalance.delay.ms": "0"})
    coordinator = GroupCoordinator(config, new_uuid=uuid.uuid4)
    for partition in range(config.offsets_topic_num_partitions):
        coordinator.load_partition(partition, [], 0)
    request_ids = itertools.count()
    answers = {}

    def join(member_id: str) -> None:
        effects = coordinator.join_group(JoinGroupRequest(
            next(request_ids), "stable", member_id, "consumer", (("range", SUBSCRIPTION),),
            30_000, 30_000, client_id="bench", client_host="/127.0.0.1"), 0)
        answers.update((reply.request_id, reply.response) for reply in effects.replies)

    started = time.process_time()
    for _ in range(members):
        join("")
    for member_id in [answer.member_id for answer in answers.values()]:
        join(member_id)
    for early in [a for a in answers.values() if a.error == ErrorCode.NONE]:
        join(early.member_id)  # the first member's generation ended as the others joined
    generation = max(answer.generation_id for answer in answers.values())
    joined = [a for a in answers.values() if a.generation_id == generation]
    leader = next(answer for answer in joined if answer.members)
    for answer in [*(a for a in joined if a is not leader), leader]:  # the leader's goes last
        assignments = tuple((m.member_id, ASSIGNMENT) for m in answer.members)
        effects = coordinator.sync_group(SyncGroupRequest(
            next(request_ids), "stable", generation, answer.member_id, assignments), 0)
    (write,) = effects.writes
    stable = coordinator.write_completed(write.write_id, None, 0)
    assert len(stable.replies) == members, "every member gets its assignment"
    return time.process_time() - started


def report(name: str, figures: dict[int, list[tuple[float, float | None]]]) -> None:
    for members, runs in figures.items():
        seconds = [elapsed for elapsed, _ in runs]
        line = (f"{name:8} {members:5} members: median {statistics.median(seconds):.3f} s "
                f"({', '.join(f'{s:.3f}' for s in seconds)})")
        cpus = [cpu for _, cpu in runs if cpu is not None]
        if cpus:
            line += (f"; broker CPU median {statistics.median(cpus):.3f} s "
                     f"({', '.join(f'{c:.2f}' for c in cpus)})")
        print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=lambda text: [int(n) for n in text.split(",")],
                        default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kafka", action="store_true", help="also measure Apache Kafka")
    parser.add_argument("--profile", action="store_true",
                        help="run kgroups under cProfile and print where its time goes")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--network-threads", type=int, default=None,
                        help="num.network.threads of kgroups (default: kgroups serve's own)")
    parser.add_argument("--core", action="store_true",
                        help="only the sans-IO coordinator's CPU time per formation")
    args = parser.parse_args()
    if args.core:
        for members in args.members:
            seconds = [core_formation(members) for _ in range(args.rounds)]
            print(f"core     {members:5} members: median {statistics.median(seconds):.4f} s CPU "
                  f"({', '.join(f'{s:.4f}' for s in seconds)})")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        profile_to = Path(scratch) / "stable.prof" if args.profile else None
        with kgroups_broker(Path(scratch) / "kgroups", profile_to,
                            args.network_threads) as (port, process):
            report("kgroups", asyncio.run(rounds(port, args.members, args.rounds, process)))
        if profile_to is not None:
            pstats.Stats(str(profile_to)).sort_stats("tottime").print_stats(args.top)
        if args.kafka:
            with kafka_broker(Path(scratch) / "kafka", 0, fsync_each=False) as port:
                create_bench_topic(port, None)
                report("kafka", asyncio.run(rounds(port, args.members, args.rounds, None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
