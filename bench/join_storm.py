"""A join storm: N members joining one consumer group at once, on `kgroups serve` and Apache
Kafka 4.3.1 in the same run, with a bystander's OffsetCommit latency meanwhile (issue 29).

One connection pipelines N ConsumerGroupHeartbeat joins (KIP-848, member epoch 0, distinct
member ids, all subscribed to one topic of --partitions partitions) into one group. Then, as
members do once they hear of a new target, the members that are not yet at the group's target
heartbeat again (their epoch and the partitions they hold; ConsumerGroupDescribe says who),
with those whose heartbeat interval is up, a round every --round-ms, until the group is Stable
at its group epoch. Meanwhile another connection commits an offset for another group every
10 ms (a simple commit: generation -1), from a process of its own (in the storm's it
measured the load generator's own work).

Printed per broker and N: seconds until every join was answered, seconds until the group was
Stable with every member at the target, the heartbeat rounds that took, and the bystander's
commits from the first join until Stable (how many, p50, p99, the longest wait) and those sent
while the joins were being answered (how many, the longest wait). Until Stable includes the
rounds' ConsumerGroupDescribe of the whole group, one request that kgroups answers in one go.
Both brokers keep their defaults (so both batch target computations:
group.consumer.assignment.interval.ms, 1 s), but for a single __consumer_offsets replica on
Kafka. Each N gets a fresh group on the same broker.

With --profile kgroups runs under cProfile (CPU time) and the functions with the most own
time, then the most time in all, are printed.

Run: .venv/bin/python bench/join_storm.py [--members 1000,2000,5000] [--partitions 64]
     [--no-kafka] [--override name=value ...] [--profile]   (--override: kgroups only)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import multiprocessing
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventFlag
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from broker import PipelinedConnection, kafka_broker, negotiate, wait_coordinator_ready
from broker_data import free_port, serving
from kgroups.errors import ErrorCode
from request_path import PROFILED

COMMIT, CG_HEARTBEAT, CG_DESCRIBE = 8, 68, 69
TOPIC = "storm"
COMMIT_EVERY_S = 0.01
SETTLE_TIMEOUT_S = 600.0
NO_TIMEOUT = datetime.timedelta(milliseconds=-1)


@contextlib.contextmanager
def kgroups_serve(data_dir: Path, overrides: list[str], profile_to: Path | None,
                  ) -> Iterator[int]:
    """`kgroups serve` as shipped (its defaults; network processes as the machine gets),
    under cProfile when `profile_to` names the output."""
    port = free_port()
    command = [sys.executable]
    command += ["-m", "kgroups.cli"] if profile_to is None else ["-c", PROFILED, str(profile_to)]
    command += ["serve", "--port", str(port), "--data-dir",
               str(data_dir), "--log-level", "WARNING"]
    for override in overrides:
        command += ["--override", override]
    with serving(command, port, stop_timeout=60) as served:
        yield served


def create_topics(port: int, partitions: int) -> None:
    """The group's topic and the bystander's (Kafka refuses commits for unknown topics)."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=partitions,
                                            replication_factor=1),
                                   NewTopic("bench", num_partitions=1, replication_factor=1)])
    for future in futures.values():
        future.result(timeout=30)


class Member:
    """What one member knows: its id, epoch and the partitions it holds."""

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, tuple[int, ...]] = {}
        self.due = 0.0  # when its heartbeat interval asks for the next heartbeat (monotonic)

    def heartbeat(self, connection: PipelinedConnection, group: str) -> Any:
        joining = self.epoch == 0
        return connection.request(
            CG_HEARTBEAT, group_id=group, member_id=self.member_id, member_epoch=self.epoch,
            instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=30) if joining else NO_TIMEOUT,
            subscribed_topic_names=(TOPIC,) if joining else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=tuple(
                connection.nested(CG_HEARTBEAT, "TopicPartitions", topic_id=t, partitions=ps)
                for t, ps in self.owned.items()))

    def absorb(self, answer: Any) -> None:
        if answer.error_code != ErrorCode.NONE:
            raise RuntimeError(f"{self.member_id}: {ErrorCode(int(answer.error_code)).name} "
                               f"{answer.error_message}")
        self.epoch = int(answer.member_epoch)
        self.due = time.monotonic() + answer.heartbeat_interval.total_seconds()
        if answer.assignment is not None:  # taken at once, as clients acknowledge
            self.owned = {t.topic_id: tuple(sorted(t.partitions))
                          for t in answer.assignment.topic_partitions}


async def bystander(connection: PipelinedConnection,
                    stop: EventFlag) -> list[tuple[float, float]]:
    """When each commit was sent (monotonic) and the seconds it took, one commit every
    COMMIT_EVERY_S until `stop`."""
    waits = []
    index = 0
    while not stop.is_set():
        index += 1
        started = time.monotonic()
        answer = await connection.send(connection.request(
            COMMIT, group_id="bystander", generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, retention_time=datetime.timedelta(0),
            topics=(connection.nested(COMMIT, "OffsetCommitRequestTopic", name="bench",
                                      partitions=(connection.nested(
                                          COMMIT, "OffsetCommitRequestPartition",
                                          partition_index=0, committed_offset=index,
                                          committed_leader_epoch=-1,
                                          committed_metadata=""),)),)))
        waits.append((started, time.monotonic() - started))
        (topic,) = answer.topics
        if topic.partitions[0].error_code != ErrorCode.NONE:
            raise RuntimeError(f"bystander commit: {topic.partitions[0].error_code}")
        await asyncio.sleep(COMMIT_EVERY_S)
    return waits


def bystander_process(port: int, versions: dict[int, int], stop: EventFlag,
                      results: Connection) -> None:
    """The bystander in a process of its own: in the storm's process its commits waited for
    the client's own work (building thousands of requests, decoding their answers), which
    measured the load generator, not the broker. time.monotonic() is the system's clock, so
    its times compare with the storm's."""
    async def run() -> list[tuple[float, float]]:
        connection = await PipelinedConnection.open(port, versions)
        try:
            return await bystander(connection, stop)
        finally:
            await connection.close()

    results.send(asyncio.run(run()))


async def describe(connection: PipelinedConnection, group: str) -> Any:
    (described,) = (await connection.send(connection.request(
        CG_DESCRIBE, group_ids=(group,), include_authorized_operations=False))).groups
    return described


def at_target(member: Any) -> bool:
    held = {(t.topic_id, p) for t in member.assignment.topic_partitions for p in t.partitions}
    wanted = {(t.topic_id, p) for t in member.target_assignment.topic_partitions
              for p in t.partitions}
    return held == wanted


async def storm(port: int, members: int, group: str, round_ms: int) -> dict[str, float]:
    versions = {**await negotiate(port), CG_HEARTBEAT: 1, CG_DESCRIBE: 1}
    connection = await PipelinedConnection.open(port, versions)
    observer = await PipelinedConnection.open(port, versions)
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    receiving, sending = spawn.Pipe(duplex=False)
    watcher = spawn.Process(target=bystander_process, args=(port, versions, stop, sending))
    watcher.start()
    await asyncio.sleep(1.5)  # the bystander's start and baseline
    joining = [Member(f"storm-{index:05d}-{uuid.uuid4().hex[:8]}") for index in range(members)]
    by_id = {member.member_id: member for member in joining}
    started = time.monotonic()
    answers = await asyncio.gather(*(connection.send(m.heartbeat(connection, group))
                                     for m in joining))
    joined = time.monotonic() - started
    for member, answer in zip(joining, answers, strict=True):
        member.absorb(answer)
    rounds = 0
    while True:
        state = await describe(observer, group)
        if state.group_state == "Stable" and state.group_epoch == state.assignment_epoch:
            break
        if time.monotonic() - started > SETTLE_TIMEOUT_S:
            raise RuntimeError(f"group not Stable after {SETTLE_TIMEOUT_S} s: {state.group_state}")
        await asyncio.sleep(round_ms / 1000)
        # Everyone while the target is behind (the next heartbeat computes it), else those not
        # yet holding their target and those whose heartbeat interval is up (a member that
        # stops heartbeating is removed after the session timeout, as a real one would be).
        now = time.monotonic()
        lagging = joining if state.group_epoch != state.assignment_epoch else [
            by_id[m.member_id] for m in state.members
            if int(m.member_epoch) != int(state.assignment_epoch) or not at_target(m)
            or by_id[m.member_id].due <= now]
        rounds += 1
        answers = await asyncio.gather(*(connection.send(m.heartbeat(connection, group))
                                         for m in lagging))
        for member, answer in zip(lagging, answers, strict=True):
            member.absorb(answer)
    stable = time.monotonic() - started
    stop.set()
    sent = await asyncio.to_thread(receiving.recv)
    watcher.join()
    for each in (connection, observer):
        await each.close()
    during_joins = [wait for at, wait in sent if started <= at < started + joined]
    return {"joined_s": joined, "stable_s": stable, "rounds": rounds,
            **percentiles("", [wait for at, wait in sent if at >= started]),
            **percentiles("joins_", during_joins or [0.0])}


def percentiles(prefix: str, waits: list[float]) -> dict[str, float]:
    waits = sorted(waits)
    return {f"{prefix}commits": len(waits), f"{prefix}p50_ms": 1000 * statistics.median(waits),
            f"{prefix}p99_ms": 1000 * waits[min(len(waits) - 1, int(len(waits) * 0.99))],
            f"{prefix}max_ms": 1000 * waits[-1]}


def run_against(name: str, port: int, args: argparse.Namespace) -> None:
    create_topics(port, args.partitions)

    async def run() -> None:
        await wait_coordinator_ready(port)
        for members in args.members:
            figures = await storm(port, members, f"storm-{members}-{uuid.uuid4().hex[:6]}",
                                  args.round_ms)
            print(f"{name:8} {members:5} members: joined {figures['joined_s']:6.2f} s, Stable "
                  f"{figures['stable_s']:6.2f} s ({figures['rounds']:.0f} rounds); bystander "
                  f"until Stable {figures['commits']:.0f} commits, p50 {figures['p50_ms']:.1f} "
                  f"ms, p99 {figures['p99_ms']:.1f} ms, max {figures['max_ms']:.1f} ms; while "
                  f"joining {figures['joins_commits']:.0f} commits, max "
                  f"{figures['joins_max_ms']:.1f} ms", flush=True)

    asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=lambda text: [int(n) for n in text.split(",")],
                        default=[1000, 2000, 5000])
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--round-ms", type=int, default=250,
                        help="pause between the lagging members' heartbeat rounds")
    parser.add_argument("--profile", action="store_true",
                        help="run kgroups under cProfile and print where its time goes")
    parser.add_argument("--no-kafka", action="store_true", help="skip Apache Kafka")
    parser.add_argument("--override", action="append", default=[],
                        help="a kgroups setting, name=value (repeatable)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        profile_to = Path(scratch) / "storm.prof" if args.profile else None
        with kgroups_serve(Path(scratch) / "kgroups", args.override, profile_to) as port:
            run_against("kgroups", port, args)
        if profile_to is not None:
            for order in ("tottime", "cumulative"):
                pstats.Stats(str(profile_to)).sort_stats(order).print_stats(25)
        if not args.no_kafka:
            with kafka_broker(Path(scratch) / "kafka", 3000, fsync_each=False) as port:
                run_against("kafka", port, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
