"""KIP-951's leader hints: a Produce (v10+) or Fetch (v12+) partition answered
NOT_LEADER_OR_FOLLOWER names the leader and its epoch (`current_leader`), and the response
lists that leader's endpoint (`node_endpoints`, Produce v10+, Fetch v16+), so the client goes
straight there instead of waiting for a Metadata round. Versions without the fields get none
(the kio classes of the version decide)."""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from kgroups.broker.topic_storage import NotLeaderHint
from kgroups.errors import ErrorCode

NO_EPOCH = -1  # a request's current_leader_epoch when the client asks for no check


def epoch_error(leader_epoch: int | None, requested: int) -> ErrorCode:
    """A request's `current_leader_epoch` (Fetch v9+, ListOffsets v4+) against the epoch this
    broker leads the partition at, as Kafka checks it: older is FENCED_LEADER_EPOCH (the
    client's metadata is stale), newer UNKNOWN_LEADER_EPOCH (this broker's is); -1, or a
    single node that keeps no epochs, checks nothing."""
    if leader_epoch is None or requested in (NO_EPOCH, leader_epoch):
        return ErrorCode.NONE
    return (ErrorCode.FENCED_LEADER_EPOCH if requested < leader_epoch
            else ErrorCode.UNKNOWN_LEADER_EPOCH)


def leader_fields(leader_cls: type[Any] | None, hint: NotLeaderHint | None) -> dict[str, Any]:
    """The partition's `current_leader` when its version has one and a leader is known."""
    if leader_cls is None or hint is None or hint.leader is None:
        return {}
    return {"current_leader": leader_cls(leader_id=hint.leader.node_id,
                                         leader_epoch=hint.leader.epoch)}


def node_endpoint_fields(module: ModuleType, hints: Iterable[NotLeaderHint]) -> dict[str, Any]:
    """The response's `node_endpoints`: each named leader's endpoint once, by node id."""
    endpoint_cls = getattr(module, "NodeEndpoint", None)
    if endpoint_cls is None:
        return {}
    endpoints = {hint.endpoint.node_id: hint.endpoint for hint in hints
                 if hint.endpoint is not None}
    return {"node_endpoints": tuple(
        endpoint_cls(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
        for _, e in sorted(endpoints.items()))}
