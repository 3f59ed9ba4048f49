"""Offsets, side by side: simple groups, generation checks, metadata size, unknown partitions,
OffsetFetch in every version (one group, all partitions, batches), OffsetDelete."""

from __future__ import annotations

import pytest
from diff_dialog import Dialog
from diff_flows import form_group, send_join, sync_all
from diff_requests import commit, describe, fetch, fetch_groups, leave, offset_delete
from diff_setup import ON_BOTH_ENGINES

pytestmark = pytest.mark.kafka

UNKNOWN = "z-00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize("version", range(2, 10))
def test_simple_group_commits_and_fetches(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 0): (10, "m0"), ("diff-t", 2): (12, None),
                                ("diff-u", 1): 7}, v=version, leader_epoch=3))
        a.call(fetch(d.group, {"diff-t": [0, 1, 2], "diff-u": [1]}, v=7))
        a.call(describe(d.group))

    converse(script)


@pytest.mark.parametrize("version", range(1, 10))
def test_fetch_versions(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 1): (5, "meta")}, leader_epoch=2))
        a.call(fetch(d.group, {"diff-t": [0, 1]}, v=version))
        if version >= 2:
            a.call(fetch(d.group, None, v=version))
        a.call(fetch(d.group + "-none", {"diff-t": [0]}, v=version))

    converse(script)


@ON_BOTH_ENGINES
def test_fetch_batch_of_groups(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 0): 1}))
        a.call(commit(d.group + "-2", {("diff-u", 1): 2}))
        a.call(fetch_groups({d.group: None, d.group + "-2": {"diff-u": [0, 1]},
                             d.group + "-none": None}))

    converse(script)


@pytest.mark.parametrize("version", [2, 8, 9])
def test_commit_to_a_missing_group_with_a_generation(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 0): 1}, generation=1, member_id=UNKNOWN, v=version))
        a.call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_member_commits_in_each_state(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=False)
        offsets = {("diff-t", 0): 3}
        a.conn.call(commit(d.group, offsets, generation=a.generation, member_id=a.member_id))
        sync_all(d, [a, b])
        a.conn.call(commit(d.group, offsets, generation=a.generation, member_id=a.member_id))
        a.conn.call(commit(d.group, offsets, generation=a.generation + 1, member_id=a.member_id))
        a.conn.call(commit(d.group, offsets, generation=a.generation, member_id=UNKNOWN))
        a.conn.call(commit(d.group, offsets))  # generation -1, no member: not while members
        leader, follower = (a, b) if a.is_leader else (b, a)
        parked = send_join(d, leader)
        d.wait_state("PreparingRebalance")
        follower.conn.call(commit(d.group, {("diff-t", 1): 4}, generation=follower.generation,
                                  member_id=follower.member_id))
        rejoined = send_join(d, follower)
        parked.result()
        rejoined.result()
        a.conn.call(fetch(d.group, None))

    converse(script)


@pytest.mark.parametrize("version", [2, 9])
def test_commit_in_an_empty_group_with_a_generation(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"])
        a.conn.call(leave(d.group, [(a.member_id, None)]))
        a.conn.call(commit(d.group, {("diff-t", 0): 9}, generation=a.generation,
                           member_id=a.member_id, v=version))
        a.conn.call(commit(d.group, {("diff-t", 0): 9}, v=version))
        a.conn.call(fetch(d.group, None))

    converse(script)


def test_metadata_size_limit(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 0): (1, "x" * 4096), ("diff-t", 1): (2, "y" * 4097),
                                ("diff-t", 2): (3, "")}))
        a.call(fetch(d.group, None))

    converse(script)


@ON_BOTH_ENGINES
def test_unknown_topic_and_partition(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 0): 1, ("diff-t", 9): 2, ("no-such-topic", 0): 3}))
        a.call(fetch(d.group, {"diff-t": [0, 9], "no-such-topic": [0]}))
        a.call(commit(d.group + "-only-unknown", {("no-such-topic", 0): 3}))
        a.call(describe(d.group + "-only-unknown"))

    converse(script)


def test_negative_and_repeated_offsets(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 0): -1, ("diff-t", 1): 5}))
        a.call(commit(d.group, {("diff-t", 1): 3}))
        a.call(fetch(d.group, None))

    converse(script)


def test_offset_delete_on_a_simple_group(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 0): 1, ("diff-t", 1): 2, ("diff-u", 0): 3}))
        a.call(offset_delete(d.group, {"diff-t": [0, 2], "diff-u": [0]}))
        a.call(fetch(d.group, None))
        a.call(offset_delete(d.group + "-none", {"diff-t": [0]}))

    converse(script)


@ON_BOTH_ENGINES
def test_offset_delete_of_a_subscribed_topic(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], topics=("diff-t",))
        a.conn.call(commit(d.group, {("diff-t", 0): 1, ("diff-u", 0): 2},
                           generation=a.generation, member_id=a.member_id))
        a.conn.call(offset_delete(d.group, {"diff-t": [0], "diff-u": [0, 1]}))
        a.conn.call(fetch(d.group, None))

    converse(script)


@ON_BOTH_ENGINES
def test_offset_delete_during_a_rebalance(converse) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"], topics=("diff-t",), do_sync=False)
        a.conn.call(commit(d.group, {("diff-u", 0): 2}, generation=a.generation,
                           member_id=a.member_id))
        a.conn.call(offset_delete(d.group, {"diff-t": [0], "diff-u": [0]}))

    converse(script)
