"""Decode speed of a generated __consumer_offsets log: records per second.

Three figures over the same bytes: walking the batches (`iter_records_raw`), walking plus
decoding every key and value into the record model, and kafka-python 3.x's DefaultRecordBatch
reader over the same batches (the named peer; it only walks batches). The log mimics what a
coordinator writes: mostly single-partition offset commits, batches of 1-10 records, with a
group metadata record every 50 commits.

    .venv/bin/python bench/log_decode.py [--records N]   (default 1,000,000)
"""

from __future__ import annotations

import argparse
import random
import time

from kafka.record.default_records import DefaultRecordBatch

from kgroups.log.batch import build_batch, iter_records_raw, peek_batch_header
from kgroups.log.replay import LatestPerKey
from kgroups.records.codec import (
    decode_key,
    decode_offset_commit_fields,
    decode_value,
    encode_key,
    encode_value,
)
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

GROUPS, TOPICS, PARTITIONS = 100, 20, 16  # 32,000 distinct offset keys


def generate(count: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    groups = [f"group-{n}" for n in range(GROUPS)]
    topics = [f"topic-{n}" for n in range(TOPICS)]
    subscription = encode_subscription(ConsumerSubscription(tuple(topics[:3])))
    assignment = encode_assignment(ConsumerAssignment((TopicPartitions(topics[0], (0, 1, 2)),)))
    members = tuple(
        MemberMetadata(f"consumer-{n}-uuid", "client", "/10.0.0.1", 45000, 300000,
                       subscription, assignment)
        for n in range(3)
    )
    batches = []
    written = 0
    timestamp = 1_700_000_000_000
    while written < count:
        size = min(rng.randint(1, 10), count - written)
        records = []
        for _ in range(size):
            group = rng.choice(groups)
            timestamp += 1
            if written % 50 == 0:
                key = encode_key(GroupMetadataKey(group))
                generation = rng.randint(1, 100)
                value = encode_value(
                    GroupMetadataValue("consumer", generation, "range", members[0].member_id,
                                       timestamp, members)
                )
            else:
                partition = rng.randrange(PARTITIONS)
                key = encode_key(OffsetCommitKey(group, rng.choice(topics), partition))
                value = encode_value(OffsetCommitValue(rng.randint(0, 10**9), "", timestamp, 5))
            records.append((key, value, timestamp))
            written += 1
        batches.append(build_batch(records, base_offset=written - size))
    return b"".join(batches)


def measure(label: str, count: int, run: object) -> float:
    # CPU time of this process: the machine is shared, and wall time would count other jobs.
    start = time.process_time()
    seen = run()  # type: ignore[operator]
    elapsed = time.process_time() - start
    assert seen == count, (label, seen, count)
    rate = count / elapsed
    print(f"{label:<44} {rate:>12,.0f} records/s  ({elapsed:.2f} s CPU)")
    return rate


def walk_raw(data: bytes) -> int:
    seen = 0
    for _ in iter_records_raw(data):
        seen += 1
    return seen


def walk_and_decode(data: bytes) -> int:
    seen = 0
    for _offset, _ts, key, value in iter_records_raw(data):
        decoded = decode_key(key)  # type: ignore[arg-type]
        decode_value(decoded, value)
        seen += 1
    return seen


def walk_and_decode_fields(data: bytes) -> int:
    """What a replay that keeps its own tables needs: cached key objects, offset-commit
    values as plain tuples, group metadata as model objects."""
    seen = 0
    for _offset, _ts, key, value in iter_records_raw(data):
        decoded = decode_key(key)  # type: ignore[arg-type]
        if type(decoded) is OffsetCommitKey:
            if value is not None:
                decode_offset_commit_fields(value)
        else:
            decode_value(decoded, value)
        seen += 1
    return seen


def latest_then_decode(data: bytes) -> int:
    """Keep each key's last record, then decode only those (what a state rebuild needs)."""
    table = LatestPerKey()
    table.add(data)
    for _offset, _ts, key, value in table.records():
        decoded = decode_key(key)
        if type(decoded) is OffsetCommitKey:
            if value is not None:
                decode_offset_commit_fields(value)
        else:
            decode_value(decoded, value)
    return table.records_seen


def kafka_python_walk(data: bytes) -> int:
    view = memoryview(data)
    seen = 0
    pos = 0
    while pos < len(data):
        _base, _last, size = peek_batch_header(data, pos)
        batch = DefaultRecordBatch(view[pos : pos + size])
        for _ in batch:
            seen += 1
        pos += size
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    data = generate(args.records)
    print(f"log: {args.records:,} records, {len(data) / 1e6:.1f} MB, "
          f"{GROUPS * TOPICS * PARTITIONS:,} offset keys, {GROUPS} groups")
    raw = measure("kgroups iter_records_raw", args.records, lambda: walk_raw(data))
    full = measure("kgroups iter_records_raw + decode to model", args.records,
                   lambda: walk_and_decode(data))
    fields = measure("kgroups iter_records_raw + decode to fields", args.records,
                     lambda: walk_and_decode_fields(data))
    latest = measure("kgroups latest per key, decode those only", args.records,
                     lambda: latest_then_decode(data))
    peer = measure("kafka-python DefaultRecordBatch (peer)", args.records,
                   lambda: kafka_python_walk(data))
    print(f"ratios vs kafka-python's walk: walk {raw / peer:.1f}x, walk+model "
          f"{full / peer:.1f}x, walk+fields {fields / peer:.1f}x, "
          f"latest-per-key {latest / peer:.1f}x")


if __name__ == "__main__":
    main()
