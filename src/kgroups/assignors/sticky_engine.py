"""The sticky placement engine shared by `sticky`, `cooperative-sticky` and `uniform`.

Goals, in Kafka's order: balance first (member counts within one where subscriptions allow;
otherwise the smallest spread between the most and least loaded member any assignment of the
group has), then keep as much previous ownership as possible.

How it stays fast at a million partitions: ownership is one int32 array over the flat partition
space, and members are only ever handled as arrays of counts. Handing out unassigned partitions
"each to the least-loaded eligible member, ties to the earlier member" is computed in closed
form per topic (a water-filling: the k-th partition goes to the k-th free slot in (load level,
member order) order), so there is no per-partition Python loop anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kgroups.assignors.claims import Claims
from kgroups.assignors.model import MemberSubscription
from kgroups.assignors.space import UNOWNED, PartitionSpace
from kgroups.assignors.sticky_racks import RackLayout


@dataclass(frozen=True, slots=True)
class Placement:
    """The engine's answer: the owner array, and the previous owners it started from."""

    owner: np.ndarray
    previous: np.ndarray


class _Subscriptions:
    """Members grouped by identical subscription, as a (group x topic) matrix, so checks and
    per-topic member lists cost per distinct subscription rather than per member."""

    def __init__(self, space: PartitionSpace, members: Sequence[MemberSubscription]) -> None:
        group_of: dict[frozenset[str], int] = {}
        self.group = np.empty(len(members), dtype=np.int64)
        for i, member in enumerate(members):
            self.group[i] = group_of.setdefault(member.topics, len(group_of))
        self.matrix = np.zeros((len(group_of), len(space.topics)), dtype=bool)
        for topics, g in group_of.items():
            positions = [space.index[t] for t in topics if t in space.index]
            self.matrix[g, positions] = True
        # As in Kafka, subscriptions are equal when the topic names are, known to the cluster
        # or not (a member waiting for a topic to be created makes the group unequal).
        self.identical = len(group_of) <= 1

    def subscribes(self, members: np.ndarray, topic_positions: np.ndarray) -> np.ndarray:
        return self.matrix[self.group[members], topic_positions]

    def eligible(self) -> list[np.ndarray]:
        """Per topic position, the subscribing member indices in member order."""
        member_sets = self.matrix[self.group]  # members x topics
        return [np.flatnonzero(member_sets[:, t]) for t in range(member_sets.shape[1])]


def resolve_previous_owners(
    space: PartitionSpace, subscriptions: _Subscriptions, claims: Claims
) -> np.ndarray:
    """Previous owner per partition. Claims on partitions that no longer exist or that the
    member stopped subscribing to are dropped; when members claim the same partition the
    highest generation wins and equal generations both lose it (their claims are stale or
    inconsistent, so nobody can be trusted to hold it)."""
    owner = np.full(space.size, UNOWNED, dtype=np.int32)
    member, flat = _valid_claims(space, subscriptions, claims)
    if flat.size == 0:
        return owner
    claim_counts = np.bincount(flat, minlength=space.size)
    single = claim_counts[flat] == 1
    owner[flat[single]] = member[single]
    if not single.all():
        contested = ~single
        generation = claims.generation[member[contested]]
        _settle_contested(owner, flat[contested], member[contested], generation)
    return owner


def _valid_claims(
    space: PartitionSpace, subscriptions: _Subscriptions, claims: Claims
) -> tuple[np.ndarray, np.ndarray]:
    """(member, flat partition) of the claims on partitions that exist, by their subscribers."""
    known = claims.topic >= 0
    member, topic, partition = claims.member[known], claims.topic[known], claims.partition[known]
    valid = (partition >= 0) & (partition < space.counts[topic])
    valid &= subscriptions.subscribes(member, topic)
    return member[valid], space.offsets[topic[valid]] + partition[valid]


def _by_partition_then_generation(
    flat: np.ndarray, member: np.ndarray, generation: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Distinct claims sorted by partition, highest generation first; plus which claim is each
    partition's first, and which first claims share their generation with the next claim."""
    # A member listing a partition twice is one claim, not a conflict with itself.
    flat, member, generation = np.unique(np.stack([flat, member, generation]), axis=1)
    order = np.lexsort((-generation, flat))
    flat, member, generation = flat[order], member[order], generation[order]
    first = np.ones(flat.size, dtype=bool)
    first[1:] = flat[1:] != flat[:-1]
    runner_up_ties = np.zeros(flat.size, dtype=bool)
    runner_up_ties[:-1] = ~first[1:] & (generation[1:] == generation[:-1])
    return flat, member, generation, first, first & runner_up_ties


def _settle_contested(
    owner: np.ndarray, flat: np.ndarray, member: np.ndarray, generation: np.ndarray
) -> None:
    flat, member, _, first, tied = _by_partition_then_generation(flat, member, generation)
    winners = first & ~tied
    owner[flat[winners]] = member[winners]


def tied_claims(
    space: PartitionSpace, members: Sequence[MemberSubscription], claims: Claims
) -> tuple[np.ndarray, np.ndarray]:
    """(flat partition, member) of every top-generation claim on a partition that two or more
    members claim in that same generation: the partitions nobody is trusted to hold."""
    member, flat = _valid_claims(space, _Subscriptions(space, members), claims)
    empty = np.empty(0, dtype=np.int64)
    if flat.size == 0 or np.bincount(flat).max() < 2:
        return empty, empty
    flat, member, generation, first, tied = _by_partition_then_generation(
        flat, member, claims.generation[member]
    )
    top = np.maximum.accumulate(np.where(first, np.arange(flat.size), 0))
    in_tie = tied[top] & (generation == generation[top])
    return flat[in_tie], member[in_tie]


def cap_to_quota(space: PartitionSpace, owner: np.ndarray, member_count: int) -> None:
    """Equal subscriptions: everyone ends with floor(P/C) or ceil(P/C) partitions, so each
    member keeps at most its quota of what it held, and only P % C members (the earliest
    holding enough) may keep the larger quota. Like Kafka, a member keeps its partitions in
    (partition number, topic) order: partition 0 of every topic before any partition 1."""
    min_quota, members_at_max = divmod(owner.size, member_count)
    held = np.flatnonzero(owner >= 0)
    holders = owner[held]
    counts = np.bincount(holders, minlength=member_count)
    allowed = np.minimum(counts, min_quota)
    allowed[np.flatnonzero(counts > min_quota)[:members_at_max]] += 1
    number = held - space.offsets[space.topic_of(held)]
    by_member = np.lexsort((held, number, holders))
    sorted_holders = holders[by_member]
    starts = np.searchsorted(sorted_holders, np.arange(member_count))
    rank = np.arange(held.size) - starts[sorted_holders]
    owner[held[by_member][rank >= allowed[sorted_holders]]] = UNOWNED


def deal_to_quota(owner: np.ndarray, member_count: int, racks: RackLayout | None = None) -> None:
    """Equal subscriptions, after `cap_to_quota`: the free partitions, in order, are dealt as
    Kafka deals them. Round after round, every member still below floor(P/C) takes one, in
    member order; then each remaining partition goes to the next member due the larger quota:
    first those that kept exactly floor(P/C) themselves, in member order, then the others in
    the order they reached it. With racks, local members are served first (`RackLayout`)."""
    free = np.flatnonzero(owner < 0)
    if free.size == 0:
        return
    min_quota, members_at_max = divmod(owner.size, member_count)
    counts = np.bincount(owner[owner >= 0], minlength=member_count)
    queue: list[int] = []
    if int((counts > min_quota).sum()) < members_at_max:
        queue = np.flatnonzero(counts == min_quota).tolist()
    below = np.flatnonzero(counts < min_quota).tolist()
    if racks is not None:
        free = racks.order_free(free)
        if racks.aware:
            free = racks.deal_local(owner, counts, free, below, queue, min_quota, members_at_max)
            if free.size == 0:
                return
    takers = np.asarray(below, dtype=np.int64)
    need = min_quota - counts[takers]
    place_in_list = np.repeat(np.arange(takers.size), need)
    rounds = np.arange(place_in_list.size) - np.repeat(np.cumsum(need) - need, need)
    dealt = takers[place_in_list[np.lexsort((place_in_list, rounds))]]
    finishers = takers[np.lexsort((np.arange(takers.size), need))]
    extra = free.size - dealt.size
    owner[free] = np.concatenate((dealt, queue, finishers))[: free.size] if extra else dealt


def water_fill(counts: np.ndarray, slots_wanted: int) -> np.ndarray:
    """Positions (into `counts`) receiving `slots_wanted` items handed out one at a time to the
    least-loaded position, ties to the lower position; the result lists them in hand-out order.

    Closed form: the final level L is the highest with sum(max(0, L - c)) <= items; positions
    at or below it get topped up to L, the first few (in order) one more, and the hand-out
    order is the free slots sorted by (level, position).
    """
    size = counts.size
    ascending = np.sort(counts)
    prefix = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(ascending, out=prefix[1:])
    cost_to_reach = np.arange(size) * ascending - prefix[:-1]
    reached = int(np.searchsorted(cost_to_reach, slots_wanted, side="right"))
    level = (slots_wanted + int(prefix[reached])) // reached
    takers = np.flatnonzero(counts <= level)
    slots = level - counts[takers]
    slots[: slots_wanted - int(slots.sum())] += 1
    receivers = np.repeat(takers, slots)
    firsts = np.repeat(np.cumsum(slots) - slots, slots)
    levels = np.repeat(counts[takers], slots) + np.arange(slots_wanted) - firsts
    return receivers[np.argsort(levels * size + receivers, kind="stable")]


def _fill_topic(
    owner: np.ndarray, counts: np.ndarray, eligible: np.ndarray, start: int, end: int
) -> None:
    free = np.flatnonzero(owner[start:end] < 0) + start
    if free.size:
        _hand_out(owner, counts, eligible, free)


def _hand_out(owner: np.ndarray, counts: np.ndarray, takers: np.ndarray,
              partitions: np.ndarray) -> None:
    """`partitions`, in order, each to the least-loaded of `takers` (ties to the earlier)."""
    picks = water_fill(counts[takers], partitions.size)
    owner[partitions] = takers[picks]
    counts[takers] += np.bincount(picks, minlength=takers.size)


def _fill_topic_locally(
    owner: np.ndarray, counts: np.ndarray, eligible: np.ndarray, start: int, end: int,
    racks: RackLayout,
) -> None:
    """Kafka's first pass with racks: each free partition of the topic to its least-loaded
    subscriber that matches it (`RackLayout.matches`), if it has one (partitions with the same
    matching subscribers handed out together, groups in partition order)."""
    free = np.flatnonzero(owner[start:end] < 0) + start
    if free.size == 0:
        return
    # Which subscribers match a partition follows from its replica racks: the matching rows
    # are computed per distinct set of replica racks (few), not per partition.
    first, by_racks = racks.replica_sets(free)
    masks = racks.match_matrix(free[first], eligible)
    rows: dict[bytes, int] = {}  # few sets: a dict, not a unique over (sets x subscribers)
    by_mask = np.array([rows.setdefault(mask.tobytes(), len(rows)) for mask in masks])
    group = by_mask[by_racks]
    starts = np.full(len(rows), free.size)
    np.minimum.at(starts, by_mask, first)
    for row in np.argsort(starts).tolist():
        takers = eligible[masks[int(np.argmax(by_mask == row))]]
        if takers.size:
            _hand_out(owner, counts, takers, free[group == row])


def _movable_first(
    flat: np.ndarray, giver: int, taker: int, previous: np.ndarray, racks: RackLayout | None
) -> np.ndarray:
    """`flat` (partitions `giver` holds) in the order to move them to `taker`: with racks,
    those matching the taker first and those matching the giver last; then those the giver
    did not hold before (stickiness); then the highest first. `racks` is given only when
    placement honours them (`RackLayout.aware`)."""
    position = np.arange(flat.size)
    fresh = previous[flat] != giver
    if racks is None:
        return flat[np.lexsort((-position, ~fresh))]
    return flat[np.lexsort((-position, ~fresh, racks.matches(flat, giver),
                            ~racks.matches(flat, taker)))]


def _balance_topic(
    owner: np.ndarray, counts: np.ndarray, eligible: np.ndarray, start: int, end: int,
    previous: np.ndarray, racks: RackLayout | None,
) -> bool:
    """Moves this topic's partitions from its most-loaded holder to the least-loaded
    subscriber while they are two or more apart, in `_movable_first` order; True if anything
    moved."""
    moved = False
    segment = owner[start:end]
    while True:
        # Every partition is assigned by now (the fill step ran first), so holders exist.
        holders = np.unique(segment)
        holder_counts = counts[holders]
        heaviest = int(np.argmax(holder_counts))
        giver = holders[heaviest]
        taker = eligible[np.argmin(counts[eligible])]
        gap = int(counts[giver] - counts[taker])
        if gap < 2:
            return moved
        held = np.flatnonzero(segment == giver)
        # Never push the giver below the next-heaviest holder: taking a big batch from one
        # member would unbalance it and cost a second round of moves to refill it.
        others = np.delete(holder_counts, heaviest)
        next_level = int(others.max()) if others.size else int(counts[taker])
        amount = min(held.size, gap // 2, max(1, int(counts[giver]) - next_level))
        moving = _movable_first(held + start, int(giver), int(taker), previous, racks)
        owner[moving[:amount]] = taker
        counts[giver] -= amount
        counts[taker] += amount
        moved = True


def place(
    space: PartitionSpace, members: Sequence[MemberSubscription], claims: Claims,
    racks: RackLayout | None = None,
) -> Placement:
    """Sticky placement for `members` (already in member order) given their `claims`, rack-aware
    with `racks` when it is `aware`."""
    subscriptions = _Subscriptions(space, members)
    previous = resolve_previous_owners(space, subscriptions, claims)
    owner = previous.copy()
    count = len(members)
    if space.size == 0 or count == 0:
        return Placement(owner, previous)
    if subscriptions.identical:
        if racks is not None:
            racks.drop_remote(owner)
        cap_to_quota(space, owner, count)
        deal_to_quota(owner, count, racks)
        return Placement(owner, previous)

    eligible = subscriptions.eligible()
    rack_aware = racks if racks is not None and racks.aware else None
    if rack_aware is not None:
        rack_aware.drop_remote(owner)
    counts = np.bincount(owner[owner >= 0], minlength=count).astype(np.int64)
    # Topics few members can take go first, so flexible members are still free for them.
    topic_order = sorted(range(len(space.topics)), key=lambda t: (eligible[t].size, t))
    bounds = [(int(space.offsets[t]), int(space.offsets[t + 1])) for t in range(len(space.topics))]
    if rack_aware is not None:
        for t in topic_order:
            _fill_topic_locally(owner, counts, eligible[t], *bounds[t], rack_aware)
    for t in topic_order:
        _fill_topic(owner, counts, eligible[t], *bounds[t])
    moved = True
    while moved:
        moved = False
        for t in topic_order:
            if eligible[t].size > 1:
                moved |= _balance_topic(owner, counts, eligible[t], *bounds[t], previous,
                                        rack_aware)
    _ChainBalancer(space, owner, previous, counts, subscriptions, rack_aware).run()
    return Placement(owner, previous)


class _ChainBalancer:
    """The last balancing step with unequal subscriptions: partitions moved along chains.

    After `_balance_topic` no single move helps, yet the spread can still be cut: a heavy member
    may give a partition of topic X to a member that also reads Y, which gives one of Y to a
    light member that reads only Y. Each member in the middle keeps its count. Such a chain
    exists from a member to one with two or more fewer partitions exactly when the assignment
    is not the most balanced there is (load balancing over a bipartite graph: an assignment is
    optimal for every convex measure, the max-min spread included, when no such path is left).
    Chains are looked for from the heaviest members down and from the lightest up, shortest
    first, so the largest count only falls and the smallest only rises; each chain moves one
    partition per hop, chosen as `_movable_first` orders them (racks, then stickiness).
    Members are the graph's nodes and topics its edges: a search is a few (members x topics)
    array steps, whatever the number of partitions."""

    def __init__(self, space: PartitionSpace, owner: np.ndarray, previous: np.ndarray,
                 counts: np.ndarray, subscriptions: _Subscriptions,
                 racks: RackLayout | None) -> None:
        self._space, self._owner, self._previous, self._counts = space, owner, previous, counts
        self._racks = racks
        self._subscribed = subscriptions.matrix[subscriptions.group]  # members x topics
        topic_count = len(space.topics)
        cells = owner.astype(np.int64) * topic_count + np.repeat(np.arange(topic_count),
                                                                 space.counts)
        self._held = np.bincount(cells, minlength=counts.size * topic_count).reshape(
            counts.size, topic_count)

    def run(self) -> None:
        while self._shift(self._path_down()) or self._shift(self._path_up()):
            pass

    def _path_down(self) -> list[tuple[int, int, int]]:
        """Hops (giver, topic, taker) from a heaviest member to one two or more lighter."""
        top = int(self._counts.max())
        steps = self._search(self._counts == top, self._held > 0, self._subscribed,
                             self._counts <= top - 2)
        return [(via, topic, member) for via, topic, member in reversed(steps)]

    def _path_up(self) -> list[tuple[int, int, int]]:
        """Hops (giver, topic, taker) from a member two or more heavier to a lightest one."""
        bottom = int(self._counts.min())
        steps = self._search(self._counts == bottom, self._subscribed, self._held > 0,
                             self._counts >= bottom + 2)
        return [(member, topic, via) for via, topic, member in steps]

    @staticmethod
    def _search(start: np.ndarray, leaving: np.ndarray, entering: np.ndarray,
                wanted: np.ndarray) -> list[tuple[int, int, int]]:
        """Breadth first from the `start` members: from a member along each topic it has in
        `leaving` (members x topics) to each member with that topic in `entering`. The steps
        (from, topic, to) back from the nearest `wanted` member reached (the lowest index
        among the nearest) to a `start` one; none if no `wanted` member is reached."""
        visited = start.copy()
        topic_seen = np.zeros(leaving.shape[1], dtype=bool)
        frontier = np.flatnonzero(start)
        came_from: dict[int, tuple[int, int]] = {}
        while frontier.size:
            out = leaving[frontier]
            topics = np.flatnonzero(out.any(axis=0) & ~topic_seen)
            if topics.size == 0:
                break
            topic_seen[topics] = True
            via = frontier[out[:, topics].argmax(axis=0)]
            into = entering[:, topics]
            fresh = np.flatnonzero(into.any(axis=1) & ~visited)
            picks = into[fresh].argmax(axis=1)
            for member, pick in zip(fresh.tolist(), picks.tolist(), strict=True):
                came_from[member] = (int(via[pick]), int(topics[pick]))
            visited[fresh] = True
            found = fresh[wanted[fresh]]
            if found.size:
                steps = []
                member = int(found[0])
                while member in came_from:
                    source, topic = came_from[member]
                    steps.append((source, topic, member))
                    member = source
                return steps
            frontier = fresh
        return []

    def _shift(self, hops: list[tuple[int, int, int]]) -> bool:
        """One partition per hop; False if there is no chain."""
        offsets = self._space.offsets
        for giver, topic, taker in hops:
            start = int(offsets[topic])
            flat = np.flatnonzero(self._owner[start:int(offsets[topic + 1])] == giver) + start
            self._owner[_movable_first(flat, giver, taker, self._previous, self._racks)[0]] = taker
            self._held[giver, topic] -= 1
            self._held[taker, topic] += 1
        if hops:
            self._counts[hops[0][0]] -= 1
            self._counts[hops[-1][2]] += 1
        return bool(hops)
