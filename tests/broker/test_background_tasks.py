"""The broker's background loops survive what happens under them, and are started again if not.

Issue 29 item 22: the log flusher listed the open logs, slept, then flushed them; a topic
deleted while it slept made it crash (IndexError on the closed log) and nothing started it
again, so time-based flushing stopped for every log until a restart.
"""

from __future__ import annotations

import datetime
import logging
import time
import urllib.request
from collections.abc import Callable

import pytest
from broker_wire_helpers import connect, create_topic, produce_request
from kio.schema.delete_topics.v6 import request as delete_topics
from prometheus_client.parser import text_string_to_metric_families
from tests.broker.servers import InProcessBroker

from kgroups.broker import log_cleaner
from kgroups.broker.background import Backoff
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch
from kgroups.tools.wire_client import KafkaWireClient

FLUSH_MS = 300


def produce(client: KafkaWireClient, topic: str) -> None:
    (answer,) = client.call(produce_request(
        topic, 0, build_batch([(b"k", b"v", int(time.time() * 1000))]))
    ).responses[0].partition_responses
    assert answer.error_code == ErrorCode.NONE


def delete_topic(client: KafkaWireClient, topic: str) -> None:
    (result,) = client.call(delete_topics.DeleteTopicsRequest(
        topics=(delete_topics.DeleteTopicState(name=topic, topic_id=None),),
        timeout=datetime.timedelta(seconds=5))).responses
    assert result.error_code == ErrorCode.NONE


def unflushed(handle: InProcessBroker, topic: str) -> int:
    async def count() -> int:
        log = handle.broker.logs.get(topic, 0)
        assert log is not None
        return log.unflushed_messages

    return handle.call(count)


def test_deleting_a_topic_while_the_flusher_sleeps_leaves_flushing_working(
    make_inprocess_broker: Callable[..., InProcessBroker],
) -> None:
    handle = make_inprocess_broker(f"log.flush.interval.ms={FLUSH_MS}",
                                   "offsets.topic.num.partitions=1")
    with connect(handle.port) as client:
        create_topic(client, "kept")
        for round_ in range(3):
            doomed = f"doomed-{round_}"
            create_topic(client, doomed)
            produce(client, doomed)
            # The flusher's sleep under way now began after the topic existed: it is deleted
            # while the flusher sleeps with it listed.
            time.sleep(FLUSH_MS * 1.5 / 1000)
            delete_topic(client, doomed)
        produce(client, "kept")
        assert unflushed(handle, "kept") == 1
        deadline = time.monotonic() + 10 * FLUSH_MS / 1000
        while unflushed(handle, "kept") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert unflushed(handle, "kept") == 0, "time-based flushing stopped"
    assert "log-flusher" not in handle.broker.task_failures()


def scrape(handle: InProcessBroker) -> dict[tuple[str, str], float]:
    """The background task counters: (sample name, task) -> value."""
    port = handle.broker.coordinator.metrics_server.port  # type: ignore[union-attr]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.name, sample.labels["task"]): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name.startswith("kgroups_background_task")}


def test_a_task_that_raises_is_restarted_logged_once_per_crash_and_counted(
    make_inprocess_broker: Callable[..., InProcessBroker], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds: list[float] = []

    def clean_once(logs: object, now_ms: int) -> int:
        rounds.append(time.monotonic())
        if len(rounds) <= 2:
            raise ValueError(f"a bug in the cleaner, round {len(rounds)}")
        return 0

    monkeypatch.setattr(log_cleaner, "clean_once", clean_once)
    with caplog.at_level(logging.ERROR, logger="kgroups"):
        handle = make_inprocess_broker("log.retention.check.interval.ms=20",
                                       "offsets.topic.num.partitions=1", "kgroups.metrics.port=0")
        deadline = time.monotonic() + 15
        while len(rounds) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(rounds) >= 5, "the cleaner was not started again after crashing"
    first = Backoff().first_s
    # Restarted after a backoff that doubles: no spin.
    assert rounds[1] - rounds[0] >= first * 0.9
    assert rounds[2] - rounds[1] >= 2 * first * 0.9
    crashes = [r for r in caplog.records if "log-cleaner crashed" in r.getMessage()]
    assert len(crashes) == 2
    assert all(r.levelno == logging.ERROR and r.exc_info is not None for r in crashes)
    assert "round 2" in crashes[1].getMessage() and "restarting in" in crashes[1].getMessage()
    assert handle.broker.task_counts.crashes["log-cleaner"] == 2
    assert handle.broker.task_failures()["log-cleaner"] == (
        "ValueError: a bug in the cleaner, round 2")
    counters = scrape(handle)
    assert counters[("kgroups_background_task_crashes_total", "log-cleaner")] == 2
    assert counters[("kgroups_background_task_restarts_total", "log-cleaner")] == 2


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_long_run() -> None:
    backoff = Backoff(first_s=0.5, cap_s=4.0)
    assert [backoff.next_delay(0.0) for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert backoff.next_delay(4.0) == 0.5
