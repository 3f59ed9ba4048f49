"""Group commit: every waiter gets an fsync that started after its call; waiters share fsyncs."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.durability import GroupCommit
from kgroups.log.partition_log import PartitionLog


class SlowFlushLog(PartitionLog):
    """Records when each flush started and finished, and makes it slow."""

    flushes: list[tuple[float, float]]

    def flush(self) -> None:
        start = time.monotonic()
        time.sleep(0.05)
        super().flush()
        self.flushes.append((start, time.monotonic()))


def open_slow(path: Path) -> SlowFlushLog:
    log = PartitionLog.open(path, LogConfig())
    log.__class__ = SlowFlushLog
    log.flushes = []
    return log  # type: ignore[return-value]


def test_concurrent_waiters_share_fsyncs(tmp_path: Path) -> None:
    log = open_slow(tmp_path / "t-0")
    commit = GroupCommit()

    async def writer(i: int) -> None:
        log.append_batch(build_batch([(b"k", b"%d" % i, i)]))
        await commit.wait_durable(log)

    async def main() -> None:
        await asyncio.gather(*(writer(i) for i in range(50)))

    asyncio.run(main())
    assert 1 <= commit.fsyncs <= 2
    assert len(log.flushes) == commit.fsyncs


def test_a_waiter_arriving_mid_fsync_waits_for_a_later_one(tmp_path: Path) -> None:
    log = open_slow(tmp_path / "t-0")
    commit = GroupCommit()
    calls: dict[str, float] = {}

    async def main() -> None:
        first = asyncio.ensure_future(commit.wait_durable(log))
        await asyncio.sleep(0.02)  # the first fsync is now running
        calls["late"] = time.monotonic()
        await commit.wait_durable(log)
        calls["late_done"] = time.monotonic()
        await first

    asyncio.run(main())
    assert len(log.flushes) == 2
    covering = [f for f in log.flushes if f[0] >= calls["late"]]
    assert covering and covering[0][1] <= calls["late_done"]


def test_fsync_errors_reach_the_waiters(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    failing = threading.Event()

    def broken_flush() -> None:
        failing.set()
        raise OSError(5, "disk on fire")

    log.flush = broken_flush  # type: ignore[method-assign]
    with pytest.raises(OSError, match="disk on fire"):
        asyncio.run(GroupCommit().wait_durable(log))
    assert failing.is_set()


def test_linger_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="linger_ms"):
        GroupCommit(linger_ms=-1)


def test_linger_lets_staggered_appends_share_one_fsync(tmp_path: Path) -> None:
    """Every writer arrives while the first fsync still lingers, so that one covers all."""
    log = open_slow(tmp_path / "t-0")
    commit = GroupCommit(linger_ms=50)

    async def writer(i: int) -> None:
        await asyncio.sleep(i * 0.005)
        log.append_batch(build_batch([(b"k", b"%d" % i, i)]))
        await commit.wait_durable(log)

    async def main() -> None:
        await asyncio.gather(*(writer(i) for i in range(5)))

    asyncio.run(main())
    assert commit.fsyncs == 1
    assert len(log.flushes) == 1
