"""The data directory as a whole, and Kafka-named settings."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager, PartitionOfflineError


def test_partitions_live_in_kafka_named_directories_and_reopen(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    assert manager.get("orders", 0) is None
    manager.get_or_create("orders", 0).append_batch(build_batch([(b"k", b"v", 1)]))
    manager.get_or_create("my-topic-with-dashes", 12)
    manager.get_or_create("__consumer_offsets", 3)
    assert (tmp_path / "orders-0" / "00000000000000000000.log").exists()
    manager.close()
    again = LogManager(tmp_path, LogConfig())
    assert again.partitions() == [
        ("__consumer_offsets", 3), ("my-topic-with-dashes", 12), ("orders", 0),
    ]
    log = again.get("orders", 0)
    assert log is not None and log.log_end_offset == 1
    again.delete_topic("orders")
    assert again.partitions() == [("__consumer_offsets", 3), ("my-topic-with-dashes", 12)]
    assert not (tmp_path / "orders-0").exists()


def test_the_offsets_topic_is_compacted_with_its_own_segment_size(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig(segment_bytes=5000))
    offsets = manager.get_or_create("__consumer_offsets", 0)
    assert offsets.config.compacted
    assert offsets.config.segment_bytes == 100 * 1024 * 1024
    assert manager.get_or_create("plain", 0).config.segment_bytes == 5000
    manager.set_topic_config("special", LogConfig(segment_bytes=777))
    assert manager.get_or_create("special", 0).config.segment_bytes == 777


def test_bad_partition_names_are_refused(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    with pytest.raises(ValueError, match="topic name"):
        manager.get_or_create("../escape", 0)
    with pytest.raises(ValueError, match="partition"):
        manager.get_or_create("t", -1)


def test_properties_use_kafka_names_and_defaults() -> None:
    assert LogConfig.from_properties({}) == LogConfig()
    config = LogConfig.from_properties(
        {
            "log.segment.bytes": "1048576",
            "log.retention.hours": "1",
            "log.retention.bytes": 5000,
            "log.cleanup.policy": "compact, delete",
            "delete.retention.ms": "10",
            "broker.id": "1",
        }
    )
    assert config.segment_bytes == 1048576
    assert config.retention_ms == 3_600_000
    assert config.retention_bytes == 5000
    assert config.compacted and config.deletes
    assert config.delete_retention_ms == 10
    both = LogConfig.from_properties({"log.retention.hours": 1, "log.retention.ms": 5})
    assert both.retention_ms == 5


@pytest.mark.parametrize(
    ("properties", "words"),
    [
        ({"log.segment.bytes": "big"}, "log.segment.bytes='big'"),
        ({"segment.bytes": "3"}, "at least 14"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"delete.retention.ms": "-5"}, "delete.retention.ms"),
    ],
)
def test_bad_settings_name_the_key(properties: dict[str, str], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        LogConfig.from_properties(properties)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_partition_holds_one_descriptor_per_segment(tmp_path: Path) -> None:
    """As many as a Kafka broker holds (its indexes are memory-mapped, their files closed):
    kgroups keeps a segment's index in memory and writes its file when the segment rolls."""
    manager = LogManager(tmp_path, LogConfig(segment_bytes=200))
    before = open_descriptors()
    for partition in range(10):
        manager.get_or_create("orders", partition)
    assert open_descriptors() - before == 10
    log = manager.get_or_create("orders", 0)
    while len(log.segments()) < 3:
        log.append_batch(build_batch([(b"k", b"v" * 50, 1)]))
    assert open_descriptors() - before == 12
    manager.close()
    assert open_descriptors() == before


def test_no_descriptor_left_fails_that_open_only_and_leaks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EMFILE is not the log's fault: unlike a damaged log, the partition is not kept offline,
    and what the failed open had opened is closed again."""
    manager = LogManager(tmp_path, LogConfig())
    manager.get_or_create("orders", 0).append_batch(build_batch([(b"k", b"v", 1)]))
    manager.close()
    manager = LogManager(tmp_path, LogConfig())
    real_open = os.open
    before = open_descriptors()

    def exhausted(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(tmp_path / "orders-0"):  # the directory's fsync, after the segment
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", exhausted)
    with pytest.raises(PartitionOfflineError, match="Too many open files"):
        manager.get("orders", 0)
    assert open_descriptors() == before
    monkeypatch.setattr(os, "open", real_open)
    log = manager.get("orders", 0)
    assert log is not None and log.log_end_offset == 1
    manager.close()
