"""Byte codecs for the user data the sticky assignors put in their subscriptions.

`sticky` writes Java's StickyAssignorUserData v1 (previous assignment + generation) so that
Java, librdkafka, kafka-python and kgroups members in one group read each other's history and
stay sticky across a mixed-language rebalance. `cooperative-sticky` writes only a generation
(int32), as Java does for members whose subscription predates the GenerationId field.

Layout (big-endian, Kafka's non-flexible encoding):
  v0: [int32 topic count] then per topic [int16 name length][utf-8 name]
      [int32 partition count][int32 partition]...
  v1: v0 followed by [int32 generation]
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kgroups.assignors.model import NO_GENERATION

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


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
    parts = [_INT32.pack(len(previous_assignment))]
    for topic in sorted(previous_assignment):
        name = topic.encode("utf-8")
        partitions = sorted(previous_assignment[topic])
        parts.append(_INT16.pack(len(name)))
        parts.append(name)
        parts.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    parts.append(_INT32.pack(generation))
    return b"".join(parts)


def decode_sticky_user_data(data: bytes) -> StickyUserData:
    """Reads v1 or v0 (no generation: Kafka's default -1) as Java writes them.

    kafka-python 3.x writes the same body behind an int16 schema version; that form is accepted
    too (never written), so its members' history still counts in a kgroups-led group.
    """
    try:
        return _decode_body(data, 0)
    except UserDataError as java_error:
        if len(data) >= 2 and _INT16.unpack_from(data, 0)[0] in (0, 1):
            try:
                return _decode_body(data, 2)
            except UserDataError:
                pass
        raise java_error


def _decode_body(data: bytes, position: int) -> StickyUserData:
    try:
        (topic_count,) = _INT32.unpack_from(data, position)
        position += 4
        if topic_count < 0:
            raise UserDataError(f"negative topic count {topic_count}")
        assignment: dict[str, tuple[int, ...]] = {}
        for _ in range(topic_count):
            (name_length,) = _INT16.unpack_from(data, position)
            position += 2
            if name_length < 0 or position + name_length > len(data):
                raise UserDataError("topic name runs past the end of the user data")
            topic = data[position : position + name_length].decode("utf-8")
            position += name_length
            (partition_count,) = _INT32.unpack_from(data, position)
            position += 4
            if partition_count < 0:
                raise UserDataError(f"negative partition count for {topic!r}")
            partitions = struct.unpack_from(f">{partition_count}i", data, position)
            position += 4 * partition_count
            assignment[topic] = assignment.get(topic, ()) + partitions
    except (struct.error, UnicodeDecodeError) as error:
        raise UserDataError(f"truncated or garbled sticky user data: {error}") from error
    remaining = len(data) - position
    if remaining == 0:
        return StickyUserData(assignment)
    if remaining == 4:
        return StickyUserData(assignment, _INT32.unpack_from(data, position)[0])
    raise UserDataError(f"{remaining} unexpected trailing bytes after the previous assignment")


def encode_generation(generation: int) -> bytes:
    """cooperative-sticky user data: the generation alone."""
    return _INT32.pack(generation)


def decode_generation(data: bytes) -> int:
    if len(data) != 4:
        raise UserDataError(f"cooperative-sticky user data is 4 bytes, got {len(data)}")
    return int(_INT32.unpack(data)[0])
