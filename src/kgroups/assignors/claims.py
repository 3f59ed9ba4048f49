"""Previous ownership as members report it, flattened into parallel arrays.

A million claimed partitions arrive as ~a million (member, topic) entries; keeping them as
arrays from the start lets ownership be validated and conflicts settled with a few numpy
operations instead of a Python loop per partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import methodcaller

import numpy as np

import kgroups.assignors.sticky_native as sticky_native
from kgroups.assignors.space import PartitionSpace


@dataclass(frozen=True, slots=True)
class Claims:
    """One row per claimed partition: who claims it, its topic (position in the partition
    space, -1 if the topic is not in it) and its number; plus each member's generation."""

    member: np.ndarray
    topic: np.ndarray
    partition: np.ndarray
    generation: np.ndarray

    @classmethod
    def none(cls, member_count: int) -> Claims:
        empty = np.empty(0, dtype=np.int64)
        return cls(empty, empty, empty, np.full(member_count, -1, dtype=np.int64))


def claims_from_mappings(
    space: PartitionSpace,
    owned: Sequence[Mapping[str, Sequence[int]]],
    generations: Sequence[int],
) -> Claims:
    """Claims from per-member topic -> partitions mappings (owned-partitions fields): read by
    the compiled module where it is built, else by the Python reference (same rows, same
    order)."""
    if sticky_native.compiled is None or type(space.index) is not dict:
        return claims_from_mappings_in_python(space, owned, generations)
    columns = sticky_native.compiled.claims_from_mappings(space.index, owned)
    member, topic, partition = (np.frombuffer(column, dtype=np.int64) for column in columns)
    if partition.size == 0:
        return Claims.none(len(owned))
    return Claims(member, topic, partition, np.asarray(generations, dtype=np.int64))


def claims_from_mappings_in_python(
    space: PartitionSpace,
    owned: Sequence[Mapping[str, Sequence[int]]],
    generations: Sequence[int],
) -> Claims:
    """`claims_from_mappings` in Python, read as whole-group columns (names, lists, numbers)
    rather than per member and entry."""
    names = list(chain.from_iterable(owned))
    lists = list(chain.from_iterable(map(methodcaller("values"), owned)))
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    total = int(lengths.sum())
    if total == 0:
        return Claims.none(len(owned))
    entries_per_member = np.fromiter(map(len, owned), dtype=np.int64, count=len(owned))
    topic = np.fromiter(
        map(space.index.get, names, repeat(-1)), dtype=np.int64, count=len(names)
    )
    return Claims(
        np.repeat(np.repeat(np.arange(len(owned)), entries_per_member), lengths),
        np.repeat(topic, lengths),
        np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=total),
        np.asarray(generations, dtype=np.int64),
    )
