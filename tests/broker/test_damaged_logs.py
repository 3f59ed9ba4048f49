"""A damaged log at start-up, and background tasks that crash: a definite answer, never a hang.

Stray bytes or a flipped byte inside an older segment of __consumer_offsets fail that
partition's load within seconds, with one line naming file and byte; its groups get
NOT_COORDINATOR and FindCoordinator (so `kgroups groups describe`) says why, while groups on
other partitions are served. A damaged topic partition answers KAFKA_STORAGE_ERROR. A loader or
cleaner that dies of an unforeseen error logs its traceback and shows in the broker's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_wire_helpers import (
    connect,
    create_topic,
    fetch_request,
    metadata_request,
    produce_request,
)
from tests.share.share_wire import brief, join_share_group, share_fetch

from kgroups.broker import coordinator_runtime, log_cleaner
from kgroups.broker.broker import Broker
from kgroups.broker.config import BrokerConfig
from kgroups.coordinator import partition_for
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch
from kgroups.tools import admin
from kgroups.tools.wire_client import KafkaWireClient

PARTITIONS = 4
OVERRIDES = (f"offsets.topic.num.partitions={PARTITIONS}", "offsets.topic.segment.bytes=1024")
STRAY = bytes(range(200, 237))  # 37 bytes
DAMAGED_GROUP = "damaged"  # partition 2 of 4
HEALTHY_GROUP = next(f"healthy-{n}" for n in range(100)
                     if partition_for(f"healthy-{n}", PARTITIONS) != partition_for(DAMAGED_GROUP,
                                                                                   PARTITIONS))


@contextlib.contextmanager
def running_broker(data_dir: Path, *overrides: str) -> Iterator[Broker]:
    """An in-process broker on its own loop thread, stopped (and its loop closed) on exit."""
    config = BrokerConfig.build(port=0, data_dir=data_dir, overrides=(*OVERRIDES, *overrides))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def create() -> Broker:
        broker = Broker(config)
        await broker.start()
        return broker

    broker = asyncio.run_coroutine_threadsafe(create(), loop).result(timeout=30)
    try:
        yield broker
    finally:
        asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def wait_loaded(broker: Broker, timeout: float = 10.0) -> float:
    """Seconds until the coordinator's load ended; fails the test if it does not end."""
    started = time.monotonic()
    while not broker.coordinator._loaded.is_set():
        assert time.monotonic() - started < timeout, "the coordinator's load never ended"
        time.sleep(0.02)
    return time.monotonic() - started


def commit(client: KafkaWireClient, group: str, offset: int) -> None:
    admin.execute_reset(client, group, [admin.OffsetReset("events", 0, None, offset)])


def committed(client: KafkaWireClient, group: str) -> int | None:
    return admin.committed_offsets(client, group).get(("events", 0))


def offsets_dir(data_dir: Path, group: str) -> Path:
    return data_dir / f"__consumer_offsets-{partition_for(group, PARTITIONS)}"


def prepare(data_dir: Path) -> None:
    """Both groups commit 60 times, so the damaged group's partition has several segments."""
    with running_broker(data_dir) as broker, connect(broker.port) as client:
        wait_loaded(broker)
        create_topic(client, "events")
        for offset in range(60):
            commit(client, DAMAGED_GROUP, offset)
            commit(client, HEALTHY_GROUP, offset)
    assert len(list(offsets_dir(data_dir, DAMAGED_GROUP).glob("*.log"))) >= 3


def insert(path: Path, at: int, data: bytes) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[:at] + data + raw[at:])


def find_coordinator_error(client: KafkaWireClient, group: str) -> tuple[int, str | None]:
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.static.primitive import i8

    (found,) = client.call(FindCoordinatorRequest(key_type=i8(0),
                                                  coordinator_keys=(group,))).coordinators
    return int(found.error_code), found.error_message


def assert_partition_failed(broker: Broker, where: str) -> None:
    """The damaged group gets definite answers naming the damage; the healthy one is served."""
    with connect(broker.port) as client:
        with pytest.raises(admin.AdminError, match="NOT_COORDINATOR"):
            committed(client, DAMAGED_GROUP)
        with pytest.raises(admin.AdminError, match="NOT_COORDINATOR"):
            commit(client, DAMAGED_GROUP, 100)
        error, message = find_coordinator_error(client, DAMAGED_GROUP)
        assert error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert message is not None and where in message
        assert committed(client, HEALTHY_GROUP) == 59
        commit(client, HEALTHY_GROUP, 60)
        assert committed(client, HEALTHY_GROUP) == 60


@pytest.mark.parametrize("damage", ["37 stray bytes", "a flipped byte"])
def test_a_damaged_offsets_segment_fails_its_partition_within_seconds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    data_dir = tmp_path / "data"
    prepare(data_dir)
    segment = offsets_dir(data_dir, DAMAGED_GROUP) / f"{0:020d}.log"
    size = segment.stat().st_size
    if damage == "37 stray bytes":
        insert(segment, size // 2, STRAY)
    else:
        raw = bytearray(segment.read_bytes())
        raw[size - 5] ^= 0xFF  # inside the last batch's records: only its CRC can tell
        segment.write_bytes(bytes(raw))
    with caplog.at_level(logging.ERROR, logger="kgroups"), running_broker(data_dir) as broker:
        assert wait_loaded(broker) < 5
        lines = [r.getMessage() for r in caplog.records if str(segment) in r.getMessage()]
        assert len(lines) == 1, lines
        assert "offsets_partition_failed" in lines[0] and "at byte " in lines[0]
        assert_partition_failed(broker, f"{segment} at byte ")
    assert segment.stat().st_size == size + (len(STRAY) if damage == "37 stray bytes" else 0)


def test_groups_describe_prints_why_the_group_has_no_coordinator(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    prepare(data_dir)
    segment = offsets_dir(data_dir, DAMAGED_GROUP) / f"{0:020d}.log"
    insert(segment, segment.stat().st_size // 2, STRAY)
    with running_broker(data_dir) as broker:
        wait_loaded(broker)
        result = subprocess.run(
            [sys.executable, "-m", "kgroups.cli", "groups", "--bootstrap-server",
             f"127.0.0.1:{broker.port}", "describe", DAMAGED_GROUP],
            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "COORDINATOR_NOT_AVAILABLE" in result.stderr
    assert f"failed to load: corrupt batch in {segment} at byte" in result.stderr


def test_a_damaged_topic_partition_answers_storage_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    with running_broker(data_dir, "log.segment.bytes=1024") as broker, \
            connect(broker.port) as client:
        create_topic(client, "events", partitions=2)
        for n in range(40):
            for partition in (0, 1):
                client.call(produce_request("events", partition,
                                            build_batch([(b"k", b"v" * 50, n)])))
    segment = data_dir / "events-0" / f"{0:020d}.log"
    insert(segment, 0, STRAY)
    with caplog.at_level(logging.ERROR, logger="kgroups"), running_broker(data_dir) as broker, \
            connect(broker.port) as client:
        for _ in range(2):
            (answer,) = client.call(produce_request(
                "events", 0, build_batch([(b"k", b"v", 1)]))).responses[0].partition_responses
            assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert f"corrupt batch in {segment} at byte 0" in (answer.error_message or "")
            (read,) = client.call(fetch_request("events", 0, 0)).responses[0].partitions
            assert read.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        (read,) = client.call(fetch_request("events", 1, 0)).responses[0].partitions
        assert read.error_code == ErrorCode.NONE and read.records
        # A share group's fetch of the offline partition is refused the same way (and the
        # connection stays), the healthy one served (from the log end: nothing yet).
        topic_id = client.call(metadata_request("events")).topics[0].topic_id
        join_share_group(client, "sharing", "m1", "events")
        for _ in range(2):
            shared = brief(client.call(share_fetch("sharing", "m1", 0, topic_id,
                                                   partitions=(0, 1))))
            assert [(p["partition"], p["error"]) for p in shared["partitions"]] == [
                (0, ErrorCode.KAFKA_STORAGE_ERROR), (1, ErrorCode.NONE)]
        # A commit for the offline partition is a __consumer_offsets write: Kafka takes it.
        wait_loaded(broker)
        commit(client, HEALTHY_GROUP, 7)
        assert committed(client, HEALTHY_GROUP) == 7
    assert sum("events-0 is offline" in r.getMessage() for r in caplog.records) == 1


def test_a_crashed_loader_fails_what_it_had_not_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    prepare(data_dir)
    damaged = partition_for(DAMAGED_GROUP, PARTITIONS)
    real_read = coordinator_runtime.read_partition_image

    def read(log: Any) -> Any:
        if log.directory.name.endswith(f"-{damaged}"):
            raise RuntimeError("a bug in the loader")
        return real_read(log)

    monkeypatch.setattr(coordinator_runtime, "read_partition_image", read)
    with caplog.at_level(logging.ERROR, logger="kgroups"), running_broker(data_dir) as broker:
        assert wait_loaded(broker) < 5
        crash = next(r for r in caplog.records if "offsets-loader crashed" in r.getMessage())
        assert crash.exc_info is not None and "a bug in the loader" in str(crash.exc_info[1])
        assert broker.task_failures() == {"offsets-loader": "RuntimeError: a bug in the loader"}
        later = [p for p in range(PARTITIONS) if p > damaged]
        assert set(broker.coordinator.failed_partitions) == {damaged, *later}
        with connect(broker.port) as client:
            with pytest.raises(admin.AdminError, match="NOT_COORDINATOR"):
                committed(client, DAMAGED_GROUP)
            error, message = find_coordinator_error(client, DAMAGED_GROUP)
            assert error == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert message is not None and "a bug in the loader" in message


def test_a_crashed_log_cleaner_is_logged_and_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def clean_once(logs: object, now_ms: int) -> int:
        raise ValueError("a bug in the cleaner")

    monkeypatch.setattr(log_cleaner, "clean_once", clean_once)
    with caplog.at_level(logging.ERROR, logger="kgroups"), \
            running_broker(tmp_path / "data", "log.retention.check.interval.ms=50") as broker:
        deadline = time.monotonic() + 10
        while "log-cleaner" not in broker.task_failures() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.task_failures() == {"log-cleaner": "ValueError: a bug in the cleaner"}
    crash = next(r for r in caplog.records if "log-cleaner crashed" in r.getMessage())
    assert crash.levelno == logging.ERROR and crash.exc_info is not None



def test_a_crashed_flusher_is_logged_and_acknowledges_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kgroups.log.partition_log import PartitionLog

    # Every append waits for an fsync (flush.messages=1), so a crashing flusher blocks them all.
    with caplog.at_level(logging.ERROR, logger="kgroups"), \
            running_broker(tmp_path / "data", "log.flush.interval.messages=1") as broker, \
            connect(broker.port) as client:
        wait_loaded(broker)
        create_topic(client, "events")

        def flush(log: PartitionLog) -> None:
            raise KeyError("a bug in the flusher")

        monkeypatch.setattr(PartitionLog, "flush", flush)
        (answer,) = client.call(produce_request(
            "events", 0, build_batch([(b"k", b"v", 1)]))).responses[0].partition_responses
        assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        with pytest.raises(admin.AdminError, match="NOT_COORDINATOR"):
            commit(client, DAMAGED_GROUP, 1)
        monkeypatch.undo()
        assert broker.task_failures() == {"group-commit": "KeyError: 'a bug in the flusher'"}
    crash = next(r for r in caplog.records if "crashed: KeyError" in r.getMessage())
    assert crash.levelno == logging.ERROR and crash.exc_info is not None
