"""Topic ids live in partition.metadata (Kafka's layout) and survive a restart."""

from __future__ import annotations

from pathlib import Path

from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager
from kgroups.log.topic_ids import parse_topic_id, topic_id_string


def test_id_is_written_as_kafka_writes_it_and_kept_across_restarts(tmp_path: Path) -> None:
    logs = LogManager(tmp_path, LogConfig())
    for partition in range(3):
        logs.get_or_create("orders", partition)
    topic_id = logs.topic_id("orders")
    assert topic_id is not None and topic_id.int > 1
    for partition in range(3):
        text = (tmp_path / f"orders-{partition}" / "partition.metadata").read_text()
        assert text == f"version: 0\ntopic_id: {topic_id_string(topic_id)}\n"
    assert len(topic_id_string(topic_id)) == 22
    logs.close()
    again = LogManager(tmp_path, LogConfig())
    assert again.topic_id("orders") == topic_id
    again.get_or_create("orders", 3)  # a partition added later gets the topic's id
    assert parse_topic_id(
        (tmp_path / "orders-3" / "partition.metadata").read_text().split()[-1]) == topic_id


def test_recreated_topic_gets_a_new_id(tmp_path: Path) -> None:
    logs = LogManager(tmp_path, LogConfig())
    logs.get_or_create("t", 0)
    first = logs.topic_id("t")
    logs.delete_topic("t")
    assert logs.topic_id("t") is None
    logs.get_or_create("t", 0)
    assert logs.topic_id("t") not in (None, first)
