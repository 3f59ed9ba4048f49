"""`kgroups analyze` on share groups: the `share_partitions` table and the report's section,
from the `__share_group_state` a kgroups broker wrote while a share consumer (ShareFetch and
ShareAcknowledge over the wire) accepted, released and rejected records."""

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
from tests.pipeline.logdata import OffsetsLogBuilder
from tests.share.share_wire import brief, share_acknowledge, share_fetch

from kgroups.log.batch import build_batch
from kgroups.pipeline.job import run_analysis

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

        assert fetch(0) == []  # initializes the share-partition at the log end
        client.call(produce_request(topic, 0, build_batch(
            [(b"k", b"v%d" % i, T) for i in range(4)])))
        assert fetch(1) == [(0, 3, 1)]
        ack(2, [(0, 0, [RELEASE]), (1, 1, [ACCEPT]), (2, 2, [REJECT]), (3, 3, [ACCEPT])])
        assert fetch(3) == [(0, 0, 2)]
        ack(4, [(0, 0, [RELEASE])])
    return topic_id


@pytest.mark.spark
def test_share_partitions_from_a_log_written_by_kgroups(spark: Any, make_inprocess_broker: Any,
                                                        tmp_path: Path) -> None:
    broker: InProcessBroker = make_inprocess_broker("offsets.topic.num.partitions=1")
    broker.call(broker.broker.coordinator.wait_loaded)
    tail = uuid.uuid4().hex[:6]
    topic, group = f"jobs-{tail}", f"workers-{tail}"
    topic_id = _share_consumer(broker, topic, group)
    logs = tmp_path / "logs"
    for found in broker.broker.config.data_dir.iterdir():
        if found.name.startswith("__share_group_state-"):
            shutil.copytree(found, logs / found.name,
                            ignore=shutil.ignore_patterns("*.index", "*.timeindex", "*.lock"))
    offsets = OffsetsLogBuilder()  # an analysis needs an offsets topic; this one is tiny
    offsets.commit("classic", {(topic, 0): 1}, T)
    offsets.write(logs)
    out = tmp_path / "out"
    result = run_analysis(spark, [str(logs)], str(out))
    assert "share_partitions" in result.tables
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

    # Without __share_group_state there is no table and no section.
    for found in logs.glob("__share_group_state-*"):
        shutil.rmtree(found)
    again = run_analysis(spark, [str(logs)], str(out))
    assert "share_partitions" not in again.tables
    assert not (out / "share_partitions").exists()
    assert "<h2>Share groups</h2>" not in (out / "report.html").read_text()
