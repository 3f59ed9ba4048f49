"""__share_group_state records: kgroups' encoding read back, read by Kafka 4.3.1's DumpLogSegments
--share-group-state-decoder, and Kafka's own records (written by its share coordinator for a
conversation of the share-state APIs) decoded and re-encoded to Kafka's bytes; the same
conversation on kgroups leaves the same records, ShareSnapshot and ShareUpdate at the same
places (`share.coordinator.snapshot.update.records.per.snapshot` set low on both)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import (
    connect,
    create_topic,
    metadata_request,
    nested_of,
    request_of,
)
from tests.broker.servers import ServerProcess
from tests.records.segment_dump import dump_segment

from kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker, kgroups_overrides
from kgroups.log.batch import iter_batches
from kgroups.records.share_state import (
    ShareSnapshotValue,
    ShareStateKey,
    ShareStateValue,
    ShareUpdateValue,
    StateBatch,
    decode_share_state_key,
    decode_share_state_value,
    encode_share_state_key,
    encode_share_state_value,
)
from kgroups.records.wire import RecordDecodeError
from kgroups.share_coordinator.placement import coordinator_key, state_partition, uuid_text

TOPIC_ID = uuid.UUID("9d459258-06e5-4887-abed-9d3d4c0d0ded")
SNAPSHOT = ShareSnapshotValue(3, 2, 7, 100, 1_700_000_000_000, 1_700_000_000_500,
                              (StateBatch(100, 104, 2, 1), StateBatch(105, 109, 0, 3)), 5)
SNAPSHOT_NO_COUNT = ShareSnapshotValue(0, 0, 0, -1, 1, 2, ())
UPDATE = ShareUpdateValue(3, 7, -1, (StateBatch(110, 110, 4, 5),), 6)
UPDATE_NO_COUNT = ShareUpdateValue(0, -1, 12, ())
RECORDS: list[tuple[ShareStateKey, ShareStateValue | None]] = [
    (ShareStateKey("workers", TOPIC_ID, 0), SNAPSHOT),
    (ShareStateKey("workers", TOPIC_ID, 0, snapshot=False), UPDATE),
    (ShareStateKey("wörkers:2", TOPIC_ID, 11), SNAPSHOT_NO_COUNT),
    (ShareStateKey("workers", TOPIC_ID, 1, snapshot=False), UPDATE_NO_COUNT),
    (ShareStateKey("workers", TOPIC_ID, 0), None)]


@pytest.mark.parametrize("key, value", RECORDS[:-1])
def test_values_read_back_as_written(key: ShareStateKey, value: ShareStateValue) -> None:
    assert decode_share_state_key(encode_share_state_key(key)) == key
    assert decode_share_state_value(key, encode_share_state_value(value)) == value


def test_the_count_of_delivered_offsets_is_a_tagged_field_written_only_when_known() -> None:
    with_count = encode_share_state_value(UPDATE)
    without = encode_share_state_value(ShareUpdateValue(3, 7, -1, UPDATE.state_batches))
    # tag section: one field, tag 0, 4 bytes, the int32 count; else an empty section.
    assert with_count == without[:-1] + b"\x01\x00\x04\x00\x00\x00\x06"
    assert without.endswith(b"\x00")
    key = encode_share_state_key(ShareStateKey("g", TOPIC_ID, 5, snapshot=False))
    assert key == b"\x00\x01\x00\x01g" + TOPIC_ID.bytes + b"\x00\x00\x00\x05"


def test_damaged_bytes_say_where() -> None:
    key = ShareStateKey("workers", TOPIC_ID, 0)
    raw = encode_share_state_value(SNAPSHOT)
    with pytest.raises(RecordDecodeError, match="stateBatches"):
        decode_share_state_value(key, raw[:45])
    with pytest.raises(RecordDecodeError, match="unknown version 1"):
        decode_share_state_value(key, b"\x00\x01" + raw[2:])
    with pytest.raises(RecordDecodeError, match="not a share state key"):
        decode_share_state_key(b"\x00\x02\x00\x01g")
    with pytest.raises(RecordDecodeError, match="topicId"):
        decode_share_state_key(encode_share_state_key(key)[:20])
    assert decode_share_state_value(key, None) is None


@pytest.mark.kafka
def test_kafka_decodes_what_kgroups_encodes(tmp_path: Path) -> None:
    dumped = dump_segment(tmp_path, "__share_group_state", "--share-group-state-decoder", [
        (encode_share_state_key(key), None if value is None else encode_share_state_value(value))
        for key, value in RECORDS])
    assert [_key_of(json.loads(key)) for _, key, _ in dumped] == [key for key, _ in RECORDS]
    assert dumped[-1][2] == "<DELETE>"
    assert [_value_of(json.loads(payload)) for _, _, payload in dumped[:-1]] == [
        value for _, value in RECORDS[:-1]]


def _key_of(printed: dict[str, Any]) -> ShareStateKey:
    data = printed["data"]
    topic_id = next(t for t in (TOPIC_ID,) if uuid_text(t) == data["topicId"])
    return ShareStateKey(data["groupId"], topic_id, data["partition"], printed["type"] == "0")


def _value_of(printed: dict[str, Any]) -> ShareStateValue:
    """DumpLogSegments' JSON of a value, as the value kgroups encoded."""
    data = printed["data"]
    assert printed["version"] == "0"
    batches = tuple(StateBatch(b["firstOffset"], b["lastOffset"], b["deliveryState"],
                               b["deliveryCount"]) for b in data["stateBatches"])
    count = data.get("deliveryCompleteCount", -1)
    if "stateEpoch" in data:
        return ShareSnapshotValue(data["snapshotEpoch"], data["stateEpoch"], data["leaderEpoch"],
                                  data["startOffset"], data["createTimestamp"],
                                  data["writeTimestamp"], batches, count)
    return ShareUpdateValue(data["snapshotEpoch"], data["leaderEpoch"], data["startOffset"],
                            batches, count)


# -- the same conversation on Kafka and on kgroups, their records compared -----------------------

SNAPSHOT_EVERY = {"share.coordinator.snapshot.update.records.per.snapshot": "3"}
INITIALIZE, READ, WRITE, DELETE = 83, 84, 85, 86
GROUP, TOPIC = "records", "share-records"


@pytest.fixture(scope="module")
def kafka_with_frequent_snapshots(tmp_path_factory: pytest.TempPathFactory
                                  ) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-share-state"),
                         settings={**KAFKA_TEST_SETTINGS, **SNAPSHOT_EVERY})
    broker.start()
    yield broker
    broker.stop()


def _call(port: int, api: int, v: int, topic_class: str, **partition: Any) -> Any:
    with connect(port) as client:
        topic_id = client.call(metadata_request(TOPIC, auto_create=False)).topics[0].topic_id
        answer = client.call(request_of(api, v, group_id=GROUP, topics=(nested_of(
            api, v, topic_class, topic_id=topic_id, partitions=(nested_of(
                api, v, "PartitionData", **partition),)),)))
    return answer.results[0].partitions[0]


def _converse(port: int) -> list[Any]:
    """Initialize, writes that overlap and move the start offset, a read by a new leader,
    a re-initialization, a delete; the answers (retrying while Kafka loads the partition)."""
    with connect(port) as client:
        create_topic(client, TOPIC, 2)
        deadline = time.monotonic() + 60
        while True:
            answer = client.call(request_of(10, 6, key_type=2, coordinator_keys=(
                f"{GROUP}:AAAAAAAAAAAAAAAAAAAAAA:0",))).coordinators[0]
            if int(answer.error_code) == 0:
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
    while int(_call(port, INITIALIZE, 0, "InitializeStateData", partition=1, state_epoch=0,
                    start_offset=0).error_code) != 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    answers = []
    for step in range(8):
        first = step * 5
        batches = tuple(nested_of(WRITE, 1, "StateBatch", first_offset=a, last_offset=b,
                                  delivery_state=s, delivery_count=n)
                        for a, b, s, n in ((first, first + 6, 0, 1), (first + 1, first + 2, 2, 1)))
        answers.append(_call(port, WRITE, 1, "WriteStateData", partition=1, state_epoch=0,
                             leader_epoch=step // 3 if step <= 4 else 9,
                             start_offset=max(first - 4, 0),
                             delivery_complete_count=step, state_batches=batches))
        if step == 4:
            answers.append(_call(port, READ, 0, "ReadStateData", partition=1, leader_epoch=9))
    answers.append(_call(port, READ, 0, "ReadStateData", partition=1, leader_epoch=9))
    answers.append(_call(port, INITIALIZE, 0, "InitializeStateData", partition=1,
                         state_epoch=1, start_offset=50))
    answers.append(_call(port, DELETE, 0, "DeleteStateData", partition=1))
    return answers


def _records(data_dir: Path, port: int) -> list[tuple[bytes, bytes | None]]:
    with connect(port) as client:
        topic_id = client.call(metadata_request(TOPIC, auto_create=False)).topics[0].topic_id
    index = state_partition(coordinator_key(GROUP, topic_id, 1))
    data = b"".join(p.read_bytes() for p in sorted(
        (data_dir / f"__share_group_state-{index}").glob("*.log")))
    return [(record.key, record.value) for batch in iter_batches(data)
            for record in batch.records]


def _comparable(key: ShareStateKey, value: ShareStateValue | None) -> Any:
    """A record without what differs between brokers (topic id, timestamps)."""
    if isinstance(value, ShareSnapshotValue):
        value = ShareSnapshotValue(value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                   value.start_offset, 0, 0, value.state_batches,
                                   value.delivery_complete_count)
    return (key.group_id, key.partition, key.snapshot, value)


@pytest.mark.kafka
def test_kafka_and_kgroups_write_the_same_records(
        kafka_with_frequent_snapshots: KafkaBroker, tmp_path: Path) -> None:
    kafka = kafka_with_frequent_snapshots
    kafka_answers = _converse(kafka.port)
    kafka_records = _records(kafka.data_dir, kafka.port)
    # Kafka's bytes decode, and re-encode to the same bytes.
    decoded = []
    for key_bytes, value_bytes in kafka_records:
        key = decode_share_state_key(key_bytes)
        value = decode_share_state_value(key, value_bytes)
        assert encode_share_state_key(key) == key_bytes
        assert (None if value is None else encode_share_state_value(value)) == value_bytes
        decoded.append((key, value))
    kinds = "".join("D" if v is None else "S" if k.snapshot else "U" for k, v in decoded)
    # Kafka's cadence: a snapshot after three updates; the read by a new leader is an update.
    assert kinds == "SUUUSUUUSUSD"

    server = ServerProcess(tmp_path / "data", tmp_path / "server.log",
                           kgroups_overrides({**KAFKA_TEST_SETTINGS, **SNAPSHOT_EVERY}))
    server.start()
    try:
        kgroups_answers = _converse(server.port)
        kgroups_records = _records(server.data_dir, server.port)
    finally:
        server.close()
    assert [_plain(a) for a in kgroups_answers] == [_plain(a) for a in kafka_answers]
    ours = [(decode_share_state_key(k), k, v) for k, v in kgroups_records]
    assert [_comparable(key, decode_share_state_value(key, v)) for key, _, v in ours] == [
        _comparable(k, v) for k, v in decoded]


def _plain(answer: Any) -> Any:
    return repr(answer)
