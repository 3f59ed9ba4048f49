"""How the share coordinator merges state batches, with the result Kafka 4.3.1 gives.

A write carries batches (offset ranges with a delivery state and count) that may overlap each
other and the batches already kept; the kept state must be one list of non-overlapping ranges.
Kafka's rule (PersisterStateBatchCombiner): drop what lies before the start offset (cutting a
batch it falls inside), then, walking the ranges in order of (first offset, last offset, count,
state), repeatedly take the first pair that overlaps (or touches with the same count and state)
and resolve it: same count and state join; otherwise the one with the higher delivery count (on
a tie, the higher state) wins the offsets they share, and the other keeps the rest. The output
must match Kafka's batch for batch, because ReadShareGroupState answers it and the share
partition rebuilds its in-flight records from it.
"""

from __future__ import annotations

from collections.abc import Iterable

from kgroups.records.share_state import StateBatch


def _order(batch: StateBatch) -> tuple[int, int, int, int]:
    return (batch.first_offset, batch.last_offset, batch.delivery_count, batch.delivery_state)


def _rank(batch: StateBatch) -> tuple[int, int]:
    """Which of two overlapping batches wins: the higher delivery count, then state."""
    return (batch.delivery_count, batch.delivery_state)


def _prune(batches: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    if start_offset == -1:
        return list(batches)
    kept = []
    for batch in batches:
        if batch.last_offset < start_offset:
            continue
        if batch.first_offset >= start_offset:
            kept.append(batch)
        else:
            kept.append(StateBatch(start_offset, batch.last_offset, batch.delivery_state,
                                   batch.delivery_count))
    return kept


def combine(so_far: Iterable[StateBatch], new: Iterable[StateBatch],
            start_offset: int) -> tuple[StateBatch, ...]:
    """`so_far` and `new` merged into non-overlapping batches past `start_offset` (-1: all)."""
    combined = _prune([*so_far, *new], start_offset)
    if len(combined) < 2:
        return tuple(combined)
    pending = set(combined)  # equal batches count once, as in Kafka's sorted set
    final: list[StateBatch] = []
    while True:
        pair = _first_mergeable(pending, final)
        if pair is None:
            break
        prev, candidate = pair
        pending.discard(prev)
        pending.discard(candidate)
        pending.update(_resolve(prev, candidate))
    final.extend(sorted(pending, key=_order))
    return tuple(final)


def _first_mergeable(pending: set[StateBatch], final: list[StateBatch]
                     ) -> tuple[StateBatch, StateBatch] | None:
    """The first overlapping (or touching, same count and state) pair in order; the batches
    before it can merge with nothing any more and move to `final`."""
    ordered = sorted(pending, key=_order)
    for index in range(1, len(ordered)):
        prev, candidate = ordered[index - 1], ordered[index]
        if (candidate.first_offset <= prev.last_offset
                or (prev.last_offset + 1 == candidate.first_offset
                    and _rank(prev) == _rank(candidate))):
            for settled in ordered[:index - 1]:
                pending.discard(settled)
                final.append(settled)
            return prev, candidate
    for settled in ordered:
        pending.discard(settled)
        final.append(settled)
    return None


def _piece(first: int, last: int, like: StateBatch) -> StateBatch:
    return StateBatch(first, last, like.delivery_state, like.delivery_count)


def _resolve(prev: StateBatch, candidate: StateBatch) -> list[StateBatch]:
    """What replaces an overlapping pair (`prev` sorts first)."""
    if _rank(prev) == _rank(candidate):
        return [_piece(prev.first_offset, max(prev.last_offset, candidate.last_offset), prev)]
    candidate_loses = _rank(candidate) < _rank(prev)
    if candidate.first_offset == prev.first_offset:
        if candidate.last_offset == prev.last_offset or not candidate_loses:
            return [candidate]
        return [prev, _piece(prev.last_offset + 1, candidate.last_offset, candidate)]
    head = _piece(prev.first_offset, candidate.first_offset - 1, prev)
    if candidate.last_offset < prev.last_offset:
        if candidate_loses:
            return [prev]
        return [head, candidate, _piece(candidate.last_offset + 1, prev.last_offset, prev)]
    if candidate.last_offset == prev.last_offset:
        return [prev] if candidate_loses else [head, candidate]
    if candidate_loses:
        return [prev, _piece(prev.last_offset + 1, candidate.last_offset, candidate)]
    return [head, candidate]
