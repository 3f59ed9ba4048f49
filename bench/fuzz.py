"""Hostile-input soak of `kgroups serve`: many mutated request frames, a healthy group beside them.

Every served request version gets the mutations of tests/broker/fuzz_frames.py (truncation,
flipped bits, inserted and deleted bytes, huge and negative counts and lengths as int16, int32
and varint, nulls, versions out of range), each frame on a connection of its own so that a
frame which closes its connection still counts. Between batches a healthy member heartbeats,
commits and reads its commit back. Printed: frames sent and how the broker took them, frames/s,
whether the broker process is still alive, the healthy member's rounds and problems, and the
broker's RSS before, at its peak (sampled between batches) and after.

Run: .venv/bin/python bench/fuzz.py [--frames 1000000] [--threads 16] [--batch 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "broker"))

from fuzz_frames import HealthyMember, random_mutation, sample_frames, send_each

from conftest import ServerProcess

MIB = 1024 * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="kgroups-fuzz-"))
    server = ServerProcess(workdir / "data", workdir / "server.log",
                           overrides=("group.initial.rebalance.delay.ms=0",))
    server.start()
    assert server.process is not None
    process = psutil.Process(server.process.pid)
    healthy = HealthyMember(server.port, "healthy-bench")
    healthy.one_round()
    rss_before = peak = process.memory_info().rss
    samples = [s.frame for s in sample_frames()]
    rng = random.Random(args.seed)
    outcomes: Counter[str] = Counter()
    started = time.monotonic()
    sent = 0
    while sent < args.frames and server.process.poll() is None:
        count = min(args.batch, args.frames - sent)
        frames = [random_mutation(rng.choice(samples), rng) for _ in range(count)]
        outcomes.update(send_each(server.port, frames, args.threads))
        sent += count
        healthy.one_round()
        peak = max(peak, process.memory_info().rss)
        if sent % (50 * args.batch) == 0:
            print(f"  {sent} frames, {sent / (time.monotonic() - started):.0f}/s", flush=True)
    elapsed = time.monotonic() - started
    alive = server.process.poll() is None
    rss_after = process.memory_info().rss if alive else 0
    healthy.close()
    print(f"frames sent: {sent} in {elapsed:.0f} s ({sent / elapsed:.0f} frames/s, "
          f"{args.threads} connections at a time)")
    print(f"broker's answers: {dict(outcomes)}")
    print(f"broker alive: {alive}; crashes: {0 if alive else 1}")
    print(f"healthy member: {healthy.rounds} rounds, problems: {healthy.problems or 'none'}")
    print(f"broker RSS: before {rss_before / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB, "
          f"after {rss_after / MIB:.0f} MiB")
    closes = server.log_text().count("connection_closed")
    failed = server.log_text().count("handler_failed")
    print(f"log: {closes} connection_closed lines, {failed} handler_failed")
    if alive:
        server.stop()
    return 0 if alive and not healthy.problems and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
