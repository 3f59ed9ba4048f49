"""What the sans-IO core asks its shell to do: send replies, persist records, log state changes.

Every entry point returns an `Effects`; the shell performs them in order. Writes must be appended
to their __consumer_offsets partition in the order emitted, then confirmed with
`GroupCoordinator.write_completed`, which may release replies that waited for durability.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kgroups.coordinator.api import RequestId, Response
from kgroups.records.schema import OffsetsRecord


@dataclass(frozen=True, slots=True)
class Reply:
    request_id: RequestId
    response: Response


@dataclass(frozen=True, slots=True)
class Write:
    write_id: int
    offsets_partition: int
    records: list[OffsetsRecord]


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """A group changed state (`old_state` None when it was just created)."""

    group_id: str
    old_state: str | None
    new_state: str
    generation: int
    member_count: int


@dataclass(slots=True)
class Effects:
    replies: list[Reply] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    events: list[GroupEvent] = field(default_factory=list)
