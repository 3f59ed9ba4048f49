"""Topic logs are cleaned on Kafka's schedule: old segments go, the log start moves on."""

from __future__ import annotations

import time
from pathlib import Path

from broker_wire_helpers import (
    connect,
    create_topic,
    fetch_request,
    list_offsets_request,
    metadata_request,
    produce_request,
)

from kgroups.broker.topics import TopicCatalog
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, iter_batches
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager


def _all_records(client, topic: str) -> list[tuple[bytes | None, bytes | None]]:  # type: ignore[no-untyped-def]
    """(key, value) of every record, fetching on until the log end (a fetch stops at the end
    of a segment, as Kafka's does)."""
    records: list[tuple[bytes | None, bytes | None]] = []
    offset = 0
    while True:
        (data,) = client.call(fetch_request(topic, 0, offset)).responses[0].partitions
        batch_records = [r for b in iter_batches(bytes(data.records or b"")) for r in b.records]
        records += [(r.key, r.value) for r in batch_records if r.offset >= offset]
        if not batch_records:
            return records
        offset = batch_records[-1].offset + 1


def _earliest(client, topic: str) -> int:  # type: ignore[no-untyped-def]
    (partition,) = client.call(list_offsets_request(topic, 0, -2)).topics[0].partitions
    return int(partition.offset)


def test_retention_bytes_deletes_old_segments(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("log.segment.bytes=400", "log.retention.bytes=800",
                                   "log.retention.check.interval.ms=50")
    with connect(broker.port) as client:
        create_topic(client, "rolling")
        for index in range(30):
            batch = build_batch([(None, b"v" * 100, int(time.time() * 1000) + index)])
            response = client.call(produce_request("rolling", 0, batch))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        # The log start may first move while the cleaner is still deleting (a check that ran
        # during the produce loop): wait until it has stayed put for ten checks.
        deadline = time.monotonic() + 10
        earliest, since = _earliest(client, "rolling"), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = _earliest(client, "rolling")
            if now != earliest:
                earliest, since = now, time.monotonic()
            elif earliest > 0 and time.monotonic() - since >= 0.5:
                break
        (gone,) = client.call(fetch_request("rolling", 0, 0)).responses[0].partitions
        (kept,) = client.call(fetch_request("rolling", 0, earliest)).responses[0].partitions
    assert 0 < earliest < 30
    assert gone.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert kept.error_code == ErrorCode.NONE and kept.records


def test_retention_time_keeps_recent_data(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("log.segment.bytes=400", "log.retention.ms=3600000",
                                   "log.retention.check.interval.ms=50")
    with connect(broker.port) as client:
        create_topic(client, "fresh")
        for _ in range(10):
            batch = build_batch([(None, b"v" * 100, int(time.time() * 1000))])
            client.call(produce_request("fresh", 0, batch))
        time.sleep(0.3)
        assert _earliest(client, "fresh") == 0


def test_retention_ms_deletes_segments_of_old_records(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("log.segment.bytes=400", "log.retention.ms=3600000",
                                   "log.retention.check.interval.ms=50")
    day_ago = int(time.time() * 1000) - 24 * 3600 * 1000
    with connect(broker.port) as client:
        create_topic(client, "stale")
        for _ in range(10):
            client.call(produce_request("stale", 0, build_batch([(None, b"v" * 100, day_ago)])))
        deadline = time.monotonic() + 10
        while _earliest(client, "stale") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        # Every closed segment held only day-old records; the active one always stays.
        assert 0 < _earliest(client, "stale") <= 10


def test_compacted_topic_keeps_the_latest_value_per_key(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("log.cleanup.policy=compact", "log.segment.bytes=300",
                                   "log.retention.check.interval.ms=50")
    now = int(time.time() * 1000)
    with connect(broker.port) as client:
        create_topic(client, "table")
        for round_number in range(6):
            for key in (b"a", b"b"):
                client.call(produce_request("table", 0, build_batch(
                    [(key, f"{key.decode()}{round_number}".encode(), now)])))
        deadline = time.monotonic() + 10
        values = _all_records(client, "table")
        while len(values) == 12 and time.monotonic() < deadline:
            time.sleep(0.05)
            values = _all_records(client, "table")
    assert len(values) < 12
    assert values[-2:] == [(b"a", b"a5"), (b"b", b"b5")]
    assert len({key for key, _ in values}) == 2


def test_topic_level_cleanup_policy_compacts_only_that_topic(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_inprocess_broker("log.segment.bytes=300", "log.retention.check.interval.ms=50")
    now = int(time.time() * 1000)
    with connect(broker.port) as client:
        assert create_topic(client, "table", configs={"cleanup.policy": "compact"}).error_code == (
            ErrorCode.NONE)
        create_topic(client, "stream")
        for round_number in range(6):
            for topic in ("table", "stream"):
                client.call(produce_request(topic, 0, build_batch(
                    [(b"k", f"v{round_number}".encode(), now)])))
        deadline = time.monotonic() + 10
        while len(_all_records(client, "table")) == 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_all_records(client, "table")) < 6
        assert len(_all_records(client, "stream")) == 6


def test_unknown_or_bad_topic_config_is_refused_and_nothing_created(
    inprocess_broker,  # type: ignore[no-untyped-def]
) -> None:
    with connect(inprocess_broker.port) as client:
        unsupported = create_topic(client, "a", configs={"min.insync.replica": "2"})
        bad_value = create_topic(client, "b", configs={"retention.ms": "soon"})
        topics = client.call(metadata_request("a", "b", auto_create=False)).topics
    assert unsupported.error_code == ErrorCode.INVALID_CONFIG
    assert "min.insync.replica" in unsupported.error_message
    assert bad_value.error_code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in bad_value.error_message
    assert {t.error_code for t in topics} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_topic_config_survives_restart_and_is_forgotten_on_delete(tmp_path: Path) -> None:
    base = LogConfig()
    catalog = TopicCatalog(LogManager(tmp_path, base))
    assert catalog.create("t", 2, {"cleanup.policy": "compact", "retention.ms": "1000"}) == (
        ErrorCode.NONE)
    reopened = LogManager(tmp_path, base)
    TopicCatalog(reopened)
    assert reopened.config_for("t").compacted
    assert reopened.config_for("t").retention_ms == 1000
    assert reopened.get("t", 1) is not None
    again = TopicCatalog(reopened)
    assert again.delete("t") == ErrorCode.NONE
    assert again.create("t", 1) == ErrorCode.NONE
    fresh = LogManager(tmp_path, base)
    TopicCatalog(fresh)
    assert not fresh.config_for("t").compacted
