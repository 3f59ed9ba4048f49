"""The share coordinator in a cluster: each persister call goes to the broker leading the
`__share_group_state` partition of its share-partition.

Share partitions (kgroups.broker.share_partitions) and the group coordinator's share glue call
a `ShareStatePersister`; on one broker that is the broker's own share coordinator
(kgroups.broker.share_state_runtime). In a cluster its partitions are spread by lease, so, as
Kafka's default persister does, a call whose share-partition this broker coordinates is served
in-process and the others are sent to the leader as Initialize/Read/Write/Delete/
ReadSummary ShareGroupState (APIs 83-87), on a connection opened for the request to the
endpoint the leader registered. An answer that the leader moved or is still loading
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, or no answer at all)
is asked again from a fresher view, for at most `RETRY_FOR_S`; after that the last error goes
back to the caller, which retries on its own (a client's next ShareFetch or ShareAcknowledge).

The connection is plaintext without SASL: a cluster whose brokers run an authorizer must allow
ClusterAction to the principal such a connection gets (docs/share-groups.md, "In a cluster").
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from itertools import count
from typing import TYPE_CHECKING, Any

from kgroups.broker import wire
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.cluster.leadership import BrokerEndpoint, LeadershipView
from kgroups.broker.events import log_event
from kgroups.broker.share_persister import ReadStateResult
from kgroups.broker.topics import SHARE_STATE_TOPIC
from kgroups.errors import ErrorCode
from kgroups.share.persisted import (
    DeliveryState,
    PersistedBatch,
    PersistedShareState,
    SharePartitionKey,
)
from kgroups.share_coordinator.shard import READ_UNINITIALIZED

if TYPE_CHECKING:
    from kgroups.broker.share_state_runtime import ShareStateRuntime

logger = logging.getLogger("kgroups.share_state")

CLIENT_ID = "kgroups-share-persister"
# The versions Kafka 4.3.1's persister sends (Write and ReadSummary v1 carry the
# delivered-offsets count).
VERSIONS = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 1,
    ApiKey.DELETE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 1,
}
TOPIC_CLASSES = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: "InitializeStateData",
    ApiKey.READ_SHARE_GROUP_STATE: "ReadStateData",
    ApiKey.WRITE_SHARE_GROUP_STATE: "WriteStateData",
    ApiKey.DELETE_SHARE_GROUP_STATE: "DeleteStateData",
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: "ReadStateSummaryData",
}
# What a moved, loading or unreachable coordinator answers: asked again.
RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION})
# Long enough for a SIGKILLed coordinator's lease to expire and be taken (the session timeout)
# and the partition to be replayed; a share-fetch waits that long at most.
RETRY_FOR_S = 20.0
RETRY_AFTER_S = 0.2
# Long enough for a loaded leader's fsync and PostgreSQL commit; asked again after it.
REQUEST_TIMEOUT_S = 10.0
_SIZE = struct.Struct(">i")


class ShareStateRouter:
    """The `ShareStatePersister` of a broker in cluster mode."""

    def __init__(self, view: LeadershipView, local: ShareStateRuntime) -> None:
        self._view = view
        self._local = local
        self._correlation_ids = count(1)

    # -- ShareStatePersister -----------------------------------------------------------------

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> ErrorCode:
        result = await self._route(
            key, lambda: _errored(self._local.initialize(key, state_epoch, start_offset)),
            ApiKey.INITIALIZE_SHARE_GROUP_STATE,
            {"state_epoch": state_epoch, "start_offset": start_offset})
        return result.error

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        return await self._route(key, lambda: self._local.read(key, leader_epoch),
                                 ApiKey.READ_SHARE_GROUP_STATE, {"leader_epoch": leader_epoch})

    async def write(self, key: SharePartitionKey, state: PersistedShareState) -> ErrorCode:
        batch_cls = wire.sibling(_request_cls(ApiKey.WRITE_SHARE_GROUP_STATE), "StateBatch")
        result = await self._route(key, lambda: _errored(self._local.write(key, state)),
                                   ApiKey.WRITE_SHARE_GROUP_STATE, {
            "state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
            "start_offset": state.start_offset,
            "delivery_complete_count": state.delivery_complete_count,
            "state_batches": tuple(
                wire.build(batch_cls, first_offset=b.first_offset, last_offset=b.last_offset,
                           delivery_state=int(b.delivery_state),
                           delivery_count=b.delivery_count) for b in state.batches)})
        return result.error

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        return await self._route(key, lambda: self._local.read_summary(key, leader_epoch),
                                 ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
                                 {"leader_epoch": leader_epoch})

    async def delete(self, key: SharePartitionKey) -> ErrorCode:
        result = await self._route(key, lambda: _errored(self._local.delete(key)),
                                   ApiKey.DELETE_SHARE_GROUP_STATE, {})
        return result.error

    # -- routing -----------------------------------------------------------------------------

    async def _route(self, key: SharePartitionKey,
                     local: Callable[[], Awaitable[ReadStateResult]], api_key: ApiKey,
                     fields: dict[str, Any]) -> ReadStateResult:
        """Served here or by the leader of the key's partition, asked again while the answer
        says the coordinator moved or is loading, for at most RETRY_FOR_S."""
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            result = await self._once(key, local, api_key, fields)
            if result.error not in RETRIABLE or time.monotonic() >= deadline:
                return result
            await asyncio.sleep(RETRY_AFTER_S)

    async def _once(self, key: SharePartitionKey,
                    local: Callable[[], Awaitable[ReadStateResult]], api_key: ApiKey,
                    fields: dict[str, Any]) -> ReadStateResult:
        if self._local.refusal(create_topic=True) is not None:  # creates the topic
            return ReadStateResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        partition = self._local.shard.partition_of(
            (key.group_id, uuid.UUID(bytes=key.topic_id), key.partition))
        leader = self._view.leader(SHARE_STATE_TOPIC, partition)
        if leader is None:
            return ReadStateResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if leader.node_id == self._view.local_node:
            return await local()
        endpoint = self._view.endpoint(leader.node_id)
        if endpoint is None:  # it left between the two reads of the view
            return ReadStateResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        try:
            response = await asyncio.wait_for(
                self._call(endpoint, _request(api_key, key, fields)), REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            log_event(logger, logging.WARNING, "share_state_send_failed", node=leader.node_id,
                      host=endpoint.host, port=endpoint.port, api=api_key.name, error=exc)
            return ReadStateResult(ErrorCode.NETWORK_EXCEPTION)
        return _result(api_key, response, fields)

    async def _call(self, endpoint: BrokerEndpoint, request: Any) -> Any:
        api_key = ApiKey(int(request.__api_key__))
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
        try:
            correlation_id = next(self._correlation_ids)
            writer.write(wire.encode_request(correlation_id, CLIENT_ID, request))
            await writer.drain()
            (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
            frame = await reader.readexactly(size)
        finally:
            writer.close()
        answered_id, response = wire.decode_response(
            wire.response_type(api_key, VERSIONS[api_key]), frame)
        if answered_id != correlation_id:
            raise ValueError(f"correlation id {answered_id}, expected {correlation_id}")
        return response


async def _errored(call: Awaitable[ErrorCode]) -> ReadStateResult:
    return ReadStateResult(await call)


def _request_cls(api_key: ApiKey) -> type[Any]:
    return wire.request_type(api_key, VERSIONS[api_key])


def _request(api_key: ApiKey, key: SharePartitionKey, fields: dict[str, Any]) -> Any:
    request_cls = _request_cls(api_key)
    topic_cls = wire.sibling(request_cls, TOPIC_CLASSES[api_key])
    partition_cls = wire.sibling(request_cls, "PartitionData")
    return wire.build(request_cls, group_id=key.group_id, topics=(wire.build(
        topic_cls, topic_id=uuid.UUID(bytes=key.topic_id),
        partitions=(wire.build(partition_cls, partition=key.partition, **fields),)),))


def _result(api_key: ApiKey, response: Any, fields: dict[str, Any]) -> ReadStateResult:
    """The one partition's answer, in the persister's words: a read of a share-partition
    never initialized is UNKNOWN_TOPIC_OR_PARTITION, as the local path says it."""
    answers = [p for result in response.results for p in result.partitions]
    if len(answers) != 1:
        return ReadStateResult(ErrorCode.NETWORK_EXCEPTION, None,
                               f"{len(answers)} partitions answered for 1")
    (answer,) = answers
    error = ErrorCode(int(answer.error_code))
    if error is not ErrorCode.NONE:
        if (api_key is ApiKey.READ_SHARE_GROUP_STATE and error is ErrorCode.INVALID_REQUEST
                and answer.error_message == READ_UNINITIALIZED):
            return ReadStateResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return ReadStateResult(error, None, answer.error_message)
    if api_key is ApiKey.READ_SHARE_GROUP_STATE:
        return ReadStateResult(ErrorCode.NONE, PersistedShareState(
            int(answer.state_epoch), int(fields["leader_epoch"]), int(answer.start_offset),
            tuple(PersistedBatch(int(b.first_offset), int(b.last_offset),
                                 DeliveryState(int(b.delivery_state)), int(b.delivery_count))
                  for b in answer.state_batches)))
    if api_key is ApiKey.READ_SHARE_GROUP_STATE_SUMMARY:
        return ReadStateResult(ErrorCode.NONE, PersistedShareState(
            int(answer.state_epoch), int(answer.leader_epoch), int(answer.start_offset), (),
            int(answer.delivery_complete_count)))
    return ReadStateResult(ErrorCode.NONE)
