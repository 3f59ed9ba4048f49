"""TxnOffsetCommit's group checks and OffsetFetch require_stable, the same conversation against
a real Kafka 4.3.1 and an in-process kgroups broker.

Both verify a TxnOffsetCommit's producer with the transaction coordinator before any group
check (KIP-890; tests/differential/test_diff_transactions.py compares the refusals), so the
producer is a real one on both (InitProducerId, AddOffsetsToTxn)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from broker_wire_helpers import connect, create_topic, nested_of, request_of
from tests.broker.servers import InProcessBroker
from tests.kafka_harness import KafkaBroker

from kgroups.tools.wire_client import KafkaWireClient

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
TXN_COMMIT, FETCH, JOIN, SYNC = 28, 9, 11, 14
GROUP = "txn-diff"


def _retry(call: Any, done: Any) -> Any:
    for _ in range(120):
        answer = call()
        if done(answer):
            return answer
        time.sleep(0.5)
    raise AssertionError(f"no answer: {answer}")


def _begin_transaction(client: KafkaWireClient) -> tuple[int, int]:
    """A real producer in a transaction holding the group's offsets (Kafka needs one)."""
    def init() -> Any:
        client.call(request_of(10, 4, key_type=1, coordinator_keys=("txn-diff-id",)))
        return client.call(request_of(
            22, 5, transactional_id="txn-diff-id",
            transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))

    started = _retry(init, lambda r: int(r.error_code) == 0)
    producer_id, epoch = int(started.producer_id), int(started.producer_epoch)
    added = client.call(request_of(25, 4, transactional_id="txn-diff-id",
                                   producer_id=producer_id, producer_epoch=epoch,
                                   group_id=GROUP))
    assert int(added.error_code) == 0
    return producer_id, epoch


def _commit(client: KafkaWireClient, version: int, producer: tuple[int, int], *,
            generation: int = -1, member_id: str = "", instance_id: str | None = None
            ) -> list[int]:
    response = client.call(request_of(
        TXN_COMMIT, version, transactional_id="txn-diff-id", group_id=GROUP,
        producer_id=producer[0], producer_epoch=producer[1], generation_id=generation,
        member_id=member_id, group_instance_id=instance_id,
        topics=(nested_of(TXN_COMMIT, version, "TxnOffsetCommitRequestTopic", name="events",
                          partitions=(nested_of(
                              TXN_COMMIT, version, "TxnOffsetCommitRequestPartition",
                              partition_index=0, committed_offset=17,
                              committed_leader_epoch=-1, committed_metadata=""),)),)))
    return [int(p.error_code) for t in response.topics for p in t.partitions]


def _fetch(client: KafkaWireClient, version: int, stable: bool) -> tuple[int, list[Any]]:
    if version >= 8:
        (group,) = client.call(request_of(FETCH, version, require_stable=stable, groups=(
            nested_of(FETCH, version, "OffsetFetchRequestGroup", group_id=GROUP,
                      member_id=None, member_epoch=-1, topics=(nested_of(
                          FETCH, version, "OffsetFetchRequestTopics", name="events",
                          partition_indexes=(0,)),)),))).groups
        return int(group.error_code), [(int(p.committed_offset), int(p.error_code))
                                       for t in group.topics for p in t.partitions]
    response = client.call(request_of(FETCH, version, group_id=GROUP, require_stable=stable,
                                      topics=(nested_of(FETCH, version,
                                                        "OffsetFetchRequestTopic",
                                                        name="events",
                                                        partition_indexes=(0,)),)))
    return int(response.error_code), [(int(p.committed_offset), int(p.error_code))
                                      for t in response.topics for p in t.partitions]


def conversation(port: int) -> list[Any]:
    """What one broker answers."""
    seen: list[Any] = []
    with connect(port) as client:
        create_topic(client, "events", 2)
        joined = _retry(lambda: client.call(request_of(
            JOIN, 9, group_id=GROUP, session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id="",
            group_instance_id="i1", protocol_type="consumer", reason=None,
            protocols=(nested_of(JOIN, 9, "JoinGroupRequestProtocol", name="range",
                                 metadata=b""),))), lambda r: int(r.error_code) == 0)
        member, generation = joined.member_id, int(joined.generation_id)
        synced = client.call(request_of(
            SYNC, 5, group_id=GROUP, generation_id=generation, member_id=member,
            group_instance_id="i1", protocol_type="consumer", protocol_name="range",
            assignments=(nested_of(SYNC, 5, "SyncGroupRequestAssignment", member_id=member,
                                   assignment=b""),)))
        assert int(synced.error_code) == 0
        producer = _begin_transaction(client)
        for version in (3, 4, 5):
            seen.append(("unknown member", version,
                         _commit(client, version, producer, generation=generation,
                                 member_id="ghost")))
            seen.append(("illegal generation", version,
                         _commit(client, version, producer, generation=generation + 1,
                                 member_id=member, instance_id="i1")))
            seen.append(("fenced instance", version,
                         _commit(client, version, producer, generation=generation,
                                 member_id="other", instance_id="i1")))
        seen.append(("no member fields, live group", 2, _commit(client, 2, producer)))
        seen.append(("the member", 3, _commit(client, 3, producer, generation=generation,
                                              member_id=member, instance_id="i1")))
        for version in (7, 9):
            seen.append(("require_stable", version, _fetch(client, version, True)))
        seen.append(("plain fetch", 9, _fetch(client, 9, False)))
    return seen


@pytest.fixture(scope="module")
def kafka_answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-txn-offsets"))
    broker.start()
    try:
        yield conversation(broker.port)
    finally:
        broker.stop()


def test_group_checks_and_require_stable_as_kafka(kafka_answers: list[Any],
                                                  make_inprocess_broker: Any) -> None:
    broker: InProcessBroker = make_inprocess_broker("group.initial.rebalance.delay.ms=0")
    broker.call(broker.broker.coordinator.wait_loaded)
    assert conversation(broker.port) == kafka_answers
