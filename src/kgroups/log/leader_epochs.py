"""A partition's leader epochs and where each began, and the lookup OffsetForLeaderEpoch
answers from, as Kafka's leader-epoch cache answers it.

A consumer whose partition changed leader asks the new leader where the epoch of its last
fetched record ended, to find out whether the records past its position were truncated away;
a follower asks the same before truncating its own log. The answer for a requested epoch is
the largest known epoch at or below it and the offset where the next epoch began (for the
current epoch: the log end offset).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


def epoch_starts(firsts: Iterable[tuple[int, int]], current_epoch: int,
                 log_end_offset: int) -> list[tuple[int, int]]:
    """(epoch, start offset) pairs in offset order, from each stamped epoch's first offset
    (`firsts`, in offset order), ending with the epoch the partition is led at now (which
    starts at the log end if nothing was written in it yet). An epoch lower than one before it
    is dropped, and batches with no epoch (-1) count for none: Kafka's cache only grows."""
    starts: list[tuple[int, int]] = []
    for epoch, offset in firsts:
        if epoch > (starts[-1][0] if starts else UNDEFINED_EPOCH):
            starts.append((epoch, offset))
    if not starts or starts[-1][0] < current_epoch:
        starts.append((current_epoch, log_end_offset))
    return starts


def end_offset_for(starts: Sequence[tuple[int, int]], requested: int,
                   log_end_offset: int) -> tuple[int, int]:
    """(epoch, end offset) for `requested`: the latest epoch ends at the log end; an older one
    where the first later epoch starts, named by the largest epoch at or below it (or by itself
    when the log no longer holds any); an undefined or unknown newer epoch answers
    (-1, -1)."""
    if requested == UNDEFINED_EPOCH or not starts:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if starts[-1][0] == requested:
        return requested, log_end_offset
    higher = next(((epoch, start) for epoch, start in starts if epoch > requested), None)
    if higher is None:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    floor = max((epoch for epoch, _ in starts if epoch <= requested), default=None)
    return (requested if floor is None else floor), higher[1]
