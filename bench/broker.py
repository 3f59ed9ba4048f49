"""Group-coordinator figures of `kgroups serve` beside Apache Kafka and Tansu, measured in one run.

Over loopback, with raw pipelined Kafka requests (no client library in the way):
- OffsetCommit/s, Heartbeat/s and Metadata/s (one topic) from many connections, each keeping
  several requests in flight, with p50/p99 request latency and the CPU each request cost the
  broker's processes and this client (the client shares the machine's cores with the broker);
- p50/p99 of OffsetCommit at a fixed moderate load: 1,000 commits/s in all from 50 groups (one
  connection each, sent on a schedule whatever the answers' latency);
- time for N members (10, 100, 1000; one connection each) to go from their first JoinGroup to
  all holding their SyncGroup answer, i.e. to a Stable group.
Every broker is started first and warmed by one round of every figure that is not counted
(Kafka's JIT: cold, it served less than half of what it serves warm); then the figures are
measured in rounds (--rounds, 3), each broker taking its turn in every round and a different one
going first each time, and each figure's median over the rounds is printed with the rounds' own
rates after it: a shared machine's speed moves within minutes, and measured once each, in a
fixed order, the brokers met different machines (an idle broker's background work, Kafka's
mostly, runs beside the others).
Each broker gets the newest version of each API that both it and this script speak. Tansu waits
a fixed ~3 s initial rebalance delay, so kgroups and Kafka run with Kafka's default of 3000 ms
unless --initial-delay-ms says otherwise. Durability as each broker runs it:
- kgroups: its defaults (Kafka's: a commit is answered once written to the log file, fsync left
  to the flush settings; on 3+ cores a network process beside the broker process), and again
  with log.flush.interval.messages=1 (fsync before answering, group commit across concurrent
  writes) unless --no-fsync;
- Kafka 4.3.1 (single KRaft node, tests/kafka_harness.py, 1 GiB heap): its default, answering once
  the record is in the page cache (log.flush.interval.messages unset), and again with
  log.flush.interval.messages=1 (fsync before answering) unless --no-fsync;
- Tansu: its in-memory storage engine.
Members waiting for the others heartbeat every 100 ms (how one learns of the next rebalance),
which bounds the resolution of the time-to-Stable figures; the time stops at the SyncGroup
answer that completes the group, not at the heartbeats the others were sleeping towards.
`make kafka` must have fetched Kafka's jars (`make test` does).

Run: .venv/bin/python bench/broker.py [--seconds S] [--connections C] [--depth D]
     [--members 10,100,1000] [--initial-delay-ms MS] [--no-kafka] [--no-fsync]
     [--other-layout] [--tls] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import math
import os
import ssl
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka.admin import AdminClient, NewTopic

# The Kafka harness lives with the tests (they start the same broker).
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from tests.broker.security_helpers import Certificates, make_certificates

from broker_data import free_port, serving, tansu_broker
from kafka_harness import KafkaBroker
from kgroups.broker.config import served_network_processes, usable_cores
from kgroups.broker.wire import build, decode_response, encode_request, request_type, sibling
from kgroups.broker.wire import response_type as response_schema
from kgroups.errors import ErrorCode
from kgroups.records.consumer_protocol import encode_assignment, encode_subscription
from kgroups.records.schema import ConsumerAssignment, ConsumerSubscription, TopicPartitions

API_VERSIONS, METADATA, JOIN, SYNC, HEARTBEAT, COMMIT, LEAVE = 18, 3, 11, 14, 12, 8, 13
# The newest version of each API this script fills in (older ones drop fields via `build`).
PREFERRED_MAX = {METADATA: 12, JOIN: 9, SYNC: 5, HEARTBEAT: 4, COMMIT: 9, LEAVE: 5}
# The fixed moderate load: this many commits per second in all, spread over this many groups.
MODERATE_COMMITS_PER_S = 1000
MODERATE_GROUPS = 50
SESSION = datetime.timedelta(seconds=30)
# Real ConsumerProtocol bytes: a broker may parse them (Tansu does).
SUBSCRIPTION = encode_subscription(ConsumerSubscription(topics=("bench",), version=0))
ASSIGNMENT = encode_assignment(
    ConsumerAssignment(assigned_partitions=(TopicPartitions("bench", (0,)),), version=0)
)


class PipelinedConnection:
    """One socket; `send` returns a future, many requests may be in flight (answers in order)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 versions: dict[int, int]) -> None:
        self._reader = reader
        self._writer = writer
        self.versions = versions
        self._pending: dict[int, tuple[asyncio.Future[Any], type[Any]]] = {}
        self._next_id = 0
        self._reading = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def open(cls, port: int, versions: dict[int, int] | None = None,
                   tls: ssl.SSLContext | None = None) -> PipelinedConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22, ssl=tls)
        return cls(reader, writer, versions or {})

    def request(self, api_key: int, **fields: Any) -> Any:
        return build(request_type(api_key, self.versions[api_key]), **fields)

    def nested(self, api_key: int, class_name: str, **fields: Any) -> Any:
        return build(sibling(request_type(api_key, self.versions[api_key]), class_name), **fields)

    def send(self, request: Any) -> asyncio.Future[Any]:
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        schema = response_schema(int(request.__api_key__), int(request.__version__))
        self._pending[self._next_id] = (future, schema)
        self._writer.write(encode_request(self._next_id, "bench", request))
        return future

    async def _read_loop(self) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
                (correlation_id,) = struct.unpack_from(">i", frame)
                future, schema = self._pending.pop(correlation_id)
                if not future.done():
                    future.set_result(decode_response(schema, frame)[1])
        except Exception as exc:
            # A closed or undecodable connection fails every request still waiting on it.
            for future, _ in self._pending.values():
                if not future.done():
                    future.set_exception(exc)

    async def close(self) -> None:
        self._reading.cancel()
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


async def negotiate(port: int, tls: ssl.SSLContext | None = None) -> dict[int, int]:
    """The newest version per API that both the broker and this script speak."""
    connection = await PipelinedConnection.open(port, {API_VERSIONS: 0}, tls)
    response = await connection.send(connection.request(API_VERSIONS))
    await connection.close()
    advertised = {int(a.api_key): (int(a.min_version), int(a.max_version))
                  for a in response.api_keys}
    versions = {}
    for api_key, preferred in PREFERRED_MAX.items():
        low, high = advertised[api_key]
        versions[api_key] = min(high, preferred)
        if versions[api_key] < low:
            raise RuntimeError(f"broker needs API {api_key} >= v{low}")
    return versions


async def join_group(connection: PipelinedConnection, group: str, member_id: str = "") -> Any:
    """JoinGroup, following MEMBER_ID_REQUIRED (v4+) once, as real clients do."""
    for _ in range(2):
        answer = await connection.send(connection.request(
            JOIN, group_id=group, session_timeout=SESSION, rebalance_timeout=SESSION,
            member_id=member_id, group_instance_id=None, protocol_type="consumer", reason=None,
            protocols=(connection.nested(JOIN, "JoinGroupRequestProtocol", name="range",
                                         metadata=SUBSCRIPTION),)))
        if answer.error_code != ErrorCode.MEMBER_ID_REQUIRED:
            return answer
        member_id = answer.member_id
    raise RuntimeError("JoinGroup kept asking for a member id")


async def form_group(connections: list[PipelinedConnection], group: str) -> tuple[float, Any]:
    """Every connection becomes a member of one group, each behaving as a client does (rejoin
    on REBALANCE_IN_PROGRESS, heartbeat while waiting for the others). Returns the seconds
    until all members hold a SyncGroup answer of one generation, and each member's last
    JoinGroup answer."""
    synced: dict[int, int] = {}
    last_join: dict[int, Any] = {}
    everyone_in = asyncio.Event()
    settled_at: list[float] = []  # when the last member's SyncGroup answer completed the group

    async def member(index: int, connection: PipelinedConnection) -> None:
        member_id = ""
        while not everyone_in.is_set():
            join = await join_group(connection, group, member_id)
            if join.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                member_id = ""
                continue
            if join.error_code != ErrorCode.NONE:
                raise RuntimeError(f"JoinGroup: {ErrorCode(int(join.error_code)).name}")
            member_id = join.member_id
            last_join[index] = join
            assignments = tuple(
                connection.nested(SYNC, "SyncGroupRequestAssignment", member_id=m.member_id,
                                  assignment=ASSIGNMENT)
                for m in join.members
            )
            sync = await connection.send(connection.request(
                SYNC, group_id=group, generation_id=join.generation_id, member_id=member_id,
                group_instance_id=None, protocol_type="consumer",
                protocol_name=join.protocol_name, assignments=assignments))
            if sync.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                continue
            if sync.error_code != ErrorCode.NONE:
                raise RuntimeError(f"SyncGroup: {ErrorCode(int(sync.error_code)).name}")
            synced[index] = join.generation_id
            while not everyone_in.is_set():
                if len(synced) == len(connections) and len(set(synced.values())) == 1:
                    settled_at.append(time.perf_counter())
                    everyone_in.set()
                    break
                await asyncio.sleep(0.1)
                beat = await connection.send(connection.request(
                    HEARTBEAT, group_id=group, generation_id=join.generation_id,
                    member_id=member_id, group_instance_id=None))
                if beat.error_code != ErrorCode.NONE:
                    synced.pop(index, None)
                    break

    started = time.perf_counter()
    # The others still finish the heartbeat they were sleeping towards: not part of the figure.
    await asyncio.gather(*(member(i, c) for i, c in enumerate(connections)))
    return settled_at[0] - started, [last_join[i] for i in range(len(connections))]


async def leave_group(connection: PipelinedConnection, group: str, joins: list[Any]) -> None:
    """Every member leaves `group` in one LeaveGroup (v3+ takes a batch), so that the broker
    removes them now rather than when their sessions end, in the middle of a later figure
    (another broker's, on a shared machine)."""
    members = tuple(connection.nested(LEAVE, "MemberIdentity", member_id=join.member_id,
                                      group_instance_id=None, reason=None)
                    for join in joins)
    check_answer(await connection.send(connection.request(LEAVE, group_id=group,
                                                          members=members)))


@dataclass(frozen=True)
class Throughput:
    per_second: float
    p50_ms: float
    p99_ms: float
    elapsed: float  # seconds


async def hammer(connections: list[PipelinedConnection], make_request: Any, depth: int,
                 seconds: float) -> Throughput:
    """Keep `depth` requests in flight on every connection for `seconds`; every answer must be
    error-free (a fast error is not a throughput figure)."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def lane(index: int, connection: PipelinedConnection) -> None:
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            answer = await connection.send(make_request(index, connection))
            latencies.append(time.perf_counter() - sent)
            check_answer(answer)

    started = time.perf_counter()
    await asyncio.gather(*(lane(i, c) for i, c in enumerate(connections) for _ in range(depth)))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return Throughput(len(ordered) / elapsed, statistics.median(ordered) * 1000,
                      ordered[int(len(ordered) * 0.99)] * 1000, elapsed)


def server_processes(port: int) -> list[psutil.Process]:
    """The broker's processes: the one listening on `port`, its ancestors below this script
    (kgroups' network process listens; the broker process that started it does not) and all
    their descendants."""
    for connection in psutil.net_connections("tcp"):
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port \
                and connection.pid is not None:
            root = psutil.Process(connection.pid)
            while (parent := root.parent()) is not None and parent.pid not in (os.getpid(), 1):
                root = parent
            return [root, *root.children(recursive=True)]
    raise RuntimeError(f"no process listens on port {port}")


def cpu_seconds(processes: list[psutil.Process]) -> float:
    """User and system CPU of the broker's processes: with the client on the same cores,
    how much of the machine each request costs the broker (bench/RESULTS.md, issue 28)."""
    total = 0.0
    for process in processes:
        times = process.cpu_times()
        total += times.user + times.system
    return total


async def paced_load(connections: list[PipelinedConnection], make_request: Any,
                     per_second: float, seconds: float) -> Throughput:
    """Open-loop load: each connection sends on its own fixed schedule (per_second in all,
    phases staggered), whatever the answers' latency, so a slow answer cannot lower the load
    it is measured under."""
    interval = len(connections) / per_second
    latencies: list[float] = []
    pending: list[asyncio.Future[Any]] = []
    started = time.perf_counter()

    async def timed_send(index: int, connection: PipelinedConnection) -> None:
        sent = time.perf_counter()
        check_answer(await connection.send(make_request(index, connection)))
        latencies.append(time.perf_counter() - sent)

    async def lane(index: int, connection: PipelinedConnection) -> None:
        next_send = started + interval * index / len(connections)
        while next_send < started + seconds:
            await asyncio.sleep(max(0.0, next_send - time.perf_counter()))
            pending.append(asyncio.ensure_future(timed_send(index, connection)))
            next_send += interval

    await asyncio.gather(*(lane(i, c) for i, c in enumerate(connections)))
    await asyncio.gather(*pending)
    ordered = sorted(latencies)
    elapsed = time.perf_counter() - started
    return Throughput(len(ordered) / elapsed, statistics.median(ordered) * 1000,
                      ordered[int(len(ordered) * 0.99)] * 1000, elapsed)


def check_answer(answer: Any) -> None:
    if hasattr(answer, "error_code"):
        errors = [int(answer.error_code)]
    elif hasattr(answer, "brokers"):  # Metadata: per-topic codes
        errors = [int(t.error_code) for t in answer.topics]
    else:
        errors = [int(p.error_code) for t in answer.topics for p in t.partitions]
    if any(errors):
        raise RuntimeError(f"request failed: {[ErrorCode(e).name for e in errors if e]}")


def heartbeats_of(joins: list[Any], group: str = "bench-heartbeat") -> Any:
    """Heartbeat of the member each connection joined `group` as."""
    def heartbeat(index: int, connection: PipelinedConnection) -> Any:
        return connection.request(HEARTBEAT, group_id=group,
                                  generation_id=joins[index].generation_id,
                                  member_id=joins[index].member_id, group_instance_id=None)
    return heartbeat


def commit(index: int, connection: PipelinedConnection) -> Any:
    """A standalone group per connection (generation -1, no member), as admin tools and
    assign()-mode consumers commit; each commit is one write to the log."""
    return commit_of(f"bench-commit-{index}", index, connection)


def commit_of(group: str, offset: int, connection: PipelinedConnection) -> Any:
    """`group`'s standalone commit of `offset` for the bench topic's partition 0."""
    return connection.request(
        COMMIT, group_id=group, generation_id_or_member_epoch=-1,
        member_id="", group_instance_id=None, retention_time=datetime.timedelta(0),
        topics=(connection.nested(COMMIT, "OffsetCommitRequestTopic", name="bench",
                                  partitions=(connection.nested(
                                      COMMIT, "OffsetCommitRequestPartition",
                                      partition_index=0, committed_offset=offset,
                                      committed_leader_epoch=-1,
                                      committed_metadata=""),)),))


def metadata(index: int, connection: PipelinedConnection) -> Any:
    """Metadata for the one topic, as clients refresh it."""
    return connection.request(
        METADATA, topics=(connection.nested(METADATA, "MetadataRequestTopic", name="bench",
                                            topic_id=None),),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False)


async def throughput(port: int, args: argparse.Namespace, label: str,
                     tls: ssl.SSLContext | None = None) -> dict[str, float]:
    """One round's request rates, latencies and CPU per request, and the moderate load's
    latency (the heartbeat group named for the round, as every round's groups are)."""
    versions = await negotiate(port, tls)
    figures: dict[str, float] = {}

    # Heartbeats: one member per connection in a Stable group, `depth` heartbeats in flight each.
    group = f"bench-heartbeat-{label}"
    members = [await PipelinedConnection.open(port, versions, tls)
               for _ in range(args.connections)]
    _, joins = await form_group(members, group)

    server = server_processes(port)
    for kind, make in (("heartbeat", heartbeats_of(joins, group)), ("commit", commit),
                       ("metadata", metadata)):
        before = cpu_seconds(server), time.process_time()
        result = await hammer(members, make, args.depth, args.seconds)
        after = cpu_seconds(server), time.process_time()
        answered = result.per_second * result.elapsed
        figures.update({f"{kind}/s": result.per_second, f"{kind} p50 ms": result.p50_ms,
                        f"{kind} p99 ms": result.p99_ms,
                        f"{kind} broker cpu us": 1e6 * (after[0] - before[0]) / answered,
                        f"{kind} client cpu us": 1e6 * (after[1] - before[1]) / answered})
    await leave_group(members[0], group, joins)
    for connection in members:
        await connection.close()

    # A fixed moderate load, the latency a consumer feels on a broker that is not saturated.
    committers = [await PipelinedConnection.open(port, versions, tls)
                  for _ in range(MODERATE_GROUPS)]
    paced = await paced_load(committers, commit, MODERATE_COMMITS_PER_S, args.seconds)
    figures.update({"moderate commit p50 ms": paced.p50_ms,
                    "moderate commit p99 ms": paced.p99_ms})
    for connection in committers:
        await connection.close()
    return figures


async def time_to_stable(port: int, args: argparse.Namespace, label: str,
                         tls: ssl.SSLContext | None = None) -> dict[str, float]:
    """One round's seconds to a Stable group of each size (a fresh group each)."""
    versions = await negotiate(port, tls)
    figures: dict[str, float] = {}
    for count in args.members:
        joiners = [await PipelinedConnection.open(port, versions, tls) for _ in range(count)]
        group = f"bench-stable-{count}-{label}"
        try:
            elapsed, joins = await asyncio.wait_for(form_group(joiners, group),
                                                    args.settle_timeout)
            await leave_group(joiners[0], group, joins)
        except TimeoutError:
            elapsed = math.inf  # never settled: printed as such, not as a number
        figures[f"stable {count} members s"] = elapsed
        for connection in joiners:
            await connection.close()
    return figures


def ssl_listener_overrides(port: int, certificates: Certificates) -> list[str]:
    """`kgroups serve` options for one SSL listener on `port` instead of PLAINTEXT."""
    return ["--override", f"listeners=SSL://127.0.0.1:{port}",
            "--override", "ssl.keystore.type=PEM",
            "--override", f"ssl.keystore.location={certificates.server}"]


def client_tls(certificates: Certificates | None) -> tuple[dict[str, str],
                                                           ssl.SSLContext | None]:
    """librdkafka settings and an SSL context for this script's own connections, trusting
    the run's CA (none of either without certificates: PLAINTEXT)."""
    if certificates is None:
        return {}, None
    tls = ssl.create_default_context(cafile=str(certificates.ca))
    tls.check_hostname = False  # the certificate names localhost; we dial 127.0.0.1
    return ({"security.protocol": "SSL", "ssl.ca.location": str(certificates.ca),
             "ssl.endpoint.identification.algorithm": "none"}, tls)


@contextlib.contextmanager
def kgroups_broker(data_dir: Path, initial_delay_ms: int, fsync_each: bool,
                   network_threads: int | None = None,
                   certificates: Certificates | None = None) -> Iterator[int]:
    port = free_port()
    command = [sys.executable, "-m", "kgroups.cli", "serve", "--port", str(port), "--data-dir",
               str(data_dir), "--log-level", "WARNING",
               "--override", f"group.initial.rebalance.delay.ms={initial_delay_ms}"]
    if fsync_each:
        command += ["--override", "log.flush.interval.messages=1"]
    if network_threads is not None:
        command += ["--override", f"num.network.threads={network_threads}"]
    if certificates is not None:
        command += ssl_listener_overrides(port, certificates)
    with serving(command, port) as served:
        yield served


# Probing this many group ids reaches every __consumer_offsets partition (Kafka's default 50)
# with near certainty, since the group ids map to partitions by hash.
PROBE_GROUPS = 1000
NOT_READY = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
             ErrorCode.COORDINATOR_NOT_AVAILABLE)


async def wait_coordinator_ready(port: int, tls: ssl.SSLContext | None = None) -> None:
    """A freshly started coordinator may still be loading (or, in Kafka, electing itself for)
    its __consumer_offsets partitions; wait until groups on every partition get answers. Asked
    with a standalone OffsetCommit of each probe group, which says COORDINATOR_LOAD_IN_PROGRESS
    while loading (a Heartbeat is answered NONE blindly then, as Kafka answers it; Tansu's
    OffsetFetch v7 answer does not decode)."""
    versions = await negotiate(port, tls)
    connection = await PipelinedConnection.open(port, versions, tls)
    pending = [f"probe-{index}" for index in range(PROBE_GROUPS)]
    try:
        for _ in range(600):
            answers = await asyncio.gather(*(connection.send(commit_of(group, 0, connection))
                                             for group in pending))
            pending = [group for group, answer in zip(pending, answers, strict=True)
                       if answer.topics[0].partitions[0].error_code in NOT_READY]
            if not pending:
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{len(pending)} probe groups still have no coordinator")
    finally:
        await connection.close()


@dataclass(frozen=True)
class Served:
    """A broker under test, ready: its port and the client TLS context (None: plaintext)."""
    port: int
    tls: ssl.SSLContext | None
    # Time to Stable warmed up and measured every round, or (Tansu: a fixed ~3 s delay makes
    # each formation 15-60 s) measured in the first round only.
    stable_every_round: bool


def prepare(port: int, certificates: Certificates | None = None,
            stable_every_round: bool = True) -> Served:
    """The committed topic created (Kafka refuses commits for topics it does not have) and
    every __consumer_offsets partition's coordinator answering."""
    over_tls, tls = client_tls(certificates)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **over_tls})
    admin.create_topics([NewTopic("bench", num_partitions=1, replication_factor=1)])[
        "bench"].result(timeout=30)
    asyncio.run(wait_coordinator_ready(port, tls))
    return Served(port, tls, stable_every_round)


def rounds_of(served: dict[str, Served], args: argparse.Namespace
              ) -> dict[str, list[dict[str, float]]]:
    """Every broker's figures, round by round, after a round of each that is not counted (a
    fresh JVM's first seconds run Kafka's code interpreted: measured cold, Kafka served less
    than half the Heartbeats and commits it serves warm). In each round every broker takes its
    turn, the first one moving along a place per round, so a stretch of the machine running
    slower (a shared VM's speed moves by tens of percent within minutes) lands on all of them
    instead of on whichever ran while it lasted."""
    names = list(served)
    for name in names:
        broker = served[name]
        asyncio.run(throughput(broker.port, args, "warm-up", broker.tls))
        if broker.stable_every_round:
            asyncio.run(time_to_stable(broker.port, args, "warm-up", broker.tls))
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        order = names[round_index % len(names):] + names[:round_index % len(names)]
        for name in order:
            broker = served[name]
            label = str(round_index)
            round_figures = asyncio.run(throughput(broker.port, args, label, broker.tls))
            if round_index == 0 or broker.stable_every_round:
                round_figures.update(asyncio.run(
                    time_to_stable(broker.port, args, label, broker.tls)))
            figures[name].append(round_figures)
    return figures


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds that measured it (the first measured them all)."""
    return {figure: statistics.median(r[figure] for r in rounds if figure in r)
            for figure in rounds[0]}


@contextlib.contextmanager
def kafka_broker(workdir: Path, initial_delay_ms: int, fsync_each: bool,
                 extra: dict[str, str] | None = None) -> Iterator[int]:
    """A real Kafka with its own defaults but for the initial delay (and fsync if asked, and
    any `extra` settings)."""
    settings = {"group.initial.rebalance.delay.ms": str(initial_delay_ms),
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1", **(extra or {})}
    if fsync_each:
        settings["log.flush.interval.messages"] = "1"
    broker = KafkaBroker(workdir, settings=settings,
                         jvm_options=("-Xmx1g", "-Xms1g", "-XX:+UseG1GC"))
    broker.start()
    try:
        yield broker.port
    finally:
        broker.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--members", type=lambda text: [int(n) for n in text.split(",")],
                        default=[10, 100, 1000])
    parser.add_argument("--settle-timeout", type=float, default=120.0,
                        help="seconds a group may take to become Stable before giving up")
    parser.add_argument("--initial-delay-ms", type=int, default=3000,
                        help="group.initial.rebalance.delay.ms of kgroups and Kafka "
                        "(Kafka's default 3000)")
    parser.add_argument("--no-kafka", action="store_true", help="skip Apache Kafka")
    parser.add_argument("--other-layout", action="store_true",
                        help="also run kgroups with the socket layout its default did not pick "
                        "here: num.network.threads=0 (sockets in the broker process) on 3+ "
                        "cores, else 1 (a network process beside it)")
    parser.add_argument("--tls", action="store_true",
                        help="kgroups alone, over one SSL listener (PEM certificates made for "
                        "the run); with --other-layout, in the other layout too")
    parser.add_argument("--no-fsync", action="store_true",
                        help="skip the kgroups and Kafka runs with log.flush.interval.messages=1")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of every figure, the brokers taking turns in each; the "
                        "medians are printed (Tansu's time to Stable is measured in the first "
                        "round only: its fixed ~3 s delay makes it 15-60 s a group)")
    args = parser.parse_args()
    served: dict[str, Served] = {}
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as brokers:
        # Every broker is started and made ready first; the rounds then take turns on them.
        certificates = make_certificates(Path(scratch) / "certs") if args.tls else None
        kgroups_runs: list[tuple[str, bool, int | None]] = [("kgroups", False, None)]
        kgroups_runs += [] if args.no_fsync else [("kgroups fsync", True, None)]
        other = 1 - served_network_processes(usable_cores())
        kgroups_runs += [(f"kgroups N={other}", False, other)] if args.other_layout else []
        for name, fsync_each, network_threads in kgroups_runs:
            port = brokers.enter_context(kgroups_broker(
                Path(scratch) / name.replace(" ", "-"), args.initial_delay_ms, fsync_each,
                network_threads, certificates))
            served[name] = prepare(port, certificates)
        kafka_runs = [] if args.no_kafka or args.tls else [("kafka", False)] + (
            [] if args.no_fsync else [("kafka fsync", True)])
        for name, fsync_each in kafka_runs:
            port = brokers.enter_context(kafka_broker(
                Path(scratch) / name.replace(" ", "-"), args.initial_delay_ms, fsync_each))
            served[name] = prepare(port)
        if not args.tls:
            bootstrap = brokers.enter_context(tansu_broker())
            served["tansu(mem)"] = prepare(int(bootstrap.rsplit(":", 1)[1]),
                                           stable_every_round=False)
        rounds = rounds_of(served, args)
    results = {name: medians(figures) for name, figures in rounds.items()}
    print(f"{args.connections} connections x {args.depth} in flight, {args.seconds:g} s each; "
          f"group.initial.rebalance.delay.ms={args.initial_delay_ms}; medians of {args.rounds} "
          f"rounds")
    # Each kgroups mode against each peer; the fsync modes against each other.
    pairs = [("kgroups", name) for name in results if not name.startswith("kgroups")]
    if "kgroups fsync" in results and "kafka fsync" in results:
        pairs.append(("kgroups fsync", "kafka fsync"))
    pairs += [(name, "kgroups") for name in results if name.startswith("kgroups N=")]
    print(f"{'figure':26}" + "".join(f"{name:>15}" for name in results)
          + "".join(f"{ours + '/' + other:>28}" for ours, other in pairs))
    for figure in results["kgroups"]:
        values = "".join(f"{results[name][figure]:15.2f}" for name in results)
        ratios = ""
        for ours_name, other_name in pairs:
            ours, other = results[ours_name][figure], results[other_name][figure]
            settled = math.isfinite(ours) and math.isfinite(other) and other > 0
            ratios += f"{ours / other:28.2f}" if settled else f"{'-':>28}"
        print(f"{figure:26}{values}{ratios}")
    print("each round (in the order the rounds ran):")
    for figure in ("heartbeat/s", "commit/s", "metadata/s", "commit p99 ms",
                   "commit broker cpu us", *(f"stable {n} members s" for n in args.members)):
        each = "  ".join(f"{name} " + " / ".join(f"{r[figure]:.2f}" for r in rounds[name]
                                                  if figure in r) for name in rounds)
        print(f"  {figure:24}{each}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
