"""Benchmark of the sticky assignors at Kafka's reference scale, and against kafka-python.

Scale: 1,000,000 partitions (500 topics x 2000) and 2,000 consumers, for `sticky` (history in
Java-layout user data, decoded as part of the assignment) and `cooperative-sticky` (history in
owned partitions). Each scenario prints the assignment time (best of --repeat runs), the peak
memory the assignment allocates (tracemalloc, a separate run), the balance and how many
partitions changed owner. Targets: <= 1.5 s with identical subscriptions, <= 5 s mixed.
"one joins" is also run through `assign_scenario` (JSON-shaped scenario in, dict out, as
`kgroups assign` runs it), best of --repeat runs and once as a new process's first call;
target: <= 1.5 s end to end. `--scenario-runs N` runs only that, N calls per strategy, and
prints their medians.

Side by side: kafka-python 3.x's StickyPartitionAssignor against kgroups' sticky (through the
kafka-python adapter, same member objects) at 10,000 partitions / 500 consumers; target ratio
>= 100.

    .venv/bin/python bench/assignors.py            # full scale
    .venv/bin/python bench/assignors.py --quick    # 1/10 scale, for a smoke run
    .venv/bin/python bench/assignors.py --scenario-runs 7   # "one joins" end to end, medians
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence

import numpy as np
from kafka.cluster import ClusterMetadata as KafkaClusterMetadata
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.protocol.consumer.group import JoinGroupResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import MetadataResponse

from kgroups.assignors import (
    ClusterMetadata,
    GroupAssignment,
    MemberSubscription,
    create_assignor,
)
from kgroups.assignors.kafka_python_adapter import KafkaPythonAssignor
from kgroups.assignors.scenario import assign_scenario

GENERATION = 7
RACKS = ("rack-a", "rack-b", "rack-c")


def timed(
    run: Callable[[], GroupAssignment], repeat: int
) -> tuple[float, float, float, GroupAssignment]:
    """Best wall and CPU time over `repeat` runs, then the peak traced allocation of one more
    run. CPU time is what to read on a shared machine: the work is single-threaded, so on an
    idle machine wall time equals it, and other jobs only inflate the wall figure."""
    best_wall = best_cpu = float("inf")
    result = None
    for _ in range(repeat):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        result = run()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    gc.collect()
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result is not None
    return best_wall, best_cpu, peak / 2**20, result


def history(strategy: str, member: MemberSubscription, owned: dict[str, list[int]]):
    """The member as it rejoins after being given `owned` in generation GENERATION."""
    own = create_assignor(strategy)
    own.on_assignment(owned, GENERATION)
    return MemberSubscription(
        member.member_id,
        member.topics,
        {t: tuple(p) for t, p in owned.items()},
        GENERATION,
        user_data=own.subscription_user_data(member.topics),
    )


def moved(before: GroupAssignment, after: GroupAssignment) -> int:
    """Partitions whose owner (by member id) differs between the two assignments."""
    ids_before = np.array((*before.member_ids, ""))
    ids_after = np.array((*after.member_ids, ""))
    return int((ids_before[before.owner] != ids_after[after.owner]).sum())


def report(label: str, timing: tuple, result: GroupAssignment, moves: int) -> None:
    wall, cpu, peak_mib = timing[:3]
    counts = result.counts().values()
    revoked = 0 if result.revoked_from is None else int((result.revoked_from >= 0).sum())
    print(
        f"  {label:<34} wall {wall:6.3f} s  cpu {cpu:6.3f} s  peak {peak_mib:6.1f} MiB  "
        f"min/max {min(counts)}/{max(counts)}  moved {moves}  revoked {revoked}"
    )


def scale_run(topic_count: int, partitions: int, consumers: int, repeat: int) -> None:
    topics = [f"topic-{i:04d}" for i in range(topic_count)]
    cluster = ClusterMetadata(dict.fromkeys(topics, partitions))
    everything = frozenset(topics)
    fresh = [MemberSubscription(f"consumer-{i:05d}", everything) for i in range(consumers)]
    half = frozenset(topics[: topic_count // 2])
    # With racks: members on three racks, each partition's replicas on two of them; all
    # members reading every topic, or every other one half of them (the general path).
    replica_racks = tuple(frozenset({RACKS[p % 3], RACKS[(p + 1) % 3]}) for p in range(partitions))
    racked_cluster = ClusterMetadata(cluster.partition_counts, dict.fromkeys(topics, replica_racks))
    racked = [MemberSubscription(m.member_id, everything if i % 2 else half, rack=RACKS[i % 3])
              for i, m in enumerate(fresh)]
    racked_equal = [MemberSubscription(m.member_id, everything, rack=RACKS[i % 3])
                    for i, m in enumerate(fresh)]
    print(
        f"{topic_count * partitions:,} partitions ({topic_count} topics x {partitions}), "
        f"{consumers:,} consumers"
    )
    for strategy in ("sticky", "cooperative-sticky"):
        assignor = create_assignor(strategy)
        print(f"{strategy}:")
        timing = timed(lambda a=assignor: a.assign(cluster, fresh), repeat)
        first = timing[3]
        report("fresh, identical", timing, first, 0)

        start = time.perf_counter()
        previous = first.as_dict()
        print(f"  {'(per-member dicts of that result)':<34} {time.perf_counter() - start:7.3f} s")
        rejoin = [history(strategy, m, previous[m.member_id]) for m in fresh]

        scenarios: list[tuple[str, Sequence[MemberSubscription]]] = [
            ("one joins", [*rejoin, MemberSubscription("consumer-new", everything)]),
            ("one leaves", rejoin[1:]),
        ]
        changed = rejoin[-1]
        scenarios.append(
            (
                "one on a different subscription",
                [
                    *rejoin[:-1],
                    history(
                        strategy,
                        MemberSubscription(changed.member_id, half),
                        previous[changed.member_id],
                    ),
                ],
            )
        )
        for label, members in scenarios:
            timing = timed(lambda a=assignor, m=members: a.assign(cluster, m), repeat)
            report(label, timing, timing[3], moved(first, timing[3]))
        mixed = [*fresh[:-1], MemberSubscription(fresh[-1].member_id, half)]
        timing = timed(lambda a=assignor, m=mixed: a.assign(cluster, m), repeat)
        report("fresh, one on a different subscr.", timing, timing[3], 0)
        timing = timed(lambda a=assignor: a.assign(racked_cluster, racked), repeat)
        report("fresh, half on half, racks", timing, timing[3], 0)
        timing = timed(lambda a=assignor: a.assign(racked_cluster, racked_equal), repeat)
        report("fresh, identical, racks", timing, timing[3], 0)
        scenario_end_to_end(strategy, topics, partitions, previous, repeat, consumers)


def one_joins_scenario(
    topics: list[str], partitions: int, previous: dict[str, dict[str, list[int]]]
) -> dict:
    """JSON-shaped "one joins": every member with its owned partitions and generation, plus
    one new member."""
    scenario = {
        "topics": dict.fromkeys(topics, partitions),
        "members": {
            member_id: {"topics": topics, "owned": owned, "generation": GENERATION}
            for member_id, owned in previous.items()
        },
    }
    scenario["members"]["consumer-new"] = {"topics": topics}
    return scenario


def scenario_end_to_end(
    strategy: str,
    topics: list[str],
    partitions: int,
    previous: dict[str, dict[str, list[int]]],
    repeat: int,
    consumers: int,
) -> None:
    """`assign_scenario` (what `kgroups assign` runs) for "one joins": JSON-shaped scenario in
    (every member's owned partitions and generation), JSON-shaped dict out, so the time covers
    validation, each member's user data as its own assignor writes it, the assignment and the
    conversion of the result, beside the assignor-alone figure printed above. Then the same
    call once in a new process (`--first-call`), as a `kgroups assign` run makes it."""
    scenario = one_joins_scenario(topics, partitions, previous)
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        output = assign_scenario(strategy, scenario)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    sizes = [sum(map(len, owned.values())) for owned in output["assignment"].values()]
    print(
        f"  {'one joins, via assign_scenario':<34} wall {best_wall:6.3f} s  "
        f"cpu {best_cpu:6.3f} s  min/max {min(sizes)}/{max(sizes)}"
    )
    command = [sys.executable, __file__, "--first-call", strategy]
    command += [str(len(topics)), str(partitions), str(consumers)]
    first = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
    label = "  the same, a process's first call"
    print(f"  {label:<34} wall {first[0]:>6} s  cpu {first[1]:>6} s")


def fresh_one_joins(strategy: str, topic_count: int, partitions: int, consumers: int) -> dict:
    """The "one joins" scenario built from a fresh assignment made by `strategy`."""
    topics = [f"topic-{i:04d}" for i in range(topic_count)]
    fresh = [MemberSubscription(f"consumer-{i:05d}", frozenset(topics)) for i in range(consumers)]
    cluster = ClusterMetadata(dict.fromkeys(topics, partitions))
    previous = create_assignor(strategy).assign(cluster, fresh).as_dict()
    return one_joins_scenario(topics, partitions, previous)


def first_call(strategy: str, topic_count: int, partitions: int, consumers: int) -> None:
    """Prints the wall and CPU seconds of this process's first `assign_scenario` call. A
    `kgroups assign` run pays this one: its heap has not grown yet, so every big temporary
    faults in fresh pages (costly in a VM), where the loop above reuses freed memory."""
    scenario = fresh_one_joins(strategy, topic_count, partitions, consumers)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    assign_scenario(strategy, scenario)
    print(f"{time.perf_counter() - wall:.3f} {time.process_time() - cpu:.3f}")


def scenario_runs(topic_count: int, partitions: int, consumers: int, runs: int) -> None:
    """Only "one joins" through `assign_scenario`, `runs` calls per strategy: every call's
    wall and CPU seconds and their medians (on a shared machine, a median over several calls
    says more than the best one)."""
    for strategy in ("sticky", "cooperative-sticky"):
        scenario = fresh_one_joins(strategy, topic_count, partitions, consumers)
        walls, cpus = [], []
        for _ in range(runs):
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            assign_scenario(strategy, scenario)
            cpus.append(time.process_time() - cpu)
            walls.append(time.perf_counter() - wall)
        print(
            f"{strategy:<20} wall median {statistics.median(walls):6.3f} s  "
            f"cpu median {statistics.median(cpus):6.3f} s (min {min(cpus):.3f})  "
            f"wall {' '.join(f'{w:.3f}' for w in walls)}  cpu {' '.join(f'{c:.3f}' for c in cpus)}"
        )


def kafka_python_cluster(counts: dict[str, int]) -> KafkaClusterMetadata:
    """kafka-python's own ClusterMetadata, fed a MetadataResponse the way its client does."""
    topic_type = MetadataResponse.MetadataResponseTopic
    partition_type = topic_type.MetadataResponsePartition
    response = MetadataResponse(
        version=1,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=0, host="h", port=1, rack=None)],
        controller_id=0,
        topics=[
            topic_type(
                error_code=0,
                name=topic,
                is_internal=False,
                partitions=[
                    partition_type(
                        error_code=0,
                        partition_index=p,
                        leader_id=0,
                        replica_nodes=[0],
                        isr_nodes=[0],
                    )
                    for p in range(count)
                ],
            )
            for topic, count in counts.items()
        ],
    )
    cluster = KafkaClusterMetadata()
    wire = response.encode(version=1, header=False)
    cluster.update_metadata(MetadataResponse.decode(wire, version=1, header=False))
    return cluster


def versus_kafka_python(topic_count: int, partitions: int, consumers: int, repeat: int) -> None:
    topics = [f"topic-{i:03d}" for i in range(topic_count)]
    cluster = kafka_python_cluster(dict.fromkeys(topics, partitions))
    subscription = ConsumerProtocolSubscription(version=0, topics=topics, user_data=b"")
    members = [
        JoinGroupResponse.JoinGroupResponseMember(
            member_id=f"consumer-{i:04d}", group_instance_id=None, metadata=subscription
        )
        for i in range(consumers)
    ]
    print(
        f"\nkafka-python StickyPartitionAssignor vs kgroups sticky, fresh, "
        f"{topic_count * partitions:,} partitions / {consumers} consumers:"
    )
    start = time.process_time()
    theirs = StickyPartitionAssignor().assign(cluster, members)
    their_seconds = time.process_time() - start
    ours_adapter = KafkaPythonAssignor("sticky")
    our_seconds = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        ours = ours_adapter.assign(cluster, members)
        our_seconds = min(our_seconds, time.process_time() - start)
    their_counts = [sum(len(p) for _, p in a.assigned_partitions) for a in theirs.values()]
    our_counts = [sum(len(p) for _, p in a.assigned_partitions) for a in ours.values()]
    print(
        f"  kafka-python {their_seconds:8.3f} s cpu"
        f"  min/max {min(their_counts)}/{max(their_counts)}"
    )
    print(
        f"  kgroups      {our_seconds:8.3f} s cpu  min/max {min(our_counts)}/{max(our_counts)}"
        "  (through the kafka-python adapter, output in kafka-python's types)"
    )
    print(f"  ratio        {their_seconds / our_seconds:8.0f} x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/10 scale smoke run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--first-call",
        nargs=4,
        metavar=("STRATEGY", "TOPICS", "PARTITIONS", "CONSUMERS"),
        help="time one assign_scenario call in this process (run by the benchmark itself)",
    )
    parser.add_argument(
        "--scenario-runs",
        type=int,
        metavar="N",
        help="only 'one joins' through assign_scenario, N calls per strategy, with medians",
    )
    args = parser.parse_args()
    if args.scenario_runs:
        scenario_runs(*((50, 2000, 200) if args.quick else (500, 2000, 2000)), args.scenario_runs)
    elif args.first_call:
        strategy, *scale = args.first_call
        first_call(strategy, *map(int, scale))
    elif args.quick:
        scale_run(50, 2000, 200, args.repeat)
        versus_kafka_python(10, 100, 50, args.repeat)
    else:
        scale_run(500, 2000, 2000, args.repeat)
        versus_kafka_python(20, 500, 500, args.repeat)


if __name__ == "__main__":
    main()
