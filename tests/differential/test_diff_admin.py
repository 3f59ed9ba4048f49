"""DescribeGroups, ListGroups, DeleteGroups, FindCoordinator and ApiVersions, side by side."""

from __future__ import annotations

import pytest
from diff_dialog import Dialog
from diff_flows import form_group, send_join, sync_all
from diff_requests import (
    api_versions,
    commit,
    delete_groups,
    describe,
    fetch,
    find_coordinator,
    leave,
    list_groups,
)
from diff_setup import ON_BOTH_ENGINES

pytestmark = pytest.mark.kafka

# The group APIs of the classic protocol, and FindCoordinator.
GROUP_API_KEYS = frozenset({8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47})


@pytest.mark.parametrize("version", range(0, 7))
def test_describe_unknown_and_existing_groups(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        (a,) = form_group(d, ["a"])
        a.conn.call(describe(d.group, d.group + "-none", v=version))

    converse(script)


@ON_BOTH_ENGINES
def test_describe_a_simple_group(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group, {("diff-t", 0): 1}))
        a.call(describe(d.group))

    converse(script)


@ON_BOTH_ENGINES
def test_describe_through_a_rebalance(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = form_group(d, ["a", "b"], do_sync=False)
        admin = d.connect("admin")
        admin.call(describe(d.group))  # CompletingRebalance
        sync_all(d, [a, b])
        admin.call(describe(d.group))  # Stable
        leader = a if a.is_leader else b
        parked = send_join(d, leader)
        d.wait_state("PreparingRebalance")
        admin.call(describe(d.group))
        for member in (a, b):
            if member is not leader:
                member.conn.call(leave(d.group, [(member.member_id, None)]))
        parked.result()

    converse(script)


def _own(d: Dialog, response: object) -> list[tuple[str, str, str, str]]:
    """This conversation's groups out of a broker-wide ListGroups answer."""
    return sorted((g.group_id, g.protocol_type, getattr(g, "group_state", ""),
                   getattr(g, "group_type", ""))
                  for g in response.groups if g.group_id.startswith(d.group))  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", range(0, 6))
def test_list_groups_versions(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group + "-simple", {("diff-t", 0): 1}))
        form_group(d, ["m"])
        answer = a.call(list_groups(v=version), record=False)
        d.record("error", int(answer.error_code))
        d.record("own groups", _own(d, answer))

    converse(script)


@pytest.mark.parametrize("states", [("Stable",), ("empty",), ("STABLE", "Empty"),
                                    ("PreparingRebalance",), ("Dead",)])
def test_list_groups_state_filter(converse, states: tuple[str, ...]) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group + "-simple", {("diff-t", 0): 1}))
        form_group(d, ["m"])
        answer = a.call(list_groups(states=states), record=False)
        d.record("own groups", _own(d, answer))

    converse(script)


@pytest.mark.parametrize("types", [("classic",), ("Classic",), ("consumer",), ("share",),
                                   ("consumer", "classic")])
def test_list_groups_type_filter(converse, types: tuple[str, ...]) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group + "-simple", {("diff-t", 0): 1}))
        form_group(d, ["m"])
        answer = a.call(list_groups(types=types), record=False)
        d.record("own groups", _own(d, answer))

    converse(script)


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_groups(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(commit(d.group + "-simple", {("diff-t", 0): 1}))
        (m,) = form_group(d, ["m"])
        a.call(delete_groups(d.group + "-simple", d.group, d.group + "-none", v=version))
        a.call(fetch(d.group + "-simple", None))
        a.call(describe(d.group + "-simple"))
        m.conn.call(leave(d.group, [(m.member_id, None)]))
        a.call(delete_groups(d.group, v=version))
        a.call(describe(d.group))
        a.call(delete_groups(d.group, v=version))

    converse(script)


@ON_BOTH_ENGINES
def test_a_deleted_group_starts_afresh(converse) -> None:
    def script(d: Dialog) -> None:
        (m,) = form_group(d, ["m"])
        m.conn.call(leave(d.group, [(m.member_id, None)]))
        m.conn.call(delete_groups(d.group))
        (again,) = form_group(d, ["n"])
        again.conn.call(describe(d.group))

    converse(script)


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_versions(converse, version: int) -> None:
    converse(lambda d: d.connect("a").call(find_coordinator(d.group, v=version)))


@ON_BOTH_ENGINES
def test_find_coordinator_batch(converse) -> None:
    def script(d: Dialog) -> None:
        a = d.connect("a")
        a.call(find_coordinator(d.group, d.group + "-2", "", d.group, v=4))
        a.call(find_coordinator(v=4))

    converse(script)


@pytest.mark.parametrize("key", ["", "x" * 300])
def test_find_coordinator_odd_keys(converse, key: str) -> None:
    converse(lambda d: d.connect("a").call(find_coordinator(key, v=3)))


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_of_the_group_apis(converse, version: int) -> None:
    """Known difference (docs/compatibility.md): OffsetCommit and OffsetFetch v10 name topics
    by id; kgroups serves up to v9, which every client falls back to."""
    def script(d: Dialog) -> None:
        answer = d.connect("a").call(api_versions(v=version), record=False)
        d.record("error", int(answer.error_code))
        for key, low, high in sorted((int(k.api_key), int(k.min_version), int(k.max_version))
                                     for k in answer.api_keys
                                     if int(k.api_key) in GROUP_API_KEYS):
            d.record(f"api {key}", [low, high])

    converse(script, known={"1 api 8[1]": (10, 9), "2 api 9[1]": (10, 9)})
