"""`kgroups analyze` on Kafka 4's other group types, from the logs of a kgroups broker: the
`streams_group_epochs` table from the streams group records a group wrote while members
(StreamsGroupHeartbeat over the wire) joined and left, and the `share_partitions` table from
the `__share_group_state` written while a share consumer (ShareFetch and ShareAcknowledge over
the wire) accepted, released and rejected records; with the report's sections. One Spark run
reads both, a second one the logs without the share state."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from tests.broker.broker_wire_helpers import (
    connect,
    create_topic,
    metadata_request,
    produce_request,
)
from tests.broker.servers import InProcessBroker, make_inprocess_broker
from tests.share.share_wire import brief, join_share_group, share_acknowledge, share_fetch
from tests.tools.test_groups_cli_streams import APP, TOPIC, Member

from kgroups.log.batch import build_batch
from kgroups.pipeline.discovery import SegmentFile
from kgroups.pipeline.job import run_analysis
from kgroups.pipeline.share_tables import read_share_state
from kgroups.records.share_state import (
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
    StateBatch,
    encode_share_state_key,
    encode_share_state_value,
)

__all__ = ["make_inprocess_broker"]

T = 1_700_000_000_000
ACCEPT, RELEASE, REJECT = 1, 2, 3


def _share_consumer(broker: InProcessBroker, topic: str, group: str) -> uuid.UUID:
    """A share consumer of `group` on `topic`-0 that is handed records 0..3, releases 0,
    accepts 1 and 3 and rejects 2, is handed 0 again (its second delivery) and releases it
    again; the topic's id is returned."""
    with connect(broker.port) as client:
        create_topic(client, topic)
        topic_id: uuid.UUID = client.call(metadata_request(topic)).topics[0].topic_id

        def fetch(epoch: int) -> list[tuple[int, int, int]]:
            answer = brief(client.call(share_fetch(group, "m1", epoch, topic_id, wait_ms=0)))
            return [a for p in answer["partitions"] for a in p["acquired"]]

        def ack(epoch: int, acks: list[tuple[int, int, list[int]]]) -> None:
            answer = brief(client.call(share_acknowledge(group, "m1", epoch, topic_id,
                                                         {0: acks})))
            assert [p["error"] for p in answer["partitions"]] == [0]

        join_share_group(client, group, "m1", topic)  # initializes the share-partition
        assert fetch(0) == []  # loads it at the log end
        client.call(produce_request(topic, 0, build_batch(
            [(b"k", b"v%d" % i, T) for i in range(4)])))
        assert fetch(1) == [(0, 3, 1)]
        ack(2, [(0, 0, [RELEASE]), (1, 1, [ACCEPT]), (2, 2, [REJECT]), (3, 3, [ACCEPT])])
        assert fetch(3) == [(0, 0, 2)]
        ack(4, [(0, 0, [RELEASE])])
    return topic_id


def _settle(members: list[Member], tasks: int) -> None:
    """Heartbeats until every member holds tasks and each of the `tasks` is held once."""
    for _ in range(30):
        for member in members:
            member.heartbeat()
        held = sorted(p for m in members for p in m.active)
        if held == list(range(tasks)) and all(m.active for m in members):
            return
    raise AssertionError([(m.epoch, m.active) for m in members])


def _streams_group(broker: InProcessBroker) -> None:
    """A streams group on a 4-partition topic: one member takes the 4 tasks, a second joins,
    then leaves."""
    with connect(broker.port) as client:
        create_topic(client, TOPIC, 4)
        first, second = Member(client), Member(client)
        _settle([first], 4)
        _settle([first, second], 4)
        second.leave()
        _settle([first], 4)


@pytest.mark.spark
def test_streams_epochs_and_share_partitions_from_logs_written_by_kgroups(
        spark: Any, make_inprocess_broker: Any, tmp_path: Path) -> None:
    broker: InProcessBroker = make_inprocess_broker(
        "offsets.topic.num.partitions=1", "group.streams.initial.rebalance.delay.ms=0",
        "group.streams.assignment.interval.ms=0")
    broker.call(broker.broker.coordinator.wait_loaded)
    _streams_group(broker)
    tail = uuid.uuid4().hex[:6]
    topic, group = f"jobs-{tail}", f"workers-{tail}"
    topic_id = _share_consumer(broker, topic, group)
    logs = tmp_path / "logs"
    for found in broker.broker.config.data_dir.iterdir():
        if found.name.startswith(("__consumer_offsets-", "__share_group_state-")):
            shutil.copytree(found, logs / found.name,
                            ignore=shutil.ignore_patterns("*.index", "*.timeindex", "*.lock"))
    out = tmp_path / "out"
    result = run_analysis(spark, [str(logs)], str(out))
    assert {"streams_group_epochs", "share_partitions"} <= set(result.tables)

    epochs = [r for r in pq.read_table(out / "streams_group_epochs").to_pylist()
              if r["group"] == APP]
    # Alone, the first member is given the 4 tasks; the second takes 2 of them (moved), and
    # when it leaves they move back. Epochs only grow.
    assert [(r["members"], r["active_tasks"], r["standby_tasks"], r["active_moved"])
            for r in epochs] == [(1, 4, 0, 0), (2, 4, 0, 2), (1, 4, 0, 2)]
    assert [r["epoch"] for r in epochs] == sorted({r["epoch"] for r in epochs})
    assert all(r["group_epoch"] == r["epoch"] for r in epochs)

    rows = pq.read_table(out / "share_partitions").to_pylist()
    assert len(rows) == 1
    row = rows[0]
    assert (row["group"], row["topic_id"], row["partition"]) == (group, str(topic_id), 0)
    # Record 0 waits for its third delivery; 1 and 3 are acknowledged behind it, 2 archived.
    assert {name: row[name] for name in ("start_offset", "available", "acknowledged",
                                         "archived", "redeliveries", "max_delivery_count")} == {
        "start_offset": 0, "available": 1, "acknowledged": 2, "archived": 1,
        "redeliveries": 1, "max_delivery_count": 2}
    assert row["state_epoch"] >= 0 and row["last_write_ts"].timestamp() > T / 1000
    report = (out / "report.html").read_text()
    assert "<h2>Share groups</h2>" in report and group in report
    assert "<h2>Streams groups</h2>" in report and APP in report

    # Without __share_group_state there is no table and no section.
    for found in logs.glob("__share_group_state-*"):
        shutil.rmtree(found)
    again = run_analysis(spark, [str(logs)], str(out))
    assert "share_partitions" not in again.tables
    assert not (out / "share_partitions").exists()
    assert "<h2>Share groups</h2>" not in (out / "report.html").read_text()


def test_share_state_replay_merges_updates_and_skips_what_does_not_decode(
        tmp_path: Path) -> None:
    """A snapshot then an update (the update's batches merged in, its start offset taken), a
    record that does not decode (skipped, not fatal), and a deleted share-partition (no row)."""
    topic_id, gone = uuid.uuid4(), uuid.uuid4()

    def record(key: ShareStateKey, value: Any, ts: int) -> tuple[bytes, bytes | None, int]:
        return (encode_share_state_key(key),
                None if value is None else encode_share_state_value(value), ts)

    snapshot = ShareSnapshotValue(0, 3, 0, 10, T, T, (StateBatch(10, 14, 0, 1),))
    update = ShareUpdateValue(0, 0, 11, (StateBatch(12, 12, 4, 2), StateBatch(13, 13, 0, 3)))
    directory = tmp_path / "__share_group_state-0"
    directory.mkdir()
    segment = directory / "00000000000000000000.log"
    segment.write_bytes(build_batch([
        record(ShareStateKey("g", topic_id, 0), snapshot, T),
        (b"\x00\x07garbage", b"", T + 1),
        record(ShareStateKey("g", topic_id, 0, snapshot=False), update, T + 2),
        record(ShareStateKey("g", gone, 1), snapshot, T + 3),
        record(ShareStateKey("g", gone, 1), None, T + 4),
    ]))
    (row,) = read_share_state([SegmentFile(str(segment), "__share_group_state", 0, 0,
                                           segment.stat().st_size)]).to_pylist()
    # Offsets 11..14 in flight: 11 available (1 delivery), 12 archived after 2, 13 available
    # after 3, 14 available (1 delivery).
    assert {name: row[name] for name in ("group", "topic_id", "state_epoch", "start_offset",
                                         "available", "archived", "redeliveries",
                                         "max_delivery_count")} == {
        "group": "g", "topic_id": str(topic_id), "state_epoch": 3, "start_offset": 11,
        "available": 3, "archived": 1, "redeliveries": 2, "max_delivery_count": 3}
    assert row["last_write_ts"].timestamp() * 1000 == T + 2
    assert read_share_state([]) is None
