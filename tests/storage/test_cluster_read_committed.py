"""read_committed on a cluster broker's PostgreSQL log: transactional batches and markers
written through the broker's handlers, and the same answers from the next leader, which loads
the aborted transactions from the store and rebuilds the open ones from the log."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import nested_of, request_of
from tests.broker.read_committed_helpers import markers_request, txn_batch
from tests.storage.test_cluster_data_plane import TOPIC, Node, _create_on, _produce, nodes

from kgroups.broker.apis import fetch, list_offsets, write_txn_markers
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, iter_batches

pytestmark = pytest.mark.postgresql
__all__ = ["nodes"]  # the fixture, used by name
A, B = 5001, 5002


def _marker(node: Node, producer_id: int, commits: bool) -> int:
    request = markers_request(1, (producer_id, 0, commits, TOPIC, (0,)))
    response = node.call(write_txn_markers.write_txn_markers, 27, 1, request)
    return int(response.markers[0].topics[0].partitions[0].error_code)


def _read_committed(node: Node, offset: int) -> Any:
    request = request_of(1, 12, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                         isolation_level=1, session_id=0, session_epoch=-1, topics=(
        nested_of(1, 12, "FetchTopic", topic=TOPIC, partitions=(
            nested_of(1, 12, "FetchPartition", partition=0, current_leader_epoch=-1,
                      fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                      partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    return node.call(fetch.fetch, 1, 12, request).responses[0].partitions[0]


def _latest_committed(node: Node) -> int:
    request = request_of(2, 7, replica_id=-1, isolation_level=1, topics=(
        nested_of(2, 7, "ListOffsetsTopic", name=TOPIC, partitions=(
            nested_of(2, 7, "ListOffsetsPartition", partition_index=0,
                      current_leader_epoch=-1, timestamp=-1),)),))
    return int(node.call(list_offsets.list_offsets, 2, 7, request).topics[0].partitions[0]
               .offset)


def _answer(node: Node) -> tuple[int, int, list[int], list[tuple[int, int]]]:
    read = _read_committed(node, 0)
    return (read.last_stable_offset, _latest_committed(node),
            [r.offset for b in iter_batches(read.records or b"") for r in b.records],
            [(a.producer_id, a.first_offset) for a in read.aborted_transactions])


def test_read_committed_on_postgresql_and_after_a_leader_change(
        nodes: tuple[Node, Node]) -> None:
    first, second = nodes
    _create_on(first, 1, seen_by=second)
    lease = first.lead(0)
    plain = build_batch([(b"k", b"p", 1_700_000_000_000)])
    for batch in (plain, txn_batch(A, b"a1", b"a2"), txn_batch(B, b"b3")):
        assert int(_produce(first, 0, batch)[1].error_code) == ErrorCode.NONE
    assert _marker(first, A, commits=False) == ErrorCode.NONE
    assert int(_produce(first, 0, plain)[1].error_code) == ErrorCode.NONE
    assert _marker(first, B, commits=True) == ErrorCode.NONE
    assert int(_produce(first, 0, txn_batch(A, b"a7", sequence=2))[1].error_code) == 0
    expected = (7, 7, [0, 1, 2, 3, 4, 5, 6], [(A, 1)])
    assert _answer(first) == expected
    first.topics.leadership_lost(TOPIC, 0)
    first.store.release_lease(lease)
    second.lead(0)
    assert _answer(second) == expected
    assert _marker(second, A, commits=True) == ErrorCode.NONE
    assert _answer(second)[:2] == (9, 9)
