"""Disk errors in the write path (injected): nothing acknowledged is lost or made unreadable.

A short write followed by ENOSPC, an EIO, a failed index write at a roll, a cut back that fails
too, and a failed fsync, each checked by what a reader (and a reopened log) sees afterwards.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kgroups.log import partition_log
from kgroups.log.batch import build_batch, iter_records_raw
from kgroups.log.config import LogConfig
from kgroups.log.durability import GroupCommit
from kgroups.log.partition_log import LogOfflineError, PartitionLog
from kgroups.log.segment import UnrepairedTailError

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=100)
real_write = os.write
real_ftruncate = os.ftruncate
real_fsync = os.fsync


def batch(n: int) -> bytes:
    return build_batch([(b"k%d" % n, b"value-%d" % n * 5, 1000 + n)])


def records(log: PartitionLog) -> list[tuple[int, bytes | None]]:
    found: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        found.extend((record[0], record[3]) for record in iter_records_raw(chunk))
        offset = found[-1][0] + 1
    return found


def expected(count: int) -> list[tuple[int, bytes | None]]:
    return [(n, b"value-%d" % n * 5) for n in range(count)]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(tmp_path / "t-0", SMALL)
    yield opened
    opened.close()


def fail_writes_to(path_suffix: str, fault: Callable[[int, bytes], int]) -> Callable[..., int]:
    """An os.write that applies `fault` to writes into files ending in `path_suffix`."""

    def write(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(path_suffix):
            return fault(fd, data)
        return real_write(fd, data)

    return write


def half_then_enospc() -> Callable[[int, bytes], int]:
    calls = 0

    def fault(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    return fault


def eio(fd: int, data: bytes) -> int:
    raise OSError(errno.EIO, "Input/output error")


@pytest.mark.parametrize("fault", [half_then_enospc, lambda: eio], ids=["short+ENOSPC", "EIO"])
def test_a_failed_append_leaves_the_segment_as_it_was(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch, fault: Callable[[], Callable[..., int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    for n in range(5):
        log.append_batch(batch(n))
    log.flush()
    active = log.segments()[-1]
    size_before, end_before = active.size, log.log_end_offset
    monkeypatch.setattr(os, "write", fail_writes_to(".log", fault()))
    with caplog.at_level(logging.ERROR), pytest.raises(OSError):
        log.append_batch(batch(5))
    assert os.path.getsize(active.log_path) == size_before == active.size
    assert log.log_end_offset == end_before
    assert log.write_error is not None
    assert "answers KAFKA_STORAGE_ERROR until an append succeeds" in caplog.text
    monkeypatch.setattr(os, "write", real_write)
    assert log.append_batch(batch(5)) == (5, 5)  # back by itself, at the right place
    assert log.write_error is None
    log.flush()
    assert records(log) == expected(6)
    log.close()
    reopened = PartitionLog.open(log.directory, SMALL)
    assert records(reopened) == expected(6)
    reopened.close()


def test_a_failed_index_write_at_a_roll_fails_that_append_only(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index goes to its file when its segment rolls: an append whose roll cannot write
    it fails and leaves the log as it was; the next append rolls."""
    appended = 0
    while log.segments()[-1].size + len(batch(appended)) <= SMALL.segment_bytes:
        log.append_batch(batch(appended))
        appended += 1
    (active,) = log.segments()
    size_before, end_before = active.size, log.log_end_offset
    monkeypatch.setattr(os, "write", fail_writes_to(".index", eio))
    with pytest.raises(OSError):
        log.append_batch(batch(appended))  # past segment.bytes: this one rolls
    assert log.segments() == [active] and active.size == size_before
    assert log.log_end_offset == end_before
    monkeypatch.setattr(os, "write", real_write)
    for n in range(appended, appended + 10):
        log.append_batch(batch(n))
    assert len(log.segments()) >= 2
    assert records(log) == expected(appended + 10)
    log.close()
    reopened = PartitionLog.open(log.directory, SMALL)
    first = reopened.segments()[0]
    assert first.load_index() and first.index_offsets == active.index_offsets
    assert records(reopened) == expected(appended + 10)
    reopened.close()


def test_when_the_cut_back_fails_appends_stay_refused_until_it_succeeds(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(3):
        log.append_batch(batch(n))
    active = log.segments()[-1]
    good_size = active.size
    monkeypatch.setattr(os, "write", fail_writes_to(".log", half_then_enospc()))

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "ftruncate", no_truncate)
    with caplog.at_level(logging.ERROR), pytest.raises(OSError):
        log.append_batch(batch(3))
    assert f"could not cut {active.log_path} back to byte {good_size}" in caplog.text
    assert os.path.getsize(active.log_path) > good_size  # half a batch is left on disk...
    assert records(log) == expected(3)  # ...and no reader sees it
    monkeypatch.setattr(os, "write", real_write)
    with pytest.raises(UnrepairedTailError, match="still ends in a failed append"):
        log.append_batch(batch(3))
    assert log.log_end_offset == 3
    monkeypatch.setattr(os, "ftruncate", real_ftruncate)
    assert log.append_batch(batch(3)) == (3, 3)
    assert os.path.getsize(active.log_path) == active.size
    log.flush()
    log.close()
    reopened = PartitionLog.open(log.directory, SMALL)
    assert records(reopened) == expected(4)
    reopened.close()


def test_a_failed_fsync_is_never_acknowledged_and_takes_the_log_offline(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log.append_batch(batch(0))
    log.flush()
    log.append_batch(batch(1))

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)

    async def wait() -> None:
        await GroupCommit().wait_durable(log)

    with caplog.at_level(logging.ERROR), pytest.raises(OSError):
        asyncio.run(wait())
    assert "takes no more writes until the broker restarts" in caplog.text
    monkeypatch.setattr(os, "fsync", real_fsync)
    # The kernel may have dropped what it could not write, and a second fsync would report
    # success anyway: nothing more is appended or acknowledged on top of it.
    with pytest.raises(LogOfflineError):
        log.append_batch(batch(2))
    with pytest.raises(LogOfflineError):
        asyncio.run(wait())
    log.close()
    reopened = PartitionLog.open(log.directory, SMALL)
    assert records(reopened)[:1] == expected(1)
    assert reopened.append_batch(batch(2))[0] == reopened.log_end_offset - 1
    reopened.close()


def test_a_failed_roll_sync_takes_the_log_offline_too(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    while len(log.segments()) == 1 and log.segments()[0].size < SMALL.segment_bytes - 200:
        log.append_batch(batch(log.log_end_offset))
    count = log.log_end_offset

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        for n in range(count, count + 10):
            log.append_batch(batch(n))
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert log.sync_failure is not None
    with pytest.raises(LogOfflineError):
        log.append_batch(batch(99))


def test_compaction_that_runs_out_of_space_leaves_no_side_file(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    while len(log.segments()) < 3:
        log.append_batch(batch(log.log_end_offset))
    old = log.segments()[0]
    original = old.pread(old.size, 0)

    class FullDisk:
        """What `open(path, "wb")` gives when the disk fills during the write."""

        def __init__(self, path: Path, mode: str) -> None:
            path.touch()

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(partition_log, "open", FullDisk, raising=False)
    with pytest.raises(OSError):
        log.replace_segment(old, original[: len(original) // 2])
    monkeypatch.undo()
    assert not list(log.directory.glob("*.cleaned"))
    assert log.segments()[0].pread(old.size, 0) == original
