"""WriteTxnMarkers (API 27): the transaction coordinator asks the partitions' leader to end a
producer's transaction with a COMMIT or ABORT marker in each partition the transaction touched.

Each marker goes through kgroups.broker.txn_markers.write_markers, the one path a marker takes
into a log (ordered with produce requests, durable, fetchers woken), and each partition answers
its own error. Kafka accepts the request from its brokers and controller only: the ClusterAction
rule below. v1 and v2 are served, as by Kafka 4.3.1 (v0 went with KIP-896; v2 carries KIP-890's
transaction version, under which the coordinator bumps the epoch for every marker).
"""

from __future__ import annotations

from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.txn_markers import MarkerWrite, write_markers
from kgroups.broker.wire import build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode


def _writes(request: Any) -> list[MarkerWrite]:
    """One write per (marker, partition), in request order."""
    return [MarkerWrite(topic.name, int(index), int(marker.producer_id),
                        int(marker.producer_epoch), bool(marker.transaction_result),
                        int(marker.coordinator_epoch),
                        int(getattr(marker, "transaction_version", 0)))
            for marker in request.markers for topic in marker.topics
            for index in topic.partition_indexes]


def _response(ctx: RequestContext, request: Any, errors: list[ErrorCode]) -> Any:
    """The answer shaped as the request: per marker, per topic, per partition."""
    response_cls = response_type(ApiKey.WRITE_TXN_MARKERS, ctx.api_version)
    marker_cls = sibling(response_cls, "WritableTxnMarkerResult")
    topic_cls = sibling(response_cls, "WritableTxnMarkerTopicResult")
    partition_cls = sibling(response_cls, "WritableTxnMarkerPartitionResult")
    answers = iter(errors)
    return build(response_cls, markers=tuple(
        build(marker_cls, producer_id=marker.producer_id, topics=tuple(
            build(topic_cls, name=topic.name, partitions=tuple(
                build(partition_cls, partition_index=index, error_code=kio_error(next(answers)))
                for index in topic.partition_indexes))
            for topic in marker.topics))
        for marker in request.markers))


@handles(api_key=ApiKey.WRITE_TXN_MARKERS, min_version=1, max_version=2)
async def write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    errors = await write_markers(ctx.broker, _writes(request))
    return _response(ctx, request, errors)


def install(registry: HandlerRegistry) -> None:
    registry.register(write_txn_markers)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.WRITE_TXN_MARKERS)
async def _authorize_write_txn_markers(ctx: RequestContext, request: Any, inner: authz.Inner,
                                       check: authz.Check) -> Any:
    """ClusterAction on the cluster, else every partition answers
    CLUSTER_AUTHORIZATION_FAILED (nothing is written)."""
    if check.cluster(Operation.CLUSTER_ACTION):
        return await inner(ctx, request)
    writes = _writes(request)
    return _response(ctx, request, [authz.CLUSTER_DENIED] * len(writes))
