"""CPU time of the consumer protocol (KIP-848) in the sans-IO core, without sockets or a broker.

bench/consumer_protocol.py times whole brokers over loopback on a shared machine, where wall
time mostly measures the neighbours; this drives `GroupCoordinator` directly, as the broker
does, and reports process CPU time per phase (best of --repeat runs):
- form: N members join one after another, then every member heartbeats with what it was last
  told until the group is Stable (each join moves the group epoch and the target);
- steady: one heartbeat from each member of the Stable group (nothing changes);
- join: one more member joins and every member heartbeats until the group is Stable again.
It also prints a digest of every record written and every answer given, so a change meant to
be faster only can be checked to leave the output byte for byte the same.

- storm (--storm): N members join within one assignment interval (1 s), then one heartbeat
  after it computes every member's target: that step's CPU (bench/join_storm.py's longest).

Run: .venv/bin/python bench/consumer_core.py [--members 1000] [--repeat 3] [--profile] [--storm]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import itertools
import pstats
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from kgroups.broker.gc_tuning import collect_for_serving
from kgroups.coordinator import Effects, GroupCoordinator, GroupCoordinatorConfig
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.records.codec import encode_record

GROUP = "bench"
TOPIC_ID = uuid.UUID(int=0xBE9C)
NOW = 1_000_000


class Driver:
    """A coordinator whose writes succeed at once, with a digest of what it wrote and said."""

    def __init__(self, partitions: int, interval_ms: int = 0) -> None:
        ids = itertools.count(1)
        # By default a target computed at every join (the clock never moves here, so with the
        # default group.consumer.assignment.interval.ms no later one would be): the worst
        # case, and the figures and digests recorded before batching stay comparable.
        config = GroupCoordinatorConfig(group_consumer_assignment_interval_ms=interval_ms)
        self.coordinator = GroupCoordinator(config, new_uuid=lambda: uuid.UUID(int=next(ids)))
        self.digest = hashlib.sha256()
        self.requests = itertools.count(1)
        self.replies: dict[object, object] = {}
        for partition in range(GroupCoordinatorConfig().offsets_topic_num_partitions):
            self.absorb(self.coordinator.load_partition(partition, [], NOW))
        self.coordinator.set_topics({"t": TopicInfo(TOPIC_ID, partitions)}, NOW)

    def absorb(self, fx: Effects, now: int = NOW) -> None:
        for reply in fx.replies:
            self.replies[reply.request_id] = reply.response
            self.digest.update(repr(reply.response).encode())
        for write in fx.writes:
            for record in write.records:
                key, value = encode_record(record)
                self.digest.update(key + b"|" + (value or b"-"))
            self.absorb(self.coordinator.write_completed(write.write_id, None, now), now)

    def heartbeat(self, member: str, epoch: int, owned: tuple,
                  now: int = NOW) -> ConsumerGroupHeartbeatResponse:
        request_id = next(self.requests)
        joining = epoch == 0
        self.absorb(self.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
            request_id, GROUP, member, epoch, rebalance_timeout_ms=30_000 if joining else -1,
            subscribed_topic_names=("t",) if joining else None,
            topic_partitions=() if joining else owned, client_id="bench",
            client_host="/127.0.0.1", version=1), now), now)
        response = self.replies.pop(request_id)
        assert isinstance(response, ConsumerGroupHeartbeatResponse), response
        return response


class Members:
    """Each member's epoch and what it holds, as a client keeps them."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.state: dict[str, tuple[int, tuple]] = {}

    def join(self, member: str) -> None:
        response = self.driver.heartbeat(member, 0, ())
        self.state[member] = (response.member_epoch, response.assignment or ())

    def round(self) -> bool:
        """Every member heartbeats once; whether anything moved."""
        moved = False
        for member, (epoch, owned) in self.state.items():
            response = self.driver.heartbeat(member, epoch, owned)
            held = owned if response.assignment is None else response.assignment
            moved = moved or (response.member_epoch, held) != (epoch, owned)
            self.state[member] = (response.member_epoch, held)
        return moved

    def settle(self) -> int:
        rounds = 1
        while self.round():
            rounds += 1
        return rounds


def run(members: int) -> tuple[dict[str, float], str]:
    driver = Driver(2 * members)
    group = Members(driver)
    times = {}
    start = time.process_time()
    for index in range(members):
        group.join(f"m{index:05d}")
    group.settle()
    times["form"] = time.process_time() - start
    start = time.process_time()
    assert not group.round()
    times["steady"] = time.process_time() - start
    start = time.process_time()
    group.join("late")
    group.settle()
    times["join"] = time.process_time() - start
    consumer = driver.coordinator._groups[GROUP].consumer
    assert consumer is not None and consumer.state() == "Stable"
    return times, driver.digest.hexdigest()


def storm(members: int) -> tuple[float, str]:
    """`members` join within one group.consumer.assignment.interval.ms (its default, 1 s), as
    in bench/join_storm.py; the CPU seconds of the one heartbeat after the interval, which
    computes every member's target and writes a record per member: the broker's longest single
    step of a join storm, during which no other client is answered. The garbage collector is
    set as `kgroups serve` sets it (and the digest covers that step's records and answer)."""
    driver = Driver(64, interval_ms=1000)
    first = driver.heartbeat("storm-00000", 0, ())
    for index in range(1, members):
        driver.heartbeat(f"storm-{index:05d}-{uuid.UUID(int=index).hex[-8:]}", 0, ())
    driver.digest = hashlib.sha256()
    collect_for_serving()
    start = time.process_time()
    driver.heartbeat("storm-00000", first.member_epoch, first.assignment or (), NOW + 1001)
    elapsed = time.process_time() - start
    gc.unfreeze()
    return elapsed, driver.digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one run instead")
    parser.add_argument("--storm", action="store_true",
                        help="time the target computation after --members joins instead")
    args = parser.parse_args()
    if args.storm:
        runs = [storm(args.members) for _ in range(args.repeat)]
        assert len({digest for _, digest in runs}) == 1, runs
        print(f"members={args.members} storm target step CPU s: "
              + ", ".join(f"{seconds:.3f}" for seconds, _ in runs) + f"; output {runs[0][1]}")
        return
    if args.profile:
        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(run, args.members)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        return
    best: dict[str, float] = {}
    digests = set()
    for _ in range(args.repeat):
        times, digest = run(args.members)
        digests.add(digest)
        best = {k: min(v, best.get(k, v)) for k, v in times.items()}
    assert len(digests) == 1, digests
    print(f"members={args.members} CPU s (best of {args.repeat}): " + ", ".join(
        f"{phase} {seconds:.3f}" for phase, seconds in best.items()) + f"; output {digests.pop()}")


if __name__ == "__main__":
    main()
