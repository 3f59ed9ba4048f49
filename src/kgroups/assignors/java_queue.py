"""java.util.PriorityQueue's order among equals, which Kafka's streams task assignor inherits.

Kafka's sticky task assignor picks the least-loaded process and, inside it, the least-loaded
member by polling priority queues whose comparators look at the load alone, so which of two
equally loaded candidates comes out first is decided by the queue's binary heap: where each
element landed as it was added (sifted up from the end, stopping at the first parent that is
not greater) and how a poll refills the root (the last element sifted down towards the smaller
child, the left one on a tie, stopping as soon as it is not greater than that child). This
heap does exactly those moves, so it polls equals in the same order Java's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class JavaPriorityQueue(Generic[T]):
    """A min-heap ordered by `key` that breaks ties exactly as java.util.PriorityQueue with a
    comparator comparing those keys."""

    __slots__ = ("_heap", "_key")

    def __init__(self, key: Callable[[T], float]) -> None:
        self._heap: list[T] = []
        self._key = key

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, item: T) -> None:
        heap, key = self._heap, self._key
        heap.append(item)
        k = len(heap) - 1
        item_key = key(item)
        while k > 0:
            parent = (k - 1) >> 1
            above = heap[parent]
            if item_key >= key(above):
                break
            heap[k] = above
            k = parent
        heap[k] = item

    def poll(self) -> T | None:
        """The least element (the first added among equals only by the heap's moves), or None
        when empty."""
        heap = self._heap
        if not heap:
            return None
        first = heap[0]
        last = heap.pop()
        size = len(heap)
        if size:
            key = self._key
            last_key = key(last)
            k = 0
            half = size >> 1
            while k < half:
                child = 2 * k + 1
                smaller = heap[child]
                smaller_key = key(smaller)
                right = child + 1
                if right < size:
                    right_key = key(heap[right])
                    if smaller_key > right_key:
                        child, smaller, smaller_key = right, heap[right], right_key
                if last_key <= smaller_key:
                    break
                heap[k] = smaller
                k = child
            heap[k] = last
        return first
