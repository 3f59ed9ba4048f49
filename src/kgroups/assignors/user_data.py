"""Byte codecs for the user data the sticky assignors put in their subscriptions.

`sticky` writes Java's StickyAssignorUserData v1 (previous assignment + generation) so that
Java, librdkafka, kafka-python and kgroups members in one group read each other's history and
stay sticky across a mixed-language rebalance. `cooperative-sticky` writes only a generation
(int32), as Java does for members whose subscription predates the GenerationId field.

Layout (big-endian, Kafka's non-flexible encoding):
  v0: [int32 topic count] then per topic [int16 name length][utf-8 name]
      [int32 partition count][int32 partition]...
  v1: v0 followed by [int32 generation]
kafka-python 3.x writes the same body behind an int16 schema version; that form is read too
(never written), so its members' history still counts in a kgroups-led group.

The leader reads every member's blob at once: at 2,000 members x 500 topics that is a million
entries, so the parser walks all blobs in lockstep (entry k of every blob per numpy step) and
matches topic names as fixed-width byte arrays, never building a Python object per entry.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, pairwise
from operator import methodcaller

import numpy as np

import kgroups.assignors.sticky_native as sticky_native
from kgroups.assignors.claims import Claims
from kgroups.assignors.model import NO_GENERATION
from kgroups.assignors.space import PartitionSpace

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ENTRY_HEADER = 6  # int16 name length + int32 partition count
_ENTRIES_AT_ONCE = 65536


class UserDataError(ValueError):
    """The bytes are not sticky-assignor user data of any known version."""


@dataclass(frozen=True, slots=True)
class StickyUserData:
    """A member's previous assignment and the generation it was made in."""

    previous_assignment: dict[str, tuple[int, ...]]
    generation: int = NO_GENERATION


def encode_sticky_user_data(
    previous_assignment: Mapping[str, Sequence[int]], generation: int
) -> bytes:
    """StickyAssignorUserData v1, topics in name order, partitions ascending."""
    return encode_sticky_user_data_of_group([previous_assignment], [generation])[0]


def encode_sticky_user_data_of_group(
    previous_assignments: Sequence[Mapping[str, Sequence[int]]], generations: Sequence[int]
) -> list[bytes]:
    """`encode_sticky_user_data` of each (assignment, generation) pair. `assign_scenario`
    writes every member's history at once (a million topic entries at Kafka's reference
    scale): by the compiled module where it is built, else by the Python reference."""
    if sticky_native.compiled is not None:
        blobs: list[bytes] = sticky_native.compiled.encode_sticky_user_data_of_group(
            previous_assignments, generations
        )
        return blobs
    return encode_sticky_user_data_of_group_in_python(previous_assignments, generations)


def encode_sticky_user_data_of_group_in_python(
    previous_assignments: Sequence[Mapping[str, Sequence[int]]], generations: Sequence[int]
) -> list[bytes]:
    """`encode_sticky_user_data_of_group` in Python (numpy): the blobs are laid out together,
    a slice of about `_ENTRIES_AT_ONCE` topic entries at a time: one slice's arrays are small
    enough for the next slice to reuse their memory, where one pass over everything would
    fault in a few hundred MiB of fresh pages."""
    blobs: list[bytes] = []
    start = entries = 0
    for end, assignment in enumerate(previous_assignments, 1):
        entries += len(assignment)
        if entries >= _ENTRIES_AT_ONCE or end == len(previous_assignments):
            blobs += _encode_together(previous_assignments[start:end], generations[start:end])
            start, entries = end, 0
    return blobs


def _encode_together(
    previous_assignments: Sequence[Mapping[str, Sequence[int]]], generations: Sequence[int]
) -> list[bytes]:
    """Every int32 field of all the blobs in one big-endian array, each distinct topic header
    once, and the blobs gathered from the two as alternating runs of bytes."""
    blob_count = len(previous_assignments)
    entry_counts = np.fromiter(map(len, previous_assignments), dtype=np.int64, count=blob_count)
    names = list(chain.from_iterable(previous_assignments))
    values = list(chain.from_iterable(map(methodcaller("values"), previous_assignments)))
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    partitions = np.fromiter(chain.from_iterable(values), dtype=np.int64, count=int(lengths.sum()))
    generation = np.asarray(generations, dtype=np.int64).reshape(blob_count)
    for field in (partitions, generation):
        if field.size and not (field.min() >= -(2**31) and field.max() < 2**31):
            raise OverflowError("sticky user data holds int32 partitions and generations")
    order = sorted(set(names))
    rank = dict(zip(order, range(len(order)), strict=True))
    entry_rank = np.fromiter(map(rank.__getitem__, names), dtype=np.int64, count=len(names))

    # Entries in (blob, topic name) order, each entry's partitions ascending.
    entry_blob = np.repeat(np.arange(blob_count), entry_counts)
    entry_order = _sorting(entry_blob * len(order) + entry_rank)
    sorted_position = np.empty_like(entry_order)
    sorted_position[entry_order] = np.arange(entry_order.size)
    partition_entry = np.repeat(sorted_position, lengths)
    partitions = partitions[_sorting((partition_entry << 32) + partitions + 2**31)]
    entry_rank, lengths = entry_rank[entry_order], lengths[entry_order]

    # Every int32 field in output order: per blob [topic count], per entry [partition count]
    # and its partitions, then [generation]; `*_slot` is a field's index in that array.
    partitions_before_entry = np.cumsum(lengths) - lengths
    entries_before = np.concatenate(([0], np.cumsum(entry_counts)))
    partitions_before = np.concatenate(([0], np.cumsum(lengths)))[entries_before]
    blob_slot = 2 * np.arange(blob_count + 1) + entries_before + partitions_before
    entry_slot = 2 * entry_blob + 1 + np.arange(entry_blob.size) + partitions_before_entry
    ints = np.empty(int(blob_slot[-1]), dtype=">i4")
    ints[blob_slot[:-1]] = entry_counts
    ints[blob_slot[1:] - 1] = generation
    ints[entry_slot] = lengths
    partition_slot = np.repeat(entry_slot + 1 - partitions_before_entry, lengths)
    ints[partition_slot + np.arange(partitions.size)] = partitions
    headers = [_topic_header(name) for name in order]
    header_length = np.fromiter(map(len, headers), dtype=np.int64, count=len(headers))
    header_start = 4 * ints.size + np.cumsum(header_length) - header_length
    source = np.concatenate((ints.view(np.uint8), np.frombuffer(b"".join(headers), np.uint8)))

    # Runs per blob: [topic count], then per entry its header and its int32s, then
    # [generation]; entry k (of all) in blob b is run 2b + 1 + 2k, its int32s the next run.
    run_start = np.empty(2 * (blob_count + entry_blob.size), dtype=np.int64)
    run_length = np.empty_like(run_start)
    first_runs = 2 * np.arange(blob_count) + 2 * entries_before[:-1]
    last_runs = first_runs + 2 * entry_counts + 1
    header_runs = 2 * entry_blob + 1 + 2 * np.arange(entry_blob.size)
    run_start[first_runs], run_length[first_runs] = 4 * blob_slot[:-1], 4
    run_start[last_runs], run_length[last_runs] = 4 * (blob_slot[1:] - 1), 4
    run_start[header_runs] = header_start[entry_rank]
    run_length[header_runs] = header_length[entry_rank]
    run_start[header_runs + 1], run_length[header_runs + 1] = 4 * entry_slot, 4 + 4 * lengths
    # Every run starts and ends on a multiple of `unit` bytes: gather whole units.
    unit = math.gcd(4, *header_length.tolist())
    data = source.view(f"u{unit}")[_run_positions(run_start // unit, run_length // unit)]
    ends = (np.cumsum(run_length)[last_runs] // unit).tolist()
    return [data[start:end].tobytes() for start, end in pairwise([0, *ends])]


def _sorting(keys: np.ndarray) -> np.ndarray:
    """The permutation that sorts `keys`, without sorting when they already are (a member
    reports what the leader gave it, which is sorted)."""
    if keys.size < 2 or bool((keys[1:] >= keys[:-1]).all()):
        return np.arange(keys.size)
    return np.argsort(keys, kind="stable")


def _run_positions(start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Source positions of the runs [start[i], start[i] + length[i]) back to back (lengths
    >= 1): a cumulative sum of ones with each run's jump at its first byte, so one index array
    and no Python step per run."""
    total = int(length.sum())
    small = total < 2**31 and int(start.max(initial=0)) < 2**31
    step = np.ones(total, dtype=np.int32 if small else np.int64)
    if start.size:
        firsts = np.cumsum(length) - length
        step[firsts[1:]] = start[1:] - (start[:-1] + length[:-1] - 1)
        step[0] = start[0]
    return np.cumsum(step, out=step)


@lru_cache(maxsize=65536)
def _topic_header(topic: str) -> bytes:
    """[int16 name length][utf-8 name] of one topic entry."""
    name = topic.encode("utf-8")
    return _INT16.pack(len(name)) + name


@dataclass(frozen=True, slots=True)
class _Parsed:
    """Where everything is in the concatenated blobs; rows of `entry_*` are topic entries."""

    buffer: np.ndarray  # uint8, all blobs back to back
    valid: np.ndarray  # per blob
    generation: np.ndarray  # per blob, NO_GENERATION when absent (v0) or invalid
    entry_blob: np.ndarray
    entry_name_start: np.ndarray
    entry_name_length: np.ndarray
    entry_partitions_start: np.ndarray
    entry_partition_count: np.ndarray

    def partitions(self) -> tuple[np.ndarray, np.ndarray]:
        """(entry row, partition number) for every listed partition, entries in order."""
        counts = self.entry_partition_count
        total = int(counts.sum())
        entry = np.repeat(np.arange(counts.size), counts)
        firsts = np.cumsum(counts) - counts
        positions = self.entry_partitions_start[entry] + 4 * (np.arange(total) - firsts[entry])
        return entry, _read_signed(self.buffer, positions, 4)


def _read_signed(buffer: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """The big-endian signed `width`-byte integers at `positions`, read through a view with
    one (overlapping, unaligned) item per byte offset: one gather, whatever the width."""
    windows = np.ndarray((max(buffer.size - width + 1, 0),), f">i{width}", buffer, strides=(1,))
    return windows[positions].astype(np.int64)


def _walk(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> _Parsed:
    """Parses the Java layout of every blob [starts[i], ends[i]) at once."""
    count = starts.size
    position = starts.copy()
    valid = ends - starts >= 4
    topic_count = np.zeros(count, dtype=np.int64)
    rows = np.flatnonzero(valid)
    topic_count[rows] = _read_signed(buffer, position[rows], 4)
    position[rows] += 4
    valid &= (topic_count >= 0) & (topic_count <= (ends - position) // _ENTRY_HEADER)
    found: list[tuple[np.ndarray, ...]] = []
    for k in range(int(topic_count[valid].max(initial=0))):
        rows = np.flatnonzero(valid & (topic_count > k))
        if rows.size == 0:
            break
        room = ends[rows] - position[rows]
        name_length = np.zeros(rows.size, dtype=np.int64)
        fits = room >= _ENTRY_HEADER
        name_length[fits] = _read_signed(buffer, position[rows[fits]], 2)
        fits &= (name_length >= 0) & (name_length <= room - _ENTRY_HEADER)
        valid[rows[~fits]] = False
        rows, name_length, room = rows[fits], name_length[fits], room[fits]
        partition_count = _read_signed(buffer, position[rows] + 2 + name_length, 4)
        fits = (partition_count >= 0) & (
            partition_count <= (room - _ENTRY_HEADER - name_length) // 4
        )
        valid[rows[~fits]] = False
        rows, name_length, partition_count = rows[fits], name_length[fits], partition_count[fits]
        name_start = position[rows] + 2
        found.append((rows, name_start, name_length, name_start + name_length + 4, partition_count))
        position[rows] += _ENTRY_HEADER + name_length + 4 * partition_count
    remaining = ends - position
    valid &= (remaining == 0) | (remaining == 4)
    generation = np.full(count, NO_GENERATION, dtype=np.int64)
    with_generation = np.flatnonzero(valid & (remaining == 4))
    generation[with_generation] = _read_signed(buffer, position[with_generation], 4)
    if found:
        columns = [np.concatenate(column) for column in zip(*found, strict=True)]
    else:
        columns = [np.empty(0, dtype=np.int64)] * 5
    keep = valid[columns[0]]
    return _Parsed(buffer, valid, generation, *(column[keep] for column in columns))


def _parse_all(blobs: Sequence[bytes | None]) -> _Parsed:
    """Java layout first; blobs that fail it and start with an int16 version 0/1 are read
    again as kafka-python's version-prefixed form."""
    lengths = np.array([len(b) if b else 0 for b in blobs], dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buffer = np.frombuffer(b"".join(b for b in blobs if b), dtype=np.uint8)
    parsed = _walk(buffer, starts, ends)
    retry = np.flatnonzero(~parsed.valid & (lengths >= 2))
    if retry.size:
        prefix = _read_signed(buffer, starts[retry], 2)
        retry = retry[(prefix == 0) | (prefix == 1)]
    if retry.size == 0:
        return parsed
    again = _walk(buffer, starts[retry] + 2, ends[retry])
    valid = parsed.valid.copy()
    valid[retry] = again.valid
    generation = parsed.generation.copy()
    generation[retry] = again.generation
    return _Parsed(
        buffer,
        valid,
        generation,
        np.concatenate([parsed.entry_blob, retry[again.entry_blob]]),
        np.concatenate([parsed.entry_name_start, again.entry_name_start]),
        np.concatenate([parsed.entry_name_length, again.entry_name_length]),
        np.concatenate([parsed.entry_partitions_start, again.entry_partitions_start]),
        np.concatenate([parsed.entry_partition_count, again.entry_partition_count]),
    )


def _topic_positions(parsed: _Parsed, topics: Sequence[str]) -> np.ndarray:
    """Position in `topics` of each entry's name, -1 for names not among them. Names of one
    length are gathered as one fixed-width byte array and looked up (a binary search in C)
    among the topics of that length only. numpy drops trailing NUL bytes of fixed-width strings,
    so the lookup keys drop them too; within one length that loses nothing (two names of equal
    length that agree once their trailing NULs are gone are the same name)."""
    result = np.full(parsed.entry_blob.size, -1, dtype=np.int64)
    by_length: dict[int, dict[bytes, int]] = {}
    for position, topic in enumerate(topics):
        name = topic.encode("utf-8")
        by_length.setdefault(len(name), {})[name.rstrip(b"\0")] = position
    for length in np.flatnonzero(np.bincount(parsed.entry_name_length)).tolist():
        known = by_length.get(length)
        if length == 0 or not known:
            continue
        rows = np.flatnonzero(parsed.entry_name_length == length)
        # Every `length`-byte window of the buffer, one item per start offset (they overlap).
        windows = np.ndarray(
            (parsed.buffer.size - length + 1,), f"S{length}", parsed.buffer, strides=(1,)
        )
        names = windows[parsed.entry_name_start[rows]]
        keys = np.array(list(known), dtype=f"S{length}")
        order = np.argsort(keys)
        keys, positions = keys[order], np.array(list(known.values()), dtype=np.int64)[order]
        at = np.minimum(np.searchsorted(keys, names), keys.size - 1)
        result[rows] = np.where(keys[at] == names, positions[at], -1)
    return result


def sticky_claims(
    space: PartitionSpace, blobs: Sequence[bytes | None]
) -> tuple[Claims, np.ndarray]:
    """Every member's previous assignment from its sticky user data, as claims, and which
    blobs were present but unreadable (those members simply claim nothing). Read by the
    compiled module where it is built (and every blob is `bytes`), else by the Python
    reference; both give the same rows in the same order."""
    if sticky_native.compiled is None or not set(map(type, blobs)) <= {bytes, type(None)}:
        return sticky_claims_in_python(space, blobs)
    *columns, unreadable = sticky_native.compiled.sticky_claims(space.topics, blobs)
    member, topic, partition, generation = (np.frombuffer(c, dtype=np.int64) for c in columns)
    return Claims(member, topic, partition, generation), np.frombuffer(unreadable, dtype=bool)


def sticky_claims_in_python(
    space: PartitionSpace, blobs: Sequence[bytes | None]
) -> tuple[Claims, np.ndarray]:
    """`sticky_claims` in Python: every blob parsed at once by the lockstep numpy walk."""
    parsed = _parse_all(blobs)
    entry, partition = parsed.partitions()
    topic = _topic_positions(parsed, space.topics)[entry]
    unreadable = ~parsed.valid & np.array([bool(b) for b in blobs], dtype=bool)
    claims = Claims(parsed.entry_blob[entry], topic, partition, parsed.generation)
    return claims, unreadable


def decode_sticky_user_data(data: bytes) -> StickyUserData:
    """One member's user data, v1 or v0 (no generation: Kafka's default -1)."""
    parsed = _parse_all([data])
    if not parsed.valid[0]:
        raise UserDataError(f"{len(data)} bytes are not sticky assignor user data (v0 or v1)")
    entry, partition = parsed.partitions()
    numbers = partition.tolist()
    assignment: dict[str, tuple[int, ...]] = {}
    cuts = np.searchsorted(entry, np.arange(parsed.entry_blob.size + 1)).tolist()
    for row in range(parsed.entry_blob.size):
        start = int(parsed.entry_name_start[row])
        name = parsed.buffer[start : start + int(parsed.entry_name_length[row])].tobytes()
        try:
            topic = name.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UserDataError(f"topic name is not UTF-8: {error}") from error
        assignment[topic] = assignment.get(topic, ()) + tuple(numbers[cuts[row] : cuts[row + 1]])
    return StickyUserData(assignment, int(parsed.generation[0]))


def encode_generation(generation: int) -> bytes:
    """cooperative-sticky user data: the generation alone."""
    return _INT32.pack(generation)


def decode_generation(data: bytes) -> int:
    if len(data) != 4:
        raise UserDataError(f"cooperative-sticky user data is 4 bytes, got {len(data)}")
    return int(_INT32.unpack(data)[0])
