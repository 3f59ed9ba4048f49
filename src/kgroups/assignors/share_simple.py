"""Kafka's share-group assignor "simple" (KIP-932), the one a share group's coordinator runs.

Share groups may give one partition to several members, so the assignor balances two numbers:
how many members share each partition (`desired sharing`: the members spread over the
partitions, rounded up) and how many partitions each member gets (the partitions times the
sharing spread over the members, the rounding handed out in member order). It keeps what members
already have where that stays within both, takes away partitions no longer subscribed,
partitions shared by too many and partitions of members holding too many, then hands the
partitions still short of sharers to the members still short of partitions, round after round.
With every member subscribed to the same topics (homogeneous) this runs once over all
partitions; otherwise once per topic among the members subscribing to it, in a slightly
different order of steps, as Kafka 4.3.1's two builders do.

Which member gives up or gets which partition follows the iteration order of the Java hash maps
and sets Kafka's builders keep (members by index, partitions by the hash of a TopicIdPartition
record: 31 * the topic id's hash + the partition), modelled with `java_hash`. Only initialized
share-partitions are assignable (`assignable`), as Kafka assigns a partition only once its share
state exists.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kgroups.assignors.java_hash import (
    grown_capacity,
    hash_set_order,
    iteration_order,
    string_hash,
    table_size_for,
    uuid_hash,
)

Assignment = dict[uuid.UUID, frozenset[int]]
NAME = "simple"
K = TypeVar("K")
TopicPartition = tuple[uuid.UUID, int]
Held = dict[uuid.UUID, set[int]]


@dataclass(frozen=True, slots=True)
class ShareAssignorMember:
    member_id: str
    subscribed: tuple[uuid.UUID, ...]  # topic ids, only topics that exist
    current: Assignment  # the member's current target


def assign(
    members: Sequence[ShareAssignorMember], partitions: Mapping[uuid.UUID, int],
    assignable: Callable[[uuid.UUID, int], bool],
) -> dict[str, Assignment]:
    """Each member's new target (every member named, possibly with nothing); `members` in
    the order the coordinator puts them into the member map it hands the assignor (a plain
    HashMap: the assignor walks it in Java's order over member ids)."""
    if not members:
        return {}
    members = iteration_order(list(members), lambda m: string_hash(m.member_id),
                              grown_capacity(len(members)))
    old = [{t: set(ps) for t, ps in m.current.items()} for m in members]
    new: dict[int, Held] = {}
    if all(set(m.subscribed) == set(members[0].subscribed) for m in members):
        # A member's subscription is a hash set of topic ids: its partitions go in that order.
        topics = hash_set_order(list(dict.fromkeys(members[0].subscribed)), uuid_hash)
        if topics:
            targets = [(t, p) for t in topics for p in range(partitions.get(t, 0))
                       if assignable(t, p)]
            _Homogeneous(len(members), set(topics), targets, old, new).build()
    else:
        for topic_id in dict.fromkeys(t for m in members for t in m.subscribed):
            subscribers = [i for i, m in enumerate(members) if topic_id in m.subscribed]
            numbers = [p for p in range(partitions.get(topic_id, 0)) if assignable(topic_id, p)]
            _TopicBuilder(topic_id, len(members), numbers, subscribers, old, new).build()
    return {m.member_id: {t: frozenset(ps) for t, ps in new.get(i, old[i]).items() if ps}
            for i, m in enumerate(members)}


def _tp_hash(tp: TopicPartition) -> int:
    """TopicIdPartition's record hashCode: 31 * hash(topicId) + partition, as an int."""
    return (31 * uuid_hash(tp[0]) + tp[1]) & 0xFFFFFFFF


def _int_hash(value: int) -> int:
    return value & 0xFFFFFFFF


def _sized_capacity(expected: int) -> int:
    """The table of Kafka's AssignorHelpers.newHashMap/newHashSet(expected):
    new HashMap((expected + 1) / 0.75f + 1)."""
    return table_size_for(max(int((expected + 1) / 0.75 + 1.0), 1))


class _JavaTable(Generic[K]):
    """A java.util.HashMap's (or HashSet's) keys in its table: buckets of power-of-two count,
    a key in bucket `(h ^ (h >>> 16)) & (capacity - 1)`. put (HashSet.add) appends to its
    bucket and grows the table after an insertion takes the size past three quarters of it;
    computeIfAbsent grows it first (when already past) and puts a new key at the head of its
    bucket. Growing splits each bucket keeping its order; removals never shrink it."""

    def __init__(self, hash_of: Callable[[K], int], capacity: int = 16) -> None:
        self.hash_of = hash_of
        self.capacity = capacity
        self.buckets: list[list[K]] = [[] for _ in range(capacity)]
        self.keys: set[K] = set()

    def _slot(self, key: K) -> int:
        h = self.hash_of(key)
        return (h ^ (h >> 16)) & (self.capacity - 1)

    def _grow(self) -> None:
        old = self.buckets
        self.capacity *= 2
        self.buckets = [[] for _ in range(self.capacity)]
        for bucket in old:
            for key in bucket:
                self.buckets[self._slot(key)].append(key)

    def add(self, key: K) -> None:
        """HashSet.add / HashMap.put of a key."""
        if key in self.keys:
            return
        self.keys.add(key)
        self.buckets[self._slot(key)].append(key)
        if len(self.keys) > self.capacity * 0.75:
            self._grow()

    def add_if_absent(self, key: K) -> None:
        """HashMap.computeIfAbsent of a key."""
        if key in self.keys:
            return
        if len(self.keys) > self.capacity * 0.75:
            self._grow()
        self.keys.add(key)
        self.buckets[self._slot(key)].insert(0, key)

    def discard(self, key: K) -> bool:
        if key not in self.keys:
            return False
        self.keys.discard(key)
        self.buckets[self._slot(key)].remove(key)
        return True

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def __len__(self) -> int:
        return len(self.keys)

    def ordered(self) -> list[K]:
        return [key for bucket in self.buckets for key in bucket]


def _live(values: _JavaTable[K]) -> list[K]:
    """A set's elements in its iteration order, for a walk that removes only the element it
    stands on (as a Java iterator's remove()); `values` is checked again at each step."""
    return values.ordered()


def _desired_counts(count: int, targets: int) -> tuple[int, list[int]]:
    """The desired sharing per partition and, per member in order, its desired count."""
    sharing = 0 if not targets else (count + targets - 1) // targets
    precise = sharing * targets / count
    return sharing, [math.ceil(precise * (n + 1)) - math.ceil(precise * n) for n in range(count)]


def _copy(assignment: Held) -> Held:
    return {t: set(ps) for t, ps in assignment.items()}


def _hand_out(
    order: list[K], holders_of: Callable[[K], _JavaTable[int]], unfilled: _JavaTable[int],
    sharing: int, give: Callable[[int, K], int], desired: list[int],
) -> None:
    """The last step of both builders: each partition (in `order`) short of sharers gets
    the next unfilled member that lacks it, the members walked round after round while a
    round gives something (a member leaves the walk once it has its desired count)."""
    if not len(unfilled):
        return
    walk = iter(unfilled.ordered())
    gave_this_round = False
    for key in order:
        holders = holders_of(key)
        to_make = sharing - len(holders)
        while to_make > 0:
            index = next((i for i in walk if i in unfilled), None)
            if index is None:
                if not gave_this_round:
                    break
                walk = iter(unfilled.ordered())
                gave_this_round = False
                continue
            if index in holders:
                continue
            holders.add(index)
            to_make -= 1
            gave_this_round = True
            if give(index, key) >= desired[index]:
                unfilled.discard(index)
        if not len(unfilled):
            break


class _Homogeneous:
    """Kafka's SimpleHomogeneousAssignmentBuilder over member indices 0..n-1."""

    def __init__(self, count: int, subscribed: set[uuid.UUID], targets: list[TopicPartition],
                 old: list[Held], new: dict[int, Held]) -> None:
        self.count = count
        self.subscribed = subscribed
        self.targets = targets
        self.old = old
        self.new = new
        self.sharing, self.desired = _desired_counts(count, len(targets))
        self.by_partition: dict[TopicPartition, _JavaTable[int]] = {}
        self.partition_keys = _JavaTable(_tp_hash, _sized_capacity(len(targets)))
        self.by_member: dict[int, _JavaTable[TopicPartition]] = {}
        self.unfilled = _JavaTable(_int_hash, _sized_capacity(count))
        self.overfilled = _JavaTable(_int_hash, _sized_capacity(count))

    def _holders(self, tp: TopicPartition) -> _JavaTable[int]:
        if tp not in self.by_partition:
            self.by_partition[tp] = _JavaTable(_int_hash)
            self.partition_keys.add_if_absent(tp)
        return self.by_partition[tp]

    def _held(self, index: int) -> _JavaTable[TopicPartition]:
        if index not in self.by_member:
            self.by_member[index] = _JavaTable(_tp_hash)
        return self.by_member[index]

    def _mine(self, index: int) -> Held:
        mine = self.new.get(index)
        if mine is None:
            mine = self.new[index] = _copy(self.old[index])
        return mine

    def build(self) -> None:
        self._revoke_unassignable()
        self._revoke_overfilled()
        self._revoke_overshared()
        for tp in self.targets:
            self._holders(tp)
        _hand_out(self.partition_keys.ordered(), self.by_partition.__getitem__, self.unfilled,
                  self.sharing, self._give, self.desired)

    def _give(self, index: int, tp: TopicPartition) -> int:
        self._mine(index).setdefault(tp[0], set()).add(tp[1])
        held = self._held(index)
        held.add(tp)
        return len(held)

    def _revoke_unassignable(self) -> None:
        for index in range(self.count):
            held = self.old[index]
            assigned = 0
            for topic_id in iteration_order(list(held), uuid_hash, grown_capacity(len(held))):
                if topic_id in self.subscribed:
                    for partition in sorted(held[topic_id]):
                        assigned += 1
                        self._holders((topic_id, partition)).add(index)
                        self._held(index).add((topic_id, partition))
                        if assigned >= self.desired[index] and index not in self.new:
                            self.new[index] = _copy(held)
                else:
                    self._mine(index).pop(topic_id, None)
            if assigned < self.desired[index]:
                self.unfilled.add(index)
            elif assigned > self.desired[index]:
                self.overfilled.add(index)

    def _revoke_overfilled(self) -> None:
        for index in _live(self.overfilled):
            held = self.by_member[index]
            if len(held) <= self.desired[index]:
                continue
            for tp in _live(held):
                self._mine(index).get(tp[0], set()).discard(tp[1])
                self.by_partition[tp].discard(index)
                held.discard(tp)
                if len(held) == self.desired[index]:
                    break

    def _revoke_overshared(self) -> None:
        for tp in self.partition_keys.ordered():
            holders = self.by_partition[tp]
            if len(holders) <= self.sharing:
                continue
            for index in _live(holders):
                partitions = self._mine(index).get(tp[0])
                if partitions is not None and tp[1] in partitions:
                    partitions.discard(tp[1])
                    holders.discard(index)
                    self.by_member[index].discard(tp)
                    self.unfilled.add(index)
                if len(holders) <= self.sharing:
                    break


class _TopicBuilder:
    """Kafka's SimpleHeterogeneousAssignmentBuilder's pass over one topic (partitions by
    number)."""

    def __init__(self, topic_id: uuid.UUID, count: int, targets: list[int],
                 subscribers: list[int], old: list[Held], new: dict[int, Held]) -> None:
        self.topic_id = topic_id
        self.count = count
        self.targets = targets
        self.subscribers = subscribers
        self.old = old
        self.new = new
        self.sharing, counts = _desired_counts(len(subscribers), len(targets))
        self.desired = [0] * count
        for n, index in enumerate(subscribers):
            self.desired[index] = counts[n]
        self.by_partition: dict[int, _JavaTable[int]] = {}
        self.partition_keys = _JavaTable(_int_hash, _sized_capacity(len(targets)))
        self.by_member: dict[int, _JavaTable[int]] = {}
        self.member_keys = _JavaTable(_int_hash, _sized_capacity(len(subscribers)))

    def _mine(self, index: int) -> Held:
        mine = self.new.get(index)
        if mine is None:
            mine = self.new[index] = _copy(self.old[index])
        return mine

    def _holders(self, partition: int) -> _JavaTable[int]:
        if partition not in self.by_partition:
            self.by_partition[partition] = _JavaTable(_int_hash)
            self.partition_keys.add_if_absent(partition)
        return self.by_partition[partition]

    def _held(self, index: int) -> _JavaTable[int]:
        if index not in self.by_member:
            self.by_member[index] = _JavaTable(_int_hash)
            self.member_keys.add_if_absent(index)
        return self.by_member[index]

    def _give(self, index: int, partition: int) -> int:
        self._mine(index).setdefault(self.topic_id, set()).add(partition)
        held = self._held(index)
        held.add(partition)
        return len(held)

    def build(self) -> None:
        for index in range(self.count):  # what members hold of the topic counts first
            old = self.old[index].get(self.topic_id)
            for partition in sorted(old or ()):
                self._holders(partition).add(index)
                self._held(index).add(partition)
        for index in self.member_keys.ordered():  # members holding too many
            held = self.by_member[index]
            for partition in _live(held):
                if len(held) <= self.desired[index]:
                    break
                self.by_partition[partition].discard(index)
                held.discard(partition)
                self._mine(index)[self.topic_id].discard(partition)
        for partition in self.partition_keys.ordered():  # partitions shared by too many
            holders = self.by_partition[partition]
            for index in _live(holders):
                if len(holders) <= self.sharing:
                    break
                mine = self._mine(index).get(self.topic_id)
                if mine is not None and partition in mine:
                    mine.discard(partition)
                    holders.discard(index)
                    self.by_member[index].discard(partition)
        for partition in self.targets:
            self._holders(partition)
        unfilled = _JavaTable(_int_hash, _sized_capacity(self.count))
        for index in self.subscribers:
            had = self.by_member.get(index)
            if (0 if had is None else len(had)) < self.desired[index]:
                unfilled.add(index)
        _hand_out(self.partition_keys.ordered(), self.by_partition.__getitem__, unfilled,
                  self.sharing, self._give, self.desired)
