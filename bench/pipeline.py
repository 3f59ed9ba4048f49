"""End-to-end speed of `kgroups analyze` on a generated __consumer_offsets log.

Generates N records (default 10,000,000) in Kafka's layout with kgroups' own log writer:
consumer groups committing all their partitions in one batch per OffsetCommit request, with a
new generation (3 members, consumer-protocol assignments) every 200 commits. Then, in the same
run and over the same files:

  * the Spark job (`kgroups.pipeline.job.run_analysis`, every table and the report) on
    local[2]: wall time and records decoded per second;
  * the peer: a single process decoding the same segments the way `kgroups offsets dump` does
    (`iter_records_raw`, then `decode_key` and `decode_value` per record; the dump's JSON
    printing is left out, which only makes the peer faster). With --with-json the dump's own
    per-segment generator (JSON lines, not printed) is timed as well;
  * for reference, the Spark tasks' own work done in this one process, outside Spark
    (`analyze_partition` for every __consumer_offsets partition, offset_commits written to a
    scratch directory), so what Spark adds on top is visible.

    .venv/bin/python bench/pipeline.py [--records N] [--master local[2]] [--runs 2] [--with-json]

The generated log is kept under /tmp (keyed by N) so reruns skip generation. The driver JVM maps
kgroups' class archive when one is in the cache (`kgroups.pipeline.class_archive`), as every
`kgroups analyze` after the first does; the run says which. For the very first run's figures,
point the cache at an empty directory: `KGROUPS_CACHE_DIR=$(mktemp -d) .venv/bin/python ...`.
"""

from __future__ import annotations

import argparse
import mmap
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kgroups.coordinator.placement import partition_for
from kgroups.log.batch import build_batch, iter_records_raw
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import PartitionLog
from kgroups.pipeline.discovery import OFFSETS_TOPIC, SegmentFile, find_inputs
from kgroups.pipeline.job import run_analysis
from kgroups.pipeline.partition import analyze_partition
from kgroups.pipeline.session import build_session, stop_session
from kgroups.pipeline.tables import clear_table
from kgroups.pipeline.window import TimeWindow
from kgroups.records.codec import decode_key, decode_value, encode_key, encode_value
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

OFFSETS_PARTITIONS = 50
GROUPS = 500
PARTITIONS_PER_GROUP = 16
GENERATION_EVERY = 200  # commit batches between two generations of a group
COMMIT_INTERVAL_MS = 5000
START_MS = 1_700_000_000_000


def generation_record(group: str, topic: str, generation: int, ts: int) -> tuple[bytes, bytes]:
    members = []
    for index in range(3):
        owned = tuple(p for p in range(PARTITIONS_PER_GROUP) if (p + generation) % 3 == index)
        members.append(MemberMetadata(
            member_id=f"consumer-{index}-{generation}", client_id=f"consumer-{index}",
            client_host=f"/10.0.0.{index}", session_timeout=45000, rebalance_timeout=300000,
            subscription=encode_subscription(ConsumerSubscription((topic,))),
            assignment=encode_assignment(ConsumerAssignment((TopicPartitions(topic, owned),))),
        ))
    value = GroupMetadataValue("consumer", generation, "range", members[0].member_id, ts,
                               tuple(members))
    return encode_key(GroupMetadataKey(group)), encode_value(value)


def generate(data_dir: Path, records: int) -> int:
    """Write about `records` records; returns the exact number written."""
    config = LogConfig().for_topic(OFFSETS_TOPIC)
    logs: dict[int, PartitionLog] = {}
    groups = [f"group-{n}" for n in range(GROUPS)]
    keys = {
        group: [encode_key(OffsetCommitKey(group, f"topic-{n}", p))
                for p in range(PARTITIONS_PER_GROUP)]
        for n, group in enumerate(groups)
    }
    written = 0
    round_number = 0
    while written < records:
        ts = START_MS + round_number * COMMIT_INTERVAL_MS
        for n, group in enumerate(groups):
            if written >= records:
                break
            partition = partition_for(group, OFFSETS_PARTITIONS)
            log = logs.get(partition)
            if log is None:
                log = logs[partition] = PartitionLog.open(
                    data_dir / f"{OFFSETS_TOPIC}-{partition}", config)
            if round_number % GENERATION_EVERY == 0:
                key, value = generation_record(group, f"topic-{n}", round_number // 200 + 1, ts)
                log.append_batch(build_batch([(key, value, ts)]))
                written += 1
            offset = round_number * 100
            batch = [
                (key, encode_value(OffsetCommitValue(offset + p, "", ts)), ts)
                for p, key in enumerate(keys[group])
            ]
            log.append_batch(build_batch(batch))
            written += len(batch)
        round_number += 1
    for log in logs.values():
        log.flush()
        log.close()
    return written


def dataset(records: int) -> tuple[Path, int]:
    """The generated data dir for `records`, reused across runs."""
    root = Path(tempfile.gettempdir()) / f"kgroups-bench-pipeline-{records}"
    marker = root / "records.txt"
    if marker.exists():
        return root / "data", int(marker.read_text())
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    written = generate(root / "data", records)
    marker.write_text(str(written))
    print(f"generated {written:,} records in {time.perf_counter() - started:.1f} s")
    return root / "data", written


def peer_decode(files: list[Path]) -> int:
    """`kgroups offsets dump`'s decoding, in one process, without its JSON output."""
    count = 0
    for path in files:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0,
                                                   access=mmap.ACCESS_READ) as data:
            for _offset, _ts, key, value in iter_records_raw(data):  # type: ignore[arg-type]
                decode_value(decode_key(key), value)
                count += 1
    return count


def pipeline_in_process(segments: tuple[SegmentFile, ...]) -> int:
    """The partition tasks' work, one partition after the other in this process."""
    by_partition: dict[int, list[SegmentFile]] = {}
    for segment in segments:
        by_partition.setdefault(segment.partition, []).append(segment)
    scratch = tempfile.mkdtemp(prefix="kgroups-bench-pipeline-inprocess-")
    clear_table(scratch, "offset_commits")
    try:
        return sum(
            analyze_partition(partition, [s.uri for s in own], TimeWindow(), None,
                              scratch).records
            for partition, own in sorted(by_partition.items())
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def peer_dump_json(files: list[Path]) -> int:
    """`kgroups offsets dump`'s own per-segment generator (JSON lines, discarded)."""
    from kgroups.records.cli import _dump_segment

    return sum(1 for path in files for _line in _dump_segment(path, None))


def class_archive_use(java_options: str) -> str:
    """What the driver JVM did with kgroups' class archive, from the options it started with."""
    if "-XX:SharedArchiveFile=" in java_options:
        return "mapped"
    if "-XX:ArchiveClassesAtExit=" in java_options:
        return "none yet (this run writes it when its JVM exits)"
    return "not used"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=2,
                        help="analyses of the same files in one Spark session (default 2)")
    parser.add_argument("--with-json", action="store_true",
                        help="also time the dump's JSON-lines generator")
    args = parser.parse_args()

    data_dir, records = dataset(args.records)
    inputs = find_inputs([str(data_dir)])
    files = [Path(s.uri) for s in inputs.offsets_segments]
    size = sum(s.size for s in inputs.offsets_segments)
    print(f"{records:,} records, {len(files)} segments, {size / 1e6:.0f} MB")

    started = time.perf_counter()
    spark = build_session(args.master, shuffle_partitions=8)
    session_seconds = time.perf_counter() - started
    archive = class_archive_use(spark.sparkContext.getConf().get("spark.driver.extraJavaOptions",
                                                                  ""))
    # Run 1 is what `kgroups analyze` pays: the first job of a fresh JVM, whose classes load
    # and compile while it runs. Later runs are a notebook's or a scheduler's second analysis
    # in the same session.
    job_seconds = []
    try:
        for _run in range(args.runs):
            out = Path(tempfile.mkdtemp(prefix="kgroups-bench-pipeline-out-"))
            try:
                started = time.perf_counter()
                result = run_analysis(spark, [str(data_dir)], str(out), inputs=inputs)
                job_seconds.append(time.perf_counter() - started)
            finally:
                shutil.rmtree(out, ignore_errors=True)
            if result.records != records:
                print(f"job decoded {result.records:,} records, expected {records:,}",
                      file=sys.stderr)
                return 1
    finally:
        stop_session(spark)

    started = time.perf_counter()
    peer_records = peer_decode(files)
    peer_seconds = time.perf_counter() - started
    started = time.perf_counter()
    in_process_records = pipeline_in_process(inputs.offsets_segments)
    decode_seconds = time.perf_counter() - started
    job_rate = records / job_seconds[0]
    peer_rate = peer_records / peer_seconds
    print(f"Spark session start ({args.master}): {session_seconds:.1f} s; class archive: {archive}")
    for number, seconds in enumerate(job_seconds, 1):
        when = "first job of the JVM" if number == 1 else "same session again"
        print(f"kgroups analyze run {number} ({args.master}, {when}), all tables + report: "
              f"{seconds:.1f} s, {records / seconds:,.0f} records/s")
    print(f"peer: single-process dump decode: {peer_seconds:.1f} s, {peer_rate:,.0f} records/s")
    print(f"ratio job (run 1) / peer: {job_rate / peer_rate:.2f}")
    print(f"reference: the partition tasks' work in one process, outside Spark: "
          f"{decode_seconds:.1f} s, {in_process_records / decode_seconds:,.0f} records/s")
    if args.with_json:
        started = time.perf_counter()
        dumped = peer_dump_json(files)
        json_seconds = time.perf_counter() - started
        print(f"peer: dump JSON-lines generator: {json_seconds:.1f} s, "
              f"{dumped / json_seconds:,.0f} records/s; ratio job / it: "
              f"{job_rate / (dumped / json_seconds):.2f}")
    verdict = "met" if job_rate >= 1e6 else "not met"
    print(f"target 1,000,000 records/s end to end (run 1): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
