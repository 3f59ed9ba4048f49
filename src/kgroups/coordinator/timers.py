"""Deadlines keyed by what they guard, so re-arming a key simply replaces its deadline.

Kafka keeps delayed joins, heartbeats and pending-sync checks in purgatories; here they are plain
deadlines the shell drives by passing the time in. Cancelled or replaced entries stay in the heap
and are skipped when they surface (cheaper than removing them from the middle).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable


class TimerQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int]] = {}
        self._sequence = 0

    def schedule(self, key: Hashable, deadline: int) -> None:
        self._sequence += 1
        self._live[key] = (deadline, self._sequence)
        heapq.heappush(self._heap, (deadline, self._sequence, key))

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: int) -> Hashable | None:
        """The earliest key whose deadline is <= now (removed from the queue), else None."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._live[key]
        return key

    def cancel_where(self, predicate: Callable[[Hashable], bool]) -> None:
        """Cancel every key for which `predicate(key)` is true (used when a partition unloads)."""
        for key in [key for key in self._live if predicate(key)]:
            del self._live[key]

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, sequence, key = heap[0]
            if self._live.get(key) == (deadline, sequence):
                return
            heapq.heappop(heap)
