"""The history of KIP-848 consumer groups (group.protocol=consumer), from their records.

A classic group writes one GroupMetadata record per generation; a consumer group writes its
state in pieces (types 3 and 5-8, see kgroups.records.consumer_group): the group epoch, each
member's subscription, the target assignment member by member then its epoch, and each member's
current assignment as it reconciles. Replaying them in log order gives, per target assignment
epoch, what the classic tables hold per generation (who was assigned what), plus what only this
protocol has: the group epoch, the member epochs, and how long the members took to reach the
target (every member at the target epoch, Stable). The rows use the schemas of
`group_generations` and `rebalances` (tables.py) with group_type = "consumer", so the two
protocols compare on the same columns.

Topics are named by id in these records; `topic_names_near` finds the names in the data
directory's partition.metadata files, and an id stays the topic's name where none is found.

The replay also hands back, per group, where it ended (`GroupEnd`: the group_summary's
state, protocol, epochs and counts) and each change of target inside the window with the
members on both sides (`Transition`), from which `rebalance_causes` tells why the epoch moved.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyarrow import fs

from kgroups.log.topic_ids import PARTITION_METADATA_FILE, parse_topic_id, topic_id_string
from kgroups.pipeline import history
from kgroups.pipeline.discovery import open_filesystem
from kgroups.pipeline.window import TimeWindow
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartitionList,
)

GROUP_TYPE = "consumer"
# The keys of the records replayed here (type 16, regular expressions, changes no assignment).
CONSUMER_GROUP_KEYS = (
    ConsumerGroupMetadataKey, ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
)
_STABLE = 0  # Kafka's MemberState byte of a member at its target
# Kafka's consumer group states (ListGroups, ConsumerGroupDescribe).
EMPTY, ASSIGNING, RECONCILING, STABLE = "Empty", "Assigning", "Reconciling", "Stable"
# A consumer group's session timeout is the broker's group.consumer.session.timeout.ms, which
# no record holds: Kafka's default is taken to tell a member that timed out from one that left.
DEFAULT_SESSION_TIMEOUT_MS = 45_000


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One consumer-group record of a __consumer_offsets partition; `value` None = tombstone."""

    log_partition: int
    log_offset: int
    ts: int
    key: Any
    value: Any


@dataclass(slots=True)
class _Target:
    """A target assignment epoch while its members reconcile towards it."""

    epoch: int
    ts: int
    waiting: set[str]
    row: dict[str, Any]


@dataclass(frozen=True, slots=True)
class GroupEnd:
    """Where a group's records left it (as of --until): what the group_summary shows. `state`
    is Kafka's consumer group state as the records tell it (Empty, Assigning: the group epoch
    is ahead of the target's, Reconciling: a member has not reached the target yet, Stable),
    `deleted` when the last word was the group's tombstone."""

    state: str
    protocol: str | None
    generation: int | None  # the target assignment epoch
    group_epoch: int | None
    member_count: int
    generations: int  # target epochs seen
    deleted: bool


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of target assignment inside the window, both sides in the form
    `rebalance_causes.compare` takes (generation, record_ts, members with their timeouts,
    subscribed topics and assigned partitions)."""

    group: str
    previous: dict[str, Any]
    current: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ConsumerHistory:
    """The replay's results: group_generations and rebalances rows, the targets' changes and
    every group's end."""

    generations: list[dict[str, Any]]
    rebalances: list[dict[str, Any]]
    transitions: list[Transition]
    ends: dict[str, GroupEnd]


@dataclass(slots=True)
class _Group:
    """What the records have said so far about one group."""

    group_epoch: int | None = None
    members: dict[str, ConsumerGroupMemberMetadataValue] = field(default_factory=dict)
    targets: dict[str, TopicPartitionList] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)  # member -> member epoch (type 8)
    reconciled: set[str] = field(default_factory=set)  # members Stable at their epoch
    last: dict[str, Any] | None = None  # the previous generation row
    last_causes: dict[str, Any] | None = None  # the same target as rebalance_causes reads it
    pending: _Target | None = None
    deleted: bool = False


def topic_names_near(segment_uri: str) -> dict[uuid.UUID, str]:
    """Topic id -> name from the partition.metadata of each topic's partition 0 directory
    beside the __consumer_offsets partition directory holding `segment_uri`."""
    filesystem, path = open_filesystem(segment_uri)
    data_dir = path.rstrip("/").rsplit("/", 2)[0]
    names: dict[uuid.UUID, str] = {}
    try:
        listed = filesystem.get_file_info(fs.FileSelector(data_dir))
    except OSError:
        return names
    for info in listed:
        topic, _, partition = info.base_name.rpartition("-")
        if info.type != fs.FileType.Directory or partition != "0" or not topic:
            continue
        try:
            with filesystem.open_input_stream(f"{info.path}/{PARTITION_METADATA_FILE}") as file:
                lines = file.read().decode().splitlines()
            names[parse_topic_id(lines[1].split(":", 1)[1].strip())] = topic
        except (OSError, IndexError, ValueError):
            continue
    return names


def history_rows(records: Iterable[ConsumerRecord], window: TimeWindow,
                 topic_names: Mapping[uuid.UUID, str]) -> ConsumerHistory:
    """The group_generations and rebalances rows of every consumer group in `records` inside
    the window, the targets' changes there, and where each group ended; records before --since
    still build the state the window starts from."""
    groups: dict[str, _Group] = {}
    targets_seen: dict[str, int] = {}
    found = ConsumerHistory([], [], [], {})
    for record in sorted(records, key=lambda r: (r.log_partition, r.log_offset)):
        if not window.reached(record.ts):
            continue
        name = record.key.group
        group = groups.setdefault(name, _Group())
        key, value = record.key, record.value
        if isinstance(key, ConsumerGroupMetadataKey):
            if value is None:  # the group was deleted: a new history starts
                groups[name] = _Group(deleted=True)
                continue
            assert isinstance(value, ConsumerGroupMetadataValue)
            group.group_epoch = value.epoch
            group.deleted = False
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            _set(group.members, key.member_id, value)
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            assert value is None or isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
            _set(group.targets, key.member_id, None if value is None else value.topic_partitions)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            _current(group, key.member_id, value, record.ts)
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey) and value is not None:
            assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
            if _new_target(name, group, value.assignment_epoch, record, topic_names, found,
                           window):
                targets_seen[name] = targets_seen.get(name, 0) + 1
    for name, group in groups.items():
        found.ends[name] = _end(group, targets_seen.get(name, 0))
    return found


def _end(group: _Group, generations: int) -> GroupEnd:
    last = group.last
    members = 0 if last is None else last["member_count"]
    if not group.members and members == 0:
        state = EMPTY
    elif last is None or (group.group_epoch or 0) > last["generation"]:
        state = ASSIGNING
    elif group.pending is not None:
        state = RECONCILING
    else:
        state = STABLE
    return GroupEnd(state=state, protocol=None if last is None else last["protocol"],
                    generation=None if last is None else last["generation"],
                    group_epoch=group.group_epoch, member_count=members,
                    generations=generations, deleted=group.deleted)


def _set(table: dict[str, Any], member_id: str, value: Any) -> None:
    if value is None:
        table.pop(member_id, None)
    else:
        table[member_id] = value


def _new_target(name: str, group: _Group, epoch: int, record: ConsumerRecord,
                topic_names: Mapping[uuid.UUID, str], found: ConsumerHistory,
                window: TimeWindow) -> bool:
    """Take the target assignment written up to `record` as a new generation; False when it
    repeats the current epoch."""
    if group.last is not None and group.last["generation"] == epoch:
        return False
    members = []
    cause_members = []
    for member_id in sorted(group.targets):
        meta = group.members.get(member_id)
        member = {
            "member_id": member_id,
            "instance_id": meta.instance_id if meta else None,
            "client_id": meta.client_id if meta else None,
            "client_host": meta.client_host if meta else None,
            "partitions": [{"topic": topic_names.get(topic_id) or topic_id_string(topic_id),
                            "partition": p}
                           for topic_id, partitions in group.targets[member_id]
                           for p in partitions],
            "topics": list(meta.subscribed_topic_names) if meta else None,
            "member_epoch": group.epochs.get(member_id),
        }
        members.append(member)
        cause_members.append({
            **member, "session_timeout": DEFAULT_SESSION_TIMEOUT_MS,
            "rebalance_timeout": meta.rebalance_timeout_ms if meta else -1})
    assignors = {m.server_assignor for m in group.members.values() if m.server_assignor}
    row = {
        "group": name, "generation": epoch, "protocol_type": GROUP_TYPE,
        "protocol": min(assignors) if assignors else None, "leader": None, "state_ts": None,
        "member_count": len(members), "members": members,
        "log_partition": record.log_partition, "log_offset": record.log_offset,
        "ts": record.ts, "group_type": GROUP_TYPE, "group_epoch": group.group_epoch,
    }
    causes = {"generation": epoch, "record_ts": record.ts, "members": cause_members}
    inside = window.contains(record.ts)
    if inside:
        found.generations.append(row)
    previous, group.last = group.last, row
    previous_causes, group.last_causes = group.last_causes, causes
    group.pending = _Target(epoch, record.ts, set(group.targets), {})
    if previous is not None:
        before = history.partition_owners(previous["members"])
        after = history.partition_owners(members)
        before_members = {history.member_identity(m) for m in previous["members"]}
        after_members = {history.member_identity(m) for m in members}
        group.pending.row = {
            "group": name, "from_generation": previous["generation"], "to_generation": epoch,
            "ts": record.ts,
            "members_joined": len(after_members - before_members),
            "members_left": len(before_members - after_members),
            "partitions_moved": sum(1 for tp, owner in after.items()
                                    if tp in before and before[tp] != owner),
            "partitions_kept": sum(1 for tp, owner in after.items() if before.get(tp) == owner),
            "seconds_since_previous": (record.ts - previous["ts"]) / 1000.0,
            "group_type": GROUP_TYPE, "seconds_to_reconcile": None,
        }
        if inside:
            found.rebalances.append(group.pending.row)
            assert previous_causes is not None
            found.transitions.append(Transition(name, previous_causes, causes))
    group.pending.waiting -= {m for m in group.reconciled if group.epochs.get(m, -1) >= epoch}
    _maybe_reconciled(group)
    return True


def _current(group: _Group, member_id: str, value: Any, ts: int) -> None:
    """A member's current assignment: once every member of the newest target reached its
    epoch Stable, the rebalance that made that target took `ts` minus its start."""
    if value is None:
        group.epochs.pop(member_id, None)
        group.reconciled.discard(member_id)
        if group.pending is not None:
            group.pending.waiting.discard(member_id)
            _maybe_reconciled(group, ts)
        return
    assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
    group.epochs[member_id] = value.member_epoch
    if value.state == _STABLE:
        group.reconciled.add(member_id)
    else:
        group.reconciled.discard(member_id)
    pending = group.pending
    if pending is not None and value.state == _STABLE and value.member_epoch >= pending.epoch:
        pending.waiting.discard(member_id)
        _maybe_reconciled(group, ts)


def _maybe_reconciled(group: _Group, ts: int | None = None) -> None:
    pending = group.pending
    if pending is None or pending.waiting:
        return
    if pending.row:
        pending.row["seconds_to_reconcile"] = ((ts if ts is not None else pending.ts)
                                               - pending.ts) / 1000.0
    group.pending = None
