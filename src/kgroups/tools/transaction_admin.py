"""Transactions administration over the Kafka wire, the operations behind `kgroups
transactions`, as kafka-transactions.sh performs them on any Kafka-compatible cluster.

Each question goes where Kafka's admin client sends it: ListTransactions to every broker (each
answers for the transactional ids it coordinates), DescribeTransactions to the id's coordinator
(FindCoordinator key type 1), DescribeProducers to the partition's leader, and the abort of a
hanging transaction, a WriteTxnMarkers ABORT, to that leader too (ClusterAction on the cluster
is needed where an authorizer runs). Every function returns plain data; the CLI formats it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kio.schema.describe_producers.v0 import request as describe_producers_request
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_transactions.v0.request import (
    ListTransactionsRequest as ListTransactionsRequestV0,
)
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1 import request as markers_request
from kio.static.primitive import i8, i16, i32, i64

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.errors import ErrorCode
from kgroups.tools.admin import AdminError
from kgroups.tools.topic_admin import metadata
from kgroups.tools.wire_client import KafkaWireClient

TRANSACTION_KEY_TYPE = 1
NO_OPEN_TRANSACTION = -1
# Where kafka-transactions find-hanging draws the line by default: transaction.max.timeout.ms.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES = 15


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int | None  # None: no transaction open
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int | None  # None: no transaction open


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int
    duration_minutes: int


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    host: str
    port: int


def _check(error_code: int, what: str) -> None:
    if int(error_code) != ErrorCode.NONE:
        raise AdminError(f"{what}: {ErrorCode(int(error_code)).name}")


@contextmanager
def _connection(bootstrap: KafkaWireClient, broker: Broker) -> Iterator[KafkaWireClient]:
    """A connection to `broker`: the bootstrap one when it is that broker."""
    if (broker.host, broker.port) == (bootstrap.host, bootstrap.port):
        yield bootstrap
        return
    with bootstrap.open_another(broker.host, broker.port) as other:
        yield other


def brokers(client: KafkaWireClient) -> list[Broker]:
    return sorted((Broker(int(b.node_id), b.host, int(b.port))
                   for b in metadata(client, []).brokers), key=lambda b: b.node_id)


def list_transactions(client: KafkaWireClient, states: tuple[str, ...] = (),
                      producer_ids: tuple[int, ...] = (), duration_ms: int = -1
                      ) -> list[TransactionListing]:
    """Every broker's transactional ids (each broker lists those it coordinates), sorted; a
    duration filter (ids whose transaction is open longer) needs ListTransactions v1."""
    ids = tuple(ProducerId(p) for p in producer_ids)
    found = []
    for broker in brokers(client):
        with _connection(client, broker) as connection:
            if duration_ms >= 0:
                connection.require(ApiKey.LIST_TRANSACTIONS, 1, "ListTransactions")
                request: Any = ListTransactionsRequest(
                    state_filters=states, producer_id_filters=ids,
                    duration_filter=i64(duration_ms))
            else:
                connection.require(ApiKey.LIST_TRANSACTIONS, 0, "ListTransactions")
                request = ListTransactionsRequestV0(
                    state_filters=states, producer_id_filters=ids)
            response = connection.call(request)
        _check(response.error_code, f"ListTransactions (broker {broker.node_id})")
        found += [TransactionListing(t.transactional_id, broker.node_id, int(t.producer_id),
                                     t.transaction_state) for t in response.transaction_states]
    return sorted(found, key=lambda t: t.transactional_id)


def describe_transaction(client: KafkaWireClient, transactional_id: str
                         ) -> TransactionDescription:
    client.require(ApiKey.FIND_COORDINATOR, 4, "FindCoordinator")
    (found,) = client.call(FindCoordinatorRequest(
        key_type=i8(TRANSACTION_KEY_TYPE), coordinator_keys=(transactional_id,))).coordinators
    _check(found.error_code, f"FindCoordinator({transactional_id})")
    coordinator = Broker(int(found.node_id), found.host, int(found.port))
    with _connection(client, coordinator) as connection:
        connection.require(ApiKey.DESCRIBE_TRANSACTIONS, 0, "DescribeTransactions")
        (state,) = connection.call(DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(transactional_id),))).transaction_states
    if int(state.error_code) == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        raise AdminError(f"Transactional id '{transactional_id}' does not exist.")
    _check(state.error_code, f"DescribeTransactions({transactional_id})")
    start_ms = round(state.transaction_start_time.timestamp() * 1000)
    return TransactionDescription(
        coordinator.node_id, transactional_id, int(state.producer_id),
        int(state.producer_epoch), state.transaction_state,
        round(state.transaction_timeout.total_seconds() * 1000),
        None if start_ms < 0 else start_ms,
        tuple(sorted((t.topic, int(p)) for t in state.topics for p in t.partitions)))


def _leaders(client: KafkaWireClient, topics: list[str] | None
             ) -> tuple[dict[int, Broker], dict[tuple[str, int], int]]:
    """The brokers by node id and each partition's leader, of the named topics (or all)."""
    answer = metadata(client, topics)
    nodes = {int(b.node_id): Broker(int(b.node_id), b.host, int(b.port)) for b in answer.brokers}
    leaders = {}
    for topic in answer.topics:
        if int(topic.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"Topic '{topic.name}' does not exist.")
        _check(topic.error_code, f"Metadata({topic.name})")
        leaders.update({(topic.name, int(p.partition_index)): int(p.leader_id)
                        for p in topic.partitions})
    return nodes, leaders


def describe_producers(client: KafkaWireClient, partitions: list[tuple[str, int]]
                       ) -> dict[tuple[str, int], list[ProducerState]]:
    """The producers each partition's leader knows, asked of each leader once."""
    nodes, leaders = _leaders(client, sorted({topic for topic, _ in partitions}))
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for key in partitions:
        if key not in leaders:
            raise AdminError(f"Partition {key[0]}-{key[1]} does not exist.")
        by_leader.setdefault(leaders[key], []).append(key)
    found: dict[tuple[str, int], list[ProducerState]] = {}
    for leader, keys in sorted(by_leader.items()):
        if leader not in nodes:
            raise AdminError(f"Partition {keys[0][0]}-{keys[0][1]} has no leader.")
        with _connection(client, nodes[leader]) as connection:
            found.update(_producers_of(connection, keys))
    return found


def _producers_of(client: KafkaWireClient, keys: list[tuple[str, int]]
                  ) -> dict[tuple[str, int], list[ProducerState]]:
    client.require(ApiKey.DESCRIBE_PRODUCERS, 0, "DescribeProducers")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in keys:
        by_topic.setdefault(topic, []).append(partition)
    response = client.call(describe_producers_request.DescribeProducersRequest(topics=tuple(
        describe_producers_request.TopicRequest(
            name=TopicName(topic), partition_indexes=tuple(i32(p) for p in indexes))
        for topic, indexes in by_topic.items())))
    found = {}
    for topic in response.topics:
        for partition in topic.partitions:
            _check(partition.error_code,
                   f"DescribeProducers({topic.name}-{int(partition.partition_index)})")
            found[(topic.name, int(partition.partition_index))] = sorted((ProducerState(
                int(p.producer_id), int(p.producer_epoch), int(p.coordinator_epoch),
                int(p.last_sequence), int(p.last_timestamp),
                None if int(p.current_txn_start_offset) == NO_OPEN_TRANSACTION
                else int(p.current_txn_start_offset)) for p in partition.active_producers),
                key=lambda p: p.producer_id)
    return found


def producer_at(client: KafkaWireClient, topic: str, partition: int, start_offset: int
                ) -> ProducerState:
    """The producer whose open transaction in the partition starts at `start_offset`."""
    for producer in describe_producers(client, [(topic, partition)])[(topic, partition)]:
        if producer.txn_start_offset == start_offset:
            return producer
    raise AdminError(f"Could not find any open transactions starting at offset {start_offset} "
                     f"on partition {topic}-{partition}")


def abort_transaction(client: KafkaWireClient, topic: str, partition: int, producer_id: int,
                      producer_epoch: int, coordinator_epoch: int) -> None:
    """An ABORT marker for the producer's open transaction in the partition, written by its
    leader (WriteTxnMarkers), as a transaction coordinator would; an epoch of -1 (no marker
    seen yet) is sent as 0, the first coordinator epoch."""
    nodes, leaders = _leaders(client, [topic])
    leader = nodes.get(leaders.get((topic, partition), -1))
    if leader is None:
        raise AdminError(f"Partition {topic}-{partition} does not exist or has no leader.")
    request = markers_request.WriteTxnMarkersRequest(markers=(markers_request.WritableTxnMarker(
        producer_id=ProducerId(producer_id), producer_epoch=i16(producer_epoch),
        transaction_result=False, coordinator_epoch=i32(max(coordinator_epoch, 0)),
        topics=(markers_request.WritableTxnMarkerTopic(
            name=TopicName(topic), partition_indexes=(i32(partition),)),)),))
    with _connection(client, leader) as connection:
        connection.require(ApiKey.WRITE_TXN_MARKERS, 1, "WriteTxnMarkers")
        (marker,) = connection.call(request).markers
    for answered in marker.topics:
        for result in answered.partitions:
            _check(result.error_code, f"WriteTxnMarkers({topic}-{partition})")


def find_hanging(client: KafkaWireClient, now_ms: int, *, topic: str | None = None,
                 partition: int | None = None, broker_id: int | None = None,
                 max_timeout_minutes: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES
                 ) -> list[HangingTransaction]:
    """Open transactions (DescribeProducers) older than the longest transaction timeout that
    their coordinator does not hold open on that partition with that producer and epoch: their
    records keep read_committed consumers (and the last stable offset) waiting forever."""
    _, leaders = _leaders(client, None if topic is None else [topic])
    wanted = [key for key, leader in leaders.items()
              if (topic is None or key[0] == topic) and (partition is None or key[1] == partition)
              and (broker_id is None or leader == broker_id)]
    if topic is not None and partition is not None and not wanted:
        raise AdminError(f"Partition {topic}-{partition} does not exist.")
    limit_ms = max_timeout_minutes * 60_000
    candidates = [(key, p, p.txn_start_offset)
                  for key, producers in describe_producers(client, wanted).items()
                  for p in producers
                  if p.txn_start_offset is not None and now_ms - p.last_timestamp >= limit_ms]
    if not candidates:
        return []
    owners: dict[int, list[str]] = {}
    for listing in list_transactions(client, producer_ids=tuple(
            sorted({p.producer_id for _, p, _ in candidates}))):
        owners.setdefault(listing.producer_id, []).append(listing.transactional_id)
    hanging = []
    for (name, index), producer, start in sorted(candidates,
                                                 key=lambda c: (c[0], c[1].producer_id)):
        if not any(_holds(client, tid, name, index, producer)
                   for tid in owners.get(producer.producer_id, [])):
            hanging.append(HangingTransaction(
                name, index, producer.producer_id, producer.producer_epoch,
                producer.coordinator_epoch, start, producer.last_timestamp,
                (now_ms - producer.last_timestamp) // 60_000))
    return hanging


def _holds(client: KafkaWireClient, transactional_id: str, topic: str, partition: int,
           producer: ProducerState) -> bool:
    """Whether the coordinator's open transaction of the id is this one, on this partition."""
    described = describe_transaction(client, transactional_id)
    return (described.state in ("Ongoing", "PrepareCommit", "PrepareAbort")
            and described.producer_id == producer.producer_id
            and described.producer_epoch == producer.producer_epoch
            and (topic, partition) in described.partitions)
