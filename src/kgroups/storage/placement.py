"""Which live broker should lead each partition: an even spread that moves as little as it can.

Every broker computes this from the same rows (the live brokers and each partition's current
leader), so they agree without talking to each other. Each live broker gets a quota of
partitions, the count divided evenly with the remainder going to the brokers already leading
the most (so the quotas themselves cause no move); a partition stays with its current leader
while that leader is live and within its quota, and the others (a dead leader's, an
over-quota broker's, unled ones) go to the brokers furthest below their quota. A broker that
joins therefore takes about 1/n of the partitions, all from brokers above their new quota,
and nothing else moves: Kafka's `auto.leader.rebalance.enable`, with the preferred leader
worked out from the live brokers instead of a replica list.

Pure: no I/O, no clock, the same answer for the same arguments.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

Partition = tuple[str, int]

NO_LEADER = -1


def preferred_leaders(brokers: Collection[int], partitions: Iterable[Partition],
                      current: Mapping[Partition, int]) -> dict[Partition, int]:
    """Each partition's preferred leader among `brokers` (live node ids), given `current`
    leaders (a partition missing from it, or led by a broker not in `brokers`, is unled).
    Empty when no broker is live."""
    ordered = sorted(set(partitions))
    live = sorted(set(brokers))
    if not live:
        return {}
    held = {broker: 0 for broker in live}
    for partition in ordered:
        leader = current.get(partition, NO_LEADER)
        if leader in held:
            held[leader] += 1
    base, extra = divmod(len(ordered), len(live))
    by_holding = sorted(live, key=lambda broker: (-held[broker], broker))
    quota = {broker: base + (1 if rank < extra else 0) for rank, broker in enumerate(by_holding)}
    placed: dict[Partition, int] = {}
    count = dict.fromkeys(live, 0)
    homeless: list[Partition] = []
    for partition in ordered:
        leader = current.get(partition, NO_LEADER)
        if leader in count and count[leader] < quota[leader]:
            placed[partition] = leader
            count[leader] += 1
        else:
            homeless.append(partition)
    for partition in homeless:
        broker = max(live, key=lambda b: (quota[b] - count[b], -b))
        placed[partition] = broker
        count[broker] += 1
    return placed
