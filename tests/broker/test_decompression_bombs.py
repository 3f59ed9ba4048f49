"""A compressed megabyte can hold a million empty records. Such a batch must cost the broker
no more than its answer needs, and never stall other clients: produced to a compacted topic,
its keys are read in a worker thread while the event loop serves everyone else; read back
with Fetch v0 (down-converted to the old message format), only the records that fit the
answer are parsed."""

from __future__ import annotations

import datetime
import select

import pytest
from broker_wire_helpers import (
    connect,
    create_topic,
    metadata_request,
    produce_request,
    raw_socket,
    read_frame,
)
from tests.broker.servers import InProcessBroker

import kgroups.broker.down_convert as down_convert_module
from kgroups.broker.legacy_schemas import nested
from kgroups.broker.wire import decode_response, encode_request, request_type, response_type
from kgroups.log.batch import _assemble, _varint, build_batch
from kgroups.log.compression import Compression, compress

RECORDS = 500_000


def _empty_records_batch(count: int, *, keyed: bool) -> bytes:
    """One zstd batch of `count` records with no value (and no key unless `keyed`)."""
    key = b"\x00" if keyed else b"\x01"  # zigzag 0: an empty key; 1: no key
    body = b"".join(
        _varint(len(record)) + record
        for record in (b"\x00\x00" + _varint(i) + key + b"\x01\x00" for i in range(count)))
    return _assemble(body=compress(Compression.ZSTD, body), base_offset=0,
                     partition_leader_epoch=-1, attributes=int(Compression.ZSTD),
                     last_offset_delta=count - 1, base_timestamp=1, max_timestamp=1,
                     producer_id=-1, producer_epoch=-1, base_sequence=-1, count=count)


def test_keyless_records_to_a_compacted_topic_leave_others_served(
        inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "compacted", configs={"cleanup.policy": "compact"})
    bomb = _empty_records_batch(RECORDS, keyed=False)
    producer = raw_socket(inprocess_broker.port, timeout=60)
    request = produce_request("compacted", 0, bomb)
    producer.sendall(encode_request(1, "bomb", request))
    with connect(inprocess_broker.port) as bystander:
        bystander.call(metadata_request(all_topics=True))
        # Answered while the bomb's keys are still being read.
        assert select.select([producer], [], [], 0)[0] == []
    _, response = decode_response(response_type(0, int(request.__version__)),
                                  read_frame(producer))
    producer.close()
    (partition,) = response.responses[0].partition_responses
    assert int(partition.error_code) == 87  # INVALID_RECORD
    assert partition.error_message.startswith(
        f"One or more records have been rejected due to {RECORDS} record errors in total")
    # Kafka lists all 500,000 (~45 MB); kgroups the first thousand (docs/compatibility.md).
    assert [int(e.batch_index) for e in partition.record_errors] == list(range(1000))


def _fetch_v0(client: object, topic: str, offset: int, max_bytes: int) -> bytes:
    request_cls = request_type(1, 0)
    topic_cls = nested(request_cls, "topics")
    partition_cls = nested(topic_cls, "partitions")
    response = client.call(request_cls(  # type: ignore[attr-defined]
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, topics=(topic_cls(
            topic=topic, partitions=(partition_cls(
                partition=0, fetch_offset=offset, partition_max_bytes=max_bytes),)),)))
    (partition,) = response.responses[0].partitions
    assert int(partition.error_code) == 0
    return bytes(partition.records)


def _message_offsets(message_set: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos < len(message_set):
        offsets.append(int.from_bytes(message_set[pos:pos + 8], "big"))
        pos += 12 + int.from_bytes(message_set[pos + 8:pos + 12], "big")
    return offsets


@pytest.mark.parametrize("fetch_offset", [0, 123_456])
def test_fetch_v0_parses_only_the_records_its_answer_holds(
        inprocess_broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch,
        fetch_offset: int) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "plain")
        client.call(produce_request("plain", 0, _empty_records_batch(RECORDS, keyed=True)))
    parsed: list[int | None] = []
    records_of = down_convert_module.records_of

    def counting(*args: object, limit: int | None = None) -> list[tuple[object, ...]]:
        rows = records_of(*args, limit=limit)  # type: ignore[arg-type]
        parsed.append(len(rows))
        return rows

    monkeypatch.setattr(down_convert_module, "records_of", counting)
    with connect(inprocess_broker.port) as client:
        messages = _fetch_v0(client, "plain", fetch_offset, 100_000)
    offsets = _message_offsets(messages)
    # Magic 0 messages of an empty key and no value: 26 bytes each, as many as fit.
    assert offsets == list(range(fetch_offset, fetch_offset + 100_000 // 26))
    assert parsed and sum(parsed) <= fetch_offset + 100_000 // 26 + 1


def test_a_batch_of_keyed_records_is_taken_by_a_compacted_topic(
        inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "compacted", configs={"cleanup.policy": "compact"})
        keyed = _empty_records_batch(10_000, keyed=True)
        mixed = build_batch([(b"k", b"v", 1), (None, b"v", 1), (b"k", None, 1)])
        answers = [client.call(produce_request("compacted", 0, batch))
                   for batch in (keyed, mixed)]
    first, second = (a.responses[0].partition_responses[0] for a in answers)
    assert (int(first.error_code), int(first.base_offset)) == (0, 0)
    assert int(second.error_code) == 87
    assert [int(e.batch_index) for e in second.record_errors] == [1]
    assert "due to 1 record errors in total" in second.error_message
