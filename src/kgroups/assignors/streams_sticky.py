"""Kafka 4.3.1's streams-group task assignor `sticky` (KIP-1071), step for step.

A streams group's members are threads of Kafka Streams processes; the assignor balances tasks
over processes first (a process's load is its tasks per member) and over a process's members
second, keeps tasks where the previous target assignment had them while a member is under its
quota, and never puts a standby on the process running the task or another replica of it.
Kafka's output depends on the iteration order of its Java hash maps and on how its priority
queues break ties between equal loads, so this module walks the same orders (`java_hashmap`,
`java_queue`):

1. Quotas: active tasks per member is the ceiling of tasks over members; all tasks per member
   (standbys of stateful subtopologies included) likewise. Each time a member's count reaches
   the current quota exactly, that member and its tasks leave the sums and the quota is
   recomputed from what is left.
2. Active tasks, ordered by partition then subtopology: first each goes back to its previous
   active owner while under the active quota; then to the least-loaded of its previous standby
   owners under the quota; the rest (ordered by subtopology then partition) go one by one to the
   least-loaded process and its least-loaded member, whatever the quotas.
3. Standby tasks (only when `num.standby.replicas` > 0, only stateful subtopologies), ordered by
   partition then subtopology, both descending: each replica goes to the previous active owner,
   else to the least-loaded previous standby owner, when its process does not hold the task yet
   and the member is under the total quota; the replicas left over (ordered by subtopology then
   partition, descending) go to the least-loaded process that does not hold the task. When no
   process is left, the replica is not placed (Kafka logs a warning).

Warm-up tasks are never assigned, and racks, client tags and task offsets are not looked at.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kgroups.assignors.java_hashmap import JavaStringHashMap
from kgroups.assignors.java_queue import JavaPriorityQueue
from kgroups.assignors.streams_tasks import (
    SubtopologyInfo,
    TaskAssignment,
    TaskAssignorError,
    TaskGroupSpec,
)

log = logging.getLogger(__name__)

NAME = "sticky"
STANDBY_REPLICAS_CONFIG = "num.standby.replicas"
_JAVA_INT = re.compile(r"[+-]?[0-9]+")

Task = tuple[str, int]  # (subtopology id, partition)


class _Member(NamedTuple):
    """A member as the previous target assignment names it."""

    process_id: str
    member_id: str


@dataclass(slots=True)
class _MemberEntry:
    """A member and its task count as the process's member queue holds them."""

    member_id: str
    count: int


@dataclass(slots=True)
class _Process:
    """One process: its members (threads), the tasks they hold and its load."""

    process_id: str
    member_order: list[str] = field(default_factory=list)  # the order members were added
    counts: dict[str, int] = field(default_factory=dict)
    active: dict[str, list[Task]] = field(default_factory=dict)
    standby: dict[str, list[Task]] = field(default_factory=dict)
    tasks: set[Task] = field(default_factory=set)
    task_count: int = 0
    load: float = 0.0
    # The members by count, kept between placements to the least-loaded member and dropped
    # whenever a task is placed on a chosen member (Kafka rebuilds it from its map then).
    by_load: JavaPriorityQueue[_MemberEntry] | None = None

    def add_member(self, member_id: str) -> None:
        self.member_order.append(member_id)
        self.counts[member_id] = 0
        self.load = self.task_count / len(self.counts)

    def add_task(self, member_id: str, task: Task, active: bool) -> int:
        """Place `task` on this member; its new task count."""
        self.by_load = None
        return self._place(member_id, task, active)

    def add_task_to_least_loaded(self, task: Task, active: bool) -> int:
        """Place `task` on the member with the fewest tasks (ties as Kafka's queue breaks
        them); its new task count."""
        if len(self.counts) == 1:
            return self._place(self.member_order[0], task, active)
        queue = self.by_load
        if queue is None:
            queue = JavaPriorityQueue(_entry_count)
            for member_id in JavaStringHashMap().put_all(self.member_order).order():
                queue.add(_MemberEntry(member_id, self.counts[member_id]))
            self.by_load = queue
        entry = queue.poll()
        assert entry is not None  # a process has at least one member
        entry.count = self._place(entry.member_id, task, active)
        queue.add(entry)
        return entry.count

    def _place(self, member_id: str, task: Task, active: bool) -> int:
        self.task_count += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, []).append(task)
        count = self.counts[member_id] + 1
        self.counts[member_id] = count
        self.load = self.task_count / len(self.counts)
        return count


def _entry_count(entry: _MemberEntry) -> float:
    return entry.count


def _process_load(process: _Process) -> float:
    return process.load


@dataclass(slots=True)
class _Quota:
    """Tasks per member while members fill up: members that reached the quota exactly leave
    the sums, as Kafka's assignor does."""

    tasks: int
    members: int
    per_member: int = 0

    def __post_init__(self) -> None:
        self.per_member = _tasks_per_member(self.tasks, self.members)

    def reached(self, count: int) -> None:
        if count == self.per_member:
            self.members -= 1
            self.tasks -= count
            self.per_member = _tasks_per_member(self.tasks, self.members)


def _tasks_per_member(tasks: int, members: int) -> int:
    """The ceiling of tasks over members with Java's int division (0 with no members)."""
    if members == 0:
        return 0
    quotient = -(-tasks // members) if tasks < 0 else tasks // members  # truncated
    return quotient + 1 if tasks - quotient * members > 0 else quotient


def _standby_replicas(configs: Mapping[str, str]) -> int:
    """`num.standby.replicas` as Kafka reads it: 0 when no config is given at all, an error
    when configs are given without it. Kafka's group config (`streams.num.standby.replicas`,
    at least 0) keeps a negative count from reaching its assignor; it is refused here."""
    if not configs:
        return 0
    value = configs.get(STANDBY_REPLICAS_CONFIG)
    if value is None or not _JAVA_INT.fullmatch(value) or int(value) < 0:
        raise ValueError(f"{STANDBY_REPLICAS_CONFIG} must be a non-negative integer: {value!r}")
    return int(value)


def _task_name(task: Task) -> str:
    return f"{task[0]}_{task[1]}"


class StickyTaskAssignor:
    """Kafka's `sticky` streams task assignor (the only one Kafka 4.3.1 ships)."""

    @property
    def name(self) -> str:
        return NAME

    def assign(self, group: TaskGroupSpec,
               topology: Mapping[str, SubtopologyInfo]) -> dict[str, TaskAssignment]:
        return _Assignment(group, topology).run()


class _Assignment:
    """One run of the assignor over one group."""

    def __init__(self, group: TaskGroupSpec, topology: Mapping[str, SubtopologyInfo]) -> None:
        self.group = group
        self.topology = topology
        self.standby_replicas = _standby_replicas(group.assignment_configs)
        # Java's String order (UTF-16 code units) for subtopology ids.
        self.sort_key = {s: s.encode("utf-16-be") for s in topology}
        active_total = sum(info.num_tasks for info in topology.values())
        total = active_total + sum(info.num_tasks * self.standby_replicas
                                   for info in topology.values() if info.stateful)
        size = len(group.members)
        self.active_quota = _Quota(active_total, size)
        self.total_quota = _Quota(total, size)

        ids = JavaStringHashMap().put_all(group.members).order()
        self.processes: dict[str, _Process] = {}
        self.previous_active: dict[Task, _Member] = {}
        self.previous_standby: dict[Task, list[_Member]] = {}
        for member_id in ids:
            spec = group.members[member_id]
            member = _Member(spec.process_id, member_id)
            process = self.processes.get(spec.process_id)
            if process is None:
                process = self.processes[spec.process_id] = _Process(spec.process_id)
            process.add_member(member_id)
            for subtopology, partitions in spec.active_tasks.items():
                for partition in partitions:
                    self.previous_active[(subtopology, partition)] = member
            for subtopology, partitions in spec.standby_tasks.items():
                for partition in partitions:
                    self.previous_standby.setdefault((subtopology, partition), []).append(member)
        # The process map is a HashMap sized for one process per member.
        self.process_order = JavaStringHashMap(size).put_all(self.processes).order()

    def run(self) -> dict[str, TaskAssignment]:
        self._assign_active()
        if self.standby_replicas > 0:
            self._assign_standby()
        return self._result()

    def _tasks(self, stateful_only: bool) -> Iterable[Task]:
        for subtopology, info in self.topology.items():
            if info.stateful or not stateful_only:
                for partition in range(info.num_tasks):
                    yield subtopology, partition

    def _by_partition(self, task: Task) -> tuple[int, bytes]:
        return task[1], self.sort_key[task[0]]

    def _by_subtopology(self, task: Task) -> tuple[bytes, int]:
        return self.sort_key[task[0]], task[1]

    def _process_queue(self) -> JavaPriorityQueue[_Process]:
        queue: JavaPriorityQueue[_Process] = JavaPriorityQueue(_process_load)
        for process_id in self.process_order:
            queue.add(self.processes[process_id])
        return queue

    def _under_active_quota(self, member: _Member) -> bool:
        return self.processes[member.process_id].counts[member.member_id] \
            < self.active_quota.per_member

    def _under_total_quota(self, member: _Member) -> bool:
        return self.processes[member.process_id].counts[member.member_id] \
            < self.total_quota.per_member

    def _placed_active(self, count: int) -> None:
        self.active_quota.reached(count)
        self.total_quota.reached(count)

    def _assign_active(self) -> None:
        kept: list[Task] = []
        for task in sorted(self._tasks(False), key=self._by_partition):
            owner = self.previous_active.get(task)
            if owner is not None and self._under_active_quota(owner):
                self._placed_active(
                    self.processes[owner.process_id].add_task(owner.member_id, task, True))
            else:
                kept.append(task)
        left: list[Task] = []
        for task in kept:
            owner = self._least_loaded_previous(self.previous_standby.get(task), None)
            if owner is not None and self._under_active_quota(owner):
                self._placed_active(
                    self.processes[owner.process_id].add_task(owner.member_id, task, True))
            else:
                left.append(task)
        left.sort(key=self._by_subtopology)
        queue = self._process_queue()
        for task in left:
            process = queue.poll()
            if process is None:  # Kafka's words: its coordinator puts them in its error
                raise TaskAssignorError(
                    f"No process available to assign active task {_task_name(task)}.")
            self._placed_active(process.add_task_to_least_loaded(task, True))
            queue.add(process)

    def _least_loaded_previous(self, members: list[_Member] | None,
                               task: Task | None) -> _Member | None:
        """The previous holder on the least-loaded process with the fewest tasks, as Kafka
        picks it: a later candidate wins only when both its process load and its own count
        are lower; with `task`, candidates whose process holds it are skipped, and so is the
        answer when the first candidate's process holds it."""
        if not members:
            return None
        best = members[0]
        first_process = self.processes[best.process_id]
        best_load = first_process.load
        best_count = first_process.counts[best.member_id]
        for member in members[1:]:
            process = self.processes[member.process_id]
            if process.load < best_load and (task is None or task not in process.tasks):
                count = process.counts[member.member_id]
                if count < best_count:
                    best, best_load, best_count = member, process.load, count
        if task is not None and task in first_process.tasks:
            return None
        return best

    def _assign_standby(self) -> None:
        replicas = self.standby_replicas
        left: list[tuple[Task, int]] = []
        for task in sorted(self._tasks(True), key=self._by_partition, reverse=True):
            for placed in range(replicas):
                if not self._keep_standby(task):
                    left.append((task, replicas - placed))
                    break
        left.sort(key=lambda item: self._by_subtopology(item[0]), reverse=True)
        queue = self._process_queue()
        unplaced: list[str] = []
        for task, missing in left:
            for placed in range(missing):
                if not self._standby_to_least_loaded(queue, task):
                    unplaced.append(f"{_task_name(task)} ({missing - placed} of {replicas})")
                    break
        if unplaced:
            log.warning("standby replicas not placed, too few processes in the group: %s",
                        ", ".join(unplaced))

    def _keep_standby(self, task: Task) -> bool:
        """One replica of `task` back on its previous active owner or on the least-loaded
        previous standby owner, if allowed; whether it was placed."""
        owner = self.previous_active.get(task)
        if owner is not None:
            process = self.processes[owner.process_id]
            if task not in process.tasks and self._under_total_quota(owner):
                self.total_quota.reached(process.add_task(owner.member_id, task, False))
                return True
        holder = self._least_loaded_previous(self.previous_standby.get(task), task)
        if holder is not None and self._under_total_quota(holder):
            process = self.processes[holder.process_id]
            self.total_quota.reached(process.add_task(holder.member_id, task, False))
            return True
        return False

    def _standby_to_least_loaded(self, queue: JavaPriorityQueue[_Process], task: Task) -> bool:
        """One replica of `task` on the least-loaded process not holding it yet; the processes
        polled on the way go back in the reverse order (Kafka recurses)."""
        polled: list[_Process] = []
        placed = False
        while True:
            process = queue.poll()
            if process is None:
                break
            polled.append(process)
            if task not in process.tasks:
                self.total_quota.reached(process.add_task_to_least_loaded(task, False))
                placed = True
                break
            if not len(queue):
                break
        for process in reversed(polled):
            queue.add(process)
        return placed

    def _result(self) -> dict[str, TaskAssignment]:
        result: dict[str, TaskAssignment] = {}
        for member_id, spec in self.group.members.items():
            process = self.processes[spec.process_id]
            result[member_id] = TaskAssignment(
                active_tasks=_by_subtopology(process.active.get(member_id, ())),
                standby_tasks=_by_subtopology(process.standby.get(member_id, ())),
            )
        return result


def _by_subtopology(tasks: Iterable[Task]) -> dict[str, frozenset[int]]:
    grouped: dict[str, set[int]] = {}
    for subtopology, partition in tasks:
        grouped.setdefault(subtopology, set()).add(partition)
    return {subtopology: frozenset(ps) for subtopology, ps in grouped.items()}
