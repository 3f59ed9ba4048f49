"""A Kafka broker's log directory opened by kgroups (the migration path): KRaft's metadata log
sits beside the topics there and must not be taken for a topic."""

from __future__ import annotations

from pathlib import Path

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager


def test_kraft_metadata_log_is_not_a_partition(tmp_path: Path) -> None:
    metadata = tmp_path / "__cluster_metadata-0"
    metadata.mkdir()
    segment = metadata / "00000000000000000000.log"
    segment.write_bytes(build_batch([(None, b"raft record", 1)]))
    manager = LogManager(tmp_path, LogConfig())
    manager.get_or_create("orders", 0)
    assert manager.partitions() == [("orders", 0)]
    manager.close()
    assert segment.read_bytes() == build_batch([(None, b"raft record", 1)])
