"""Transaction markers in a cluster: each marker goes to the broker leading its partition.

The transaction coordinator (kgroups.broker.transaction_runtime) ends a transaction with a
marker in every partition it touched, and in a cluster those partitions are led by different
brokers. A partition this broker leads (or whose leader the view does not know: the local
path answers NOT_LEADER_OR_FOLLOWER then) gets its marker through the local path
(kgroups.broker.txn_markers.write_markers); the others are sent to their leader, as Kafka's
coordinator does, in one WriteTxnMarkers (API 27, v2) request per leader, on a connection
opened for that request to the endpoint the leader registered. Each marker comes back with its
error in order; the runtime retries the failed ones, so a leader that moved meanwhile
(NOT_LEADER_OR_FOLLOWER) or could not be reached (NETWORK_EXCEPTION) is asked again from a
fresher view.

The connection is plaintext without SASL: a cluster whose brokers run an authorizer must
allow ClusterAction to the principal such a connection gets (docs/transactions.md, "In a
cluster").
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Sequence
from itertools import count
from typing import Any

from kgroups.broker import wire
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.cluster.leadership import BrokerEndpoint, LeadershipView
from kgroups.broker.events import log_event
from kgroups.errors import ErrorCode
from kgroups.transactions.messages import MarkerWrite

logger = logging.getLogger("kgroups.txn_markers")

WRITE_TXN_MARKERS_VERSION = 2  # carries the transaction version (KIP-890), as Kafka 4.3.1 sends
CLIENT_ID = "kgroups-txn-markers"
# Long enough for a loaded leader's fsync and PostgreSQL commit; the runtime retries after it.
REQUEST_TIMEOUT_S = 10.0
_SIZE = struct.Struct(">i")

MarkerWriter = Callable[[Sequence[MarkerWrite]], Awaitable[list[ErrorCode]]]


class MarkerRouter:
    """`send` is the transaction runtime's marker path in cluster mode."""

    def __init__(self, view: LeadershipView, write_locally: MarkerWriter) -> None:
        self._view = view
        self._write_locally = write_locally
        self._correlation_ids = count(1)

    async def send(self, markers: Sequence[MarkerWrite]) -> list[ErrorCode]:
        """One error per marker, in order (NONE once its leader made it durable)."""
        local: list[int] = []
        remote: dict[int, list[int]] = {}
        for index, marker in enumerate(markers):
            leader = self._view.leader(marker.topic, marker.partition)
            if leader is None or leader.node_id == self._view.local_node:
                local.append(index)
            else:
                remote.setdefault(leader.node_id, []).append(index)
        errors = [ErrorCode.NONE] * len(markers)
        sends = [self._send_to(node, [markers[i] for i in indexes])
                 for node, indexes in remote.items()]
        answers = await asyncio.gather(self._write_locally([markers[i] for i in local]), *sends)
        for indexes, answered in zip([local, *remote.values()], answers, strict=True):
            for index, error in zip(indexes, answered, strict=True):
                errors[index] = error
        return errors

    async def _send_to(self, node_id: int, markers: list[MarkerWrite]) -> list[ErrorCode]:
        endpoint = self._view.endpoint(node_id)
        if endpoint is None:  # it left between the two reads of the view
            return [ErrorCode.NOT_LEADER_OR_FOLLOWER] * len(markers)
        try:
            return await asyncio.wait_for(self._call(endpoint, markers), REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            log_event(logger, logging.WARNING, "marker_send_failed", node=node_id,
                      host=endpoint.host, port=endpoint.port, markers=len(markers), error=exc)
            return [ErrorCode.NETWORK_EXCEPTION] * len(markers)

    async def _call(self, endpoint: BrokerEndpoint, markers: list[MarkerWrite]
                    ) -> list[ErrorCode]:
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
        try:
            correlation_id = next(self._correlation_ids)
            writer.write(wire.encode_request(correlation_id, CLIENT_ID, _request(markers)))
            await writer.drain()
            (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
            frame = await reader.readexactly(size)
        finally:
            writer.close()
        answered_id, response = wire.decode_response(
            wire.response_type(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION), frame)
        if answered_id != correlation_id:
            raise ValueError(f"correlation id {answered_id}, expected {correlation_id}")
        errors = [ErrorCode(int(partition.error_code)) for result in response.markers
                  for topic in result.topics for partition in topic.partitions]
        if len(errors) != len(markers):
            raise ValueError(f"{len(errors)} partitions answered for {len(markers)} markers")
        return errors


def _request(markers: list[MarkerWrite]) -> Any:
    """One WritableTxnMarker per marker (one topic, one partition), so the answers come back
    in the markers' order."""
    request_cls = wire.request_type(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
    marker_cls = wire.sibling(request_cls, "WritableTxnMarker")
    topic_cls = wire.sibling(request_cls, "WritableTxnMarkerTopic")
    return wire.build(request_cls, markers=tuple(
        wire.build(marker_cls, producer_id=m.producer_id, producer_epoch=m.producer_epoch,
              transaction_result=m.commits, coordinator_epoch=m.coordinator_epoch,
              transaction_version=m.transaction_version,
              topics=(wire.build(topic_cls, name=m.topic, partition_indexes=(m.partition,)),))
        for m in markers))
