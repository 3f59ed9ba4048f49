"""The per-group rules: what counts as a rebalance, and Burrow's partition verdicts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kgroups.pipeline.history import (
    CommitPoint,
    GroupEvent,
    GroupStatus,
    PartitionStatus,
    partition_status,
    rebalances,
)


def member(member_id: str, partitions: list[int], instance_id: str | None = None) -> dict:
    return {
        "member_id": member_id,
        "instance_id": instance_id,
        "partitions": [{"topic": "t", "partition": p} for p in partitions],
    }


def event(offset: int, generation: int | None, members: list[dict] | None,
          ts: int | None = None) -> GroupEvent:
    return GroupEvent(0, offset, offset * 1000 if ts is None else ts, generation, members)


def test_rebalance_counts_joined_left_moved_and_kept():
    found = rebalances([
        event(0, 1, [member("a", [0, 1, 2, 3])]),
        event(5, 2, [member("a", [0, 1]), member("b", [2, 3])]),
        event(9, 3, [member("b", [0, 1, 2, 3])]),
    ])
    assert [(r.from_generation, r.to_generation) for r in found] == [(1, 2), (2, 3)]
    first, second = found
    assert (first.members_joined, first.members_left) == (1, 0)
    assert (first.partitions_moved, first.partitions_kept) == (2, 2)
    assert (second.members_joined, second.members_left) == (0, 1)
    assert (second.partitions_moved, second.partitions_kept) == (2, 2)
    assert first.seconds_since_previous == 5.0
    assert second.seconds_since_previous == 4.0


def test_same_generation_rewrite_is_not_a_rebalance_but_updates_membership():
    # A static member restarting gets a new member id in the same generation.
    found = rebalances([
        event(0, 5, [member("a-1", [0, 1], "inst-a")]),
        event(1, 5, [member("a-2", [0, 1], "inst-a")]),
        event(2, 6, [member("a-3", [0], "inst-a"), member("b-1", [1], "inst-b")]),
    ])
    assert len(found) == 1
    only = found[0]
    assert (only.members_joined, only.members_left) == (1, 0)
    assert (only.partitions_moved, only.partitions_kept) == (1, 1)
    assert only.seconds_since_previous == 2.0  # measured from generation 5's first record


def test_tombstone_starts_a_new_history():
    found = rebalances([
        event(0, 1, [member("a", [0])]),
        event(1, None, None),
        event(2, 1, [member("z", [0])]),
        event(3, 2, [member("z", [0])]),
    ])
    assert [(r.from_generation, r.to_generation, r.partitions_kept) for r in found] == [(1, 2, 1)]


def test_events_are_taken_in_log_order_whatever_the_input_order():
    events = [event(9, 3, [member("a", [0])]), event(0, 1, [member("a", [0])]),
              event(5, 2, [member("b", [0])])]
    assert [(r.from_generation, r.to_generation) for r in rebalances(events)] == [(1, 2), (2, 3)]


@given(st.lists(st.integers(0, 3), min_size=1, max_size=12),
       st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_moved_plus_kept_never_exceeds_partitions_owned_in_both(before, after):
    owners_before = [member(f"m{i % 4}", [p]) for i, p in enumerate(before)]
    owners_after = [member(f"m{(i + 1) % 4}", [p]) for i, p in enumerate(after)]
    found = rebalances([event(0, 1, owners_before), event(1, 2, owners_after)])
    assert len(found) == 1
    shared = set(before) & set(after)
    assert found[0].partitions_moved + found[0].partitions_kept <= len(shared)


def window(*points: tuple[int, int, int]) -> list[CommitPoint]:
    return [CommitPoint(offset=o, ts=t, lag=lag) for o, t, lag in points]


def test_no_current_lag_no_commit_or_any_zero_lag_is_ok():
    busy = window((10, 0, 5), (20, 10, 7), (30, 20, 9))
    assert partition_status(busy, current_lag=0, now_ms=25) is PartitionStatus.OK
    assert partition_status([], current_lag=9, now_ms=25) is PartitionStatus.OK
    caught_up = window((10, 0, 5), (20, 10, 0), (30, 20, 9))
    assert partition_status(caught_up, current_lag=9, now_ms=25) is PartitionStatus.OK


def test_offset_going_backwards_is_rewind():
    rewind = window((30, 0, 5), (20, 10, 6), (40, 20, 4))
    assert partition_status(rewind, current_lag=4, now_ms=25) is PartitionStatus.REWIND


def test_silence_longer_than_the_window_is_stop():
    points = window((10, 0, 5), (20, 10, 4), (30, 20, 3))
    assert partition_status(points, current_lag=3, now_ms=41) is PartitionStatus.STOP
    assert partition_status(points, current_lag=3, now_ms=40) is PartitionStatus.OK


def test_a_lone_old_commit_with_lag_is_stop_even_after_a_zero_lag():
    """The Empty group with lag and no recent commit: Burrow checks STOP before rule 1, since
    a window's zero lag may be long past."""
    assert partition_status(window((10, 0, 0)), current_lag=1920, now_ms=1) is PartitionStatus.STOP
    was_caught_up = window((10, 0, 5), (20, 10, 0))
    assert partition_status(was_caught_up, current_lag=7, now_ms=21) is PartitionStatus.STOP


def test_stop_waits_while_the_consumer_was_caught_up_lately():
    points = window((10, 0, 5), (20, 10, 4), (30, 20, 3))
    assert partition_status(points, 3, now_ms=41, recent_log_end=30) is PartitionStatus.OK
    assert partition_status(points, 3, now_ms=41, recent_log_end=31) is PartitionStatus.STOP


def test_unmoving_offsets_with_lag_is_stall():
    points = window((10, 0, 5), (10, 10, 6), (10, 20, 7))
    assert partition_status(points, current_lag=7, now_ms=25) is PartitionStatus.STALL


def test_lag_never_decreasing_is_warn():
    points = window((10, 0, 5), (20, 10, 5), (30, 20, 8))
    assert partition_status(points, current_lag=8, now_ms=25) is PartitionStatus.WARN
    shrinking = window((10, 0, 5), (20, 10, 4), (30, 20, 8))
    assert partition_status(shrinking, current_lag=8, now_ms=25) is PartitionStatus.OK


def test_group_status_is_burrows_worst_with_stop_stall_rewind_as_err():
    assert GroupStatus.of([]) is GroupStatus.OK
    assert GroupStatus.of([PartitionStatus.OK, PartitionStatus.WARN]) is GroupStatus.WARN
    for bad in (PartitionStatus.STOP, PartitionStatus.STALL, PartitionStatus.REWIND):
        assert GroupStatus.of([PartitionStatus.WARN, bad]) is GroupStatus.ERR
