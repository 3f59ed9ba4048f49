"""What a streams group's task assignor is given and returns (KIP-1071).

A streams group is assigned tasks, not partitions: a task is a subtopology id and a partition
number, and each member gets active tasks (it processes them), standby tasks (it keeps a replica of
their state) and warm-up tasks (it catches a replica up before taking the task over). The shapes
follow Kafka's group-coordinator streams assignor interface (GroupSpec, AssignmentMemberSpec,
TopologyDescriber, GroupAssignment), so that an assignor here can be compared with Kafka's own
through the Java harness on the same input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

# Tasks by subtopology id: subtopology -> the partition numbers of its tasks.
TasksBySubtopology = Mapping[str, frozenset[int]]


@dataclass(frozen=True, slots=True)
class TaskMemberSpec:
    """One member as the assignor sees it: where it runs and what it holds now."""

    process_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_tags: Mapping[str, str] = field(default_factory=dict)
    active_tasks: TasksBySubtopology = field(default_factory=dict)
    standby_tasks: TasksBySubtopology = field(default_factory=dict)
    warmup_tasks: TasksBySubtopology = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TaskGroupSpec:
    """The group: its members by member id and the assignment configs (Kafka passes
    `num.standby.replicas` here).

    `members` lists them in the order Kafka's coordinator puts them into the Java HashMap it
    hands its assignor: the group's members as its member map (a TimelineHashMap) iterates
    them, then the member whose heartbeat this is, if it is new. The assignor walks that
    HashMap's order, which for member ids sharing a bucket is this put order."""

    members: Mapping[str, TaskMemberSpec]
    assignment_configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubtopologyInfo:
    """A subtopology as the assignor sees it: how many tasks it has (the most partitions of
    any of its source topics) and whether it keeps state (only stateful tasks get standbys)."""

    num_tasks: int
    stateful: bool


@dataclass(frozen=True, slots=True)
class TaskAssignment:
    """One member's share of the tasks."""

    active_tasks: TasksBySubtopology = field(default_factory=dict)
    standby_tasks: TasksBySubtopology = field(default_factory=dict)
    warmup_tasks: TasksBySubtopology = field(default_factory=dict)


class TaskAssignorError(Exception):
    """The assignor cannot place the tasks (Kafka's TaskAssignorException), e.g. a topology
    with tasks and a group with no members."""


class TaskAssignor(Protocol):
    """A server-side streams task assignor (`group.streams.assignors`).

    `topology` is iterated in the order Kafka's TopologyDescriber lists subtopologies, which
    the caller keeps (a dict preserves it); the result has an entry for every member."""

    @property
    def name(self) -> str: ...

    def assign(self, group: TaskGroupSpec,
               topology: Mapping[str, SubtopologyInfo]) -> dict[str, TaskAssignment]: ...
