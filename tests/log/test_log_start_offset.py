"""The log start offset DeleteRecords moves: kept in Kafka's log-start-offset-checkpoint, read
back on open, forgotten with its topic, and never handing out offsets again after a crash cut
the log below it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager
from kgroups.log.partition_log import OffsetOutOfRangeError
from kgroups.log.start_offsets import CHECKPOINT_FILE, CheckpointError


def _filled(manager: LogManager, topic: str, count: int, partition: int = 0) -> None:
    log = manager.get_or_create(topic, partition)
    for index in range(count):
        log.append_batch(build_batch([(b"k", b"v" * 50, index)]))
    log.flush()


def test_the_checkpoint_is_kafkas_file_and_is_read_back(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig(segment_bytes=300))
    _filled(manager, "a", 10)
    _filled(manager, "b", 3, partition=2)
    manager.advance_log_starts({("a", 0): 5, ("b", 2): 3})
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\na 0 5\nb 2 3\n"
    manager.close()

    again = LogManager(tmp_path, LogConfig(segment_bytes=300))
    a, b = again.get("a", 0), again.get("b", 2)
    assert a is not None and b is not None
    assert (a.log_start_offset, b.log_start_offset) == (5, 3)
    with pytest.raises(OffsetOutOfRangeError):
        a.read(4, 1000)
    # Opening one partition and moving another keeps what the file said of the first.
    manager_b = LogManager(tmp_path, LogConfig(segment_bytes=300))
    _filled(manager_b, "b", 2, partition=2)
    manager_b.advance_log_starts({("b", 2): 4})
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\na 0 5\nb 2 4\n"


def test_a_deleted_topic_is_forgotten(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    _filled(manager, "gone", 4)
    _filled(manager, "stays", 4)
    manager.advance_log_starts({("gone", 0): 3, ("stays", 0): 2})
    manager.delete_topic("gone")
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n1\nstays 0 2\n"
    reborn = manager.get_or_create("gone", 0)
    assert (reborn.log_start_offset, reborn.log_end_offset) == (0, 0)


def test_a_log_cut_below_its_start_starts_over_there(tmp_path: Path) -> None:
    """A crash can cut the unflushed tail a start was moved into (DeleteRecords -1): the log
    then resumes at the start rather than handing out offsets consumers were told are gone."""
    manager = LogManager(tmp_path, LogConfig())
    _filled(manager, "t", 3)
    manager.advance_log_starts({("t", 0): 3})
    manager.close()
    (tmp_path / CHECKPOINT_FILE).write_text("0\n1\nt 0 8\n")
    log = LogManager(tmp_path, LogConfig()).get("t", 0)
    assert log is not None
    assert (log.log_start_offset, log.log_end_offset) == (8, 8)
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == [
        "00000000000000000008.log"]
    assert log.append_batch(build_batch([(b"k", b"v", 1)])) == (8, 8)


def test_an_empty_checkpoint_lists_nothing(tmp_path: Path) -> None:
    """As Kafka reads it: a Kafka log dir copied after a kill -9 can hold an empty one."""
    (tmp_path / CHECKPOINT_FILE).write_text("")
    _filled(LogManager(tmp_path, LogConfig()), "t", 2)
    log = LogManager(tmp_path, LogConfig()).get("t", 0)
    assert log is not None and log.log_start_offset == 0


@pytest.mark.parametrize("text, why", [
    ("1\n0\n", "line 1: unsupported version '1'"),
    ("0\n2\nt 0 5\n", "line 2: says 2 entries, the file has 1"),
    ("0\n1\nt zero 5\n", "line 3: partition and offset must be numbers"),
])
def test_a_damaged_checkpoint_stops_the_log_manager(tmp_path: Path, text: str, why: str) -> None:
    """Starting without it would bring deleted records back: refuse, naming file and line."""
    (tmp_path / CHECKPOINT_FILE).write_text(text)
    with pytest.raises(CheckpointError, match=why):
        LogManager(tmp_path, LogConfig())
