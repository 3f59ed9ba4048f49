"""Streams-group assignment cases shared by the sticky task assignor's tests: the JSON spec
StreamsAssignorOracle.java reads (members in the order the coordinator puts them into its map,
the same group as the assignor's Python inputs,
answers in the oracle's listing, and seeded random groups.

A spec: {"configs": {...}, "subtopologies": [{"id", "tasks", "stateful"}], "members": [{"id",
"process", "instance", "rack", "tags", "active", "standby", "warmup"}]}, each task map
{subtopology id: [partitions]}.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from java_harness import ORACLE_TIMEOUT_S, harness_command
from kgroups.assignors.streams_sticky import StickyTaskAssignor
from kgroups.assignors.streams_tasks import (
    SubtopologyInfo,
    TaskAssignment,
    TaskAssignorError,
    TaskGroupSpec,
    TaskMemberSpec,
)

Spec = dict[str, Any]
# member -> {"active" | "standby" | "warmup": {subtopology: sorted partitions}}
Listing = dict[str, dict[str, dict[str, list[int]]]]


def run_oracle(specs: Sequence[Spec]) -> list[dict[str, Any]]:
    """Kafka's StickyTaskAssignor over every spec in one JVM: {"assignment": Listing} or
    {"error": "..."} each."""
    command = harness_command("kgroups.harness.StreamsAssignorOracle", log_level="off")
    command.remove("-XX:TieredStopAtLevel=1")  # a long batch: let the JIT optimise fully
    done = subprocess.run(command, input="".join(json.dumps(s) + "\n" for s in specs),
                          capture_output=True, text=True, check=False, timeout=ORACLE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(specs), done.stderr
    return answers


def _tasks(listed: Mapping[str, Sequence[int]] | None) -> dict[str, frozenset[int]]:
    return {s: frozenset(ps) for s, ps in (listed or {}).items()}


def inputs(spec: Spec) -> tuple[TaskGroupSpec, dict[str, SubtopologyInfo]]:
    """The spec as the assignor's inputs, members in put order."""
    members = {
        m["id"]: TaskMemberSpec(
            process_id=m["process"], instance_id=m.get("instance"), rack_id=m.get("rack"),
            client_tags=m.get("tags", {}), active_tasks=_tasks(m.get("active")),
            standby_tasks=_tasks(m.get("standby")), warmup_tasks=_tasks(m.get("warmup")))
        for m in spec["members"]
    }
    topology = {s["id"]: SubtopologyInfo(s["tasks"], s["stateful"]) for s in spec["subtopologies"]}
    return TaskGroupSpec(members, spec["configs"]), topology


def listing(result: Mapping[str, TaskAssignment]) -> Listing:
    def listed(tasks: Mapping[str, frozenset[int]]) -> dict[str, list[int]]:
        return {s: sorted(ps) for s, ps in sorted(tasks.items())}

    return {m: {"active": listed(a.active_tasks), "standby": listed(a.standby_tasks),
                "warmup": listed(a.warmup_tasks)}
            for m, a in sorted(result.items())}


def ours(spec: Spec) -> dict[str, Any]:
    """kgroups' answer in the oracle's shape (an error only as "error")."""
    try:
        return {"assignment": listing(StickyTaskAssignor().assign(*inputs(spec)))}
    except (TaskAssignorError, ValueError) as error:
        return {"error": str(error)}


def same_answer(ours_: Mapping[str, Any], kafka: Mapping[str, Any]) -> bool:
    """Equal assignments, or both an error: the same message for Kafka's TaskAssignorException
    (its coordinator's error names it), any for a bad config (Java's parse error)."""
    if "error" in ours_ or "error" in kafka:
        kind, _, message = kafka.get("error", "").partition(": ")
        if kind == "TaskAssignorException":
            return bool(ours_.get("error") == message)
        return "error" in ours_ and "error" in kafka
    return bool(ours_["assignment"] == kafka["assignment"])


def _kafka_member_id(rng: random.Random) -> str:
    raw = uuid.UUID(int=rng.getrandbits(128)).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# Strings of "Aa" and "BB" share one Java hash code: ids a client may choose to crowd a bucket.
SAME_HASH_IDS = ["".join(parts) for parts in itertools.product(["Aa", "BB"], repeat=5)]


def _member_id(rng: random.Random, index: int) -> str:
    roll = rng.random()
    if roll < 0.45:
        return _kafka_member_id(rng)
    if roll < 0.75:  # short ids: many share a bucket of a small table
        return f"m{index}"
    if roll < 0.9:
        return rng.choice(SAME_HASH_IDS)
    return f"{rng.choice(['a', 'b', 'Aa', 'BB', 'c'])}{rng.randint(0, 40)}-{index}"


def _process_id(rng: random.Random, index: int) -> str:
    roll = rng.random()
    if roll < 0.5:
        return str(uuid.UUID(int=rng.getrandbits(128)))
    if roll < 0.6:
        return SAME_HASH_IDS[index]
    return f"p{index}"


def _subtopology_ids(rng: random.Random, count: int) -> list[str]:
    if rng.random() < 0.85:  # Kafka Streams numbers them; "10" sorts before "2"
        start = rng.choice([0, 0, 8])
        return [str(i) for i in range(start, start + count)]
    # Names whose Java (UTF-16) and code point orders differ.
    pool = ["x", "\uff21", "\U0001f600", "A", "\U00010000b", "sub-1", "sub-10"]
    return rng.sample(pool, min(count, len(pool)))


def random_spec(rng: random.Random, big: bool = False) -> Spec:
    """One random group: 0-5 subtopologies (stateful or not), members spread over processes,
    previous active/standby/warm-up tasks at random (overlapping and stale claims included),
    num.standby.replicas 0-3 or no configs at all."""
    subtopologies = [
        {"id": sid, "tasks": rng.randint(0, 64 if big else 16), "stateful": rng.random() < 0.6}
        for sid in _subtopology_ids(rng, rng.randint(1, 8) if big else rng.randint(0, 5))
    ]
    process_count = rng.randint(1, 30) if big else rng.randint(1, 6)
    processes = [_process_id(rng, i) for i in range(process_count)]
    member_count = rng.randint(20, 100) if big else rng.randint(0, 12)
    members: list[dict[str, Any]] = []
    ids: set[str] = set()
    while len(members) < member_count:
        member_id = _member_id(rng, len(members))
        if member_id in ids:
            continue
        ids.add(member_id)
        member: dict[str, Any] = {"id": member_id, "process": rng.choice(processes),
                                  "active": {}, "standby": {}, "warmup": {}}
        if rng.random() < 0.2:
            member["instance"] = f"i-{len(members)}"
            member["rack"] = rng.choice(["r1", "r2"])
            member["tags"] = {"zone": rng.choice(["a", "b"])}
        members.append(member)
    if members:
        _previous_tasks(rng, subtopologies, members)
    roll = rng.random()
    configs = {} if roll < 0.15 else {"num.standby.replicas": str(rng.choice([0, 1, 1, 2, 3]))}
    return {"configs": configs, "subtopologies": subtopologies, "members": members}


def _previous_tasks(rng: random.Random, subtopologies: list[dict[str, Any]],
                    members: list[dict[str, Any]]) -> None:
    claim = rng.choice([0.0, 0.3, 0.7, 1.0])
    stale = [{"id": "gone-subtopology", "tasks": 2}] if rng.random() < 0.2 else []
    for sub in subtopologies + stale:
        for partition in range(sub["tasks"] + rng.choice([0, 0, 1])):  # sometimes one too many
            holders = rng.sample(members, min(len(members), rng.choice([1, 1, 1, 2])))
            if rng.random() < claim:
                for holder in holders:  # two claims of one active task now and then
                    holder["active"].setdefault(sub["id"], []).append(partition)
            for holder in rng.sample(members, min(len(members), rng.randint(0, 3))):
                if rng.random() < claim:
                    kind = "standby" if rng.random() < 0.8 else "warmup"
                    tasks = holder[kind].setdefault(sub["id"], [])
                    if partition not in tasks:
                        tasks.append(partition)


def next_round(rng: random.Random, spec: Spec, answer: Listing) -> Spec:
    """The group a round later: the members that stayed hold `answer` as their previous
    target, a few members left and a few joined."""
    members = []
    for m in spec["members"]:
        if rng.random() < 0.15:
            continue
        held = answer[m["id"]]
        members.append({**m, "active": held["active"], "standby": held["standby"],
                        "warmup": held["warmup"]})
    processes = sorted({m["process"] for m in members}) or ["p0"]
    taken = {m["id"] for m in members}
    for index in range(rng.randint(0, 3)):
        member_id = _member_id(rng, 1000 + index)
        if member_id not in taken:
            taken.add(member_id)
            process = rng.choice(processes) if rng.random() < 0.7 else f"new-{index}"
            members.append({"id": member_id, "process": process,
                            "active": {}, "standby": {}, "warmup": {}})
    rng.shuffle(members)
    return {**spec, "members": members}
