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
    comparator comparing those keys. An element's key is read once, when it is added: it must
    not change while the element is queued (Kafka's assignor changes a load only after
    polling its holder)."""

    __slots__ = ("_items", "_key", "_keys")

    def __init__(self, key: Callable[[T], float]) -> None:
        self._items: list[T] = []
        self._keys: list[float] = []
        self._key = key

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T) -> None:
        items, keys = self._items, self._keys
        item_key = self._key(item)
        items.append(item)
        keys.append(item_key)
        k = len(items) - 1
        while k > 0:
            parent = (k - 1) >> 1
            parent_key = keys[parent]
            if item_key >= parent_key:
                break
            items[k] = items[parent]
            keys[k] = parent_key
            k = parent
        items[k] = item
        keys[k] = item_key

    def poll(self) -> T | None:
        """The least element (among equals, the one the heap's moves put first), or None when
        empty."""
        items, keys = self._items, self._keys
        if not items:
            return None
        first = items[0]
        last = items.pop()
        last_key = keys.pop()
        size = len(items)
        if size:
            k = 0
            half = size >> 1
            while k < half:
                child = 2 * k + 1
                child_key = keys[child]
                right = child + 1
                if right < size and child_key > keys[right]:
                    child = right
                    child_key = keys[right]
                if last_key <= child_key:
                    break
                items[k] = items[child]
                keys[k] = child_key
                k = child
            items[k] = last
            keys[k] = last_key
        return first
