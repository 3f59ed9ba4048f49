"""What the coordinator hands its server-side assignors: each member's subscribed topic ids
and current target, and the target they give back (shared by `server` and
`server_heterogeneous`, which each need them)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from kgroups.assignors.java_hash import copy_capacity, hash_set_order, uuid_hash

Target = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True)
class ServerMember:
    """One member as the coordinator hands it to an assignor: its subscribed topic ids and
    current target (topic id -> partitions), both in the order the coordinator built them."""

    member_id: str
    topics: Sequence[uuid.UUID]
    assigned: Mapping[uuid.UUID, Sequence[int]] = field(default_factory=dict)
    instance_id: str | None = None
    rack: str | None = None

    @cached_property
    def held(self) -> list[tuple[uuid.UUID, list[int]]]:
        """The current target in the order Kafka's maps iterate it (a replayed record's
        shape). Kept with the member: the coordinator hands an unchanged member to the
        assignor again at the next epoch (inputs are read only), so only members whose target
        moved pay for the ordering."""
        held = self.assigned
        topics = list(held) if len(held) < 2 else hash_set_order(list(held), uuid_hash)
        return [(t, partition_order(held[t])) for t in topics]


def partition_order(partitions: Sequence[int]) -> list[int]:
    """A HashSet copied from the list: below its capacity, an integer's bucket is itself."""
    listed = list(partitions)
    mask = copy_capacity(len(listed)) - 1
    if max(listed, default=0) <= mask:
        return sorted(listed)
    return sorted(listed, key=lambda p: (p ^ (p >> 16)) & mask)  # stable: put order kept
