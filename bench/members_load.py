"""N light consumers of one group on one machine (kgroups.loadgen: kgroups.member's state
machines over asyncio sockets, one connection each) against `kgroups serve` and Apache Kafka
4.3.1, each started by the bench with its own defaults (group.initial.rebalance.delay.ms 3 s;
Kafka: a single KRaft node, bench/broker.py's settings, 1 GiB heap).

Per broker and protocol, on a fresh topic of --partitions partitions and a fresh group:
- time to Stable: from the first member's start (connections open --connect-concurrency at a
  time, each member starting as soon as its own is up) until every member holds its assignment
  of one generation (classic) or one assignment epoch (consumer protocol) and every partition
  is owned exactly once;
- heartbeats answered per second without an error over a steady window (--steady-s, 60 by
  default) after Stable, beside those sent (well above: the broker is behind) and what the
  members' interval asks for (N / 3 s classic; N / the broker's
  group.consumer.heartbeat.interval.ms, 5 s, for the consumer protocol; sent well below it:
  the driver is behind, short of CPU);
- every error answer of the run by API and code (MEMBER_ID_REQUIRED and REBALANCE_IN_PROGRESS
  are how a classic group forms), and the bench process's CPU seconds over the steady window
  (the driver's own cost: if it nears the window, the driver is the bottleneck);
- kgroups/Kafka ratios of both figures.
Members behave as the Java consumer with its defaults (kgroups.member: heartbeat.interval.ms
3000, session.timeout.ms 45000, auto-commit every 5 s of what they own, a 100 ms poll loop).
Classic groups are unbounded on both brokers (group.max.size), and so are consumer groups
(Kafka 4.3.1's group.consumer.max.size defaults to Integer.MAX_VALUE, not 200). But Kafka keeps
a classic group's state in one record of every member's subscription and assignment, and with
its default message.max.bytes (1 MB) a 10,000-member group did not form here: pass
--kafka-setting message.max.bytes=10485760 (bench/RESULTS.md). At the end of a
run the members' connections close without LeaveGroup (their sessions expire on the broker
while the next protocol runs, on another group).

The open-file limit is raised to its hard limit first (one socket per member here, and one per
member in the broker, which inherits the limit); fewer than N + 200 descriptors is refused.

Run: .venv/bin/python bench/members_load.py [--members 10000] [--partitions 1000]
     [--protocols eager,consumer] [--steady-s 60] [--kafka-setting name=value ...]
     [--no-kafka] [--no-kgroups]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker import kafka_broker, wait_coordinator_ready
from join_storm import kgroups_serve
from kgroups.loadgen import LoadError, LoadGenerator
from kgroups.loadgen.tally import HEARTBEAT_APIS
from kgroups.member import MemberSettings, Protocol
from kgroups.tools.topic_admin import create_topic
from kgroups.tools.wire_client import KafkaWireClient

ASSIGNORS = {Protocol.EAGER: "range", Protocol.COOPERATIVE: "cooperative-sticky",
             Protocol.CONSUMER: "uniform"}
# Each member's expected heartbeat interval, for the "asked for" column (the consumer
# protocol's is the brokers' group.consumer.heartbeat.interval.ms default).
INTERVAL_S = {Protocol.EAGER: 3.0, Protocol.COOPERATIVE: 3.0, Protocol.CONSUMER: 5.0}
SPARE_DESCRIPTORS = 200


@dataclass
class Figures:
    stable_s: float
    heartbeats_per_s: float
    sent_per_s: float  # heartbeats sent: well above those answered, the broker is behind
    cpu_s: float
    errors: dict[str, int] = field(default_factory=dict)
    failures: int = 0


def raise_open_file_limit(members: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, members + SPARE_DESCRIPTORS)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if wanted < members + SPARE_DESCRIPTORS:
        raise SystemExit(f"open-file limit {wanted} is too low for {members} members "
                         f"(one socket each, plus {SPARE_DESCRIPTORS}); raise `ulimit -Hn`")
    return wanted


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_run(port: int, protocol: Protocol, args: argparse.Namespace) -> Figures | None:
    """The run's figures; None when the group did not become Stable (said why)."""
    topic = f"load-{protocol.value}-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(make_topic, port, topic, args.partitions)
    await wait_coordinator_ready(port)
    settings = MemberSettings(f"{topic}-group", (topic,), protocol, ASSIGNORS[protocol])
    generator = await LoadGenerator.connect("127.0.0.1", port, settings)
    try:
        started = time.monotonic()
        await generator.start_members(args.members, args.connect_concurrency)
        try:
            await generator.wait_stable(args.stable_timeout_s, check_every_s=0.25)
        except LoadError as exc:
            print(f"  {exc}; errors {errors_of(generator)}", flush=True)
            return None
        stable_s = time.monotonic() - started
        heard, sent, cpu = generator.tally.heartbeats, heartbeats_sent(generator), process_cpu_s()
        steady_started = time.monotonic()
        await generator.hold(args.steady_s, check_every_s=0.5)
        steady_s = time.monotonic() - steady_started
        rate = (generator.tally.heartbeats - heard) / steady_s
        sent_rate = (heartbeats_sent(generator) - sent) / steady_s
        cpu = process_cpu_s() - cpu
        still = "Stable" if generator.stable() else f"not Stable ({generator.describe()})"
        print(f"  after the steady window: {still}", flush=True)
        return Figures(stable_s, rate, sent_rate, cpu, errors_of(generator),
                       len(generator.tally.failures))
    finally:
        await generator.shutdown()


def errors_of(generator: LoadGenerator) -> dict[str, int]:
    return {f"{api} {code}": count
            for (api, code), count in generator.tally.errors.most_common()}


def heartbeats_sent(generator: LoadGenerator) -> int:
    return sum(generator.tally.sent[api] for api in HEARTBEAT_APIS)


def make_topic(port: int, topic: str, partitions: int) -> None:
    with KafkaWireClient("127.0.0.1", port) as client:
        create_topic(client, topic, partitions, {})


def run_against(name: str, port: int, args: argparse.Namespace,
                results: dict[tuple[str, Protocol], Figures]) -> None:
    async def run() -> None:
        for protocol in args.protocols:
            print(f"{name}: {args.members} {protocol.value} members ...", flush=True)
            figures = await one_run(port, protocol, args)
            if figures is None:
                continue
            results[name, protocol] = figures
            print(f"{name:8} {protocol.value:11} {args.members} members: Stable in "
                  f"{figures.stable_s:.2f} s; {figures.heartbeats_per_s:.0f} heartbeats/s "
                  f"answered over {args.steady_s:g} s ({figures.sent_per_s:.0f}/s sent, asked for "
                  f"{args.members / INTERVAL_S[protocol]:.0f}/s); bench CPU "
                  f"{figures.cpu_s:.1f} s; errors {figures.errors or 'none'}; "
                  f"{figures.failures} members stopped", flush=True)

    with event_loop() as runner:
        runner.run(run())


@contextlib.contextmanager
def event_loop() -> Iterator[asyncio.Runner]:
    """uvloop when installed (the driver's own cost per request is most of its CPU)."""
    try:
        import uvloop
    except ImportError:
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        yield runner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--protocols", default="eager,consumer",
                        type=lambda text: [Protocol(p) for p in text.split(",")],
                        help="among eager, cooperative, consumer")
    parser.add_argument("--steady-s", type=float, default=60.0)
    parser.add_argument("--stable-timeout-s", type=float, default=900.0)
    parser.add_argument("--connect-concurrency", type=int, default=64,
                        help="connections being opened at once (Kafka's listen backlog is 50)")
    parser.add_argument("--kafka-setting", action="append", default=[],
                        help="a Kafka broker setting, name=value (repeatable), e.g. "
                        "message.max.bytes=10485760 for a classic group's record of 10,000 "
                        "members")
    parser.add_argument("--no-kafka", action="store_true", help="skip Apache Kafka")
    parser.add_argument("--no-kgroups", action="store_true", help="skip kgroups")
    args = parser.parse_args()
    limit = raise_open_file_limit(args.members)
    load = os.getloadavg()
    print(f"{args.members} members, {args.partitions} partitions, steady window "
          f"{args.steady_s:g} s; open-file limit {limit}; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    results: dict[tuple[str, Protocol], Figures] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if not args.no_kgroups:
            with kgroups_serve(Path(scratch) / "kgroups", [], None) as port:
                run_against("kgroups", port, args, results)
        if not args.no_kafka:
            extra = dict(setting.split("=", 1) for setting in args.kafka_setting)
            with kafka_broker(Path(scratch) / "kafka", 3000, False, extra) as port:
                run_against("kafka", port, args, results)
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for protocol in args.protocols:
        ours, theirs = results.get(("kgroups", protocol)), results.get(("kafka", protocol))
        if ours is not None and theirs is not None:
            print(f"kgroups/kafka {protocol.value:11}: time to Stable "
                  f"{ours.stable_s / theirs.stable_s:.2f}, heartbeats/s "
                  f"{ours.heartbeats_per_s / theirs.heartbeats_per_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
