"""A streams group's (KIP-1071) time to a stable assignment, `kgroups serve` beside Apache
Kafka 4.3.1 in the same run.

Over loopback, one connection per member, raw StreamsGroupHeartbeat v0 requests (light members,
not Kafka Streams JVMs): N instances (default 100) of one application whose topology is a
single subtopology reading a topic of 2N partitions, so 2N active tasks and no internal topics.
Each member joins with epoch 0 and the topology, takes what it is given at once (reports the
new tasks in its next heartbeat, sent at once after a change, as Streams does once it has
revoked and initialised its tasks), and otherwise heartbeats every heartbeat interval.
- form: seconds from the first heartbeat until every task is held by exactly one member and
  the members' counts are within one;
- one joins: one more member joins the stable group; seconds until it holds its tasks and the
  group is balanced again.
Both brokers run with a 500 ms streams heartbeat interval (group.streams.heartbeat.interval.ms
and its minimum, lowered from 5 s: the interval bounds how fast a member learns of a new target)
and Kafka's default initial rebalance delay for streams groups
(group.streams.initial.rebalance.delay.ms, 3 s), which the form time includes on both.

Run: .venv/bin/python bench/streams_groups.py [--members 100] [--repeat 3] [--no-kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import sys
import tempfile
import uuid
from pathlib import Path
from statistics import median
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from broker import PipelinedConnection, wait_coordinator_ready
from consumer_protocol import Holdings, form_and_join, kafka_serve, kgroups_serve
from kgroups.errors import ErrorCode

API_VERSIONS, STREAMS_HEARTBEAT = 18, 88
VERSIONS = {API_VERSIONS: 0, STREAMS_HEARTBEAT: 0}
TOPIC = "bench-streams"
SUBTOPOLOGY = "0"
REBALANCE_TIMEOUT = datetime.timedelta(seconds=45)
SETTINGS = {
    "group.streams.heartbeat.interval.ms": "500",
    "group.streams.min.heartbeat.interval.ms": "500",
}


def _topology(connection: PipelinedConnection) -> Any:
    """One subtopology reading TOPIC: a task per partition, nothing for the broker to create."""
    return connection.nested(
        STREAMS_HEARTBEAT, "Topology", epoch=0, subtopologies=(connection.nested(
            STREAMS_HEARTBEAT, "Subtopology", subtopology_id=SUBTOPOLOGY,
            source_topics=(TOPIC,), source_topic_regex=(), state_changelog_topics=(),
            repartition_sink_topics=(), repartition_source_topics=(),
            copartition_groups=()),))


def _tasks(connection: PipelinedConnection, partitions: frozenset[int]) -> tuple[Any, ...]:
    if not partitions:
        return ()
    return (connection.nested(STREAMS_HEARTBEAT, "TaskIds", subtopology_id=SUBTOPOLOGY,
                              partitions=tuple(sorted(partitions))),)


async def streams_member(connection: PipelinedConnection, group: str, holdings: Holdings,
                         stop: asyncio.Event) -> None:
    """A streams member that reconciles instantly (see the module doc)."""
    member_id = str(uuid.uuid4())
    epoch = 0
    held: frozenset[int] = frozenset()
    report: frozenset[int] | None = frozenset()  # the tasks to report; None: unchanged
    while not stop.is_set():
        joining = epoch == 0
        answer = await connection.send(connection.request(
            STREAMS_HEARTBEAT, group_id=group, member_id=member_id, member_epoch=epoch,
            endpoint_information_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=(REBALANCE_TIMEOUT if joining
                               else datetime.timedelta(milliseconds=-1)),
            topology=_topology(connection) if joining else None,
            active_tasks=None if report is None else _tasks(connection, report),
            standby_tasks=None if report is None else (),
            warmup_tasks=None if report is None else (),
            process_id=member_id if joining else None, user_endpoint=None,
            client_tags=() if joining else None, task_offsets=None, task_end_offsets=None,
            shutdown_application=False))
        if answer.error_code != ErrorCode.NONE:
            raise RuntimeError(f"heartbeat: {ErrorCode(int(answer.error_code)).name} "
                               f"{answer.error_message}")
        epoch, report = int(answer.member_epoch), None
        if answer.active_tasks is not None:
            held = frozenset(int(p) for t in answer.active_tasks for p in t.partitions)
            holdings.set(member_id, held)
            report = held
            continue  # report the new tasks at once
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), answer.heartbeat_interval.total_seconds())
    await connection.send(connection.request(
        STREAMS_HEARTBEAT, group_id=group, member_id=member_id, member_epoch=-1,
        endpoint_information_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(milliseconds=-1), topology=None,
        active_tasks=None, standby_tasks=None, warmup_tasks=None, process_id=None,
        user_endpoint=None, client_tags=None, task_offsets=None, task_end_offsets=None,
        shutdown_application=False))


async def group_figures(port: int, members: int) -> tuple[float, float]:
    """(seconds to form, seconds for one more member to get its share) for a new group."""
    await wait_coordinator_ready(port)
    return await form_and_join(port, VERSIONS, f"bench-streams-{uuid.uuid4().hex[:6]}",
                               streams_member, members)


def broker_figures(port: int, members: int, repeat: int) -> dict[str, float]:
    """Median over `repeat` fresh groups of the same application shape."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2 * members, replication_factor=1)])[
        TOPIC].result(timeout=120)
    runs = [asyncio.run(group_figures(port, members)) for _ in range(repeat)]
    return {f"form {members} s": median(f for f, _ in runs),
            f"one joins {members} s": median(j for _, j in runs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-kafka", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with kgroups_serve(Path(tmp) / "kgroups", SETTINGS) as port:
            results["kgroups"] = broker_figures(port, args.members, args.repeat)
        if not args.no_kafka:
            with kafka_serve(Path(tmp) / "kafka", SETTINGS) as port:
                results["kafka 4.3.1"] = broker_figures(port, args.members, args.repeat)
    print(f"streams group, {args.members} members / {2 * args.members} tasks, "
          f"median of {args.repeat}:")
    print(f"{'':24}" + "".join(f"{name:>14}" for name in results))
    for key in next(iter(results.values())):
        print(f"{key:24}" + "".join(f"{r[key]:14.3f}" for r in results.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
