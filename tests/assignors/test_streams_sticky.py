"""Properties of the streams task assignor `sticky` over random groups, with no JVM: what a
Kafka Streams application relies on whatever the input (every task processed by exactly one
member, no replica on the process that runs the task or another replica, standbys only for
state), what stickiness promises, and its speed for a large group.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.assignors.java_hashmap import JavaStringHashMap
from kgroups.assignors.java_queue import JavaPriorityQueue
from kgroups.assignors.streams_sticky import StickyTaskAssignor
from kgroups.assignors.streams_tasks import (
    SubtopologyInfo,
    TaskAssignorError,
    TaskGroupSpec,
    TaskMemberSpec,
)

Topology = dict[str, SubtopologyInfo]


@st.composite
def groups(draw: st.DrawFn, with_members: bool = True) -> tuple[TaskGroupSpec, Topology]:
    """Subtopologies "0".. (stateful or not, 0-12 tasks), 1-10 members (0-10 without
    `with_members`) on 1-5 processes, previous active/standby/warm-up tasks at random
    (overlaps, stale tasks and tasks of unknown subtopologies included)."""
    topology = {str(i): SubtopologyInfo(draw(st.integers(0, 12)), draw(st.booleans()))
                for i in range(draw(st.integers(0, 4)))}
    task_lists = st.dictionaries(st.sampled_from([*topology, "stale"]),
                                 st.frozensets(st.integers(0, 13), max_size=4), max_size=3)
    processes = [f"process-{i}" for i in range(draw(st.integers(1, 5)))]
    members = {
        f"member-{i}": TaskMemberSpec(process_id=draw(st.sampled_from(processes)),
                                      active_tasks=draw(task_lists),
                                      standby_tasks=draw(task_lists),
                                      warmup_tasks=draw(task_lists))
        for i in range(draw(st.integers(1 if with_members else 0, 10)))
    }
    configs = draw(st.sampled_from([{}, *({"num.standby.replicas": str(n)} for n in range(4))]))
    return TaskGroupSpec(members, configs), topology


def _tasks(assignment: Mapping[str, frozenset[int]]) -> list[tuple[str, int]]:
    return [(s, p) for s, ps in assignment.items() for p in ps]


def _replicas(group: TaskGroupSpec) -> int:
    return int(group.assignment_configs.get("num.standby.replicas", 0))


@settings(max_examples=250)
@given(groups())
def test_one_active_member_per_task_and_standbys_for_state_never_beside_a_copy(
    group_topology: tuple[TaskGroupSpec, Topology],
) -> None:
    """Every task has exactly one active member; no member holds a task as active and
    standby; no process holds two copies of a task; a stateful task gets the requested
    replicas, as many as there are other processes; no warm-up tasks; every member answered."""
    group, topology = group_topology
    result = StickyTaskAssignor().assign(group, topology)
    assert set(result) == set(group.members)
    assert all(not a.warmup_tasks for a in result.values())
    owners = Counter(t for a in result.values() for t in _tasks(a.active_tasks))
    assert owners == Counter({(s, p): 1 for s, info in topology.items()
                              for p in range(info.num_tasks)})
    copies: Counter[tuple[str, str, int]] = Counter()
    standbys: Counter[tuple[str, int]] = Counter()
    for member_id, assignment in result.items():
        process = group.members[member_id].process_id
        active = set(_tasks(assignment.active_tasks))
        for task in _tasks(assignment.standby_tasks):
            assert task not in active
            assert topology[task[0]].stateful
            standbys[task] += 1
        for task in active | set(_tasks(assignment.standby_tasks)):
            copies[(process, *task)] += 1
    assert set(copies.values()) <= {1}
    processes = len({m.process_id for m in group.members.values()})
    wanted = min(_replicas(group), processes - 1)
    assert standbys == Counter({(s, p): wanted for s, info in topology.items() if info.stateful
                                for p in range(info.num_tasks) if wanted})


@settings(max_examples=150)
@given(groups())
def test_a_fresh_group_is_balanced_and_keeps_its_active_tasks_next_round(
    group_topology: tuple[TaskGroupSpec, Topology],
) -> None:
    """With no previous tasks, active counts differ by one at most; fed its own answer as the
    previous target, the assignor leaves every active task where it is."""
    group, topology = group_topology
    fresh = TaskGroupSpec({m: TaskMemberSpec(spec.process_id) for m, spec in group.members.items()},
                          group.assignment_configs)
    first = StickyTaskAssignor().assign(fresh, topology)
    counts = [len(_tasks(a.active_tasks)) for a in first.values()]
    assert max(counts) - min(counts) <= 1
    again = TaskGroupSpec(
        {m: TaskMemberSpec(spec.process_id, active_tasks=first[m].active_tasks,
                           standby_tasks=first[m].standby_tasks)
         for m, spec in fresh.members.items()},
        group.assignment_configs)
    second = StickyTaskAssignor().assign(again, topology)
    assert {m: a.active_tasks for m, a in second.items()} == \
        {m: a.active_tasks for m, a in first.items()}


def test_the_queue_polls_equals_in_javas_order() -> None:
    """java.util.PriorityQueue ordered by string length, "a" "b" "c" "d" "ee" "f" added in that
    order, polls a, f, b, d, c, ee (jshell on the JDK the harness runs): equal keys come out
    neither first-in-first-out nor last-in-first-out, and the assignor's ties follow that."""
    queue: JavaPriorityQueue[str] = JavaPriorityQueue(len)
    for text in ["a", "b", "c", "d", "ee", "f"]:
        queue.add(text)
    polled = [queue.poll() for _ in range(6)]
    assert polled == ["a", "f", "b", "d", "c", "ee"]
    assert queue.poll() is None


def _same_hash_ids(count: int) -> list[str]:
    """Strings of "Aa" and "BB" (one Java hash code for every string of a length)."""
    return ["".join("BB" if n >> bit & 1 else "Aa" for bit in (3, 2, 1, 0)) for n in range(count)]


def test_crowded_buckets_iterate_as_javas_hash_map() -> None:
    """Orders jshell printed for java.util.HashMap's keySet after the same puts: a bucket's
    ninth key doubles a 16-slot table (k1 moves from after the bucket to before it); in a
    64-slot table it makes a tree whose root (BBBBAaAa) goes to the front of the bucket."""
    same = _same_hash_ids(16)
    small = ["zz", same[3], *[s for s in same if s != same[3]][:8], "k1"]
    assert JavaStringHashMap(16).put_all(small).order() == [
        "zz", "k1", same[3], *[s for s in same if s != same[3]][:8]]
    backwards = same[::-1]
    large = [*backwards[:12], "x64", "x0"]
    assert JavaStringHashMap(64).put_all(large).order() == [
        "BBBBAaAa", "BBBBBBBB", "BBBBBBAa", "BBBBAaBB", *backwards[4:12], "x64", "x0"]


def test_members_keep_previous_active_tasks_up_to_their_share() -> None:
    """One member held all 8 tasks; a second joins: the first keeps 4 of its own, the
    newcomer takes the other 4."""
    topology = {"0": SubtopologyInfo(8, True)}
    group = TaskGroupSpec({
        "old": TaskMemberSpec("p1", active_tasks={"0": frozenset(range(8))}),
        "new": TaskMemberSpec("p2"),
    }, {"num.standby.replicas": "0"})
    result = StickyTaskAssignor().assign(group, topology)
    kept = result["old"].active_tasks["0"]
    assert len(kept) == 4 and kept <= frozenset(range(8))
    assert result["new"].active_tasks["0"] == frozenset(range(8)) - kept


def test_a_standby_takes_over_when_the_active_member_leaves() -> None:
    topology = {"0": SubtopologyInfo(2, True)}
    group = TaskGroupSpec({
        "a": TaskMemberSpec("p1", standby_tasks={"0": frozenset({1})}),
        "b": TaskMemberSpec("p2", standby_tasks={"0": frozenset({0})}),
    }, {"num.standby.replicas": "1"})
    result = StickyTaskAssignor().assign(group, topology)
    assert result["a"].active_tasks == {"0": frozenset({1})}
    assert result["b"].active_tasks == {"0": frozenset({0})}
    assert result["a"].standby_tasks == {"0": frozenset({0})}


@settings(max_examples=50)
@given(groups(with_members=False))
def test_tasks_without_members_are_refused(group_topology: tuple[TaskGroupSpec, Topology],
                                           ) -> None:
    group, topology = group_topology
    empty = TaskGroupSpec({}, group.assignment_configs)
    if any(info.num_tasks for info in topology.values()):
        with pytest.raises(TaskAssignorError):
            StickyTaskAssignor().assign(empty, topology)
    else:
        assert StickyTaskAssignor().assign(empty, topology) == {}


@pytest.mark.parametrize("configs", [{"other.config": "1"}, {"num.standby.replicas": "-1"},
                                     {"num.standby.replicas": "one"}])
def test_a_bad_standby_config_is_refused(configs: dict[str, str]) -> None:
    group = TaskGroupSpec({"m": TaskMemberSpec("p")}, configs)
    with pytest.raises(ValueError, match=r"num\.standby\.replicas"):
        StickyTaskAssignor().assign(group, {"0": SubtopologyInfo(1, True)})


def test_a_hundred_members_and_thousands_of_tasks_take_well_under_a_second() -> None:
    """100 members on 25 processes, 3,000 tasks (half of them stateful, two standbys each),
    first from nothing, then from that answer with ten members gone."""
    topology = {str(i): SubtopologyInfo(500, i % 2 == 0) for i in range(6)}
    members = {f"member-{i}": TaskMemberSpec(f"process-{i % 25}") for i in range(100)}
    configs = {"num.standby.replicas": "2"}
    assignor = StickyTaskAssignor()
    started = time.perf_counter()
    first = assignor.assign(TaskGroupSpec(members, configs), topology)
    survivors = {m: TaskMemberSpec(spec.process_id, active_tasks=first[m].active_tasks,
                                   standby_tasks=first[m].standby_tasks)
                 for m, spec in members.items() if not m.endswith("7")}
    second = assignor.assign(TaskGroupSpec(survivors, configs), topology)
    elapsed = time.perf_counter() - started
    assert sum(len(_tasks(a.active_tasks)) for a in second.values()) == 3000
    assert elapsed < 2.0, elapsed
