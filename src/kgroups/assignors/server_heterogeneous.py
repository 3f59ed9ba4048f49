"""KIP-848 `uniform` for members with unequal subscriptions, step for step as Kafka 4.3.

Kafka's heterogeneous builder keeps every member's current partitions of topics it still
subscribes to (no quota: balance comes later), deals the free partitions topic by topic to
the least loaded subscriber, and then moves partitions from the most to the least loaded
subscribers of each topic until no topic can improve. Its choices follow fixed orders:

- members by index, the order of the coordinator's member map (`server.assign`);
- topics by partitions per subscriber (most first), then fewer subscribers, then topic id
  (Kafka's Uuid order: the signed high half, then the signed low half);
- a topic's subscribers by load, then index; the least loaded are used round-robin within the
  band of equal load, the most loaded from the highest index of the top band down;
- a topic's partitions by owner index (free first) then partition, a member giving up the
  last of its run.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence

from kgroups.assignors.server_member import ServerMember, Target

_MAX_ROUNDS = 16  # Kafka's bound on passes over the topics while balancing


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def _uuid_key(topic: uuid.UUID) -> tuple[int, int]:
    return _signed64(topic.int >> 64), _signed64(topic.int & 0xFFFFFFFFFFFFFFFF)


class _Balancer:
    """Hands out the least and most loaded subscribers of one topic (Kafka's bands)."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.order: list[int] = []

    def initialize(self, members: Sequence[int]) -> int:
        sizes = self.sizes
        self.order = sorted(members, key=lambda m: (sizes[m], m))
        order = self.order
        self.least_end = 0
        self.least_count = sizes[order[0]] - 1
        self.next_least = 0
        self.most_start = len(order)
        self.most_end = len(order)
        self.most_count = sizes[order[-1]] + 1
        self.next_most = len(order) - 1
        return sizes[order[-1]] - sizes[order[0]]

    def least_loaded(self) -> int:
        order, sizes = self.order, self.sizes
        if self.next_least >= self.least_end:
            self.least_count += 1
            while self.least_end < len(order) and sizes[order[self.least_end]] == self.least_count:
                self.least_end += 1
            self.next_least = 0
        member = order[self.next_least]
        self.next_least += 1
        return member

    def most_loaded(self) -> int:
        order, sizes = self.order, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                self.most_count = sizes[order[self.most_start - 1]]
            else:
                self.most_count -= 1
            while self.most_start > 0 and sizes[order[self.most_start - 1]] == self.most_count:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = order[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        order = self.order
        at = self.next_most + 1
        order[at], order[self.most_end - 1] = order[self.most_end - 1], order[at]
        self.most_end -= 1

    def balanced(self) -> bool:
        return self.most_count - self.least_count <= 1


def assign_heterogeneous(members: list[ServerMember], counts: Mapping[uuid.UUID, int]) -> Target:
    subscribers: dict[uuid.UUID, list[int]] = {}
    for index, member in enumerate(members):
        for topic in dict.fromkeys(member.topics):
            subscribers.setdefault(topic, []).append(index)
    if not subscribers:
        return {m.member_id: {} for m in members}
    sizes = [0] * len(members)
    owners = {t: [-1] * counts[t] for t in subscribers}
    for index, member in enumerate(members):
        subscribed = set(member.topics)
        for topic, ps in member.assigned.items():
            if topic in subscribed:
                sizes[index] += len(ps)
                for p in ps:
                    owners[topic][p] = index

    def topic_order(topics: list[uuid.UUID]) -> list[uuid.UUID]:
        return sorted(topics, key=lambda t: (-counts[t] / len(subscribers[t]),
                                             len(subscribers[t]), _uuid_key(t)))

    def move(topic: uuid.UUID, p: int, to: int) -> None:
        held = owners[topic]
        if held[p] != -1:
            sizes[held[p]] -= 1
        held[p] = to
        sizes[to] += 1

    balancer = _Balancer(sizes)
    free = {t: [p for p, o in enumerate(owners[t]) if o == -1] for t in subscribers}
    for topic in topic_order([t for t in subscribers if free[t]]):
        balancer.initialize(subscribers[topic])
        for p in free[topic]:
            move(topic, p, balancer.least_loaded())

    shared = topic_order([t for t in subscribers if len(subscribers[t]) >= 2])
    last = -1
    for _ in range(_MAX_ROUNDS):
        for position, topic in enumerate(shared):
            if position == last:
                return _result(members, owners)
            if _balance_topic(topic, counts[topic], owners[topic], subscribers[topic],
                              balancer, move) > 0 or last == -1:
                last = position
    return _result(members, owners)


def _balance_topic(topic: uuid.UUID, count: int, held: list[int], members: list[int],
                   balancer: _Balancer, move: Callable[[uuid.UUID, int, int], None]) -> int:
    moved = 0
    if balancer.initialize(members) <= 1:
        return moved
    partitions = sorted(range(count), key=lambda p: (held[p], p))
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    for i, p in enumerate(partitions):
        start.setdefault(held[p], i)
        end[held[p]] = i + 1
    while not balancer.balanced():
        while True:
            most = balancer.most_loaded()
            if most == -1:
                break
            if most not in end or end[most] - start[most] <= 0:
                balancer.exclude_most_loaded()
                continue
            break
        if most == -1:
            break
        p = partitions[end[most] - 1]
        end[most] -= 1
        least = balancer.least_loaded()
        if balancer.balanced():
            break
        move(topic, p, least)
        moved += 1
    return moved


def _result(members: list[ServerMember], owners: dict[uuid.UUID, list[int]]) -> Target:
    got: list[dict[uuid.UUID, set[int]]] = [{} for _ in members]
    for topic, held in owners.items():
        for p, owner in enumerate(held):
            if owner != -1:
                got[owner].setdefault(topic, set()).add(p)
    return {m.member_id: {t: frozenset(ps) for t, ps in g.items()}
            for m, g in zip(members, got, strict=True)}
