"""The two rebalance protocols side by side on `kgroups serve` and Apache Kafka 4.3.1, one run.

Over loopback, one connection per member, raw requests (no client library in the way):
- form: N members (default 1000) start at once; seconds from the first request until every
  member holds its part of a complete, balanced assignment of a topic of 2N partitions (each
  partition held by exactly one member, counts within one). Classic protocol: JoinGroup and
  SyncGroup, the leader computing a range assignment, members heartbeating every 100 ms while
  they wait (as bench/broker.py forms groups); consumer protocol (KIP-848): ConsumerGroupHeartbeat,
  each member taking what it is given at once and heartbeating again at once after a change
  (as the Java client and librdkafka acknowledge), otherwise every heartbeat interval;
- join: one more member joins the Stable N-member group; seconds until it holds its
  partitions and every member holds its share again (classic: the whole group rejoins and
  syncs a new generation; consumer: only the members giving partitions up take part).
Both brokers run with group.initial.rebalance.delay.ms=3000 (Kafka's default: a new classic
group waits that long for more members) and a 500 ms consumer heartbeat interval
(group.consumer.heartbeat.interval.ms, and its minimum, lowered from 5 s on both: the interval
bounds how fast a member learns of a new target). Kafka keeps its other defaults, including
4.3's target-assignment batching (group.consumer.assignment.interval.ms).

Then the `uniform` server-side assignor at 10,000 members / 100,000 partitions (100 topics x
1000 partitions, every member subscribed to all): kgroups' (kgroups.assignors.server, Python)
beside Kafka's own (org.apache.kafka.coordinator.group.assignor.UniformAssignor, through
tests/java ServerAssignorBench, `make java-harness`), a full assignment and one member joining;
best of --repeat runs each, with balance and partitions moved.

Run: .venv/bin/python bench/consumer_protocol.py [--members 1000] [--no-kafka]
     [--assignor-members 10000] [--assignor-topics 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from broker import PipelinedConnection, wait_coordinator_ready
from broker_data import free_port, serving
from kafka_harness import KafkaBroker
from kgroups.assignors.server import ServerMember
from kgroups.assignors.server import assign as assign_server
from kgroups.errors import ErrorCode
from kgroups.records.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from kgroups.records.schema import ConsumerAssignment, ConsumerSubscription, TopicPartitions

API_VERSIONS, METADATA, JOIN, SYNC, HEARTBEAT, CG_HEARTBEAT = 18, 3, 11, 14, 12, 68
VERSIONS = {API_VERSIONS: 0, METADATA: 12, JOIN: 9, SYNC: 5, HEARTBEAT: 4, CG_HEARTBEAT: 1}
TOPIC = "bench-protocols"
SESSION = datetime.timedelta(seconds=45)
SETTINGS = {
    "group.initial.rebalance.delay.ms": "3000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
JAVA_HARNESS_HOME = Path(os.environ.get(
    "JAVA_HARNESS_HOME", Path.home() / ".cache" / "kgroups" / "java-harness"))
SETTLE_TIMEOUT_S = 300.0


class Holdings:
    """Who holds which partition right now, kept incrementally: `settled` is set when every
    partition has exactly one holder and the members' counts are within one."""

    def __init__(self, partitions: int, members: int) -> None:
        self.partitions = partitions
        self.members = members
        self.held: dict[str, frozenset[int]] = {}
        self.holders: Counter[int] = Counter()
        self.sizes: Counter[int] = Counter({0: members})
        self.settled = asyncio.Event()

    def resize(self, members: int) -> None:
        self.sizes[0] += members - self.members
        self.members = members
        self.settled.clear()
        self._check()

    def set(self, member: str, partitions: frozenset[int]) -> None:
        before = self.held.get(member, frozenset())
        if before == partitions:
            return
        self.holders.subtract(before)
        self.holders.update(partitions)
        self.sizes[len(before)] -= 1
        self.sizes[len(partitions)] += 1
        self.held[member] = partitions
        self._check()

    def _check(self) -> None:
        counts = [size for size, n in self.sizes.items() if n > 0]
        complete = (sum(self.holders.values()) == self.partitions
                    and sum(1 for n in self.holders.values() if n == 1) == self.partitions)
        if complete and max(counts) - min(counts) <= 1:
            self.settled.set()
        else:
            self.settled.clear()


async def negotiate(port: int) -> dict[int, int]:
    connection = await PipelinedConnection.open(port, {API_VERSIONS: 0})
    response = await connection.send(connection.request(API_VERSIONS))
    await connection.close()
    advertised = {int(a.api_key): int(a.max_version) for a in response.api_keys}
    return {key: min(version, advertised[key]) for key, version in VERSIONS.items()}


async def topic_id(port: int, versions: dict[int, int]) -> uuid.UUID:
    connection = await PipelinedConnection.open(port, versions)
    response = await connection.send(connection.request(
        METADATA, topics=(connection.nested(METADATA, "MetadataRequestTopic", name=TOPIC,
                                            topic_id=None),),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False))
    await connection.close()
    (topic,) = response.topics
    return topic.topic_id


# ------------------------------------------------------------------- consumer protocol


async def consumer_member(connection: PipelinedConnection, group: str, holdings: Holdings,
                          stop: asyncio.Event) -> None:
    """A KIP-848 member that reconciles instantly: it reports what it was given, heartbeats
    at once after a change and every heartbeat interval otherwise."""
    member_id = str(uuid.uuid4())
    epoch = 0
    owned: dict[uuid.UUID, tuple[int, ...]] = {}
    full = True
    while not stop.is_set():
        request = connection.request(
            CG_HEARTBEAT, group_id=group, member_id=member_id, member_epoch=epoch,
            instance_id=None, rack_id=None,
            rebalance_timeout=SESSION if full else datetime.timedelta(milliseconds=-1),
            subscribed_topic_names=(TOPIC,) if full else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=tuple(
                connection.nested(CG_HEARTBEAT, "TopicPartitions", topic_id=t, partitions=ps)
                for t, ps in owned.items()))
        answer = await connection.send(request)
        if answer.error_code != ErrorCode.NONE:
            raise RuntimeError(f"heartbeat: {ErrorCode(int(answer.error_code)).name} "
                               f"{answer.error_message}")
        full = False
        epoch = int(answer.member_epoch)
        if answer.assignment is not None:
            owned = {t.topic_id: tuple(sorted(t.partitions))
                     for t in answer.assignment.topic_partitions}
            holdings.set(member_id, frozenset(p for ps in owned.values() for p in ps))
            continue  # acknowledge at once, as clients do after reconciling
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(),
                                   answer.heartbeat_interval.total_seconds())
    await connection.send(connection.request(
        CG_HEARTBEAT, group_id=group, member_id=member_id, member_epoch=-1, instance_id=None,
        rack_id=None, rebalance_timeout=datetime.timedelta(milliseconds=-1),
        subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=None))


# ---------------------------------------------------------------------------- classic


def _range_assignment(member_ids: list[str], partitions: int) -> dict[str, bytes]:
    """The leader's range assignment of TOPIC, as ConsumerProtocol bytes per member."""
    ordered = sorted(member_ids)
    share, extra = divmod(partitions, len(ordered))
    assignments, start = {}, 0
    for index, member in enumerate(ordered):
        count = share + (1 if index < extra else 0)
        assignments[member] = encode_assignment(ConsumerAssignment(
            assigned_partitions=(TopicPartitions(TOPIC, tuple(range(start, start + count))),),
            version=0))
        start += count
    return assignments


async def classic_member(connection: PipelinedConnection, group: str, holdings: Holdings,
                         stop: asyncio.Event) -> None:
    """An eager classic member: join (following MEMBER_ID_REQUIRED), the leader assigns by
    range, sync, heartbeat every 100 ms, rejoin when the group rebalances."""
    member_id, key = "", str(uuid.uuid4())
    subscription = encode_subscription(ConsumerSubscription(topics=(TOPIC,), version=0))
    while not stop.is_set():
        holdings.set(key, frozenset())  # eager: everything revoked before (re)joining
        join = await connection.send(connection.request(
            JOIN, group_id=group, session_timeout=SESSION, rebalance_timeout=SESSION,
            member_id=member_id, group_instance_id=None, protocol_type="consumer", reason=None,
            protocols=(connection.nested(JOIN, "JoinGroupRequestProtocol", name="range",
                                         metadata=subscription),)))
        if join.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            member_id = join.member_id
            continue
        if join.error_code != ErrorCode.NONE:
            raise RuntimeError(f"JoinGroup: {ErrorCode(int(join.error_code)).name}")
        member_id = join.member_id
        assignments: tuple[Any, ...] = ()
        if join.leader == member_id:
            assignments = tuple(
                connection.nested(SYNC, "SyncGroupRequestAssignment", member_id=m,
                                  assignment=a)
                for m, a in _range_assignment([m.member_id for m in join.members],
                                              holdings.partitions).items())
        sync = await connection.send(connection.request(
            SYNC, group_id=group, generation_id=join.generation_id, member_id=member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name=join.protocol_name,
            assignments=assignments))
        if sync.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            continue
        if sync.error_code != ErrorCode.NONE:
            raise RuntimeError(f"SyncGroup: {ErrorCode(int(sync.error_code)).name}")
        held = decode_assignment(sync.assignment).assigned_partitions if sync.assignment else ()
        holdings.set(key, frozenset(p for tp in held for p in tp.partitions))
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
            if stop.is_set():
                break
            beat = await connection.send(connection.request(
                HEARTBEAT, group_id=group, generation_id=join.generation_id,
                member_id=member_id, group_instance_id=None))
            if beat.error_code != ErrorCode.NONE:
                break  # REBALANCE_IN_PROGRESS: rejoin


# ------------------------------------------------------------------------------ runs


# A member of the benchmark: joins `group` on its connection and keeps `holdings` up to date
# until `stop` is set.
Member = Callable[[PipelinedConnection, str, Holdings, asyncio.Event], Awaitable[None]]


async def form_and_join(port: int, versions: dict[int, int], group: str, member: Member,
                        members: int) -> tuple[float, float]:
    """Seconds until N members of a new group hold a complete balanced share of 2N partitions
    (or tasks), then seconds until one more member gets its share with the group balanced
    again."""
    holdings = Holdings(2 * members, members)
    stop = asyncio.Event()
    connections = [await PipelinedConnection.open(port, versions) for _ in range(members + 1)]
    tasks: list[asyncio.Future[None]] = []
    try:
        started = time.perf_counter()
        tasks = [asyncio.ensure_future(member(c, group, holdings, stop))
                 for c in connections[:members]]
        await settle(holdings, tasks)
        formed = time.perf_counter() - started
        await asyncio.sleep(2)  # a Stable group: members back to their heartbeat rhythm
        holdings.resize(members + 1)
        started = time.perf_counter()
        tasks.append(asyncio.ensure_future(member(connections[-1], group, holdings, stop)))
        await settle(holdings, tasks)
        joined = time.perf_counter() - started
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for connection in connections:
            await connection.close()
    return formed, joined


async def protocol_figures(port: int, protocol: str, members: int) -> dict[str, float]:
    """Seconds to form an N-member group with a complete balanced assignment, then for one
    more member to get its share with the group balanced again."""
    versions = await negotiate(port)
    await wait_coordinator_ready(port)
    group = f"bench-{protocol}-{uuid.uuid4().hex[:6]}"
    member = consumer_member if protocol == "consumer" else classic_member
    formed, joined = await form_and_join(port, versions, group, member, members)
    return {f"{protocol}: form {members} s": formed,
            f"{protocol}: one joins {members} s": joined}


async def settle(holdings: Holdings, tasks: list[asyncio.Future[None]]) -> None:
    """Wait for a settled assignment, failing at once if a member failed."""
    waiter = asyncio.ensure_future(holdings.settled.wait())
    done, _ = await asyncio.wait([waiter, *tasks], timeout=SETTLE_TIMEOUT_S,
                                 return_when=asyncio.FIRST_COMPLETED)
    if waiter not in done:
        waiter.cancel()
        for task in done:
            task.result()
        raise RuntimeError("the group never settled")


def broker_figures(port: int, members: int) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2 * members, replication_factor=1)])[
        TOPIC].result(timeout=120)
    figures: dict[str, float] = {}
    for protocol in ("classic", "consumer"):
        figures.update(asyncio.run(protocol_figures(port, protocol, members)))
    return figures


@contextlib.contextmanager
def kgroups_serve(data_dir: Path, settings: Mapping[str, str] = SETTINGS) -> Iterator[int]:
    port = free_port()
    command = [sys.executable, "-m", "kgroups.cli", "serve", "--port", str(port), "--data-dir",
               str(data_dir), "--log-level", "WARNING"]
    for name, value in settings.items():
        command += ["--override", f"{name}={value}"]
    with serving(command, port) as served:
        yield served


@contextlib.contextmanager
def kafka_serve(workdir: Path, settings: Mapping[str, str] = SETTINGS) -> Iterator[int]:
    broker = KafkaBroker(workdir, settings={
        **settings, "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"},
        jvm_options=("-Xmx1g", "-Xms1g", "-XX:+UseG1GC"))
    broker.start()
    try:
        yield broker.port
    finally:
        broker.close()


# ---------------------------------------------------------------------------- assignors


def kgroups_uniform(members: int, topics: int, per_topic: int, repeat: int) -> dict[str, Any]:
    """kgroups' uniform assignor on the shape ServerAssignorBench gives Kafka's: topic i has
    id Uuid(1, i + 1), members are put into the member map in id order, the joining one
    last."""
    ids_of = [uuid.UUID(int=(1 << 64) | (t + 1)) for t in range(topics)]
    counts = dict.fromkeys(ids_of, per_topic)
    ids = [f"member-{m:06d}" for m in range(members)]
    fresh = [ServerMember(i, ids_of) for i in ids]
    best_full, full = _best(lambda: assign_server("uniform", fresh, counts), repeat)
    joined = [ServerMember(i, ids_of, {t: sorted(ps) for t, ps in full[i].items()}) for i in ids]
    joined.append(ServerMember("member-joining", ids_of))
    best_join, join = _best(lambda: assign_server("uniform", joined, counts), repeat)
    held, after = _by_index(full), _by_index(join)
    return {"full_ms": best_full * 1000, "join_ms": best_join * 1000,
            "full": _summary(held, {}), "join": _summary(after, held),
            "full_assignment": held, "join_assignment": after}


def _by_index(
    assignment: dict[str, dict[uuid.UUID, frozenset[int]]],
) -> dict[str, dict[str, list[int]]]:
    """{member: {topic index: sorted partitions}}, ServerAssignorBench's "print" shape."""
    return {member: {str((topic.int & 0xFFFFFFFFFFFFFFFF) - 1): sorted(ps)
                     for topic, ps in by_topic.items() if ps}
            for member, by_topic in assignment.items()}


def same_as_kafka(members: int, topics: int, per_topic: int) -> str:
    """Whether kgroups' uniform gives every member the partitions Kafka's gives it, for a
    small group (full assignment, then one member joining)."""
    ours = kgroups_uniform(members, topics, per_topic, 1)
    theirs = kafka_uniform(members, topics, per_topic, 1, show=True)
    verdicts = []
    for case in ("full", "join"):
        differing = sum(1 for m, a in theirs[f"{case}_assignment"].items()
                        if ours[f"{case}_assignment"].get(m, {}) != a)
        verdicts.append(f"{case}: {differing} of {len(theirs[f'{case}_assignment'])} members "
                        "differ")
    return "; ".join(verdicts)


def _best(run: Any, repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


def _summary(assignment: dict[str, dict[str, list[int]]],
             before: dict[str, dict[str, list[int]]]) -> dict[str, int]:
    """As ServerAssignorBench summarises Kafka's: fewest/most per member, total, and how many
    partitions a member got that it did not hold before."""
    counts, moved = [], 0
    for member, by_topic in assignment.items():
        had = {(t, p) for t, ps in before.get(member, {}).items() for p in ps}
        owned = [(t, p) for t, ps in by_topic.items() for p in ps]
        counts.append(len(owned))
        if before:
            moved += sum(1 for tp in owned if tp not in had)
    return {"fewest": min(counts), "most": max(counts), "assigned": sum(counts), "moved": moved}


def kafka_uniform(members: int, topics: int, per_topic: int, repeat: int,
                  show: bool = False) -> dict[str, Any]:
    jar = JAVA_HARNESS_HOME / "kgroups-java-harness.jar"
    if not jar.exists():
        raise SystemExit(f"{jar} is missing: run `make java-harness`")
    command = ["java", "-Xmx4g", "-cp", f"{jar}{os.pathsep}{JAVA_HARNESS_HOME / 'lib' / '*'}",
               "kgroups.harness.ServerAssignorBench", "uniform", str(members), str(topics),
               str(per_topic), str(repeat), *(["print"] if show else [])]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=1800)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--assignor-members", type=int, default=10_000)
    parser.add_argument("--assignor-topics", type=int, default=100)
    parser.add_argument("--assignor-partitions-per-topic", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-brokers", action="store_true")
    args = parser.parse_args()

    results: dict[str, dict[str, float]] = {}
    if not args.skip_brokers:
        with tempfile.TemporaryDirectory() as tmp:
            with kgroups_serve(Path(tmp) / "kgroups") as port:
                results["kgroups"] = broker_figures(port, args.members)
            if not args.no_kafka:
                with kafka_serve(Path(tmp) / "kafka") as port:
                    results["kafka 4.3.1"] = broker_figures(port, args.members)
        keys = list(next(iter(results.values())))
        print(f"{'':34}" + "".join(f"{name:>14}" for name in results))
        for key in keys:
            print(f"{key:34}" + "".join(f"{r[key]:14.3f}" for r in results.values()))

    shape = (args.assignor_members, args.assignor_topics, args.assignor_partitions_per_topic,
             args.repeat)
    ours = kgroups_uniform(*shape)
    theirs = kafka_uniform(*shape)
    print(f"uniform assignor, {shape[0]} members / {shape[1] * shape[2]} partitions "
          f"({shape[1]} topics), best of {shape[3]}:")
    for name, figures in (("kgroups (Python)", ours), ("Kafka 4.3.1 (Java)", theirs)):
        print(f"  {name:20} full {figures['full_ms']:9.1f} ms {figures['full']}   "
              f"one joins {figures['join_ms']:9.1f} ms {figures['join']}")
    print(f"  ratio kgroups/Kafka: full {ours['full_ms'] / theirs['full_ms']:.1f}x, "
          f"one joins {ours['join_ms'] / theirs['join_ms']:.1f}x")
    for shape in ((3, 1, 6), (10, 1, 25), (10, 4, 10)):
        print(f"  same partitions as Kafka's uniform, {shape[0]} members / {shape[1]} topics x "
              f"{shape[2]}: {same_as_kafka(*shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
