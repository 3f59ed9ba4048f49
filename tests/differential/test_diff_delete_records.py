"""DeleteRecords (API 21) against Kafka 4.3.1: the versions served, the low watermark and error
code of every partition, and what ListOffsets, Fetch and Produce say of the log start after.

Each conversation makes its own topics (named after its group, the same on both brokers) and
fills them with the same batches, so offsets line up."""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from typing import Any

import pytest
from diff_dialog import Connection, Dialog
from diff_requests import api_versions
from diff_setup import ON_BOTH_ENGINES
from tests.broker.broker_wire_helpers import (
    fetch_request,
    list_offsets_request,
    metadata_request,
    nested_of,
    produce_request,
    request_of,
)

from kgroups.log.batch import build_batch, iter_batches

pytestmark = pytest.mark.kafka

BASE_MS = 1_700_000_000_000
NOT_LEADER_OR_FOLLOWER = 6


def delete_records(offsets: Mapping[str, Mapping[int, int]], v: int = 2) -> Any:
    return request_of(21, v, timeout=datetime.timedelta(seconds=5), topics=tuple(
        nested_of(21, v, "DeleteRecordsTopic", name=topic, partitions=tuple(
            nested_of(21, v, "DeleteRecordsPartition", partition_index=partition, offset=offset)
            for partition, offset in partitions.items()))
        for topic, partitions in offsets.items()))


def make_topic(c: Connection, name: str, partitions: int = 1, records: int = 10,
               configs: Mapping[str, str] | None = None) -> None:
    """Create `name` and fill partition 0 with one-record batches at fixed times (unrecorded:
    creation is another test's subject)."""
    created = c.call(request_of(19, 7, timeout=datetime.timedelta(seconds=5),
                                validate_only=False, topics=(nested_of(
        19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
        assignments=(), configs=tuple(nested_of(19, 7, "CreatableTopicConfig", name=key,
                                                value=value)
                                      for key, value in (configs or {}).items())),)),
                     record=False)
    assert int(created.topics[0].error_code) == 0, created
    deadline = time.monotonic() + 30
    while True:  # Kafka elects the leaders a moment after answering
        (topic,) = c.call(metadata_request(name, auto_create=False), record=False).topics
        if int(topic.error_code) == 0 and all(int(p.leader_id) >= 0 for p in topic.partitions):
            break
        assert time.monotonic() < deadline, topic
        time.sleep(0.05)
    for index in range(records):
        batch = build_batch([(f"k{index}".encode(), b"v", BASE_MS + index)])
        while True:  # and may still answer NOT_LEADER_OR_FOLLOWER for a moment after that
            produced = c.call(produce_request(name, 0, batch), record=False)
            error = int(produced.responses[0].partition_responses[0].error_code)
            if error != NOT_LEADER_OR_FOLLOWER:
                break
            assert time.monotonic() < deadline, produced
            time.sleep(0.05)
        assert error == 0, produced


def look(d: Dialog, c: Connection, topic: str, *fetch_offsets: int) -> None:
    """Record what a consumer learns of the log start: ListOffsets earliest and by time, and
    Fetch at each offset (its error, watermarks, log start and the records' offsets)."""
    (earliest,) = c.call(list_offsets_request(topic, 0, -2), record=False).topics[0].partitions
    d.record("earliest", (int(earliest.error_code), int(earliest.offset)))
    (by_time,) = c.call(list_offsets_request(topic, 0, BASE_MS), record=False).topics[0].partitions
    d.record("first at or after the oldest timestamp", (int(by_time.error_code),
                                                         int(by_time.offset)))
    for offset in fetch_offsets:
        (answer,) = c.call(fetch_request(topic, 0, offset), record=False).responses[0].partitions
        offsets = [r.offset for b in iter_batches(bytes(answer.records or b""))
                   for r in b.records if r.offset >= offset]
        d.record(f"fetch at {offset}", {
            "error": int(answer.error_code), "high_watermark": int(answer.high_watermark),
            "log_start_offset": int(answer.log_start_offset), "offsets": offsets[:3]})


@ON_BOTH_ENGINES
def test_versions_served(converse: Any) -> None:
    def script(d: Dialog) -> None:
        answer = d.connect("a").call(api_versions(), record=False)
        (entry,) = [k for k in answer.api_keys if int(k.api_key) == 21]
        d.record("DeleteRecords", [int(entry.min_version), int(entry.max_version)])

    converse(script)


@ON_BOTH_ENGINES
@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_start_moves_forward_only(converse: Any, version: int) -> None:
    def script(d: Dialog) -> None:
        c = d.connect("a")
        topic = f"dr-{d.group}"
        make_topic(c, topic)
        look(d, c, topic, 0)
        c.call(delete_records({topic: {0: 4}}, v=version))
        look(d, c, topic, 3, 4, 10)
        c.call(delete_records({topic: {0: 2}}, v=version))  # never backwards
        c.call(delete_records({topic: {0: 11}}, v=version))  # beyond the high watermark
        c.call(delete_records({topic: {0: -2}}, v=version))
        c.call(delete_records({topic: {0: 10}}, v=version))  # the high watermark itself
        look(d, c, topic, 9, 10)
        produced = c.call(produce_request(topic, 0, build_batch([(b"k", b"v", BASE_MS)])))
        d.record("produce answer's log start", int(
            produced.responses[0].partition_responses[0].log_start_offset))
        c.call(delete_records({topic: {0: -1}}, v=version))  # -1: the high watermark
        look(d, c, topic, 10, 11, 13)  # 13: beyond the log end

    converse(script)


@ON_BOTH_ENGINES
def test_every_refusal(converse: Any) -> None:
    def script(d: Dialog) -> None:
        c = d.connect("a")
        plain, compacted = f"dr-{d.group}", f"drc-{d.group}"
        make_topic(c, plain, partitions=2, records=3)
        make_topic(c, compacted, records=3, configs={"cleanup.policy": "compact"})
        c.call(delete_records({
            plain: {0: 1, 1: 1, 7: 0},  # partition 1 is empty: 1 is beyond its high watermark
            compacted: {0: 1},
            f"dr-missing-{d.group}": {0: 0},
            "__consumer_offsets": {0: 0},
        }))
        # One answer per partition named twice, the last offset counting.
        c.call(request_of(
            21, 2, timeout=datetime.timedelta(seconds=5), topics=(nested_of(
                21, 2, "DeleteRecordsTopic", name=plain, partitions=tuple(
                    nested_of(21, 2, "DeleteRecordsPartition", partition_index=0, offset=offset)
                    for offset in (3, 2))),)))

    converse(script)
