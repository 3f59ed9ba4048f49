"""The group coordinator's own assignors (KIP-848 `uniform` and `range`), as Kafka runs them.

Unlike the classic protocol's client-side assignors, these see the group as Kafka's coordinator
builds it: members in a Java HashMap keyed by member id, subscriptions as hash sets of topic
ids, each member's current target as a map of topic id to a hash set of partitions. Their
output depends on those maps' iteration orders, so this module walks the group in exactly
those orders (`java_hash`) and follows Kafka 4.3's algorithms step by step:

- `uniform`, every member subscribed to the same topics: each member, in map order, keeps its
  current partitions up to its quota (the minimum share, plus one while members owed an extra
  partition remain; a member gives its extra up when enough members follow it to take them
  all), in the order its own maps iterate; partitions nobody holds (topics in the
  subscription set's order, partitions ascending) and then the ones given up are dealt out
  in contiguous runs to the members still short, in map order.
- `range`: members sorted by instance id (static members first) then member id; every topic
  is cut into consecutive ranges over its subscribers, the first `count % subscribers` one
  partition longer. It ignores racks and current assignments.
- `uniform` with unequal subscriptions: `server_heterogeneous`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from kgroups.assignors.java_hash import (
    copied_set_order,
    grown_capacity,
    hash_set_order,
    iteration_order,
    string_hash,
    timeline_capacity,
    timeline_order,
    uuid_hash,
)
from kgroups.assignors.model import AssignmentInputError
from kgroups.assignors.server_heterogeneous import assign_heterogeneous
from kgroups.assignors.server_member import ServerMember, Target


def assign(
    assignor: str, members: Sequence[ServerMember], partitions: Mapping[uuid.UUID, int],
    peak_members: int | None = None,
) -> Target:
    """The target assignment of every member (members with nothing get an empty mapping).

    `members` are in the order the coordinator put them into its member map and
    `peak_members` is the most that map held (a departing member is removed after the
    others were put, so the table may be one size larger than the survivors need)."""
    if not members:
        return {}
    if len({m.member_id for m in members}) < len(members):
        raise AssignmentInputError("a member id appears twice")
    capacity = grown_capacity(max(peak_members or 0, len(members)))
    ordered = iteration_order(members, lambda m: string_hash(m.member_id), capacity)
    # Members usually share one subscription object: compare and check each only once.
    subscriptions = {id(m.topics): m.topics for m in ordered}
    distinct = {frozenset(topics) for topics in subscriptions.values()}
    for topics in distinct:
        missing = sorted(str(t) for t in topics if t not in partitions)
        if missing:
            raise AssignmentInputError(f"a member subscribes to topic {missing[0]} "
                                       "which does not exist")
    if assignor == "range":
        return _range(ordered, partitions)
    if len(distinct) == 1:
        return _uniform_homogeneous(ordered, partitions)
    return assign_heterogeneous(ordered, partitions)


def coordinator_order(
    members: Sequence[ServerMember], newcomer: str | None = None, most: int = 0,
) -> list[ServerMember]:
    """The order Kafka's coordinator puts members into the member map it gives an assignor:
    the group's members as its TimelineHashMap iterates them (`members` in the order they
    joined; `most`: the most members that map ever held, as its table never shrinks), then
    `newcomer`, the member whose first heartbeat this is. Only the order of member ids that
    share a bucket of the member map depends on it."""
    present = [m for m in members if m.member_id != newcomer]
    capacity = timeline_capacity(max(most, len(present)))
    ordered = timeline_order(present, lambda m: string_hash(m.member_id), capacity)
    return ordered + [m for m in members if m.member_id == newcomer]


def _topic_order(topics: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """A subscription set copied into a new HashSet, as the homogeneous builder copies it."""
    return copied_set_order(hash_set_order(list(dict.fromkeys(topics)), uuid_hash), uuid_hash)


def _uniform_homogeneous(members: list[ServerMember], counts: Mapping[uuid.UUID, int]) -> Target:
    topics = _topic_order(members[0].topics)
    if not topics:
        return {m.member_id: {} for m in members}
    index_of = {t: i for i, t in enumerate(topics)}
    taken = [bytearray(counts[t]) for t in topics]  # 1 where some member holds the partition
    for member in members:
        for topic, ps in member.assigned.items():
            position = index_of.get(topic)
            if position is not None:
                flags = taken[position]
                for p in ps:
                    flags[p] = 1
    free = [(i, p) for i, flags in enumerate(taken) for p in range(len(flags)) if not flags[p]]
    total = sum(counts[t] for t in topics)
    minimum, extra_left = divmod(total, len(members))

    kept: list[dict[int, list[int]]] = []
    short: list[tuple[int, int]] = []
    for index, member in enumerate(members):
        quota = minimum
        has_extra = extra_left > 0
        if has_extra:
            quota += 1
        mine: dict[int, list[int]] = {}
        for topic, ps in member.held:
            position = index_of.get(topic)
            if position is None:
                continue
            keep = ps[:quota]
            free.extend((position, p) for p in ps[quota:])
            quota -= len(keep)
            if keep:
                mine[position] = keep
        if quota > 0 and has_extra and len(members) - index > extra_left:
            quota -= 1  # leave the extra partition to a later member
            has_extra = False
        if quota > 0:
            short.append((index, quota))
        if has_extra:
            extra_left -= 1
        kept.append(mine)

    start = 0
    for index, quota in short:
        mine = kept[index]
        for position, p in free[start:start + quota]:
            got = mine.get(position)
            if got is None:
                mine[position] = [p]
            else:
                got.append(p)
        start += quota
    if start < len(free):
        raise AssignmentInputError("partitions were left unassigned")
    return {m.member_id: {topics[i]: frozenset(ps) for i, ps in got.items()}
            for m, got in zip(members, kept, strict=True)}


def _range(members: list[ServerMember], counts: Mapping[uuid.UUID, int]) -> Target:
    ordered = sorted(members, key=lambda m: (0, m.instance_id, "") if m.instance_id is not None
                     else (1, "", m.member_id))
    subscribers: dict[uuid.UUID, int] = {}
    for member in ordered:
        for topic in set(member.topics):
            subscribers[topic] = subscribers.get(topic, 0) + 1
    next_start = dict.fromkeys(subscribers, 0)
    extra_left = {t: counts[t] % n for t, n in subscribers.items()}
    result: Target = {}
    for member in ordered:
        mine: dict[uuid.UUID, frozenset[int]] = {}
        for topic in set(member.topics):
            quota = counts[topic] // subscribers[topic]
            if extra_left[topic] > 0:
                quota += 1
                extra_left[topic] -= 1
            start = next_start[topic]
            end = min(start + quota, counts[topic])
            next_start[topic] = end
            if start < end:
                mine[topic] = frozenset(range(start, end))
        result[member.member_id] = mine
    return result
