"""A share-partition's state as the share coordinator keeps it in `__share_group_state`.

The share partition (`kgroups.share`) holds the live acquisition state; what it hands the share
coordinator to keep, and gets back after a restart or a leader move, is this: the share-partition
start offset, the epochs, and the in-flight batches past the start offset with their delivery
state and count (ShareSnapshot/ShareUpdate values, and the Read/WriteShareGroupState APIs).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class DeliveryState(IntEnum):
    """A persisted batch's delivery state, with Kafka's wire numbers (RecordState)."""

    AVAILABLE = 0
    ACQUIRED = 1  # never persisted as such: kept as AVAILABLE with its count
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    """Which share-partition: a share group and one partition of a topic (by topic id)."""

    group_id: str
    topic_id: bytes  # the topic's 16-byte UUID
    partition: int


@dataclass(frozen=True, slots=True)
class PersistedBatch:
    """Offsets first..last (inclusive) in one delivery state with one delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: DeliveryState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class PersistedShareState:
    """What Write/ReadShareGroupState carry for one share-partition."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[PersistedBatch, ...] = ()
    # ReadShareGroupStateSummary v1 / WriteShareGroupState v1: records past the start offset
    # already acknowledged or archived (-1: not known).
    delivery_complete_count: int = -1
