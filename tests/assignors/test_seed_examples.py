"""Every worked example of seed 001. Where the seed's prose and Kafka 4.3.1 disagree (two
examples: round-robin with unequal subscriptions, and which member gets which freed partition
after C1 leaves a sticky group) kgroups does what Kafka does, and the test says so; the seed's
point (balance, how many partitions stay put) holds either way."""

from __future__ import annotations

from kgroups.assignors import assign_scenario


def _run(strategy: str, topics: dict, members: dict) -> dict:
    return assign_scenario(strategy, {"topics": topics, "members": members})["assignment"]


def test_range_four_partitions_three_consumers() -> None:
    members = {c: {"topics": ["t1"]} for c in ("c0", "c1", "c2")}
    assert _run("range", {"t1": 4}, members) == {
        "c0": {"t1": [0, 1]},
        "c1": {"t1": [2]},
        "c2": {"t1": [3]},
    }


def test_roundrobin_unequal_subscriptions_leave_consumer1_with_more() -> None:
    """Seed: Consumer0 on Topic-A/B and Consumer1 on Topic-B/C, three partitions each.
    The seed's prose ends 3 against 6, but the RoundRobinAssignor code it quotes (and Kafka,
    see test_kafka_oracle.py) deals B1 to Consumer0: Consumer1 still ends with more, 5 to 4."""
    topics = {"Topic-A": 3, "Topic-B": 3, "Topic-C": 3}
    members = {
        "Consumer0": {"topics": ["Topic-A", "Topic-B"]},
        "Consumer1": {"topics": ["Topic-B", "Topic-C"]},
    }
    result = _run("roundrobin", topics, members)
    assert result == {
        "Consumer0": {"Topic-A": [0, 1, 2], "Topic-B": [1]},
        "Consumer1": {"Topic-B": [0, 2], "Topic-C": [0, 1, 2]},
    }


FOUR_TOPICS = {"T0": 2, "T1": 2, "T2": 2, "T3": 2}
ALL_FOUR = ["T0", "T1", "T2", "T3"]


def test_roundrobin_and_sticky_agree_on_identical_subscriptions() -> None:
    members = {c: {"topics": ALL_FOUR} for c in ("C0", "C1", "C2")}
    expected = {
        "C0": {"T0": [0], "T1": [1], "T3": [0]},
        "C1": {"T0": [1], "T2": [0], "T3": [1]},
        "C2": {"T1": [0], "T2": [1]},
    }
    assert _run("roundrobin", FOUR_TOPICS, members) == expected
    assert _run("sticky", FOUR_TOPICS, members) == expected


def test_after_c1_leaves_roundrobin_reshuffles_and_sticky_keeps_five() -> None:
    previous = {"C0": {"T0": [0], "T1": [1], "T3": [0]}, "C2": {"T1": [0], "T2": [1]}}
    members = {c: {"topics": ALL_FOUR, "owned": previous[c], "generation": 1} for c in previous}
    assert _run("roundrobin", FOUR_TOPICS, members) == {
        "C0": {"T0": [0], "T1": [0], "T2": [0], "T3": [0]},
        "C2": {"T0": [1], "T1": [1], "T2": [1], "T3": [1]},
    }
    sticky = _run("sticky", FOUR_TOPICS, members)
    # The seed hands C1's three to the least-loaded first (C0 gets T2P0). Kafka deals freed
    # partitions round the members below quota in member order: T0P1 to C0, then T2P0 and
    # T3P1 to C2, which still needs two. Both keep all five previously held partitions.
    assert sticky == {
        "C0": {"T0": [0, 1], "T1": [1], "T3": [0]},
        "C2": {"T1": [0], "T2": [0, 1], "T3": [1]},
    }
    kept = sum(p in sticky[c].get(t, []) for c in previous for t, ps in previous[c].items()
               for p in ps)
    assert kept == 5


NESTED_TOPICS = {"T0": 1, "T1": 2, "T2": 3}
NESTED = {"C0": ["T0"], "C1": ["T0", "T1"], "C2": ["T0", "T1", "T2"]}


def test_unequal_subscriptions_roundrobin_against_sticky() -> None:
    members = {c: {"topics": topics} for c, topics in NESTED.items()}
    assert _run("roundrobin", NESTED_TOPICS, members) == {
        "C0": {"T0": [0]},
        "C1": {"T1": [0]},
        "C2": {"T1": [1], "T2": [0, 1, 2]},
    }
    assert _run("sticky", NESTED_TOPICS, members) == {
        "C0": {"T0": [0]},
        "C1": {"T1": [0, 1]},
        "C2": {"T2": [0, 1, 2]},
    }


def test_unequal_subscriptions_after_c0_leaves() -> None:
    roundrobin_before = {"C1": {"T1": [0]}, "C2": {"T1": [1], "T2": [0, 1, 2]}}
    sticky_before = {"C1": {"T1": [0, 1]}, "C2": {"T2": [0, 1, 2]}}

    def members(before: dict) -> dict:
        return {c: {"topics": NESTED[c], "owned": before[c], "generation": 1} for c in before}

    assert _run("roundrobin", NESTED_TOPICS, members(roundrobin_before)) == {
        "C1": {"T0": [0], "T1": [1]},
        "C2": {"T1": [0], "T2": [0, 1, 2]},
    }
    assert _run("sticky", NESTED_TOPICS, members(sticky_before)) == {
        "C1": {"T0": [0], "T1": [0, 1]},
        "C2": {"T2": [0, 1, 2]},
    }


def test_cooperative_revokes_first_and_assigns_in_the_next_round() -> None:
    """consumer1 holds T0P0 and T0P2, consumer2 T0P1; consumer3 joins."""
    owned = {"consumer1": {"T0": [0, 2]}, "consumer2": {"T0": [1]}, "consumer3": {}}
    members = {c: {"topics": ["T0"], "owned": o, "generation": 3} for c, o in owned.items()}
    first = assign_scenario("cooperative-sticky", {"topics": {"T0": 3}, "members": members})
    assert first["revoked"] == {"consumer1": {"T0": [2]}, "consumer2": {}, "consumer3": {}}
    assert first["assignment"] == {
        "consumer1": {"T0": [0]},
        "consumer2": {"T0": [1]},
        "consumer3": {},
    }

    members = {
        c: {"topics": ["T0"], "owned": first["assignment"][c], "generation": 4} for c in owned
    }
    second = assign_scenario("cooperative-sticky", {"topics": {"T0": 3}, "members": members})
    assert second["revoked"] == {"consumer1": {}, "consumer2": {}, "consumer3": {}}
    assert second["assignment"] == {
        "consumer1": {"T0": [0]},
        "consumer2": {"T0": [1]},
        "consumer3": {"T0": [2]},
    }
