"""The `kafka_broker` fixture and `serve_in_background`, as a developer testing a consumer
meets them: a fresh broker per test, settings from a marker, data kept in a given directory,
the plugin found by pytest through the package's entry point alone, setting typos refused, and
a teardown that leaves nothing behind (under `-W error`: see conftest.py)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.broker.broker_wire_helpers import (
    connect,
    create_topic,
    fetch_request,
    is_closed_by_peer,
    raw_socket,
)

import kgroups
from kgroups.broker.config import ConfigError
from kgroups.broker.wire import encode_request
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
    with pytest.raises(ConfigError, match=r"num\.partitions"), \
            kgroups.serve_in_background({"num.partitions": "0"}):
        pass


def test_serve_in_background_refuses_a_setting_typo_with_the_closest_name() -> None:
    """`kgroups serve` warns "Did you mean"; a test would silently run without the setting."""
    with pytest.raises(ConfigError) as refused, \
            kgroups.serve_in_background({"offsets.retention.minute": "1"}):
        pass
    assert str(refused.value) == (
        "The configuration 'offsets.retention.minute' was supplied but isn't a known config. "
        "Did you mean 'offsets.retention.minutes'?")


def test_serve_in_background_warns_about_a_kafka_setting_it_does_not_use() -> None:
    """As `kgroups serve` does: a Kafka setting is no typo, it only has no effect here."""
    with pytest.warns(UserWarning, match=r"'log\.dirs' is a Kafka broker setting kgroups does "
                      r"not use; ignored \(kgroups serve keeps its data in --data-dir\)"), \
            kgroups.serve_in_background({"log.dirs": "/tmp/elsewhere"}) as broker:
        assert broker.port > 0


def test_stopping_with_a_long_poll_owed_to_a_departed_client_closes_everything() -> None:
    """A client that sent a Fetch long poll and then closed its side leaves the broker waiting
    to answer it when the test ends: the stop cancels that request and closes the socket (it
    used to leave both to the dying event loop: "Task was destroyed but it is pending!", an
    unclosed TCPTransport and EBUSY from loop.close() in the broker's thread)."""
    with kgroups.serve_in_background() as broker:
        admin = connect(broker.port)
        create_topic(admin, "quiet")
        admin.close()
        sock = raw_socket(broker.port)
        sock.sendall(encode_request(1, "poller", fetch_request("quiet", 0, 0,
                                                               max_wait_ms=60_000)))
        sock.shutdown(socket.SHUT_WR)
        time.sleep(0.3)  # the broker reads the EOF and waits for the Fetch it owes
        began = time.monotonic()
    assert time.monotonic() - began < 10
    assert is_closed_by_peer(sock)
    sock.close()


TYPO_EXAMPLE = """
import pytest


@pytest.mark.kafka_broker(offsets_retention_minute=1)
def test_with_a_typo(kafka_broker):
    pass
"""


@pytest.mark.slow
def test_a_users_strict_project_gets_the_fixture_from_the_entry_point(tmp_path: Path) -> None:
    """docs/testing.md's example, run by pytest with `-W error` in a directory with no
    conftest.py (the fixture can only come from the installed plugin): it passes and its
    teardown reports nothing; a test whose marker has a typo fails at set-up with the
    closest setting's name."""
    shutil.copy(HERE / "consumer_example.py", tmp_path / "test_consumer.py")
    (tmp_path / "test_typo.py").write_text(TYPO_EXAMPLE)
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-m", "pytest", "-W", "error", "-q", "-p",
         "no:cacheprovider", "test_consumer.py", "test_typo.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    output = result.stdout + result.stderr
    assert "1 passed, 1 error" in result.stdout, output
    assert ("ERROR at setup of test_with_a_typo" in result.stdout
            and "kafka_broker: The configuration 'offsets.retention.minute' was supplied but "
                "isn't a known config. Did you mean 'offsets.retention.minutes'?"
            in result.stdout), output
    for symptom in ("Task was destroyed", "ResourceWarning", "Exception ignored", "Errno"):
        assert symptom not in output, output
