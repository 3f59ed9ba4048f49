"""Java's HashMap and HashSet iteration orders, which Kafka's server-side assignors inherit.

Kafka's group coordinator hands its assignors members, subscribed topics and owned partitions
in plain Java hash maps and sets, and the assignors walk them in iteration order: who gets the
extra partition, which partitions a member keeps and which it gives up all follow from it. To
give the same answer kgroups must walk them in the same order, and that order is a fact of
java.util.HashMap: a table of power-of-two capacity, a key in bucket
`(h ^ (h >>> 16)) & (capacity - 1)`, buckets in index order and, inside a bucket, keys in the
order they were put (a resize splits a bucket but keeps that relative order). The capacity is
the only history that matters: it starts at 16 (or the table size for an initial capacity) and
doubles whenever the size passes three quarters of it; removals never shrink it.
"""

from __future__ import annotations

import operator
import sys
import uuid
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TypeVar

K = TypeVar("K")

_MASK = 0xFFFFFFFF
DEFAULT_CAPACITY = 16


# 31 ** k modulo 2 ** 32: String.hashCode is sum(unit[i] * 31 ** (n - 1 - i)) in int arithmetic.
_POWERS = [pow(31, k, 1 << 32) for k in range(1024)]


@lru_cache(maxsize=1 << 17)
def string_hash(text: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as an unsigned 32-bit value. Kept
    per string: the coordinator orders the same member ids at every target computation. The
    sum runs in C (half the time of a loop over the units for a 45-character member id); the
    group coordinator's placement of group ids uses it too."""
    units = array("H", text.encode("utf-16-le"))
    if sys.byteorder == "big":
        units.byteswap()
    if len(units) <= len(_POWERS):
        return sum(map(operator.mul, reversed(units), _POWERS)) & _MASK
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK
    return h


def uuid_hash(value: uuid.UUID) -> int:
    """org.apache.kafka.common.Uuid.hashCode: the halves of (most ^ least) xor-ed together."""
    raw = value.int
    xor = (raw >> 64) ^ (raw & 0xFFFFFFFFFFFFFFFF)
    return ((xor >> 32) ^ xor) & _MASK


def table_size_for(capacity: int) -> int:
    """The power of two HashMap allocates for an initial capacity."""
    size = 1
    while size < capacity:
        size <<= 1
    return size


def grown_capacity(size: int, initial: int = DEFAULT_CAPACITY) -> int:
    """The table capacity after `size` keys were put one by one into new HashMap(initial)."""
    capacity = table_size_for(max(initial, 1))
    while size > capacity * 0.75:
        capacity <<= 1
    return capacity


def copy_capacity(size: int) -> int:
    """The table capacity of new HashSet(collection) over `size` elements on Java 17, the JVM
    kgroups' Kafka peers run on (Java 19 and later size it from max(size, 12) / 0.75
    instead, which differs for some sizes of 24 and more)."""
    return table_size_for(max(int(size / 0.75) + 1, DEFAULT_CAPACITY))


def iteration_order(
    keys: Iterable[K], hash_of: Callable[[K], int], capacity: int
) -> list[K]:
    """The keys (given in the order they were put) in a HashMap's iteration order."""
    mask = capacity - 1

    def slot(key: K) -> int:
        h = hash_of(key)
        return (h ^ (h >> 16)) & mask

    return sorted(keys, key=slot)  # a stable sort: keys of one bucket stay in put order


def hash_set_order(values: Sequence[K], hash_of: Callable[[K], int]) -> list[K]:
    """The iteration order of a HashSet built by adding `values` one by one."""
    return iteration_order(values, hash_of, grown_capacity(len(values)))


def copied_set_order(values: Sequence[K], hash_of: Callable[[K], int]) -> list[K]:
    """The iteration order of new HashSet(c) for a collection c iterating as `values`."""
    return iteration_order(values, hash_of, copy_capacity(len(values)))


def timeline_capacity(size: int) -> int:
    """The slot count of Kafka's TimelineHashMap (created empty: two slots) holding `size`
    entries once one of them was put again: every put, a replacing one too, first doubles
    the table while one more entry would take it past three quarters full. The coordinator
    puts a member again at each of its heartbeats that changes it, so a group's member map
    has seen such a put at its current size."""
    capacity = 2
    while (size + 1) * 0.75 > capacity:
        capacity <<= 1
    return capacity


def timeline_order(keys: Iterable[K], hash_of: Callable[[K], int], capacity: int) -> list[K]:
    """The keys (given in the order they were put) in Kafka's TimelineHashMap iteration order:
    its slot is the top bits of the hash code times a 64-bit Fibonacci constant, slots in
    index order, and a slot's keys from the last put to the first."""
    shift = 65 - capacity.bit_length()
    listed = list(keys)

    def slot(index: int) -> tuple[int, int]:
        h = hash_of(listed[index])
        signed = h - (1 << 32) if h & 0x80000000 else h
        return ((signed * -7046029254386353131) & 0xFFFFFFFFFFFFFFFF) >> shift, -index

    return [listed[i] for i in sorted(range(len(listed)), key=slot)]
