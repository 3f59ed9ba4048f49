"""A ShareStatePersister that keeps each share partition's last written state in a dict: what
the share partition tests need of the share coordinator, and a record of every write."""

from __future__ import annotations

from kgroups.broker.share_persister import ReadStateResult
from kgroups.errors import ErrorCode
from kgroups.share.persisted import PersistedShareState, SharePartitionKey


class MemoryPersister:
    def __init__(self) -> None:
        self.states: dict[SharePartitionKey, PersistedShareState] = {}
        self.writes: list[tuple[SharePartitionKey, PersistedShareState]] = []

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> ErrorCode:
        self.states[key] = PersistedShareState(state_epoch, 0, start_offset)
        return ErrorCode.NONE

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        state = self.states.get(key)
        if state is None:
            return ReadStateResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return ReadStateResult(ErrorCode.NONE, state)

    async def write(self, key: SharePartitionKey, state: PersistedShareState) -> ErrorCode:
        self.states[key] = state
        self.writes.append((key, state))
        return ErrorCode.NONE

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        return await self.read(key, leader_epoch)

    async def delete(self, key: SharePartitionKey) -> ErrorCode:
        self.states.pop(key, None)
        return ErrorCode.NONE
