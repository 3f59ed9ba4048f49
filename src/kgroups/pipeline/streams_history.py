"""The epochs of streams groups (KIP-1071, group.protocol=streams), from their records.

A streams group writes its state in pieces, as a consumer group does (types 17 and 19-23, see
kgroups.records.streams_group): the group epoch, each member's metadata, the target assignment
member by member (active, standby and warm-up tasks, a task being a subtopology and a
partition) then its epoch, each member's current assignment and the topology. Replaying them in
log order gives, at each target assignment epoch, who was to run which task, and so which
tasks the broker's assignor moved from one member to another: what a Streams operator watches,
as every moved active task restores its state stores on its new instance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kgroups.pipeline.consumer_history import ConsumerRecord
from kgroups.pipeline.tables import TIMESTAMP
from kgroups.pipeline.window import TimeWindow
from kgroups.records import streams_group as sg

STREAMS_GROUP_EPOCHS = pa.schema([
    ("group", pa.string()),
    ("epoch", pa.int32()),  # the target assignment epoch
    ("group_epoch", pa.int32()),  # the group epoch when the target was written
    ("ts", TIMESTAMP),  # when the target's epoch was written
    ("members", pa.int32()),  # members of the group then
    ("active_tasks", pa.int32()),  # active tasks in the target
    ("standby_tasks", pa.int32()),  # standby replicas in the target
    ("active_moved", pa.int32()),  # active tasks now on another member than in the last target
    ("standby_moved", pa.int32()),  # standby replicas on a member not holding one before
])

Task = tuple[str, int]  # subtopology id, partition


@dataclass(slots=True)
class _Group:
    group_epoch: int = -1
    members: set[str] = field(default_factory=set)
    # member id -> (active tasks, standby tasks) of the target being written
    targets: dict[str, tuple[set[Task], set[Task]]] = field(default_factory=dict)
    last_active: dict[Task, str] = field(default_factory=dict)  # task -> member
    last_standby: set[tuple[Task, str]] = field(default_factory=set)


def _tasks(tasks: sg.TaskList) -> set[Task]:
    return {(entry.subtopology_id, partition) for entry in tasks for partition in entry.partitions}


def epoch_rows(records: Iterable[ConsumerRecord], window: TimeWindow) -> list[dict[str, Any]]:
    """STREAMS_GROUP_EPOCHS rows of every target assignment epoch of `records` (one
    __consumer_offsets partition's streams records) written inside the window; the records
    before --since still build the target the first row is compared with."""
    groups: dict[str, _Group] = {}
    rows: list[dict[str, Any]] = []
    for record in sorted(records, key=lambda r: r.log_offset):
        if not window.reached(record.ts):
            continue
        key, value = record.key, record.value
        group = groups.setdefault(key.group, _Group())
        if isinstance(key, sg.StreamsGroupMetadataKey):
            if value is None:  # the group was deleted: a new history starts
                groups[key.group] = _Group()
            else:
                assert isinstance(value, sg.StreamsGroupMetadataValue)
                group.group_epoch = value.epoch
        elif isinstance(key, sg.StreamsGroupMemberMetadataKey):
            (group.members.discard if value is None else group.members.add)(key.member_id)
        elif isinstance(key, sg.StreamsGroupTargetAssignmentMemberKey):
            if value is None:
                group.targets.pop(key.member_id, None)
            else:
                assert isinstance(value, sg.StreamsGroupTargetAssignmentMemberValue)
                group.targets[key.member_id] = (_tasks(value.active_tasks),
                                                _tasks(value.standby_tasks))
        elif isinstance(key, sg.StreamsGroupTargetAssignmentMetadataKey) and value is not None:
            assert isinstance(value, sg.StreamsGroupTargetAssignmentMetadataValue)
            row = _new_target(key.group, group, value.assignment_epoch, record.ts)
            if window.contains(record.ts):
                rows.append(row)
    return rows


def _new_target(name: str, group: _Group, epoch: int, ts: int) -> dict[str, Any]:
    active = {task: member for member, (tasks, _) in group.targets.items() for task in tasks}
    standby = {(task, member) for member, (_, tasks) in group.targets.items() for task in tasks}
    had_standby = {task for task, _ in group.last_standby}
    row = {
        "group": name, "epoch": epoch, "group_epoch": group.group_epoch, "ts": ts,
        "members": len(group.members), "active_tasks": len(active),
        "standby_tasks": len(standby),
        "active_moved": sum(1 for task, member in active.items()
                            if group.last_active.get(task, member) != member),
        "standby_moved": len({(task, member) for task, member in standby - group.last_standby
                              if task in had_standby}),
    }
    group.last_active, group.last_standby = active, standby
    return row
