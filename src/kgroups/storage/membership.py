"""One broker's part in a cluster: registered, heartbeating, and leading its share of the
partitions by lease.

`step` is what the broker runs every `broker.heartbeat.interval.ms` (Kafka's name, default
2000): heartbeat, then the lease step. From the live brokers and the partitions' current
leaders it works out every partition's preferred leader (placement.py) and then, for this
broker only: renews the leases it holds and is still preferred for, takes the free or expired
ones it is preferred for (a dead broker's included: placement hands its partitions to the live
ones evenly), and releases those whose preferred leader is now another live broker (a broker
joined: it gets its share back at its own next step). It answers with the leases gained and the
partitions lost, so the broker loads and unloads coordinators (`__consumer_offsets-N`) and
logs. `leave` is Kafka's controlled shutdown: every lease released and the registration
deleted, so the next step of any other broker takes the partitions at once.

The lease lasts `kgroups.lease.ms`, by default broker.session.timeout.ms (9000): a broker that
stops heartbeating drops out of the live set and its leases run out at about the same moment,
so a partition is never unled longer than a session timeout. Renewing every heartbeat leaves
a broker four missed heartbeats before its leases lapse.

When PostgreSQL cannot be reached, `step` raises StorageUnavailableError and keeps `held` and
`safe_until` as the last step that reached it left them: the leases surely run until
`safe_until` (local monotonic time), and the broker must stop serving them once it passes,
since another broker may take them from then on. The store is what keeps a broker that is
late at that from doing harm: every append checks the lease in its own transaction, so a
stale leader's write is refused. A partition handed back during a step that then failed is
out of `held` at once (its release may have committed) and reported lost by the next step
that succeeds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kgroups.storage.placement import Partition, preferred_leaders
from kgroups.storage.postgresql import Lease, PostgresStore
from kgroups.storage.registry import BROKER_SESSION_TIMEOUT_MS, Registration

DEFAULT_LEASE_MS = BROKER_SESSION_TIMEOUT_MS  # kgroups.lease.ms


class NodeIdTakenError(RuntimeError):
    """Another incarnation registered this node id (this broker had expired): it must stop."""


@dataclass
class LeaseChanges:
    gained: list[Lease] = field(default_factory=list)
    lost: list[Partition] = field(default_factory=list)


class ClusterMember:
    def __init__(self, store: PostgresStore, registration: Registration,
                 lease_ms: int = DEFAULT_LEASE_MS) -> None:
        self._store = store
        self.registration = registration
        self.lease_ms = lease_ms
        self.held: dict[Partition, Lease] = {}
        # Released by a step that failed afterwards: reported lost by the next one.
        self._handed_back: set[Partition] = set()
        # Local monotonic time until which every held lease is surely still running: each
        # renewal's database time is later than the moment its step began.
        self.safe_until = 0.0

    @classmethod
    def join(cls, store: PostgresStore, node_id: int, host: str, port: int,
             rack: str | None = None, lease_ms: int = DEFAULT_LEASE_MS) -> ClusterMember:
        """Register (DuplicateNodeIdError while a live broker holds the id); no leases yet:
        the first `step` takes this broker's share."""
        return cls(store, store.registry.register(node_id, host, port, rack), lease_ms)

    @property
    def node_id(self) -> int:
        return self.registration.node_id

    def step(self) -> LeaseChanges:
        """Heartbeat and balance leases once (see the module's docstring). NodeIdTakenError,
        with every lease dropped from `held`, when the registration was taken over;
        StorageUnavailableError, `held` and `safe_until` as they were (but for hand-backs),
        when the store could not be reached."""
        began = time.monotonic()
        if not self._store.registry.heartbeat(self.registration):
            self.held.clear()
            raise NodeIdTakenError(
                f"node.id {self.node_id} was registered by another broker after this one's "
                f"session expired")
        live = [broker.node_id for broker in self._store.registry.live_brokers()]
        rows = self._store.leadership()
        preferred = preferred_leaders(
            live, [(row.topic, row.partition) for row in rows],
            {(row.topic, row.partition): row.leader for row in rows})
        mine = {key for key, leader in preferred.items() if leader == self.node_id}
        for key in sorted(set(self.held) - mine):  # hand back to the preferred live broker
            self._handed_back.add(key)
            self._store.release_lease(self.held.pop(key))
        kept = [self.held[key] for key in sorted(mine & set(self.held))]
        renewed = self._store.renew_leases(kept, self.lease_ms)
        acquired = self._store.acquire_leases(sorted(mine - set(self.held)), self.node_id,
                                              self.lease_ms)
        before = {*self.held, *self._handed_back}
        self.held = {(lease.topic, lease.partition): lease for lease in [*renewed, *acquired]}
        self._handed_back.clear()
        self.safe_until = began + self.lease_ms / 1000
        return LeaseChanges(gained=acquired,
                            lost=sorted(key for key in before if key not in self.held))

    def leave(self) -> list[Partition]:
        """Controlled shutdown: deregister, then release every lease; the partitions given up.
        In that order because the release's announcement wakes the other brokers' steps: by
        then this broker must be out of the live set, or placement would still prefer it for
        its partitions and they would wait for the others' next heartbeat."""
        given_up = sorted(self.held)
        self._store.registry.deregister(self.registration)
        self._store.release_leases(self.node_id)
        self.held.clear()
        return given_up
