"""What a coordinator in cluster mode answers when the store refuses or cannot take a write:
never a success. Fenced (another broker leads the offsets partition): NOT_COORDINATOR, and the
partition is unloaded and its lease given up. Unreachable: COORDINATOR_NOT_AVAILABLE, which
clients retry, and the partition stays loaded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kgroups.broker.appends import AppendNotifier
from kgroups.broker.cluster.offsets_reader import OffsetsReader
from kgroups.broker.config import BrokerConfig
from kgroups.broker.coordinator_runtime import CoordinatorRuntime
from kgroups.broker.topics import TopicCatalog
from kgroups.coordinator import messages
from kgroups.errors import ErrorCode
from kgroups.log.config import LogConfig
from kgroups.log.durability import GroupCommit
from kgroups.log.manager import LogManager
from kgroups.storage.postgresql import FencedError, StorageUnavailableError


class RefusingLog:
    """A leased offsets log whose every append fails as the store would."""

    flush_due = False

    def __init__(self, error: Exception) -> None:
        self.error = error

    def append_batch(self, batch: bytes) -> tuple[int, int]:
        raise self.error


async def _coordinating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        log: object) -> CoordinatorRuntime:
    """A cluster-mode coordinator runtime that has loaded an empty `__consumer_offsets-0`
    and appends to `log`."""
    config = BrokerConfig.build(data_dir=tmp_path, overrides=[
        "kgroups.storage=postgresql://kgroups@127.0.0.1:1/unused",
        "offsets.topic.num.partitions=1"])
    logs = LogManager(tmp_path, LogConfig.from_properties(config.properties))
    topics = TopicCatalog(logs)
    runtime = CoordinatorRuntime(config, topics, logs, AppendNotifier(), GroupCommit())

    async def empty(_self: OffsetsReader, _topic: str, _partition: int) -> bytes:
        return b""

    monkeypatch.setattr(OffsetsReader, "read", empty)
    monkeypatch.setattr(topics, "log", lambda topic, partition: log)
    runtime.partition_gained(0)
    while 0 not in runtime.shard.owned_partitions:
        await asyncio.sleep(0.01)
    return runtime


async def _commit(runtime: CoordinatorRuntime, group: str) -> messages.OffsetCommitResponse:
    answer: messages.OffsetCommitResponse = await runtime.call(
        lambda request_id: messages.OffsetCommitRequest(request_id, group, (
            messages.OffsetCommitTopic("t", (messages.OffsetCommitPartition(0, 5),)),)))
    return answer


async def _commit_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       error: Exception) -> tuple[ErrorCode, bool, list[int]]:
    """(the commit's error, whether the partition is still loaded, partitions given up)."""
    runtime = await _coordinating(tmp_path, monkeypatch, RefusingLog(error))
    given_up: list[int] = []
    runtime.give_up = given_up.append
    answer = await _commit(runtime, "g")
    await asyncio.sleep(0.05)  # the fenced partition is unloaded on the next loop turns
    (topic,) = answer.topics
    (partition,) = topic.partitions
    loaded = 0 in runtime.shard.owned_partitions
    await runtime.stop()
    return partition.error, loaded, given_up


def test_a_fenced_write_answers_not_coordinator_and_gives_the_partition_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    error, loaded, given_up = asyncio.run(_commit_with(
        tmp_path, monkeypatch, FencedError("__consumer_offsets-0: node 1 is not the leader")))
    assert error == ErrorCode.NOT_COORDINATOR
    assert not loaded and given_up == [0]


def test_an_unreachable_store_answers_a_retriable_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    error, loaded, given_up = asyncio.run(_commit_with(
        tmp_path, monkeypatch, StorageUnavailableError("PostgreSQL at ... is unreachable")))
    assert error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert loaded and given_up == []


class FailingOnceLog:
    """An offsets log whose first append fails and whose later ones are kept."""

    flush_due = False

    def __init__(self) -> None:
        self.failed = False
        self.kept: list[bytes] = []

    def append_batch(self, batch: bytes) -> tuple[int, int]:
        if not self.failed:
            self.failed = True
            raise StorageUnavailableError("PostgreSQL at ... is unreachable")
        self.kept.append(batch)
        return len(self.kept) - 1, len(self.kept) - 1


def test_writes_behind_a_failed_one_are_not_appended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two commits of two groups on one offsets partition, the first write failing: the core
    fails the second with it (it reverts to the failed write), so the log must not hold the
    second either, or a restart would replay a commit its client was told had failed."""

    async def run() -> tuple[list[ErrorCode], list[bytes]]:
        log = FailingOnceLog()
        runtime = await _coordinating(tmp_path, monkeypatch, log)
        answers = await asyncio.gather(_commit(runtime, "first"), _commit(runtime, "second"))
        errors = [answer.topics[0].partitions[0].error for answer in answers]
        await runtime.stop()
        return errors, log.kept

    errors, kept = asyncio.run(run())
    assert all(error != ErrorCode.NONE for error in errors)
    assert kept == []
