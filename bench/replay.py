"""Coordinator replay: rebuild group state from a large __consumer_offsets log, in records/s.

Generates (once, then reuses) a log of N records spread over several __consumer_offsets
partitions as real segment files via kgroups.log: many groups, mostly offset commits in small
batches (one OffsetCommit request per batch, as a coordinator writes them), some group metadata
records with three members each, some offset and group tombstones. Then replays every partition
into a fresh GroupCoordinator the way a broker taking over the partitions would:

    segment bytes -> kgroups.coordinator.latest_values (last raw value per key, CRC-checked),
                     in forked worker processes (fold_partitions; --workers 1: in-process)
                  -> PartitionImage.apply_raw (decodes only the survivors), in this process
                  -> GroupCoordinator.load_image

with the garbage collector off during the replay (--gc keeps it on). Each --workers value is a
separate replay; each prints wall and CPU time (this process plus its reaped workers) and the
load average, since the machine is shared. As named peers measured in the same run on the
largest partition: the naive path over a
prefix (decode every record into the record model and feed them all to load_partition), and
kgroups.log.replay.LatestPerKey, the log's general last-record-per-key walker, for the fold.

    .venv/bin/python bench/replay.py [--records N] [--partitions P] [--groups G]
                                     [--workers W ...] [--gc]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from kgroups.coordinator import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    PartitionImage,
    latest_values,
    partition_for,
)
from kgroups.log.batch import build_batch, iter_records_raw
from kgroups.log.config import OFFSETS_TOPIC, LogConfig
from kgroups.log.partition_log import PartitionLog
from kgroups.log.replay import LatestPerKey
from kgroups.records.codec import decode_record, encode_key, encode_value
from kgroups.records.consumer_protocol import encode_assignment, encode_subscription
from kgroups.records.schema import (
    ConsumerAssignment,
    ConsumerSubscription,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicPartitions,
)
from parallel_fold import fold_partitions

TOPICS_PER_GROUP, PARTITIONS_PER_TOPIC = 4, 8
NOW = 1_700_000_000_000


def _group_value(group: str, generation: int, topics: list[str]) -> bytes:
    subscription = encode_subscription(ConsumerSubscription(tuple(topics)))
    members = tuple(
        MemberMetadata(
            member_id=f"consumer-{n}-{generation}",
            client_id=f"consumer-{n}",
            client_host="/10.0.0.1",
            session_timeout=45_000,
            rebalance_timeout=300_000,
            subscription=subscription,
            assignment=encode_assignment(
                ConsumerAssignment((TopicPartitions(topics[n], tuple(range(8))),))
            ),
        )
        for n in range(3)
    )
    return encode_value(
        GroupMetadataValue("consumer", generation, "range", members[0].member_id, NOW, members)
    )


def generate(directory: Path, records: int, partitions: int, groups: int, seed: int) -> None:
    rng = random.Random(seed)
    names = [f"app-{n:06d}" for n in range(groups)]
    home = {name: partition_for(name, partitions) for name in names}
    topics = {name: [f"{name}-topic-{t}" for t in range(TOPICS_PER_GROUP)] for name in names}
    offset_keys = {
        name: [
            encode_key(OffsetCommitKey(name, topic, p))
            for topic in topics[name]
            for p in range(PARTITIONS_PER_TOPIC)
        ]
        for name in names
    }
    config = LogConfig().for_topic(OFFSETS_TOPIC)
    logs = [
        PartitionLog.open(directory / f"{OFFSETS_TOPIC}-{p}", config) for p in range(partitions)
    ]
    generation = dict.fromkeys(names, 0)
    written = 0
    clock = NOW
    while written < records:
        name = rng.choice(names)
        clock += rng.randint(0, 3)
        roll = rng.random()
        if roll < 0.04:  # a rebalance completed: the group's metadata record
            generation[name] += 1
            batch = [
                (
                    encode_key(GroupMetadataKey(name)),
                    _group_value(name, generation[name], topics[name]),
                    clock,
                )
            ]
        elif roll < 0.05:  # offsets expired or deleted: tombstones, sometimes the group's too
            keys = rng.sample(offset_keys[name], rng.randint(1, 4))
            batch = [(key, None, clock) for key in keys]
            if rng.random() < 0.1:
                batch.append((encode_key(GroupMetadataKey(name)), None, clock))
        else:  # an OffsetCommit request for a few partitions
            keys = rng.sample(offset_keys[name], rng.randint(1, 8))
            batch = [
                (
                    key,
                    encode_value(OffsetCommitValue(rng.randint(0, 10**9), "", clock, 7)),
                    clock,
                )
                for key in keys
            ]
        batch = batch[: records - written]
        logs[home[name]].append_batch(build_batch(batch))
        written += len(batch)
    for log in logs:
        log.flush()
        log.close()


def partition_bytes(log: PartitionLog) -> bytes:
    return b"".join(segment.pread(segment.size, 0) for segment in log.segments())


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the fold workers)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def bulk_replay(
    coordinator: GroupCoordinator, logs: list[PartitionLog], workers: int
) -> dict[str, float]:
    """The fast path over every partition; returns seconds spent in each stage of this process
    (waiting for folds, decoding survivors, installing groups) and the record counts."""
    stages = dict.fromkeys(("fold wait", "decode", "load", "survivors", "walked"), 0.0)

    def read(partition: int) -> bytes:
        return partition_bytes(logs[partition])

    waited_from = time.perf_counter()
    for partition, survivors, walked in fold_partitions(read, range(len(logs)), workers):
        folded = time.perf_counter()
        image = PartitionImage()
        image.apply_raw(survivors.items())
        decoded_at = time.perf_counter()
        coordinator.load_image(partition, image, NOW)
        loaded = time.perf_counter()
        stages["fold wait"] += folded - waited_from
        stages["decode"] += decoded_at - folded
        stages["load"] += loaded - decoded_at
        stages["survivors"] += len(survivors)
        stages["walked"] += walked
        waited_from = loaded
    return stages


def naive_replay(partition: int, data: bytes, limit: int, partitions: int) -> tuple[int, float]:
    """The peer: every record decoded into the model and folded one by one."""
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(offsets_topic_num_partitions=partitions), new_uuid=uuid.uuid4)
    started = time.perf_counter()
    records = []
    for _, _, key, value in iter_records_raw(data):
        records.append(decode_record(key, value))
        if len(records) >= limit:
            break
    coordinator.load_partition(partition, records, NOW)
    return len(records), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--groups", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--peer-records", type=int, default=500_000)
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[2, 1],
        help="fold worker processes; one replay per value (1 = fold in this process)",
    )
    parser.add_argument("--gc", action="store_true", help="keep the garbage collector on")
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()

    name = f"kgroups-replay-{args.records}-{args.partitions}-{args.groups}-{args.seed}"
    directory = args.data_dir / name
    if not (directory / "complete").exists():
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        started = time.perf_counter()
        generate(directory, args.records, args.partitions, args.groups, args.seed)
        (directory / "complete").touch()
        print(f"generated {args.records:,} records in {time.perf_counter() - started:.1f} s")
    print(f"log: {directory}")

    # Opening the logs (index checks, torn-tail recovery) is broker start-up, not replay.
    log_config = LogConfig().for_topic(OFFSETS_TOPIC)
    logs = [
        PartitionLog.open(directory / f"{OFFSETS_TOPIC}-{p}", log_config)
        for p in range(args.partitions)
    ]
    config = GroupCoordinatorConfig(offsets_topic_num_partitions=args.partitions)
    print(f"load average before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    rates: dict[int, float] = {}
    for workers in args.workers:
        coordinator = GroupCoordinator(config, new_uuid=uuid.uuid4)
        gc.collect()
        if not args.gc:
            gc.disable()  # replay builds ~1M long-lived objects: collections only rescan them
        started = time.perf_counter()
        cpu_started = cpu_seconds()
        stages = bulk_replay(coordinator, logs, workers)
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds() - cpu_started
        gc.enable()
        walked = int(stages["walked"])
        rates[workers] = rate = walked / elapsed
        groups = len(coordinator.group_views())
        print(
            f"bulk replay, {workers} fold worker(s), gc {'on' if args.gc else 'off'}: "
            f"{walked:,} records, {int(stages['survivors']):,} live keys, {groups:,} groups "
            f"in {elapsed:.2f} s = {rate:,.0f} records/s (CPU {cpu:.2f} s = "
            f"{walked / cpu:,.0f} records/CPU-s; load average now {os.getloadavg()[0]:.2f})"
        )
        for stage in ("fold wait", "decode", "load"):
            print(f"  {stage:<10}{stages[stage]:7.2f} s  ({stages[stage] / elapsed:5.1%})")
    largest = max(range(args.partitions), key=lambda p: logs[p].log_end_offset)
    largest_bytes = partition_bytes(logs[largest])
    fold_started = time.perf_counter()
    latest_values(largest_bytes)
    fast_fold = time.perf_counter() - fold_started
    fold_started = time.perf_counter()
    LatestPerKey().add(largest_bytes)
    general_fold = time.perf_counter() - fold_started
    print(
        f"fold of partition {largest}: latest_values {fast_fold:.2f} s, "
        f"LatestPerKey {general_fold:.2f} s ({general_fold / fast_fold:.1f}x)"
    )
    count, seconds = naive_replay(largest, largest_bytes, args.peer_records, args.partitions)
    peer_rate = count / seconds
    print(f"peer (decode every record, then load): {count:,} records = {peer_rate:,.0f} records/s")
    for workers, rate in rates.items():
        print(f"bulk ({workers} fold worker(s)) / peer: {rate / peer_rate:.1f}x")


if __name__ == "__main__":
    main()
