"""The share coordinator's side of a `__share_group_state` lease, without PostgreSQL: its
share-partitions answer COORDINATOR_LOAD_IN_PROGRESS while the partition is read back, are
served from the replayed records once it is, and NOT_COORDINATOR once it is lost; a fenced write
answers NOT_COORDINATOR, unloads the partition and gives its lease up. And the persister in a
cluster: a share-partition whose leader cannot be reached comes back NETWORK_EXCEPTION after
its bounded retries, one led here is served here."""

from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path

import pytest

from kgroups.broker.appends import AppendNotifier
from kgroups.broker.background import TaskCounts
from kgroups.broker.cluster import share_state_sender
from kgroups.broker.cluster.leadership import BrokerEndpoint, Leader, LeadershipView
from kgroups.broker.cluster.offsets_reader import OffsetsReader
from kgroups.broker.cluster.share_state_sender import ShareStateRouter
from kgroups.broker.config import BrokerConfig
from kgroups.broker.share_state_runtime import ShareStateRuntime
from kgroups.broker.topics import SHARE_STATE_TOPIC, TopicCatalog
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.durability import GroupCommit
from kgroups.log.manager import LogManager
from kgroups.records.share_state import encode_share_state_key, encode_share_state_value
from kgroups.share.persisted import PersistedShareState, SharePartitionKey
from kgroups.share_coordinator.shard import ShareCoordinatorShard
from kgroups.storage.postgresql import FencedError

TOPIC_ID = uuid.UUID(int=42)
KEY = SharePartitionKey("queue", TOPIC_ID.bytes, 0)
STORED_START = 10


class KeptLog:
    """A leased `__share_group_state-0` keeping its appends, or refusing them with `error`."""

    flush_due = False

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.kept: list[bytes] = []

    def append_batch(self, batch: bytes) -> tuple[int, int]:
        if self.error is not None:
            raise self.error
        self.kept.append(batch)
        return 100 + len(self.kept), 100 + len(self.kept)


def _stored() -> bytes:
    """The partition as a former coordinator left it: the share-partition initialized at
    STORED_START."""
    answer = ShareCoordinatorShard(num_partitions=1).initialize(
        KEY.group_id, TOPIC_ID, 0, 1, STORED_START, lambda topic_id: 1, 0)
    assert answer.record is not None and answer.record.value is not None
    return build_batch([(encode_share_state_key(answer.record.key),
                         encode_share_state_value(answer.record.value), 0)])


def _runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: KeptLog,
             read_gate: asyncio.Event) -> ShareStateRuntime:
    config = BrokerConfig.build(data_dir=tmp_path, overrides=[
        "kgroups.storage=postgresql://kgroups@127.0.0.1:1/unused",
        "share.coordinator.state.topic.num.partitions=1"])
    logs = LogManager(tmp_path, LogConfig.from_properties(config.properties))
    topics = TopicCatalog(logs)
    stored = _stored()

    async def read(_self: OffsetsReader, topic: str, partition: int) -> bytes:
        assert (topic, partition) == (SHARE_STATE_TOPIC, 0)
        await read_gate.wait()
        return stored

    monkeypatch.setattr(OffsetsReader, "read", read)
    runtime = ShareStateRuntime(config, topics, logs, GroupCommit(), AppendNotifier(),
                                TaskCounts(), cluster_mode=True)
    runtime.ensure_topic()
    monkeypatch.setattr(topics, "log", lambda topic, partition: log)
    monkeypatch.setattr(runtime, "topic_partitions", lambda topic_id: 1)
    return runtime


def test_a_gained_partition_loads_then_serves_what_was_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> tuple[list[ErrorCode], int | None, ErrorCode, int]:
        log, gate = KeptLog(), asyncio.Event()
        runtime = _runtime(tmp_path, monkeypatch, log, gate)
        errors = [(await runtime.read(KEY, 0)).error]
        runtime.partition_gained(0)
        errors.append((await runtime.read(KEY, 0)).error)
        gate.set()
        while runtime.refusal(True, (KEY.group_id, TOPIC_ID, 0)) is not None:
            await asyncio.sleep(0.01)
        served = await runtime.read(KEY, 0)
        written = await runtime.write(KEY, PersistedShareState(1, 0, STORED_START + 5))
        runtime.partition_lost(0)
        errors.append((await runtime.read(KEY, 0)).error)
        await runtime.stop()
        start = None if served.state is None else served.state.start_offset
        return errors, start, written, len(log.kept)

    errors, start, written, kept = asyncio.run(run())
    assert errors == [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.NOT_COORDINATOR]
    assert start == STORED_START
    assert (written, kept) == (ErrorCode.NONE, 1)


def test_a_fenced_write_gives_the_partition_up(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> tuple[ErrorCode, list[int], ErrorCode]:
        log, gate = KeptLog(), asyncio.Event()
        gate.set()
        runtime = _runtime(tmp_path, monkeypatch, log, gate)
        given_up: list[int] = []
        runtime.give_up = given_up.append
        runtime.partition_gained(0)
        while runtime.refusal(True, (KEY.group_id, TOPIC_ID, 0)) is not None:
            await asyncio.sleep(0.01)
        log.error = FencedError("another broker leads __share_group_state-0")
        written = await runtime.write(KEY, PersistedShareState(1, 0, STORED_START + 5))
        await asyncio.sleep(0)  # the give-up is scheduled after the answer
        after = (await runtime.read(KEY, 0)).error
        await runtime.stop()
        return written, given_up, after

    written, given_up, after = asyncio.run(run())
    assert written == ErrorCode.NOT_COORDINATOR
    assert given_up == [0]
    assert after == ErrorCode.NOT_COORDINATOR


def test_the_persister_serves_here_what_is_led_here_and_retries_an_unreachable_leader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr(share_state_sender, "RETRY_FOR_S", 0.5)

    async def run() -> tuple[int | None, ErrorCode]:
        gate = asyncio.Event()
        gate.set()
        runtime = _runtime(tmp_path, monkeypatch, KeptLog(), gate)
        view = LeadershipView(local_node=1)
        endpoints = [BrokerEndpoint(1, "127.0.0.1", 1), BrokerEndpoint(2, "127.0.0.1", port)]
        router = ShareStateRouter(view, runtime)
        runtime.partition_gained(0)
        while runtime.refusal(True, (KEY.group_id, TOPIC_ID, 0)) is not None:
            await asyncio.sleep(0.01)
        view.update({(SHARE_STATE_TOPIC, 0): Leader(1, 3)}, endpoints)
        here = await router.read(KEY, 0)
        view.update({(SHARE_STATE_TOPIC, 0): Leader(2, 4)}, endpoints)
        unreachable = await router.write(KEY, PersistedShareState(1, 0, STORED_START))
        await runtime.stop()
        return None if here.state is None else here.state.start_offset, unreachable

    start, unreachable = asyncio.run(run())
    assert start == STORED_START
    assert unreachable == ErrorCode.NETWORK_EXCEPTION
