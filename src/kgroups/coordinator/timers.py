"""Deadlines keyed by what they guard, so re-arming a key simply replaces its deadline.

Kafka keeps delayed joins, heartbeats and pending-sync checks in purgatories; here they are plain
deadlines the shell drives by passing the time in. Every heartbeat re-arms its member's session,
so pushing a heap entry per re-arm would grow the heap with heartbeat rate x session timeout.
Instead each key's current deadline lives in a dict and the heap holds at most one entry per key
that is no later than that deadline: moving a deadline later (the common case) touches only the
dict, and when the early entry surfaces it is re-queued at the key's real deadline. Entries left
behind by cancellations or by moving a deadline earlier are dropped when they surface, and the
heap is rebuilt from the dict if they ever outnumber the armed timers, so its size stays bounded
by the number of armed timers.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable

# (deadline, sequence of the schedule call): the sequence breaks ties in scheduling order.
_Slot = tuple[int, int]

# Stale entries tolerated beyond one per armed timer before the heap is rebuilt; keeps small
# queues from being rebuilt over and over.
_COMPACTION_SLACK = 64


class TimerQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._armed: dict[Hashable, _Slot] = {}
        # The one heap entry per key that is not stale (it may be earlier than the deadline).
        self._queued: dict[Hashable, _Slot] = {}
        self._sequence = 0
        # The top entry is known exact (`_settle_top` ran since the last change): every request
        # looks at the timers twice (`pop_due`, then the shell's `next_deadline`), and most
        # change none.
        self._settled = True

    def __len__(self) -> int:
        """How many timers are armed."""
        return len(self._armed)

    @property
    def queued_entries(self) -> int:
        """How many entries the heap holds (stale ones included): what bounds its memory."""
        return len(self._heap)

    def schedule(self, key: Hashable, deadline: int) -> None:
        self._sequence += 1
        slot = (deadline, self._sequence)
        self._armed[key] = slot
        self._settled = False
        queued = self._queued.get(key)
        if queued is not None and queued[0] <= deadline:
            return  # the queued entry surfaces first and is re-queued at `slot` then
        self._queued[key] = slot
        heapq.heappush(self._heap, (deadline, self._sequence, key))
        self._compact_if_sparse()

    def is_armed(self, key: Hashable) -> bool:
        return key in self._armed

    def cancel(self, key: Hashable) -> None:
        if self._armed.pop(key, None) is not None:
            self._settled = False
            self._compact_if_sparse()

    def cancel_where(self, predicate: Callable[[Hashable], bool]) -> None:
        """Cancel every key for which `predicate(key)` is true (used when a partition unloads)."""
        for key in [key for key in self._armed if predicate(key)]:
            del self._armed[key]
            self._settled = False
        self._compact_if_sparse()

    def next_deadline(self) -> int | None:
        self._settle_top()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: int) -> Hashable | None:
        """The earliest key whose deadline is <= now (removed from the queue), else None."""
        self._settle_top()
        if not self._heap or self._heap[0][0] > now:
            return None
        _, _, key = heapq.heappop(self._heap)
        self._settled = False
        del self._armed[key]
        del self._queued[key]
        return key

    def _settle_top(self) -> None:
        """Pop or re-queue heap entries until the top one is an armed key at its exact slot.

        Every armed key's queued slot is no later than its armed slot, so an exact top entry is
        the earliest armed slot of all."""
        if self._settled:
            return
        self._settled = True
        heap = self._heap
        while heap:
            deadline, sequence, key = heap[0]
            slot = (deadline, sequence)
            if self._queued.get(key) != slot:
                heapq.heappop(heap)  # superseded by an earlier entry for the same key
                continue
            armed = self._armed.get(key)
            if armed == slot:
                return
            if armed is None:
                heapq.heappop(heap)
                del self._queued[key]
            else:
                self._queued[key] = armed
                heapq.heapreplace(heap, (armed[0], armed[1], key))

    def _compact_if_sparse(self) -> None:
        if len(self._heap) <= 2 * len(self._armed) + _COMPACTION_SLACK:
            return
        self._queued = dict(self._armed)
        self._heap = [(slot[0], slot[1], key) for key, slot in self._armed.items()]
        heapq.heapify(self._heap)
