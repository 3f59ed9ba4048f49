"""What the coordinator hands its server-side assignors: each member's subscribed topic ids
and current target, and the target they give back (shared by `server` and
`server_heterogeneous`, which each need them)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
