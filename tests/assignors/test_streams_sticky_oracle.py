"""Kafka's own streams task assignor (kafka-group-coordinator 4.3.1's StickyTaskAssignor, run by
tests/java's StreamsAssignorOracle) judges kgroups' `sticky` one: the same active, standby and
warm-up tasks for every member, or an error on both sides.

Named edge cases (no members, more members than tasks, num.standby.replicas 0/1/2, members
sharing a process, previous active/standby/warm-up tasks, stateless subtopologies, racks and
client tags, a 100-member group with thousands of tasks) and seeded
random groups, each followed by a next round that starts from its answer with members joined
and left, all go through one JVM.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from streams_cases import (
    SAME_HASH_IDS,
    Spec,
    next_round,
    ours,
    random_spec,
    run_oracle,
    same_answer,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEED = 20261127
RANDOM_GROUPS = 300


def _member(member_id: str, process: str, active: dict[str, list[int]] | None = None,
            standby: dict[str, list[int]] | None = None,
            warmup: dict[str, list[int]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": member_id, "process": process, "active": active or {},
            "standby": standby or {}, "warmup": warmup or {}, **extra}


def _spec(members: list[dict[str, Any]], subtopologies: list[tuple[str, int, bool]],
          standbys: int | None = 1) -> Spec:
    return {"configs": {} if standbys is None else {"num.standby.replicas": str(standbys)},
            "subtopologies": [{"id": s, "tasks": n, "stateful": st} for s, n, st in subtopologies],
            "members": members}


def _threads(processes: int, per_process: int) -> list[dict[str, Any]]:
    return [_member(f"member-{p}-{t}", f"process-{p}")
            for p in range(processes) for t in range(per_process)]


def _all_on_one() -> list[dict[str, Any]]:
    """Four members, the first holding every task of the previous round."""
    members = _threads(2, 2)
    members[0]["active"] = {"0": list(range(8)), "1": list(range(4))}
    members[3]["standby"] = {"0": list(range(8))}
    return members


def _active_owner_gone() -> list[dict[str, Any]]:
    """The active owner of subtopology 0 left; its standbys are elsewhere."""
    members = _threads(3, 1)[1:]
    members[0]["standby"] = {"0": [0, 1]}
    members[1]["standby"] = {"0": [2, 3]}
    return members


def _double_claim() -> list[dict[str, Any]]:
    """Two members both name the same active tasks (stale targets): the later one in the
    member map wins."""
    members = [_member(f"c{i}", f"p{i % 2}", active={"0": [0, 1, 2]}) for i in range(6)]
    return members


def _tagged() -> list[dict[str, Any]]:
    return [_member(f"m{i}", f"p{i % 3}", instance=f"instance-{i}", rack=f"rack-{i % 2}",
                    tags={"zone": f"z{i % 3}"}) for i in range(6)]


def _same_hash(members: int, others: int) -> list[dict[str, Any]]:
    """`members` ids of one hash code among `others`, on processes whose ids share one too:
    buckets that grow the table (fewer than 64 slots) or turn into trees (64 and more)."""
    ids = SAME_HASH_IDS[:members] + [f"m{i}" for i in range(others)]
    random.Random(len(ids)).shuffle(ids)
    return [_member(member_id, SAME_HASH_IDS[-1 - i % 10], active={"0": [i % 40]})
            for i, member_id in enumerate(ids)]


def _big_group() -> Spec:
    """100 members on 25 processes, 2,400 tasks in 6 subtopologies, previous targets from a
    smaller group."""
    rng = random.Random(SEED)
    members = _threads(25, 4)
    subtopologies = [(str(i), 400, i % 2 == 0) for i in range(6)]
    for sub, count, _ in subtopologies:
        for p in range(count):
            if rng.random() < 0.8:
                rng.choice(members[:80])["active"].setdefault(sub, []).append(p)
    rng.shuffle(members)
    return _spec(members, subtopologies, standbys=2)


EDGE_CASES: dict[str, Spec] = {
    "no members, no subtopologies": _spec([], []),
    "no members, tasks": _spec([], [("0", 4, True)]),
    "no members, a subtopology without tasks": _spec([], [("0", 0, True)]),
    "more members than tasks": _spec(_threads(5, 2), [("0", 3, True)]),
    "standby replicas 0": _spec(_threads(3, 2), [("0", 6, True), ("1", 4, False)], 0),
    "standby replicas 1": _spec(_threads(3, 2), [("0", 6, True), ("1", 4, False)], 1),
    "standby replicas 2": _spec(_threads(3, 2), [("0", 6, True), ("1", 4, False)], 2),
    "standby replicas beyond the processes": _spec(_threads(2, 3), [("0", 5, True)], 3),
    "no configs at all": _spec(_threads(2, 2), [("0", 5, True)], None),
    "configs without num.standby.replicas": {**_spec(_threads(2, 1), [("0", 2, True)]),
                                             "configs": {"other": "1"}},
    "members sharing one process": _spec(_threads(1, 5), [("0", 12, True), ("1", 3, False)], 1),
    "previous active all on one member": _spec(_all_on_one(), [("0", 8, True), ("1", 4, True)]),
    "previous active owner gone": _spec(_active_owner_gone(), [("0", 4, True)]),
    "previous warm-up tasks": _spec(
        [_member("a", "p1", warmup={"0": [0, 1, 2]}), _member("b", "p2", active={"0": [0]})],
        [("0", 3, True)]),
    "active tasks claimed twice": _spec(_double_claim(), [("0", 3, True)]),
    "stateless subtopologies only": _spec(_threads(3, 2), [("0", 7, False), ("1", 2, False)], 2),
    "subtopologies 10 and 2": _spec(_threads(2, 2), [("2", 3, True), ("10", 3, True)]),
    "racks and client tags": _spec(_tagged(), [("0", 9, True)], 1),
    "nine member ids of one hash code": _spec(_same_hash(9, 4), [("0", 40, True)], 1),
    "a bucket turned into a tree": _spec(_same_hash(20, 60), [("0", 40, True), ("1", 90, False)]),
    "a hundred members, thousands of tasks": _big_group(),
}


def _random_specs() -> list[Spec]:
    rng = random.Random(SEED)
    specs = []
    for index in range(RANDOM_GROUPS):
        spec = random_spec(rng, big=index % 10 == 0)
        specs.append(spec)
        answer = ours(spec)
        if "assignment" in answer and spec["members"]:
            specs.append(next_round(rng, spec, answer["assignment"]))
    return specs


@pytest.fixture(scope="module")
def judged() -> dict[str, list[tuple[Spec, dict[str, Any], dict[str, Any]]]]:
    """(spec, kgroups' answer, Kafka's answer) for the edge cases and the random groups."""
    edge = list(EDGE_CASES.values())
    random_specs = _random_specs()
    answers = run_oracle(edge + random_specs)
    both = [(spec, ours(spec), kafka)
            for spec, kafka in zip(edge + random_specs, answers, strict=True)]
    return {"edge": both[:len(edge)], "random": both[len(edge):]}


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_case_matches_kafka(
    judged: dict[str, list[tuple[Spec, dict[str, Any], dict[str, Any]]]], name: str,
) -> None:
    spec, mine, kafka = judged["edge"][list(EDGE_CASES).index(name)]
    assert same_answer(mine, kafka), (json.dumps(spec)[:2000], mine, kafka)


def test_edge_cases_show_what_they_are_named_for(
    judged: dict[str, list[tuple[Spec, dict[str, Any], dict[str, Any]]]],
) -> None:
    """The cases hold what makes them edges on Kafka's side, so they cannot pass vacuously."""
    by_name = {name: kafka for name, (_, _, kafka) in zip(EDGE_CASES, judged["edge"], strict=True)}
    assert by_name["no members, no subtopologies"] == {"assignment": {}}
    assert "error" in by_name["no members, tasks"]
    assert "error" in by_name["configs without num.standby.replicas"]

    def standbys(name: str) -> int:
        return sum(len(ps) for m in by_name[name]["assignment"].values()
                   for ps in m["standby"].values())

    assert [standbys(f"standby replicas {n}") for n in range(3)] == [0, 6, 12]
    assert standbys("standby replicas beyond the processes") == 5  # one other process each
    assert standbys("members sharing one process") == 0
    previous = by_name["previous active owner gone"]["assignment"]
    assert previous["member-1-0"]["active"] == {"0": [0, 1]}
    assert previous["member-2-0"]["active"] == {"0": [2, 3]}
    idle = [m for m, got in by_name["more members than tasks"]["assignment"].items()
            if not got["active"]]
    assert len(idle) == 7


def test_random_groups_match_kafka(
    judged: dict[str, list[tuple[Spec, dict[str, Any], dict[str, Any]]]],
) -> None:
    mismatches = [(json.dumps(spec), mine, kafka) for spec, mine, kafka in judged["random"]
                  if not same_answer(mine, kafka)]
    assert mismatches[:1] == []


def test_random_groups_cover_every_shape(
    judged: dict[str, list[tuple[Spec, dict[str, Any], dict[str, Any]]]],
) -> None:
    """Standbys placed, members sharing processes, previous targets held, and Kafka's error
    for tasks without members all occur."""
    specs = [spec for spec, _, _ in judged["random"]]
    answers = [kafka for _, _, kafka in judged["random"]]
    assert sum("error" in a for a in answers) >= 3
    assert sum(any(m["standby"] for m in a["assignment"].values())
               for a in answers if "assignment" in a) > RANDOM_GROUPS // 4
    assert sum(len({m["process"] for m in s["members"]}) < len(s["members"])
               for s in specs) > RANDOM_GROUPS // 2
    assert sum(any(m["active"] for m in s["members"]) for s in specs) > RANDOM_GROUPS // 2
