"""What one request costs `kgroups serve`, from the bytes arriving to the answer written.

For Heartbeat, OffsetCommit (one partition), Metadata (one topic), ConsumerGroupHeartbeat (a
KIP-848 member of a stable group) and a JoinGroup + SyncGroup pair (a one-member group
rebalancing), the broker's own CPU time over many pipelined requests divided by their number:
microseconds of broker CPU per request, socket to socket. CPU time of the broker process (not
wall time) keeps the figure honest on a shared machine, and includes everything the request
costs: reading and checking the frame, decoding, the coordinator, the log write, encoding, the
event loop.

With --profile the broker runs under cProfile (timed by CPU), switched on by a signal for the
timed requests only (start-up and warm-up stay out), and prints per kind the split by stage:
each stage is the cumulative time of the functions that do it (`STAGES`), nested stages taken
out of the one around them, and what no stage claims (the event loop, tasks, futures, the
coordinator runtime's own bookkeeping) is "loop". cProfile inflates every Python call, so the
split is given as shares and as those shares of the CPU per request of the same kind's run
without the profiler; `--top K` also prints the functions with the most own time. The broker
is restarted per kind, so each profile holds one kind. Nothing in kgroups is changed to be
measured: the profile is the bench's own.

With --instructions the broker process also runs under valgrind's callgrind, counting the
machine instructions it executes for the timed requests (instrumentation switched on and off
around them with callgrind_control): the same figure run after run, where CPU time on a shared
virtual machine moves by 5-20% between runs, so a change of a few percent can be seen. The
broker runs ~50 times slower there, so the client pipelines more requests per read and per loop
turn than at full speed: compare counts with counts, never with microseconds.

Run: .venv/bin/python bench/request_path.py [--requests N] [--kinds K,K] [--profile] [--top K]
       [--instructions [--instructions-requests N]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import pstats
import shutil
import signal
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
    SESSION,
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
    wait_coordinator_ready,
)
from broker_data import free_port, wait_for_port
from kgroups.errors import ErrorCode

CONNECTIONS = 4  # the default of --connections
DEPTH = 8
CG_HEARTBEAT = 68
CG_HEARTBEAT_VERSION = 1
KINDS = ("heartbeat", "commit", "metadata", "cg-heartbeat", "join+sync")

RequestMaker = Callable[[int, PipelinedConnection], Any]

# `kgroups` under cProfile timed by CPU time (python -m cProfile times by the wall clock, which
# charges the event loop's idle waits to whatever coroutine was suspended), on from SIGUSR1 to
# SIGUSR2 (the timed requests); argv[1] is the file.
PROFILED = """
import cProfile, signal, sys, time
from kgroups.cli import main
out = sys.argv.pop(1)
profile = cProfile.Profile(time.process_time)
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
signal.signal(signal.SIGUSR2, lambda *_: profile.disable())
try:
    main()
except SystemExit:
    pass
finally:
    profile.disable()
    profile.dump_stats(out)
"""

# The request path's stages, each the functions (file suffix, name) whose cumulative CPU time
# it is. "handler" is what a connection's `_dispatch` spends (the broker process's own socket's
# or a relayed one's), less the answer's encoding, the ACL rule and all of the coordinator
# runtime's `call` (the shard, and the offsets write where it runs inside it): the API
# handler's own work. "core" is the coordinator shard, reached from
# `call` (`_dispatch`) or from the runtime's completions and timers; "record encode" and
# "append" are counted wherever they run (inside `call`, or at the end of the loop turn).
# The ACL row is the authorizer's wrapper: with an authorizer it holds the handler too, so the
# split is meant for a broker without one (the bench's), where the row is zero.
STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "frame in": (("net/local_connection.py", "_read_frame"),),
    "decode": (("broker/wire.py", "peek_header"), ("broker/wire.py", "decode_request")),
    "ACL": (("security/acl_enforcement.py", "__call__"),),
    "core": (("broker/coordinator_runtime.py", "_dispatch"),
             ("coordinator/coordinator.py", "write_completed"),
             ("coordinator/coordinator.py", "writes_completed"),
             ("coordinator/coordinator.py", "advance_time")),
    "record encode": (("broker/coordinator_runtime.py", "batch_of"),
                      ("broker/coordinator_runtime.py", "merged_runs"),
                      ("broker/coordinator_runtime.py", "plain_batch")),
    "append": (("log/partition_log.py", "append_batch"), ("log/durability.py", "settle")),
    "answer encode": (("broker/wire.py", "encode_response"),),
    "write": (("net/local_connection.py", "_pump"), ("net/local_connection.py", "_drain")),
}
HANDLER_AROUND = (("net/local_connection.py", "_dispatch"), ("net/front_link.py", "_dispatch"))
COORDINATOR_CALL = ("broker/coordinator_runtime.py", "call")
STAGE_ORDER = ("frame in", "decode", "ACL", "handler", "core", "record encode", "append",
               "answer encode", "write", "loop")


def create_bench_topic(port: int, certificates: Certificates | None) -> None:
    """The topic commits name (the admin client is gone once this returns, before the broker
    stops, so it does not log reconnect attempts)."""
    over_tls, _ = client_tls(certificates)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **over_tls})
    admin.create_topics([NewTopic("bench", num_partitions=1, replication_factor=1)])[
        "bench"].result(timeout=30)


def cumulative(stats: pstats.Stats, functions: tuple[tuple[str, str], ...]) -> float:
    """The cumulative CPU seconds of the named functions (every definition matching)."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return sum(entry[3] for (file, _, name), entry in table.items()
               if any(file.endswith(suffix) and name == wanted for suffix, wanted in functions))


def stage_split(profile: Path) -> dict[str, float]:
    """Profiled CPU seconds per stage (STAGE_ORDER); "loop" is the rest of the total."""
    stats = pstats.Stats(str(profile))
    split = {stage: cumulative(stats, functions) for stage, functions in STAGES.items()}
    split["handler"] = max(0.0, cumulative(stats, HANDLER_AROUND)
                           - cumulative(stats, (COORDINATOR_CALL,))
                           - split["ACL"] - split["answer encode"])
    total: float = stats.total_tt  # type: ignore[attr-defined]
    split["loop"] = max(0.0, total - sum(split.values()))
    return {stage: split[stage] for stage in STAGE_ORDER}


def print_split(kind: str, split: dict[str, float], requests: int, plain_us: float | None) -> None:
    total = sum(split.values())
    scale = f", scaled to {plain_us:.1f} µs unprofiled" if plain_us else ""
    print(f"== {kind}: stages (profiled {total / requests * 1e6:.1f} µs per request{scale})")
    for stage, seconds in split.items():
        share = seconds / total if total else 0.0
        scaled = f" {share * plain_us:7.1f} µs" if plain_us else ""
        print(f"  {stage:<14} {share * 100:5.1f} %{scaled}")


@contextlib.contextmanager
def broker(data_dir: Path, profile_to: Path | None, network_threads: int,
           certificates: Certificates | None,
           valgrind_log: Path | None = None) -> Iterator[tuple[int, psutil.Process]]:
    """A broker on a free port (under cProfile with `profile_to`, under callgrind, its
    instrumentation off until `counting` turns it on, with `valgrind_log`)."""
    port = free_port()
    command = [] if valgrind_log is None else [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--log-file={valgrind_log}",
        f"--callgrind-out-file={valgrind_log.with_suffix('.callgrind')}"]
    command += [sys.executable]
    command += ["-m", "kgroups.cli"] if profile_to is None else ["-c", PROFILED, str(profile_to)]
    command += ["serve", "--port", str(port), "--data-dir", str(data_dir),
                "--log-level", "WARNING", "--override", "group.initial.rebalance.delay.ms=0",
                # The consumer group's target assignment at once, not a second after a join
                # (the members would settle on an epoch the timed run then moves).
                "--override", "group.consumer.assignment.interval.ms=0",
                "--override", f"num.network.threads={network_threads}"]
    if certificates is not None:
        command += ssl_listener_overrides(port, certificates)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, process, 60 if valgrind_log is None else 900)
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


def answered(kind: str, count: int, connections: int) -> int:
    """How many requests a run of `count` sends: whole rounds of every lane, or (join+sync)
    a JoinGroup and a SyncGroup per twentieth."""
    if kind == "join+sync":
        return count // 20 * 2
    return count // (connections * DEPTH) * connections * DEPTH


def cpu_seconds(process: psutil.Process) -> tuple[float, float]:
    """User + system CPU of the broker process and of its network processes."""
    network = sum(sum(child.cpu_times()[:2]) for child in process.children())
    return sum(process.cpu_times()[:2]), network


async def consumer_members(connections: list[PipelinedConnection]) -> RequestMaker:
    """One KIP-848 member per connection in group bench-cg, heartbeating until the group is
    stable (every member at one epoch, and a round of heartbeats changes no epoch and no
    assignment); then the steady heartbeat each lane sends: the
    member's epoch, nothing changed (null subscription and partitions)."""
    member_ids = [f"bench-cg-member-{i}" for i in range(len(connections))]
    epochs = [0] * len(connections)
    owned: list[dict[Any, tuple[int, ...]]] = [{} for _ in connections]
    for _ in range(100):
        changed = False
        for i, connection in enumerate(connections):
            answer = await connection.send(connection.request(
                CG_HEARTBEAT, group_id="bench-cg", member_id=member_ids[i],
                member_epoch=epochs[i], instance_id=None, rack_id=None,
                rebalance_timeout=SESSION, subscribed_topic_names=("bench",),
                subscribed_topic_regex=None, server_assignor=None,
                topic_partitions=tuple(
                    connection.nested(CG_HEARTBEAT, "TopicPartitions", topic_id=t, partitions=p)
                    for t, p in owned[i].items())))
            check_answer(answer)
            given = owned[i] if answer.assignment is None else {
                t.topic_id: tuple(sorted(t.partitions))
                for t in answer.assignment.topic_partitions}
            changed |= int(answer.member_epoch) != epochs[i] or given != owned[i]
            epochs[i], owned[i] = int(answer.member_epoch), given
        if not changed and len(set(epochs)) == 1:
            break
        await asyncio.sleep(0.05)
    else:
        raise RuntimeError("the consumer group did not settle")
    unchanged = datetime.timedelta(milliseconds=-1)

    def heartbeat(index: int, connection: PipelinedConnection) -> Any:
        return connection.request(
            CG_HEARTBEAT, group_id="bench-cg", member_id=member_ids[index],
            member_epoch=epochs[index], instance_id=None, rack_id=None,
            rebalance_timeout=unchanged, subscribed_topic_names=None,
            subscribed_topic_regex=None, server_assignor=None, topic_partitions=None)
    return heartbeat


@contextlib.contextmanager
def counting(process: psutil.Process) -> Iterator[None]:
    """Callgrind's instrumentation of the broker on for the block."""
    subprocess.run(["callgrind_control", "--instr=on", str(process.pid)], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        yield
    finally:
        subprocess.run(["callgrind_control", "--instr=off", str(process.pid)], check=True,
                       stdout=subprocess.DEVNULL)


def instructions_counted(valgrind_log: Path) -> int:
    """What callgrind counted while instrumenting (its log's "Collected" line, written when
    the broker exits)."""
    for line in valgrind_log.read_text().splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1].strip().replace(",", ""))
    raise RuntimeError(f"no instruction count in {valgrind_log}")


async def cost(port: int, kind: str, requests: int, process: psutil.Process,
               tls: ssl.SSLContext | None, profiled: bool,
               lanes: int = CONNECTIONS, counted: bool = False) -> tuple[float, float]:
    """Broker-process and network-process CPU microseconds per request of `kind`, after a
    warm-up of a tenth as many (a profiled broker profiles the timed requests only; under
    callgrind, `counted`, instructions are counted for them only)."""
    await wait_coordinator_ready(port, tls)  # every __consumer_offsets partition loaded
    versions = await negotiate(port, tls)
    versions[CG_HEARTBEAT] = CG_HEARTBEAT_VERSION
    connections = [await PipelinedConnection.open(port, versions, tls)
                   for _ in range(lanes)]
    makers: dict[str, RequestMaker] = {"commit": commit, "metadata": metadata}
    if kind == "heartbeat":
        _, joins = await form_group(connections, "bench-heartbeat")
        makers[kind] = heartbeats_of(joins)
    elif kind == "cg-heartbeat":
        makers[kind] = await consumer_members(connections)

    async def run(count: int) -> int:
        if kind == "join+sync":
            await rebalances(connections[0], count // 20)
        else:
            await pipelined(connections, makers[kind], count)
        return answered(kind, count, lanes)

    await run(requests // 10)
    if profiled:
        os.kill(process.pid, signal.SIGUSR1)
        await asyncio.sleep(0.2)  # the signal handled (the loop wakes for it) before the run
    broker_before, network_before = cpu_seconds(process)
    with counting(process) if counted else contextlib.nullcontext():
        done = await run(requests)
    broker_after, network_after = cpu_seconds(process)
    if profiled:
        os.kill(process.pid, signal.SIGUSR2)
    for connection in connections:
        await connection.close()
    return ((broker_after - broker_before) / done * 1e6,
            (network_after - network_before) / done * 1e6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"which request kinds, comma-separated (of {', '.join(KINDS)})")
    parser.add_argument("--profile", action="store_true",
                        help="also run each kind under cProfile and print its split by stage")
    parser.add_argument("--keep-profiles", type=Path, default=None,
                        help="with --profile, keep each kind's profile in this directory")
    parser.add_argument("--top", type=int, default=0,
                        help="with --profile, also print the K functions with most own time")
    parser.add_argument("--network-threads", type=int, default=0,
                        help="num.network.threads of the broker (0: sockets served in the "
                             "broker process, as measured before network processes existed)")
    parser.add_argument("--tls", action="store_true",
                        help="serve and connect over one SSL listener (PEM certificates made "
                             "for the run)")
    parser.add_argument("--connections", type=int, default=CONNECTIONS,
                        help="client connections (commit: one standalone group each; "
                             "bench/broker.py's commit phase has 16, most on partitions of "
                             "their own, so that each commit is a batch of its own)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each kind's instructions per request in the broker "
                             "process under valgrind's callgrind (see the module)")
    parser.add_argument("--instructions-requests", type=int, default=4_000,
                        help="with --instructions, how many requests are counted (the broker "
                             "runs ~50 times slower under callgrind)")
    args = parser.parse_args()
    if args.instructions and not shutil.which("valgrind"):
        parser.error("--instructions needs valgrind (apt-get install valgrind)")
    kinds = args.kinds.split(",")
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    if args.keep_profiles:
        args.keep_profiles.mkdir(parents=True, exist_ok=True)
    figures: dict[str, tuple[float, float]] = {}
    instructions: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        certificates = make_certificates(Path(scratch) / "certs") if args.tls else None
        _, tls = client_tls(certificates)
        for kind in kinds:
            with broker(Path(scratch) / kind, None, args.network_threads,
                        certificates) as (port, process):
                figures[kind] = asyncio.run(cost(port, kind, args.requests, process, tls,
                                                 profiled=False, lanes=args.connections))
            if args.instructions:
                valgrind_log = Path(scratch) / f"{kind}.valgrind"
                with broker(Path(scratch) / f"{kind}-counted", None, args.network_threads,
                            certificates, valgrind_log) as (port, process):
                    asyncio.run(cost(port, kind, args.instructions_requests, process, tls,
                                     profiled=False, lanes=args.connections, counted=True))
                instructions[kind] = instructions_counted(valgrind_log) / answered(
                    kind, args.instructions_requests, args.connections)
            if not args.profile:
                continue
            profile_to = (args.keep_profiles or Path(scratch)) / f"{kind}.prof"
            with broker(Path(scratch) / f"{kind}-profiled", profile_to, args.network_threads,
                        certificates) as (port, process):
                asyncio.run(cost(port, kind, args.requests, process, tls, profiled=True,
                                 lanes=args.connections))
            print_split(kind, stage_split(profile_to),
                        answered(kind, args.requests, args.connections), figures[kind][0])
            if args.top:
                pstats.Stats(str(profile_to)).sort_stats("tottime").print_stats(args.top)
    print(f"CPU per request, {args.requests:,} requests per kind over {args.connections} "
          f"connections, num.network.threads={args.network_threads}"
          f"{' over TLS' if args.tls else ''}")
    print(f"  {'kind':<12} {'broker':>10} {'network':>10} {'total':>10}"
          f"{'  broker instructions' if instructions else ''}")
    for kind, (in_broker, in_network) in figures.items():
        counted = f" {instructions[kind]:20,.0f}" if kind in instructions else ""
        print(f"  {kind:<12} {in_broker:8.1f} µs {in_network:7.1f} µs "
              f"{in_broker + in_network:7.1f} µs{counted}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
