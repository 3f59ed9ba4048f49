"""Kafka's share-group assignor "simple" (KIP-932), the one a share group's coordinator runs.

Share groups may give one partition to several members, so the assignor balances two numbers:
how many members share each partition (`desired sharing`: the members spread over the
partitions, rounded up) and how many partitions each member gets (the partitions times the
sharing spread over the members, the rounding handed out in member order). It keeps what members
already have where that stays within both, takes away partitions no longer subscribed, partitions
shared by too many and partitions of members holding too many, then hands the partitions still
short of sharers to the members still short of partitions, round after round. With every member
subscribed to the same topics (homogeneous) this runs once over all partitions; otherwise once
per topic among the members subscribing to it.

Only initialized share-partitions are assignable (`assignable`): Kafka assigns a partition only
once its share state exists. Walk orders: members in the group's order, partitions by topic (in
the order given) then number, sets in ascending order.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

Assignment = dict[uuid.UUID, frozenset[int]]
NAME = "simple"


@dataclass(frozen=True, slots=True)
class ShareAssignorMember:
    member_id: str
    subscribed: tuple[uuid.UUID, ...]  # topic ids, only topics that exist
    current: Assignment  # the member's current target


def assign(
    members: Sequence[ShareAssignorMember], partitions: Mapping[uuid.UUID, int],
    assignable: Callable[[uuid.UUID, int], bool],
) -> dict[str, Assignment]:
    """Each member's new target (every member named, possibly with nothing)."""
    if not members:
        return {}
    topics: list[uuid.UUID] = []
    for member in members:
        topics.extend(t for t in member.subscribed if t not in topics)
    old = [dict(m.current) for m in members]
    new = [dict(m.current) for m in members]
    homogeneous = all(set(m.subscribed) == set(members[0].subscribed) for m in members)
    subscribed_ids = set(topics)
    for index in range(len(members)):  # topics nobody subscribes to any more go
        for topic_id in list(new[index]):
            if topic_id not in subscribed_ids or topic_id not in partitions:
                del new[index][topic_id]
    if homogeneous:
        _build(list(range(len(members))), _targets(topics, partitions, assignable), old, new)
    else:
        for topic_id in topics:
            subscribers = [i for i, m in enumerate(members) if topic_id in m.subscribed]
            for index in range(len(members)):  # drop what non-subscribers held
                if index not in subscribers and topic_id in new[index]:
                    del new[index][topic_id]
            _build(subscribers, _targets([topic_id], partitions, assignable), old, new)
    return {m.member_id: {t: p for t, p in new[i].items() if p} for i, m in enumerate(members)}


def _targets(topics: Sequence[uuid.UUID], partitions: Mapping[uuid.UUID, int],
             assignable: Callable[[uuid.UUID, int], bool]) -> list[tuple[uuid.UUID, int]]:
    return [(t, p) for t in topics for p in range(partitions.get(t, 0)) if assignable(t, p)]


def _build(
    subscribers: list[int], targets: list[tuple[uuid.UUID, int]],
    old: list[Assignment], new: list[Assignment],
) -> None:
    """One balancing pass over `targets` among `subscribers` (indices into `old`/`new`)."""
    if not subscribers:
        return
    target_set = set(targets)
    sharing = 0 if not targets else (len(subscribers) + len(targets) - 1) // len(targets)
    precise = sharing * len(targets) / len(subscribers)
    desired = {index: math.ceil(precise * (n + 1)) - math.ceil(precise * n)
               for n, index in enumerate(subscribers)}
    by_partition: dict[tuple[uuid.UUID, int], list[int]] = {}
    by_member: dict[int, list[tuple[uuid.UUID, int]]] = {i: [] for i in subscribers}
    unfilled: list[int] = []
    overfilled: set[int] = set()
    for index in subscribers:
        held = sorted((t, p) for t, ps in old[index].items() for p in ps
                      if (t, p) in target_set)
        for tp in held:
            by_partition.setdefault(tp, []).append(index)
            by_member[index].append(tp)
        # keep only assignable partitions held of the topics in play
        for t in {t for t, _ in targets}:
            kept = frozenset(p for p in new[index].get(t, frozenset()) if (t, p) in target_set)
            new[index][t] = kept
        if len(held) < desired[index]:
            unfilled.append(index)
        elif len(held) > desired[index]:
            overfilled.add(index)

    def take(index: int, tp: tuple[uuid.UUID, int]) -> None:
        by_partition[tp].remove(index)
        by_member[index].remove(tp)
        new[index][tp[0]] = new[index].get(tp[0], frozenset()) - {tp[1]}
        if index not in unfilled:
            unfilled.append(index)

    for tp in targets:  # partitions shared by too many: overfilled members give up first
        for prefer_overfilled in (True, False):
            for index in list(by_partition.get(tp, ())):
                if len(by_partition[tp]) <= sharing:
                    break
                if (index in overfilled) == prefer_overfilled:
                    take(index, tp)
    for index in subscribers:  # members holding too many
        if index in overfilled:
            for tp in list(by_member[index]):
                if len(by_member[index]) <= desired[index]:
                    break
                by_partition[tp].remove(index)
                by_member[index].remove(tp)
                new[index][tp[0]] = new[index].get(tp[0], frozenset()) - {tp[1]}
    unfilled = [i for i in subscribers if i in unfilled and len(by_member[i]) < desired[i]]
    cursor = 0
    progressed = False
    for tp in targets:
        holders = by_partition.setdefault(tp, [])
        while len(holders) < sharing and unfilled:
            if cursor >= len(unfilled):
                if not progressed:
                    break
                cursor, progressed = 0, False
            index = unfilled[cursor]
            if index in holders:
                cursor += 1
                continue
            holders.append(index)
            by_member[index].append(tp)
            new[index][tp[0]] = new[index].get(tp[0], frozenset()) | {tp[1]}
            progressed = True
            if len(by_member[index]) >= desired[index]:
                unfilled.pop(cursor)
            else:
                cursor += 1
        if not unfilled:
            break
