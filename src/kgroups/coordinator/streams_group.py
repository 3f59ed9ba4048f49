"""A KIP-1071 streams group in memory, and how its records change it.

A streams group keeps what any group keeps (committed offsets, on the `ClassicGroup` object the
offset APIs already use) plus a `StreamsGroup`: the group epoch and metadata hash, the topology
the members run and the topology epoch last validated against the topics, the target assignment
and its epoch, and each member's metadata, epochs, reconciliation state and current tasks.
`apply_streams_record` is the one way records change it, for the live path and for replay alike;
which process holds each task (`active_owners`, `standby_owners`, `warmup_owners`) is derived from
the current assignments as they are applied, so a rebuilt group knows who holds what exactly as
the live one did.

What is not persisted is memory only, as in Kafka: the configured topology (recomputed from the
topology and the topics when the metadata hash moves or the group is loaded), the endpoint
information epoch and a member's shutdown request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kgroups.records.streams_group import (
    Pairs,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupKey,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMemberMetadataValue,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsGroupValue,
    TaskIds,
    TaskList,
)

Tasks = dict[str, frozenset[int]]  # subtopology id -> partition numbers
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
STREAMS_PROTOCOL_TYPE = "streams"


class StreamsMemberState(IntEnum):
    """Kafka's streams MemberState bytes, as stored in the current-assignment value (they
    start at 1, unlike the consumer protocol's)."""

    STABLE = 1
    UNREVOKED_TASKS = 2  # must give tasks up before it moves on
    UNRELEASED_TASKS = 3  # at the target epoch, waiting for tasks others still hold
    UNKNOWN = 127


class StreamsGroupState:
    """The group states Kafka reports for streams groups (ListGroups, StreamsGroupDescribe)."""

    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class TaskTuple:
    """A member's active, standby and warm-up tasks (each without empty subtopologies)."""

    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def contains_any(self, other: TaskTuple) -> bool:
        return any(_overlaps(mine, theirs) for mine, theirs in (
            (self.active, other.active), (self.standby, other.standby),
            (self.warmup, other.warmup)))


EMPTY_TASKS = TaskTuple()


def _overlaps(a: Tasks, b: Tasks) -> bool:
    return any(a.get(sub, frozenset()) & parts for sub, parts in b.items())


@dataclass(slots=True)
class StreamsMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: Pairs = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: StreamsMemberState = StreamsMemberState.STABLE
    assigned: TaskTuple = EMPTY_TASKS
    pending_revocation: TaskTuple = EMPTY_TASKS
    # The epoch at which each active task came to the member (Kafka 4.3's assignment epochs).
    active_epochs: dict[tuple[str, int], int] = field(default_factory=dict)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is StreamsMemberState.STABLE and self.member_epoch == epoch


@dataclass(slots=True)
class StreamsGroup:
    """The streams part of a group (see the module docstring)."""

    group_epoch: int = 0
    metadata_hash: int = 0
    validated_topology_epoch: int = -1
    last_assignment_configs: Pairs = ()
    assignment_epoch: int = 0
    assignment_timestamp: int | None = None
    topology: StreamsGroupTopologyValue | None = None
    members: dict[str, StreamsMember] = field(default_factory=dict)
    targets: dict[str, TaskTuple] = field(default_factory=dict)
    # Which process holds each task: active (one), standby and warm-up (any number).
    active_owners: dict[tuple[str, int], str] = field(default_factory=dict)
    standby_owners: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    warmup_owners: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    # Memory only (see the module docstring). `configured` is a ConfiguredTopology
    # (streams_topology), kept untyped here so that this module stays below that one.
    configured: Any = field(default=None, compare=False, repr=False)
    metadata_checked: int = field(default=-1, compare=False)
    endpoint_information_epoch: int = field(default=0, compare=False)
    shutdown_requested_by: str | None = field(default=None, compare=False)
    stored: dict[StreamsGroupKey, StreamsGroupValue] = field(
        default_factory=dict, compare=False, repr=False)

    def state(self) -> str:
        if not self.members:
            return StreamsGroupState.EMPTY
        # Ready: as last checked against the topics, or (a group just loaded, not checked yet)
        # as its records say (the validated topology epoch is the topology's once ready).
        ready = (self.configured.ready if self.configured is not None
                 else self.topology is not None
                 and self.validated_topology_epoch == self.topology.epoch)
        if self.topology is None or not ready:
            return StreamsGroupState.NOT_READY
        if self.group_epoch != self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        if all(m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return StreamsGroupState.STABLE
        return StreamsGroupState.RECONCILING

    def topology_epoch(self) -> int:
        return -1 if self.topology is None else self.topology.epoch

    def target_epoch(self) -> int:
        """The epoch members reconcile towards: the assignment epoch, or 1 for a group whose
        first target is not computed yet (its initial rebalance delay runs), as Kafka 4.3.1
        starts a new streams group (seen on the wire: members at epoch 1, group epoch 2)."""
        if self.assignment_epoch == 0 and self.group_epoch > 0:
            return 1
        return self.assignment_epoch


# -- records -----------------------------------------------------------------------------------


def task_list(tasks: Tasks, epochs: Mapping[tuple[str, int], int] | None = None) -> TaskList:
    """Tasks in record form: subtopologies and partitions sorted, empty ones out; with the
    per-partition epochs when `epochs` is given."""
    return tuple(
        TaskIds(sub, tuple(sorted(parts)),
                None if epochs is None else tuple(epochs[(sub, p)] for p in sorted(parts)))
        for sub, parts in sorted(tasks.items()) if parts)


def tasks_of(entries: Iterable[TaskIds] | Iterable[tuple[str, Iterable[int]]]) -> Tasks:
    result: dict[str, set[int]] = {}
    for entry in entries:
        sub, parts = ((entry.subtopology_id, entry.partitions) if isinstance(entry, TaskIds)
                      else entry)
        result.setdefault(sub, set()).update(parts)
    return {sub: frozenset(parts) for sub, parts in result.items() if parts}


def member_metadata_value(member: StreamsMember) -> StreamsGroupMemberMetadataValue:
    return StreamsGroupMemberMetadataValue(
        member.instance_id, member.rack_id, member.client_id, member.client_host,
        member.rebalance_timeout_ms, member.topology_epoch, member.process_id,
        member.user_endpoint, member.client_tags)


def target_value(target: TaskTuple) -> StreamsGroupTargetAssignmentMemberValue:
    return StreamsGroupTargetAssignmentMemberValue(
        task_list(target.active), task_list(target.standby), task_list(target.warmup))


def current_assignment_value(member: StreamsMember) -> StreamsGroupCurrentMemberAssignmentValue:
    """Active tasks with the epoch each came at, as Kafka 4.3 writes them (a task without one
    counts from the member epoch)."""
    default = max(member.member_epoch, 0)
    epochs = {(sub, p): member.active_epochs.get((sub, p), default)
              for sub, parts in member.assigned.active.items() for p in parts}
    pending = member.pending_revocation
    return StreamsGroupCurrentMemberAssignmentValue(
        member.member_epoch, member.previous_member_epoch, int(member.state),
        task_list(member.assigned.active, epochs), task_list(member.assigned.standby),
        task_list(member.assigned.warmup), task_list(pending.active),
        task_list(pending.standby), task_list(pending.warmup))


def apply_streams_record(
    streams: StreamsGroup, key: StreamsGroupKey, value: StreamsGroupValue | None
) -> None:
    """Change `streams` as one record says (a None value is the key's tombstone)."""
    if isinstance(key, StreamsGroupMetadataKey):
        if isinstance(value, StreamsGroupMetadataValue):
            streams.group_epoch = value.epoch
            streams.metadata_hash = value.metadata_hash
            streams.validated_topology_epoch = value.validated_topology_epoch
            streams.last_assignment_configs = value.last_assignment_configs
        return
    if isinstance(key, StreamsGroupTopologyKey):
        streams.topology = value if isinstance(value, StreamsGroupTopologyValue) else None
        streams.configured = None
        return
    if isinstance(key, StreamsGroupTargetAssignmentMetadataKey):
        if isinstance(value, StreamsGroupTargetAssignmentMetadataValue):
            streams.assignment_epoch = value.assignment_epoch
            streams.assignment_timestamp = value.assignment_timestamp or None
        else:
            streams.assignment_epoch = 0
            streams.assignment_timestamp = None
        return
    if isinstance(key, StreamsGroupTargetAssignmentMemberKey):
        if isinstance(value, StreamsGroupTargetAssignmentMemberValue):
            streams.targets[key.member_id] = TaskTuple(
                tasks_of(value.active_tasks), tasks_of(value.standby_tasks),
                tasks_of(value.warmup_tasks))
        else:
            streams.targets.pop(key.member_id, None)
        return
    if isinstance(key, StreamsGroupMemberMetadataKey):
        if isinstance(value, StreamsGroupMemberMetadataValue):
            member = _member(streams, key.member_id)
            _release(streams, member)
            member.instance_id = value.instance_id
            member.rack_id = value.rack_id
            member.client_id = value.client_id
            member.client_host = value.client_host
            member.rebalance_timeout_ms = value.rebalance_timeout_ms
            member.topology_epoch = value.topology_epoch
            member.process_id = value.process_id
            member.user_endpoint = value.user_endpoint
            member.client_tags = value.client_tags
            _hold(streams, member)
        else:
            gone = streams.members.pop(key.member_id, None)
            if gone is not None:
                _release(streams, gone)
        return
    if isinstance(value, StreamsGroupCurrentMemberAssignmentValue):
        member = _member(streams, key.member_id)
        _release(streams, member)
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        known = value.state in StreamsMemberState._value2member_map_
        member.state = StreamsMemberState(value.state) if known else StreamsMemberState.UNKNOWN
        member.assigned = TaskTuple(tasks_of(value.active_tasks), tasks_of(value.standby_tasks),
                                    tasks_of(value.warmup_tasks))
        member.pending_revocation = TaskTuple(
            tasks_of(value.active_tasks_pending_revocation),
            tasks_of(value.standby_tasks_pending_revocation),
            tasks_of(value.warmup_tasks_pending_revocation))
        default = max(value.member_epoch, 0)
        member.active_epochs = {}
        for entry in value.active_tasks:
            epochs = entry.assignment_epochs
            for index, partition in enumerate(entry.partitions):
                member.active_epochs[(entry.subtopology_id, partition)] = (
                    epochs[index] if epochs is not None and len(epochs) == len(entry.partitions)
                    else default)
        _hold(streams, member)
        return
    left = streams.members.get(key.member_id)
    if left is not None:
        _release(streams, left)
        left.member_epoch = LEAVE_EPOCH
        left.previous_member_epoch = LEAVE_EPOCH
        left.state = StreamsMemberState.STABLE
        left.assigned = EMPTY_TASKS
        left.pending_revocation = EMPTY_TASKS
        left.active_epochs = {}


def _member(streams: StreamsGroup, member_id: str) -> StreamsMember:
    member = streams.members.get(member_id)
    if member is None:
        member = StreamsMember(member_id)
        streams.members[member_id] = member
    return member


def _each(tasks: TaskTuple) -> Iterable[tuple[str, tuple[str, int]]]:
    for kind, held in (("active", tasks.active), ("standby", tasks.standby),
                       ("warmup", tasks.warmup)):
        for sub, parts in held.items():
            for partition in parts:
                yield kind, (sub, partition)


def _hold(streams: StreamsGroup, member: StreamsMember) -> None:
    """Note the tasks `member` holds (assigned or pending revocation) under its process."""
    process = member.process_id
    for tasks in (member.assigned, member.pending_revocation):
        for kind, task in _each(tasks):
            if kind == "active":
                streams.active_owners[task] = process
            else:
                owners = streams.standby_owners if kind == "standby" else streams.warmup_owners
                held = owners.setdefault(task, {})
                held[process] = held.get(process, 0) + 1


def _release(streams: StreamsGroup, member: StreamsMember) -> None:
    """Forget the tasks `member` held (assigned or pending revocation)."""
    process = member.process_id
    for tasks in (member.assigned, member.pending_revocation):
        for kind, task in _each(tasks):
            if kind == "active":
                if streams.active_owners.get(task) == process:
                    del streams.active_owners[task]
                continue
            owners = streams.standby_owners if kind == "standby" else streams.warmup_owners
            held = owners.get(task)
            if held is None or process not in held:
                continue
            held[process] -= 1
            if not held[process]:
                del held[process]
            if not held:
                del owners[task]
