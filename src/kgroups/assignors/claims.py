"""Previous ownership as members report it, flattened into parallel arrays.

A million claimed partitions arrive as ~a million (member, topic) entries; keeping them as
arrays from the start lets ownership be validated and conflicts settled with a few numpy
operations instead of a Python loop per partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

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
    """Claims from per-member topic -> partitions mappings (owned-partitions fields)."""
    index_get = space.index.get
    topic_positions: list[int] = []
    lengths: list[int] = []
    partitions: list[int] = []
    entries_per_member: list[int] = []
    for member_owned in owned:
        entries_per_member.append(len(member_owned))
        if member_owned:
            topic_positions.extend(index_get(t, -1) for t in member_owned)
            values = member_owned.values()
            lengths.extend(map(len, values))
            partitions.extend(chain.from_iterable(values))
    generation = np.asarray(generations, dtype=np.int64)
    if not partitions:
        return Claims.none(len(owned))
    lengths_array = np.asarray(lengths, dtype=np.int64)
    entry_member = np.repeat(np.arange(len(owned)), entries_per_member)
    return Claims(
        np.repeat(entry_member, lengths_array),
        np.repeat(np.asarray(topic_positions, dtype=np.int64), lengths_array),
        np.asarray(partitions, dtype=np.int64),
        generation,
    )
