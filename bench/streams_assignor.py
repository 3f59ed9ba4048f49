"""The streams task assignor `sticky` (KIP-1071): kgroups' (kgroups.assignors.streams_sticky,
Python) beside Kafka 4.3.1's own (StickyTaskAssignor, through tests/java StreamsAssignorOracle,
`make java-harness`) on the same groups, best of --repeat runs each, and whether both gave the
same tasks to every member.

Groups: --members members (default 100) on --members / --threads processes, --subtopologies
subtopologies (default 6, every other one stateful) of --tasks tasks each (default 500: 3,000
tasks), num.standby.replicas 1. Three rounds: from nothing; one member joining the group that
holds the first answer; one whole process leaving it.

Run: .venv/bin/python bench/streams_assignor.py [--members 100] [--threads 4]
     [--subtopologies 6] [--tasks 500] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT / "tests"))
sys.path.insert(1, str(ROOT / "tests" / "assignors"))

from streams_cases import Spec, inputs, listing, run_oracle  # noqa: E402

from kgroups.assignors.streams_sticky import StickyTaskAssignor  # noqa: E402


def _member(member_id: str, process: str, held: dict[str, Any] | None = None) -> dict[str, Any]:
    held = held or {}
    return {"id": member_id, "process": process, "active": held.get("active", {}),
            "standby": held.get("standby", {}), "warmup": {}}


def rounds(args: argparse.Namespace) -> dict[str, Spec]:
    subtopologies = [{"id": str(i), "tasks": args.tasks, "stateful": i % 2 == 0}
                     for i in range(args.subtopologies)]
    base: Spec = {"configs": {"num.standby.replicas": "1"}, "subtopologies": subtopologies,
                  "members": [_member(f"member-{m:03d}", f"process-{m // args.threads:03d}")
                              for m in range(args.members)]}
    first = listing(StickyTaskAssignor().assign(*inputs(base)))
    held = [_member(m["id"], m["process"], first[m["id"]]) for m in base["members"]]
    joining = {**base, "members": [*held, _member("member-joining", "process-new")]}
    leaving = {**base, "members": [m for m in held if m["process"] != "process-000"]}
    return {"fresh": base, "one member joins": joining, "one process leaves": leaving}


def best_ms(spec: Spec, repeat: int) -> float:
    group, topology = inputs(spec)
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        StickyTaskAssignor().assign(group, topology)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--subtopologies", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    specs = rounds(args)
    kafka = run_oracle([{**spec, "repeat": args.repeat} for spec in specs.values()])
    for (name, spec), answer in zip(specs.items(), kafka, strict=True):
        ours = listing(StickyTaskAssignor().assign(*inputs(spec)))
        print(json.dumps({
            "round": name, "members": len(spec["members"]),
            "tasks": args.subtopologies * args.tasks,
            "kgroups_ms": round(best_ms(spec, args.repeat), 1),
            "kafka_ms": round(answer["best_ms"], 1),
            "same_assignment": ours == answer["assignment"],
        }))


if __name__ == "__main__":
    main()
