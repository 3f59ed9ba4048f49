"""Who leads each partition and where each live broker listens, as this broker last read it.

Metadata, FindCoordinator and DescribeCluster answer from it, and a request for a partition
this broker does not lead gets NOT_LEADER_OR_FOLLOWER with the leader it names (KIP-951). The
membership runtime refreshes it after every lease step and on every lease announcement, so it
lags the store by at most one heartbeat interval; the store's fencing, not this view, is what
keeps a stale leader from writing."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Leader:
    node_id: int
    epoch: int


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class LeadershipView:
    """A snapshot replaced whole by `update`, so a reader never sees half of a refresh."""

    local_node: int
    _leaders: dict[tuple[str, int], Leader] = field(default_factory=dict)
    _brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)

    def update(self, leaders: dict[tuple[str, int], Leader],
               brokers: list[BrokerEndpoint]) -> None:
        self._leaders = leaders
        self._brokers = {broker.node_id: broker for broker in brokers}

    def leader(self, topic: str, partition: int) -> Leader | None:
        """The partition's leader if it has one that is alive; None while it is unled."""
        leader = self._leaders.get((topic, partition))
        return leader if leader is not None and leader.node_id in self._brokers else None

    def brokers(self) -> list[BrokerEndpoint]:
        return sorted(self._brokers.values(), key=lambda broker: broker.node_id)

    def endpoint(self, node_id: int) -> BrokerEndpoint | None:
        return self._brokers.get(node_id)
