"""Properties over random groups: unequal subscriptions, static members, previous ownership
with generations, for every strategy and especially the sticky family."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.assignors import assign_scenario

STICKY_FAMILY = ("sticky", "cooperative-sticky", "uniform")
ALL_STRATEGIES = ("range", "roundrobin", *STICKY_FAMILY)


@st.composite
def groups(draw: st.DrawFn) -> dict:
    """Topics t0.. with 1-9 partitions; members c0.. subscribed to random non-empty subsets,
    some static, some claiming random partitions (overlapping claims included) at random
    generations."""
    topic_count = draw(st.integers(1, 5))
    topics = {f"t{i}": draw(st.integers(1, 9)) for i in range(topic_count)}
    names = sorted(topics)
    members = {}
    for i in range(draw(st.integers(1, 7))):
        subscribed = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        spec: dict = {"topics": subscribed}
        owned = {}
        for topic in draw(st.lists(st.sampled_from(names), unique=True, max_size=3)):
            partitions = draw(st.lists(st.integers(0, topics[topic] + 1), unique=True, max_size=4))
            owned[topic] = sorted(partitions)
        if owned:
            spec["owned"] = owned
            spec["generation"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            spec["instance_id"] = f"static-{draw(st.integers(0, 99))}-{i}"
        members[f"c{i}"] = spec
    return {"topics": topics, "members": members}


def _pairs(assignment: dict) -> list[tuple[str, str, int]]:
    return [
        (member, topic, p)
        for member, topics in assignment.items()
        for topic, parts in topics.items()
        for p in parts
    ]


def _all_partitions(scenario: dict) -> set[tuple[str, int]]:
    wanted = {t for m in scenario["members"].values() for t in m["topics"]}
    return {(t, p) for t in wanted for p in range(scenario["topics"][t])}


def _check_valid(scenario: dict, result: dict, cooperative: bool) -> None:
    pairs = _pairs(result["assignment"])
    owned_partitions = [(t, p) for _, t, p in pairs]
    assert len(owned_partitions) == len(set(owned_partitions)), "a partition has two owners"
    for member, topic, _ in pairs:
        assert topic in scenario["members"][member]["topics"], "owner is not subscribed"
    assert set(result["assignment"]) == set(scenario["members"])
    revoked = {(t, p) for _, t, p in _pairs(result.get("revoked", {}))}
    # A member may keep a partition another member also claimed (and now gives up), but no
    # member starts on a partition in the round that revokes it.
    newly_assigned = {
        (t, p) for m, t, p in pairs
        if p not in scenario["members"][m].get("owned", {}).get(t, [])
    }
    assert not revoked & newly_assigned, "revoked and newly assigned in the same round"
    if cooperative:
        assert set(owned_partitions) | revoked == _all_partitions(scenario)
    else:
        assert set(owned_partitions) == _all_partitions(scenario)


def _check_balanced(scenario: dict, assignment: dict) -> None:
    counts = {m: sum(len(p) for p in topics.values()) for m, topics in assignment.items()}
    for heavy, heavy_topics in assignment.items():
        for light, light_spec in scenario["members"].items():
            if counts[heavy] >= counts[light] + 2:
                shared = set(heavy_topics) & set(light_spec["topics"])
                assert not shared, f"{heavy} ({counts[heavy]}) holds {shared} {light} could take"


def _next_round(scenario: dict, assignment: dict, generation: int) -> dict:
    members = {
        m: {**spec, "owned": assignment[m], "generation": generation}
        for m, spec in scenario["members"].items()
    }
    return {"topics": scenario["topics"], "members": members}


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(ALL_STRATEGIES))
def test_one_subscribed_owner_per_partition(scenario: dict, strategy: str) -> None:
    result = assign_scenario(strategy, scenario)
    _check_valid(scenario, result, cooperative=strategy == "cooperative-sticky")


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(("sticky", "uniform")))
def test_sticky_family_members_two_apart_share_no_topic(scenario: dict, strategy: str) -> None:
    _check_balanced(scenario, assign_scenario(strategy, scenario)["assignment"])


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(("sticky", "uniform")))
def test_a_balanced_assignment_is_kept_as_it_is(scenario: dict, strategy: str) -> None:
    first = assign_scenario(strategy, scenario)["assignment"]
    again = assign_scenario(strategy, _next_round(scenario, first, 10))["assignment"]
    assert again == first


@settings(max_examples=150, deadline=None)
@given(groups())
def test_cooperative_converges_within_four_rounds(scenario: dict) -> None:
    current = scenario
    for generation in range(10, 14):
        result = assign_scenario("cooperative-sticky", current)
        _check_valid(current, result, cooperative=True)
        if not any(result["revoked"].values()):
            _check_valid(current, result, cooperative=False)
            _check_balanced(current, result["assignment"])
            return
        current = _next_round(current, result["assignment"], generation)
    raise AssertionError("cooperative-sticky still revoking after four rounds")


@settings(max_examples=100, deadline=None)
@given(groups(), st.sampled_from(ALL_STRATEGIES), st.randoms(use_true_random=False))
def test_result_does_not_depend_on_member_order(
    scenario: dict, strategy: str, shuffler: random.Random
) -> None:
    members = list(scenario["members"].items())
    shuffler.shuffle(members)
    shuffled = {"topics": scenario["topics"], "members": dict(members)}
    assert assign_scenario(strategy, shuffled) == assign_scenario(strategy, scenario)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 9), min_size=1),
    st.integers(2, 7),
    st.booleans(),
    st.sampled_from(STICKY_FAMILY),
)
def test_when_one_member_joins_or_leaves_only_its_share_moves(
    topics: dict, member_count: int, joins: bool, strategy: str
) -> None:
    """Equal subscriptions: members who stay never trade partitions among themselves; they
    only hand some to a newcomer or take over a leaver's."""
    members = {f"c{i}": {"topics": sorted(topics)} for i in range(member_count)}
    before = assign_scenario(strategy, {"topics": topics, "members": members})["assignment"]
    changed = "c-new" if joins else "c0"
    after_members = {m: spec for m, spec in members.items() if m != changed}
    if joins:
        after_members[changed] = {"topics": sorted(topics)}
    after = assign_scenario(
        strategy,
        _next_round({"topics": topics, "members": after_members}, before | {"c-new": {}}, 5),
    )
    owner_before = {(t, p): m for m, t, p in _pairs(before)}
    for member, topic, partition in _pairs(after["assignment"]):
        previous = owner_before[(topic, partition)]
        to_newcomer = joins and member == changed
        from_leaver = not joins and previous == changed
        assert previous == member or to_newcomer or from_leaver, f"{topic}-{partition} moved"
    counts = [sum(map(len, a.values())) for a in after["assignment"].values()]
    if strategy != "cooperative-sticky":
        assert max(counts) - min(counts) <= 1


@st.composite
def racked_groups(draw: st.DrawFn) -> dict:
    """Groups whose members and partitions carry racks (some members without one)."""
    racks = ["r1", "r2", "r3"]
    scenario = draw(groups())
    for topic, count in list(scenario["topics"].items()):
        replica_racks = [
            draw(st.lists(st.sampled_from(racks), unique=True, max_size=2)) for _ in range(count)
        ]
        scenario["topics"][topic] = {"partitions": count, "racks": replica_racks}
    for spec in scenario["members"].values():
        rack = draw(st.sampled_from([None, *racks]))
        if rack is not None:
            spec["rack"] = rack
    return scenario


@settings(max_examples=150, deadline=None)
@given(racked_groups())
def test_range_keeps_per_topic_quotas_whatever_the_racks(scenario: dict) -> None:
    result = assign_scenario("range", scenario)["assignment"]
    for topic, spec in scenario["topics"].items():
        subscribers = [m for m, s in scenario["members"].items() if topic in s["topics"]]
        if not subscribers:
            continue
        sizes = sorted(len(result[m].get(topic, [])) for m in subscribers)
        share, extra = divmod(spec["partitions"], len(subscribers))
        assert sizes == [share] * (len(subscribers) - extra) + [share + 1] * extra


@st.composite
def small_unequal_groups(draw: st.DrawFn) -> dict:
    """Groups small enough to know their best balance: 1-3 topics of 1-4 partitions, 2-4
    members with random non-empty subscriptions, some claiming partitions."""
    topics = {f"t{i}": draw(st.integers(1, 4)) for i in range(draw(st.integers(1, 3)))}
    names = sorted(topics)
    members = {}
    for i in range(draw(st.integers(2, 4))):
        spec: dict = {"topics": draw(st.lists(st.sampled_from(names), min_size=1, unique=True))}
        owned = {t: sorted(draw(st.lists(st.integers(0, topics[t] - 1), unique=True)))
                 for t in draw(st.lists(st.sampled_from(names), unique=True, max_size=2))}
        if owned:
            spec["owned"], spec["generation"] = owned, 1
        members[f"c{i}"] = spec
    return {"topics": topics, "members": members}


def _best_spread(scenario: dict) -> int:
    """The smallest max-min partition count over every way to share each topic's partitions
    among its subscribers (counts only: which partition goes where does not matter)."""
    names = sorted(scenario["members"])
    reachable = {tuple(0 for _ in names)}
    for topic, count in scenario["topics"].items():
        takers = [i for i, m in enumerate(names) if topic in scenario["members"][m]["topics"]]
        if not takers:
            continue
        shares = [s for s in itertools.product(range(count + 1), repeat=len(takers))
                  if sum(s) == count]
        following = set()
        for counts in reachable:
            for share in shares:
                after = list(counts)
                for taker, amount in zip(takers, share, strict=True):
                    after[taker] += amount
                following.add(tuple(after))
        reachable = following
    return min(max(c) - min(c) for c in reachable)


@settings(max_examples=100, deadline=None)
@given(small_unequal_groups())
def test_sticky_is_as_balanced_as_any_assignment(scenario: dict) -> None:
    """Unequal subscriptions: no assignment of the group has a smaller spread between its most
    and least loaded members, even where getting there moves partitions along a chain (a heavy
    member gives one to a member that gives one of another topic to a light one)."""
    assignment = assign_scenario("sticky", scenario)["assignment"]
    counts = [sum(map(len, topics.values())) for topics in assignment.values()]
    assert max(counts) - min(counts) == _best_spread(scenario)


def test_sticky_moves_partitions_along_a_chain_to_balance() -> None:
    """`a` reads `x` and holds all three; `b` reads `x` and `y` and holds two of `y`; `c` reads
    `y` and holds the third. No single move helps (a member one partition ahead of another
    would only swap places with it), yet a chain does: an `x` from `a` to `b` and a `y` from `b`
    to `c` leave everyone with two, each keeping what it can."""
    scenario = {"topics": {"x": 3, "y": 3}, "members": {
        "a": {"topics": ["x"], "owned": {"x": [0, 1, 2]}, "generation": 1},
        "b": {"topics": ["x", "y"], "owned": {"y": [0, 1]}, "generation": 1},
        "c": {"topics": ["y"], "owned": {"y": [2]}, "generation": 1},
    }}
    assignment = assign_scenario("sticky", scenario)["assignment"]
    assert {m: sum(map(len, t.values())) for m, t in assignment.items()} == {
        "a": 2, "b": 2, "c": 2}
    assert len(assignment["a"]["x"]) == 2 and len(assignment["b"]["y"]) == 1
    assert 2 in assignment["c"]["y"]
