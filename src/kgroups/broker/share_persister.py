"""How the broker's share partitions and the group coordinator reach the share coordinator.

Kafka calls this the Persister: share partitions read their state when they load and write it
after every change of their in-flight records; the group coordinator initializes a share-partition
when a share group first subscribes to it (or AlterShareGroupOffsets resets it) and deletes it with
DeleteShareGroupOffsets / DeleteGroups. One implementation serves it from the broker's own share
coordinator (`share_state_runtime`); in a cluster the calls go to the broker leading the
`__share_group_state` partition of the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kgroups.errors import ErrorCode
from kgroups.share.persisted import PersistedShareState, SharePartitionKey


@dataclass(frozen=True, slots=True)
class ReadStateResult:
    """`state` is None when the error is not NONE (INVALID_REQUEST: never initialized;
    FENCED_LEADER_EPOCH, COORDINATOR_*), as ReadShareGroupState answers."""

    error: ErrorCode
    state: PersistedShareState | None = None
    error_message: str | None = None


class ShareStatePersister(Protocol):
    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> ErrorCode: ...

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult: ...

    async def write(self, key: SharePartitionKey, state: PersistedShareState) -> ErrorCode: ...

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        """The state without its batches (DescribeShareGroupOffsets)."""
        ...

    async def delete(self, key: SharePartitionKey) -> ErrorCode: ...
