"""CPU time of OffsetCommit in the sans-IO core, and of the completions the broker hands it.

bench/broker.py's commit phase gives each connection a standalone group of its own, and the
groups fall on different `__consumer_offsets` partitions: each commit is a batch of its own, so
whatever the broker pays per batch, and per call into the coordinator, it pays per commit. This
drives `GroupCoordinator` as the broker does, without sockets, a log or an event loop: every
round each of --groups standalone groups commits one offset (`offset_commit`), then the writes
complete, either one call per write (`--completions each`, what the runtime did per partition
batch) or one call for the round (`--completions turn`, what it does since: one call per event
loop turn). It prints process CPU time per commit and per completion (best of --repeat runs),
and a digest of every record written and every answer given, which two runs of different
modes must share: the mode changes the cost, never the outcome.

Run: .venv/bin/python bench/commit_core.py [--groups 16] [--rounds 3000] [--repeat 5]
     [--completions each|turn|both]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from kgroups.coordinator import GroupCoordinator
from kgroups.coordinator.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
)
from kgroups.records.codec import encode_record

NOW = 1_000_000
PARTITIONS = 50  # offsets.topic.num.partitions' default


def run(groups: int, rounds: int, each: bool) -> tuple[float, float, str]:
    """(CPU µs per commit, CPU µs per completion, digest) of one run."""
    coordinator = GroupCoordinator(new_uuid=uuid.uuid4)
    for partition in range(PARTITIONS):
        coordinator.load_partition(partition, [], NOW)
    names = [f"bench-commit-{index}" for index in range(groups)]
    request_ids = itertools.count(1)
    digest = hashlib.sha256()
    committing = completing = 0.0
    for round_number in range(rounds):
        write_ids: list[int] = []
        started = time.process_time()
        for group in names:
            request = OffsetCommitRequest(
                next(request_ids), group,
                (OffsetCommitTopic("bench", (OffsetCommitPartition(0, round_number, None, -1),)),))
            effects = coordinator.offset_commit(request, NOW)
            for write in effects.writes:
                write_ids.append(write.write_id)
                for record in write.records:
                    digest.update(b"".join(part or b"" for part in encode_record(record)))
        committing += time.process_time() - started
        started = time.process_time()
        if each:
            answers = [reply for write_id in write_ids
                       for reply in coordinator.writes_completed([write_id], None, NOW).replies]
        else:
            answers = coordinator.writes_completed(write_ids, None, NOW).replies
        completing += time.process_time() - started
        for reply in answers:
            digest.update(repr(reply).encode())
    commits = groups * rounds
    return committing / commits * 1e6, completing / commits * 1e6, digest.hexdigest()[:16]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--completions", choices=("each", "turn", "both"), default="both")
    args = parser.parse_args()
    modes = ("each", "turn") if args.completions == "both" else (args.completions,)
    best: dict[str, tuple[float, float, str]] = {}
    for _ in range(args.repeat):
        for mode in modes:  # alternated, so a neighbour's burst falls on both alike
            figures = run(args.groups, args.rounds, mode == "each")
            if mode not in best or sum(figures[:2]) < sum(best[mode][:2]):
                best[mode] = figures
    print(f"{args.groups} standalone groups x {args.rounds} rounds, best of {args.repeat}")
    print(f"{'completions':<12} {'commit µs':>10} {'completion µs':>14}  digest")
    for mode, (commit_us, completion_us, digest) in best.items():
        print(f"{mode:<12} {commit_us:>10.2f} {completion_us:>14.2f}  {digest}")
    if len({digest for _, _, digest in best.values()}) > 1:
        print("the modes' digests differ: the outcome changed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
