"""Kafka's own share-group assignor (kafka-group-coordinator 4.3.1's SimpleAssignor, run by
tests/java's ShareAssignorOracle) judges kgroups' `share_simple` on seeded random share groups:
1-3 topics of 1-12 partitions, some not yet initialized, 1-10 members with short and Kafka-style
ids subscribing to equal or unequal topic sets, and current targets that are empty, random, or
the previous round's own answer with members joined and left. All groups go through one JVM."""

from __future__ import annotations

import base64
import json
import random
import subprocess
import uuid

import pytest

from java_harness import harness_command
from kgroups.assignors.share_simple import ShareAssignorMember, assign

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

GROUPS = 1500
SEED = 20261127
Answer = dict[str, dict[str, list[int]]]
Group = tuple[list[ShareAssignorMember], dict[uuid.UUID, int], dict[uuid.UUID, frozenset[int]]]


def kafka_id(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def member_id(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice("abcdefghij") + str(rng.randrange(100))
    return kafka_id(uuid.UUID(int=rng.getrandbits(128)))


def random_group(rng: random.Random) -> Group:
    topics = {uuid.UUID(int=rng.getrandbits(128)): rng.randint(1, 12)
              for _ in range(rng.randint(1, 3))}
    initialized = {t: frozenset(p for p in range(n) if rng.random() < 0.85)
                   for t, n in topics.items()}
    names = list(dict.fromkeys(member_id(rng) for _ in range(rng.randint(1, 10))))
    equal = rng.random() < 0.5
    everything = tuple(topics)
    members = []
    for name in names:
        subscribed = everything if equal else tuple(
            t for t in everything if rng.random() < 0.6) or (rng.choice(everything),)
        current: dict[uuid.UUID, frozenset[int]] = {}
        if rng.random() < 0.5:
            for t, n in topics.items():
                held = frozenset(p for p in initialized[t] if rng.random() < 2 / (len(names) + 1))
                if held and p_in_range(held, n):
                    current[t] = held
        members.append(ShareAssignorMember(name, subscribed, current))
    return members, topics, initialized


def p_in_range(held: frozenset[int], count: int) -> bool:
    return max(held) < count


def next_round(rng: random.Random, group: Group, answer: dict[str, dict[uuid.UUID,
               frozenset[int]]]) -> Group:
    """The previous answer as the members' targets, one member gone and one new."""
    members, topics, initialized = group
    kept = [ShareAssignorMember(m.member_id, m.subscribed, answer[m.member_id])
            for m in members]
    if len(kept) > 1:
        kept.pop(rng.randrange(len(kept)))
    newcomer = member_id(rng)
    if newcomer not in {m.member_id for m in kept}:
        kept.append(ShareAssignorMember(newcomer, kept[0].subscribed if kept else tuple(topics),
                                        {}))
    return kept, topics, initialized


def spec(group: Group) -> str:
    members, topics, initialized = group
    return json.dumps({
        "topics": {kafka_id(t): n for t, n in topics.items()},
        "assignable": {kafka_id(t): sorted(ps) for t, ps in initialized.items()},
        "members": [{"id": m.member_id, "topics": [kafka_id(t) for t in m.subscribed],
                     "owned": {kafka_id(t): sorted(ps) for t, ps in m.current.items()}}
                    for m in members]})


def listing(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> Answer:
    return {member: {kafka_id(t): sorted(ps) for t, ps in sorted(
        targets.items(), key=lambda item: kafka_id(item[0])) if ps}
        for member, targets in sorted(result.items())}


def ours(group: Group) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    members, topics, initialized = group
    return assign(members, topics, lambda t, p: p in initialized.get(t, frozenset()))


def test_simple_assignor_matches_kafka() -> None:
    rng = random.Random(SEED)
    groups: list[Group] = []
    while len(groups) < GROUPS:
        group = random_group(rng)
        groups.append(group)
        if rng.random() < 0.5:
            groups.append(next_round(rng, group, ours(group)))
    command = harness_command("kgroups.harness.ShareAssignorOracle", log_level="off")
    lines = [spec(g) for g in groups]
    done = subprocess.run(command, input="".join(line + "\n" for line in lines),
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(groups), done.stderr
    mismatches = [(line, listing(ours(g)), answer.get("assignment", answer))
                  for g, line, answer in zip(groups, lines, answers, strict=True)
                  if listing(ours(g)) != answer.get("assignment")]
    assert len(mismatches) == 0, (len(mismatches), mismatches[:1])
