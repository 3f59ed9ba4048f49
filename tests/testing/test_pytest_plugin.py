"""The `kafka_broker` fixture and `serve_in_background`, as a developer testing a consumer
meets them: a fresh broker per test, settings from a marker, data kept in a given directory,
and the plugin found by pytest through the package's entry point alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import kgroups
from kgroups.testing import BackgroundBroker

HERE = Path(__file__).parent


def _commit(bootstrap: str, group: str, offset: int) -> None:
    """Commit `offset` of events-0 (the topic is created first: Kafka refuses a commit for a
    topic it does not have)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("events", b"x", partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition("events", 0, offset)], asynchronous=False)
    consumer.close()


def _committed(bootstrap: str, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    [found] = consumer.committed([TopicPartition("events", 0)], timeout=10)
    consumer.close()
    return int(found.offset)


@pytest.mark.kafka_broker(num_partitions=3)
def test_fixture_applies_marker_settings_and_keeps_data_in_tmp_path(
    kafka_broker: BackgroundBroker, tmp_path: Path
) -> None:
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce("auto-created", b"x")
    assert producer.flush(10) == 0
    topics = AdminClient({"bootstrap.servers": kafka_broker.bootstrap}).list_topics(timeout=10)
    assert len(topics.topics["auto-created"].partitions) == 3
    assert kafka_broker.data_dir == tmp_path / "kgroups-data"
    assert (kafka_broker.data_dir / "auto-created-2").is_dir()


@pytest.fixture
def kafka_broker_settings() -> dict[str, str]:
    """A directory's conftest.py would override this to change every test's broker."""
    return {"num.partitions": "4", "offsets.retention.minutes": "60"}


@pytest.mark.kafka_broker({"num.partitions": "2"})
def test_each_test_gets_a_fresh_broker_the_marker_over_the_settings_fixture(
    kafka_broker: BackgroundBroker
) -> None:
    """The previous test's topic does not exist here; the marker's dict wins over the
    kafka_broker_settings fixture, whose other settings stay."""
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    assert "auto-created" not in admin.list_topics(timeout=10).topics
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce("second", b"x")
    assert producer.flush(10) == 0
    assert len(admin.list_topics(timeout=10).topics["second"].partitions) == 2
    assert kafka_broker.settings["offsets.retention.minutes"] == "60"


def test_serve_in_background_keeps_offsets_in_its_data_dir(tmp_path: Path) -> None:
    with kgroups.serve_in_background(data_dir=tmp_path / "data") as first, \
            kgroups.serve_in_background() as second:
        assert first.port != second.port
        _commit(first.bootstrap, "g", 42)
        assert _committed(second.bootstrap, "g") < 0  # another broker: no offset there
    with kgroups.serve_in_background(data_dir=tmp_path / "data") as again:
        assert _committed(again.bootstrap, "g") == 42


def test_serve_in_background_refuses_a_bad_setting() -> None:
    from kgroups.broker.config import ConfigError

    with pytest.raises(ConfigError, match=r"num\.partitions"), \
            kgroups.serve_in_background({"num.partitions": "0"}):
        pass


@pytest.mark.slow
def test_a_users_project_gets_the_fixture_from_the_entry_point(tmp_path: Path) -> None:
    """docs/testing.md's example, run by pytest in a directory with no conftest.py: the
    fixture can only come from the installed plugin."""
    shutil.copy(HERE / "consumer_example.py", tmp_path / "test_consumer.py")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_consumer.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
