"""Exactly-once consume-transform-produce: `kgroups serve` beside Apache Kafka 4.3.1 (issue 25).

One confluent-kafka consumer (read_committed, no auto commit) reads an input topic of
--partitions partitions; one transactional producer, per transaction, consumes
--records-per-transaction records, produces each transformed (its value reversed) to the same
partition of an output topic, sends the consumer's positions with
`send_offsets_to_transaction` and calls `commit_transaction`. Both brokers finish a commit
(markers, then the Complete record) after answering EndTxn, so the next transaction's
AddOffsetsToTxn may hear CONCURRENT_TRANSACTIONS and librdkafka retries it after
retry.backoff.ms: the producer runs with --retry-backoff-ms (10) rather than librdkafka's 100 ms,
which otherwise bounds every transaction at about 100 ms on both brokers.

Printed per broker: transactions/s over --transactions transactions (after --warmup ones not
counted), commit_transaction latency p50/p99, the p50 of the other stages of a transaction
(consume, produce, send_offsets) and the output partitions a transaction touched on average
(librdkafka hands records a fetched batch at a time, so usually one or two whatever
--partitions), then the ratios kgroups/Kafka.

Durability as each broker runs:
- kgroups as shipped (its defaults): every __transaction_state record and every marker written
  to a data partition is fsynced before the coordinator goes on; the producer's records and the
  __consumer_offsets writes follow the flush settings, Kafka's default (no forced fsync);
- kgroups with log.flush.interval.messages=1: everything fsynced before it is acknowledged;
- Kafka 4.3.1 (single KRaft node, bench/broker.py's `kafka_broker`, 1 GiB heap) with its default
  flush policy: nothing fsynced before an acknowledgement (page cache);
- Kafka with log.flush.interval.messages=1: everything fsynced before it is acknowledged. This and
  kgroups' flush=1 run are the pair at equal durability.
Both brokers run with group.initial.rebalance.delay.ms=0 (the group forms before timing starts).
`make kafka` must have fetched Kafka's jars.

With --profile kgroups' runs go under cProfile (CPU time of the broker process's main thread:
the fsyncs, run in worker threads, show only as waits) and the functions with the most own time
are printed.

Run: .venv/bin/python bench/transactions.py [--transactions N] [--records-per-transaction R]
     [--partitions P] [--warmup W] [--retry-backoff-ms MS] [--no-kafka] [--no-fsync] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from broker import kafka_broker
from broker_data import produce_messages
from join_storm import kgroups_serve
from metadata import create_topics

VALUE_BYTES = 100
STAGES = ("consume", "produce", "send_offsets", "commit")
FSYNC_EACH = "log.flush.interval.messages=1"
NUMBERS = {  # option: (default, help)
    "--transactions": (200, "transactions timed"),
    "--records-per-transaction": (100, "input records consumed (and output records produced) "
                                  "per transaction"),
    "--partitions": (4, "partitions of the input topic and of the output topic"),
    "--warmup": (5, "transactions run first and not counted"),
    "--retry-backoff-ms": (10, "the producer's retry.backoff.ms (librdkafka's default 100 ms "
                           "then bounds every transaction on either broker)"),
}
SWITCHES = {
    "--no-kafka": "skip Apache Kafka",
    "--no-fsync": "skip the runs with log.flush.interval.messages=1",
    "--profile": "run kgroups under cProfile and print where its CPU time goes",
}


@dataclass(frozen=True)
class Figures:
    transactions_per_s: float
    commit_p50_ms: float
    commit_p99_ms: float
    stage_p50_ms: dict[str, float]
    partitions_per_transaction: float  # output partitions (each gets a marker), mean


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def consume_exactly(consumer: Consumer, count: int) -> list[object]:
    """`count` records from the consumer (librdkafka may hand fewer per call)."""
    records: list[object] = []
    deadline = time.monotonic() + 60
    while len(records) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(records)} of {count} input records arrived")
        for message in consumer.consume(count - len(records), timeout=1.0):
            if message.error() is not None:
                raise RuntimeError(f"consume: {message.error()}")
            records.append(message)
    return records


def run_loop(bootstrap: str, args: argparse.Namespace) -> Figures:
    """Fill the input topic, then time the consume-transform-produce loop."""
    tag = uuid.uuid4().hex[:8]
    source, sink = f"tx-in-{tag}", f"tx-out-{tag}"
    create_topics(AdminClient({"bootstrap.servers": bootstrap}), [source, sink], args.partitions)
    per_transaction = args.records_per_transaction
    total = (args.transactions + args.warmup) * per_transaction
    produce_messages(bootstrap, source, total, args.partitions, b"v" * VALUE_BYTES)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tx-group-{tag}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{tag}",
                         "linger.ms": 5, "retry.backoff.ms": args.retry_backoff_ms})
    try:
        consumer.subscribe([source])
        producer.init_transactions(60)
        spent: dict[str, list[float]] = {stage: [] for stage in STAGES}
        touched: list[int] = []
        started = 0.0
        for index in range(args.warmup + args.transactions):
            if index == args.warmup:
                started = time.perf_counter()
                spent = {stage: [] for stage in STAGES}
                touched = []
            marks = [time.perf_counter()]
            records = consume_exactly(consumer, per_transaction)
            marks.append(time.perf_counter())
            touched.append(len({record.partition() for record in records}))  # type: ignore[attr-defined]
            producer.begin_transaction()
            for record in records:
                producer.produce(sink, value=record.value()[::-1],  # type: ignore[attr-defined]
                                 key=record.key(),  # type: ignore[attr-defined]
                                 partition=record.partition())  # type: ignore[attr-defined]
            marks.append(time.perf_counter())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60)
            marks.append(time.perf_counter())
            producer.commit_transaction(60)
            marks.append(time.perf_counter())
            for stage, begin, end in zip(STAGES, marks, marks[1:], strict=False):
                spent[stage].append(end - begin)
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
        producer.flush(10)
    commits = spent["commit"]
    return Figures(args.transactions / elapsed, 1000 * statistics.median(commits),
                   1000 * p99(commits),
                   {stage: 1000 * statistics.median(values) for stage, values in spent.items()},
                   statistics.mean(touched))


@contextlib.contextmanager
def kgroups_bootstrap(data_dir: Path, fsync_each: bool, profile_to: Path | None) -> Iterator[str]:
    overrides = ["group.initial.rebalance.delay.ms=0"] + ([FSYNC_EACH] if fsync_each else [])
    with kgroups_serve(data_dir, overrides, profile_to) as port:
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def kafka_bootstrap(workdir: Path, fsync_each: bool) -> Iterator[str]:
    with kafka_broker(workdir, 0, fsync_each) as port:
        yield f"127.0.0.1:{port}"


def print_figures(results: dict[str, Figures]) -> None:
    pairs = [(ours, theirs) for ours, theirs in (("kgroups", "kafka"),
                                                 ("kgroups flush=1", "kafka flush=1"))
             if ours in results and theirs in results]
    rows: list[tuple[str, dict[str, float]]] = [
        ("transactions/s", {name: f.transactions_per_s for name, f in results.items()}),
        ("commit p50 ms", {name: f.commit_p50_ms for name, f in results.items()}),
        ("commit p99 ms", {name: f.commit_p99_ms for name, f in results.items()}),
    ] + [(f"{stage} p50 ms", {name: f.stage_p50_ms[stage] for name, f in results.items()})
         for stage in STAGES if stage != "commit"] + [  # commit: the p50 row above
        ("partitions/txn", {name: f.partitions_per_transaction for name, f in results.items()})]
    print(f"{'figure':20}" + "".join(f"{name:>17}" for name in results)
          + "".join(f"{ours + ' / ' + theirs:>34}" for ours, theirs in pairs))
    for figure, values in rows:
        ratios = "".join(f"{values[ours] / values[theirs]:34.2f}" if values[theirs] else
                         f"{'-':>34}" for ours, theirs in pairs)
        print(f"{figure:20}" + "".join(f"{values[name]:17.2f}" for name in results) + ratios)
    if any(theirs == "kafka flush=1" for _, theirs in pairs):
        print("equal durability: kgroups flush=1 / kafka flush=1 (every write fsynced before "
              "it is acknowledged)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, (default, text) in NUMBERS.items():
        parser.add_argument(flag, type=int, default=default, help=text)
    for flag, text in SWITCHES.items():
        parser.add_argument(flag, action="store_true", help=text)
    args = parser.parse_args()
    print(f"{args.transactions} transactions of {args.records_per_transaction} records over "
          f"{args.partitions} partitions ({args.warmup} more first, not counted), "
          f"retry.backoff.ms={args.retry_backoff_ms}; load average "
          + " / ".join(f"{load:.1f}" for load in os.getloadavg()), flush=True)
    results: dict[str, Figures] = {}
    flushes = [False] + ([] if args.no_fsync else [True])
    with tempfile.TemporaryDirectory() as scratch:
        for fsync_each in flushes:
            name = "kgroups flush=1" if fsync_each else "kgroups"
            directory = Path(scratch) / name.replace(" ", "-")
            profile_to = directory.with_suffix(".prof") if args.profile else None
            with kgroups_bootstrap(directory, fsync_each, profile_to) as bootstrap:
                results[name] = run_loop(bootstrap, args)
            if profile_to is not None:
                print(f"{name}: the broker's functions with the most own CPU time")
                pstats.Stats(str(profile_to)).sort_stats("tottime").print_stats(20)
        for fsync_each in [] if args.no_kafka else flushes:
            name = "kafka flush=1" if fsync_each else "kafka"
            with kafka_bootstrap(Path(scratch) / name.replace(" ", "-"), fsync_each) as bootstrap:
                results[name] = run_loop(bootstrap, args)
    print("load average after: " + " / ".join(f"{load:.1f}" for load in os.getloadavg()))
    print_figures(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
