"""Placement of partition leaders over live brokers: one live leader each, an even spread, and
little movement when a broker joins or dies (pure; no database)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kgroups.storage.placement import preferred_leaders

partitions_st = st.lists(st.tuples(st.sampled_from(["orders", "__consumer_offsets", "t"]),
                                   st.integers(0, 60)), unique=True, max_size=150)
brokers_st = st.lists(st.integers(0, 20), min_size=1, max_size=8, unique=True)


def _counts(placed: dict[tuple[str, int], int], brokers: list[int]) -> list[int]:
    return [sum(1 for leader in placed.values() if leader == b) for b in brokers]


@given(brokers_st, partitions_st, st.data())
def test_every_partition_gets_one_live_leader_and_counts_differ_by_at_most_one(
        brokers: list[int], partitions: list[tuple[str, int]], data: st.DataObject) -> None:
    current = {p: data.draw(st.integers(-1, 25)) for p in partitions}
    placed = preferred_leaders(brokers, partitions, current)
    assert set(placed) == set(partitions)
    assert set(placed.values()) <= set(brokers)
    counts = _counts(placed, brokers)
    assert max(counts) - min(counts) <= 1
    # Stable: computed again from its own answer, nothing moves.
    assert preferred_leaders(brokers, partitions, placed) == placed


@given(brokers_st, partitions_st, st.integers(21, 30))
def test_a_joining_broker_takes_its_share_and_little_else_moves(
        brokers: list[int], partitions: list[tuple[str, int]], joiner: int) -> None:
    before = preferred_leaders(brokers, partitions, {})
    after = preferred_leaders([*brokers, joiner], partitions, before)
    moved = [p for p in partitions if before[p] != after[p]]
    share = len(partitions) // (len(brokers) + 1)
    assert all(after[p] == joiner for p in moved)  # only moves to the new broker
    assert share <= len(moved) <= share + 1


@given(st.lists(st.integers(0, 20), min_size=2, max_size=8, unique=True), partitions_st)
def test_a_dead_brokers_partitions_alone_move(brokers: list[int],
                                             partitions: list[tuple[str, int]]) -> None:
    before = preferred_leaders(brokers, partitions, {})
    dead = brokers[0]
    after = preferred_leaders(brokers[1:], partitions, before)
    moved = {p for p in partitions if before[p] != after[p]}
    orphans = {p for p in partitions if before[p] == dead}
    assert orphans <= moved
    assert len(moved - orphans) <= len(brokers)  # at most one per survivor to even out


def test_no_live_broker_no_leader() -> None:
    assert preferred_leaders([], [("t", 0)], {}) == {}
