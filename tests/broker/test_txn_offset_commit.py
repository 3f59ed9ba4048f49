"""TxnOffsetCommit (API 28) over a socket to an in-process broker, in every version Kafka 4.3.1
serves (v0-v5), from a producer whose transaction holds the group's offsets partition
(InitProducerId, AddOffsetsToTxn: the group coordinator verifies it with the transaction
coordinator, KIP-890): the offsets stay pending (OffsetFetch require_stable answers
UNSTABLE_OFFSET_COMMIT, a plain fetch the last committed value) until the producer's marker goes
through `write_markers`, which hands a __consumer_offsets marker to the group coordinator; the
log then holds the producer's transactional batch followed by its control batch."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from broker_wire_helpers import connect, create_topic, fetch_request, nested_of, request_of
from tests.broker.servers import InProcessBroker

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import RequestContext
from kgroups.broker.broker import Broker
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation, ResourceType
from kgroups.broker.txn_markers import MarkerWrite, write_markers
from kgroups.coordinator import partition_for
from kgroups.errors import ErrorCode
from kgroups.log.batch import CONTROL, TRANSACTIONAL, iter_batches
from kgroups.records.codec import decode_record
from kgroups.tools.wire_client import KafkaWireClient

TXN_COMMIT, FETCH, JOIN, INIT_PRODUCER_ID, ADD_OFFSETS = 28, 9, 11, 22, 25
E = ErrorCode


def _ready(make_inprocess_broker: Any) -> InProcessBroker:
    broker: InProcessBroker = make_inprocess_broker("group.initial.rebalance.delay.ms=0")
    broker.call(broker.broker.coordinator.wait_loaded)
    with connect(broker.port) as client:
        create_topic(client, "events", 2)
    return broker


def _begin(client: KafkaWireClient, *groups: str) -> tuple[int, int]:
    """The producer id and epoch of "txn-a", in a transaction holding the groups' offsets."""
    started = client.call(request_of(
        INIT_PRODUCER_ID, 5, transactional_id="txn-a",
        transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert started.error_code == E.NONE
    producer_id, epoch = int(started.producer_id), int(started.producer_epoch)
    for group in groups:
        added = client.call(request_of(ADD_OFFSETS, 4, transactional_id="txn-a",
                                       producer_id=producer_id, producer_epoch=epoch,
                                       group_id=group))
        assert added.error_code == E.NONE
    return producer_id, epoch


def _txn_commit(client: KafkaWireClient, version: int, group: str, producer_id: int,
                epoch: int, offsets: dict[tuple[str, int], int], *, generation: int = -1,
                member_id: str = "", instance_id: str | None = None) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(nested_of(
            TXN_COMMIT, version, "TxnOffsetCommitRequestPartition", partition_index=partition,
            committed_offset=offset, committed_leader_epoch=4, committed_metadata="meta"))
    response = client.call(request_of(
        TXN_COMMIT, version, transactional_id="txn-a", group_id=group, producer_id=producer_id,
        producer_epoch=epoch, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id,
        topics=tuple(nested_of(TXN_COMMIT, version, "TxnOffsetCommitRequestTopic", name=name,
                               partitions=tuple(parts)) for name, parts in by_topic.items())))
    return {(t.name, int(p.partition_index)): int(p.error_code)
            for t in response.topics for p in t.partitions}


def _fetch(client: KafkaWireClient, version: int, group: str, *, stable: bool
           ) -> dict[int, tuple[int, int, int]]:
    """partition -> (offset, leader epoch, error) of events-0 and events-1."""
    asked = ("events", (0, 1))
    if version >= 8:
        (fetched,) = client.call(request_of(FETCH, version, require_stable=stable, groups=(
            nested_of(FETCH, version, "OffsetFetchRequestGroup", group_id=group, member_id=None,
                      member_epoch=-1, topics=(nested_of(
                          FETCH, version, "OffsetFetchRequestTopics", name=asked[0],
                          partition_indexes=asked[1]),)),))).groups
        assert fetched.error_code == E.NONE
        topics = fetched.topics
    else:
        response = client.call(request_of(FETCH, version, group_id=group, require_stable=stable,
                                          topics=(nested_of(
                                              FETCH, version, "OffsetFetchRequestTopic",
                                              name=asked[0], partition_indexes=asked[1]),)))
        assert response.error_code == E.NONE
        topics = response.topics
    return {int(p.partition_index): (int(p.committed_offset), int(p.committed_leader_epoch),
                                     int(p.error_code))
            for t in topics for p in t.partitions}


def _end(broker: InProcessBroker, group: str, producer_id: int, epoch: int,
         commits: bool) -> list[ErrorCode]:
    marker = MarkerWrite("__consumer_offsets", partition_for(group, 50), producer_id, epoch,
                         commits, 0)
    return broker.call(lambda: write_markers(broker.broker, [marker]))


@pytest.mark.parametrize("version", range(6))
def test_pending_until_the_marker_in_each_version(make_inprocess_broker: Any,
                                                  version: int) -> None:
    broker = _ready(make_inprocess_broker)
    group = f"txg-{version}"
    with connect(broker.port) as client:
        producer_id, epoch = _begin(client, group)
        assert _txn_commit(client, version, group, producer_id, epoch,
                           {("events", 0): 42, ("missing", 0): 1}) == {
            ("events", 0): E.NONE, ("missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert _fetch(client, 9, group, stable=False)[0] == (-1, -1, E.NONE)
        assert _fetch(client, 9, group, stable=True)[0][2] == E.UNSTABLE_OFFSET_COMMIT
        assert _fetch(client, 7, group, stable=True)[0][2] == E.UNSTABLE_OFFSET_COMMIT
        assert _fetch(client, 9, group, stable=True)[1] == (-1, -1, E.NONE)
        assert _end(broker, group, producer_id, epoch, commits=True) == [E.NONE]
        leader_epoch = 4 if version >= 2 else -1
        assert _fetch(client, 9, group, stable=True)[0] == (42, leader_epoch, E.NONE)

        # The log: the producer's transactional batch, then its COMMIT control batch.
        response = client.call(fetch_request("__consumer_offsets", partition_for(group, 50), 0))
        (data,) = response.responses[0].partitions
        batches = list(iter_batches(bytes(data.records or b"")))
    mine = [b for b in batches if b.producer_id == producer_id]
    # Kafka 4.3.1's layout (read from its segment after a confluent-kafka producer's
    # send_offsets_to_transaction): attributes 0x10 with base sequence 0, then 0x30 with none.
    assert [(b.attributes, b.producer_epoch, b.base_sequence) for b in mine] == [
        (TRANSACTIONAL, epoch, 0), (TRANSACTIONAL | CONTROL, epoch, -1)]
    (record,) = mine[0].records
    decoded = decode_record(record.key, record.value)
    assert (decoded.key.group, decoded.key.topic, decoded.value.offset) == (group, "events", 42)


def test_abort_marker_drops_the_offsets(make_inprocess_broker: Any) -> None:
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        producer_id, epoch = _begin(client, "aborting")
        assert _txn_commit(client, 5, "aborting", producer_id, epoch, {("events", 1): 9}) == {
            ("events", 1): E.NONE}
        assert _fetch(client, 9, "aborting", stable=True)[1][2] == E.UNSTABLE_OFFSET_COMMIT
        assert _end(broker, "aborting", producer_id, epoch, commits=False) == [E.NONE]
        assert _fetch(client, 9, "aborting", stable=True)[1] == (-1, -1, E.NONE)


def test_group_fencing_errors(make_inprocess_broker: Any) -> None:
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        pid, epoch = _begin(client, "nogroup", "made")
        # A group that does not exist, with a generation: ILLEGAL_GENERATION (no group made).
        assert _txn_commit(client, 3, "nogroup", pid, epoch, {("events", 0): 1}, generation=1,
                           member_id="m") == {("events", 0): E.ILLEGAL_GENERATION}
        # An empty group made by a commit without generation; then an unknown member.
        assert _txn_commit(client, 3, "made", pid, epoch, {("events", 0): 1}) == {
            ("events", 0): E.NONE}
        assert _txn_commit(client, 3, "made", pid, epoch, {("events", 0): 1}, generation=0,
                           member_id="ghost") == {("events", 0): E.UNKNOWN_MEMBER_ID}


@pytest.mark.parametrize(("version", "refused"), [(3, E.INVALID_TXN_STATE),
                                                  (4, E.TRANSACTION_ABORTABLE)])
def test_offsets_outside_the_transaction_are_refused(make_inprocess_broker: Any, version: int,
                                                     refused: ErrorCode) -> None:
    """KIP-890: the transaction coordinator is asked first; a transaction without the group's
    offsets partition (no AddOffsetsToTxn) is refused and nothing is held pending; an unknown
    producer is INVALID_PRODUCER_ID_MAPPING. v5 (transaction version 2) adds the partition."""
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        pid, epoch = _begin(client)
        assert _txn_commit(client, version, "outside", pid, epoch, {("events", 0): 3}) == {
            ("events", 0): refused}
        assert _txn_commit(client, version, "outside", pid + 1, epoch, {("events", 0): 3}) == {
            ("events", 0): E.INVALID_PRODUCER_ID_MAPPING}
        assert _fetch(client, 9, "outside", stable=True)[0] == (-1, -1, E.NONE)
        assert _txn_commit(client, 5, "outside", pid, epoch, {("events", 0): 3}) == {
            ("events", 0): E.NONE}
        assert _fetch(client, 9, "outside", stable=True)[0][2] == E.UNSTABLE_OFFSET_COMMIT


def test_a_restarted_broker_keeps_the_pending_offsets(make_inprocess_broker: Any) -> None:
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        pid, epoch = _begin(client, "survivor")
        _txn_commit(client, 5, "survivor", pid, epoch, {("events", 0): 5})
    config = broker.broker.config
    broker.call(broker.broker.stop)

    async def restart() -> Broker:
        again = Broker(config)
        await again.start()
        await again.coordinator.wait_loaded()
        return again

    restarted = broker.call(restart)
    try:
        second = InProcessBroker(restarted, broker.loop)
        with connect(restarted.port) as client:
            assert _fetch(client, 9, "survivor", stable=True)[0][2] == E.UNSTABLE_OFFSET_COMMIT
            assert _end(second, "survivor", pid, epoch, commits=True) == [E.NONE]
            assert _fetch(client, 9, "survivor", stable=True)[0] == (5, 4, E.NONE)
    finally:
        broker.call(restarted.stop)


class _Rights:
    """A principal's rights for the rule: the (operation, resource type, name) it holds."""

    def __init__(self, *held: tuple[Operation, ResourceType, str]) -> None:
        self.held = set(held)

    def __call__(self, operation: Operation, kind: ResourceType, name: str) -> bool:
        return (operation, kind, name) in self.held

    def group(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.GROUP, name)

    def topic(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.TOPIC, name)


@pytest.mark.parametrize("version", [0, 5])
def test_acl_rule_is_kafkas(version: int) -> None:
    """TransactionalId Write first, then Group Read (either refused: every partition carries
    it), then Topic Read per topic (the refused ones alone answer TOPIC_AUTHORIZATION_FAILED)."""
    request = request_of(
        TXN_COMMIT, version, transactional_id="tx", group_id="g", producer_id=1,
        producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
        topics=tuple(nested_of(TXN_COMMIT, version, "TxnOffsetCommitRequestTopic", name=name,
                               partitions=(nested_of(
                                   TXN_COMMIT, version, "TxnOffsetCommitRequestPartition",
                                   partition_index=0, committed_offset=1,
                                   committed_leader_epoch=-1, committed_metadata=None),))
                     for name in ("ok", "no")))
    passed: list[Any] = []

    async def inner(ctx: RequestContext, forwarded: Any) -> Any:
        passed.append(forwarded)
        return authz.response(ctx, topics=tuple(
            authz.nested(ctx, "TxnOffsetCommitResponseTopic", name=t.name,
                         partitions=authz.partition_entries(
                             ctx, "TxnOffsetCommitResponsePartition", t, E.NONE))
            for t in forwarded.topics))

    ctx = RequestContext(ApiKey.TXN_OFFSET_COMMIT, version, 1, None, "127.0.0.1",
                         None)  # type: ignore[arg-type]
    rule = authz.RULES[ApiKey.TXN_OFFSET_COMMIT]

    def answer(rights: _Rights) -> dict[str, list[int]]:
        response = asyncio.run(rule(ctx, request, inner, rights))  # type: ignore[arg-type]
        return {t.name: [int(p.error_code) for p in t.partitions] for t in response.topics}

    txn = (Operation.WRITE, ResourceType.TRANSACTIONAL_ID, "tx")
    group = (Operation.READ, ResourceType.GROUP, "g")
    topic = (Operation.READ, ResourceType.TOPIC, "ok")
    assert answer(_Rights(group, topic)) == {"ok": [53], "no": [53]}
    assert answer(_Rights(txn, topic)) == {"ok": [30], "no": [30]}
    assert passed == []
    assert answer(_Rights(txn, group, topic)) == {"ok": [0], "no": [29]}
    assert [t.name for t in passed[0].topics] == ["ok"]
