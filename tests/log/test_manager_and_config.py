"""The data directory as a whole, and Kafka-named settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager


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
