"""The brokers of a cluster: each registers its `node.id` and advertised listener, heartbeats,
and counts as live while its last heartbeat is within `broker.session.timeout.ms` (Kafka's
name and default, 9000 ms) on the database's clock.

A node id belongs to one running broker at a time, as on Kafka, which refuses a second broker
with the same id: a registration is refused while another incarnation of the id is live, and
takes the id over once that one has expired. Each registration gets a new incarnation (a
random uuid, so two processes can tell themselves apart) and the next epoch of its node id
(Kafka's broker epoch: it goes up with every registration). A broker's heartbeat carries its
incarnation, so one whose id was taken over learns it from the heartbeat's answer.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kgroups.storage.columns import NOW_MS, as_int, as_str
from kgroups.storage.database import Database

BROKER_SESSION_TIMEOUT_MS = 9000  # Kafka's broker.session.timeout.ms default
BROKER_HEARTBEAT_INTERVAL_MS = 2000  # Kafka's broker.heartbeat.interval.ms default


class DuplicateNodeIdError(RuntimeError):
    """Another live broker holds the node id."""


@dataclass(frozen=True, slots=True)
class Registration:
    """What a broker got when it registered: the proof it shows with every heartbeat."""
    node_id: int
    incarnation: uuid.UUID
    epoch: int


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker, as Metadata and DescribeCluster list it."""
    node_id: int
    host: str
    port: int
    rack: str | None
    epoch: int


class BrokerRegistry:
    def __init__(self, database: Database,
                 session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS) -> None:
        self._db = database
        self.session_timeout_ms = session_timeout_ms

    def register(self, node_id: int, host: str, port: int, rack: str | None = None
                 ) -> Registration:
        """Claim `node_id` with this listener; DuplicateNodeIdError while another
        incarnation's heartbeat is within the session timeout."""
        incarnation = uuid.uuid4()
        row = self._db.execute(
            f"INSERT INTO brokers (node_id, host, port, rack, incarnation, epoch, heartbeat_ms) "
            f"VALUES (%(node)s, %(host)s, %(port)s, %(rack)s, %(inc)s, 1, {NOW_MS}) "
            f"ON CONFLICT (node_id) DO UPDATE SET host = excluded.host, port = excluded.port, "
            f"rack = excluded.rack, incarnation = excluded.incarnation, "
            f"epoch = brokers.epoch + 1, heartbeat_ms = excluded.heartbeat_ms "
            f"WHERE brokers.heartbeat_ms <= {NOW_MS} - %(timeout)s RETURNING epoch",
            {"node": node_id, "host": host, "port": port, "rack": rack, "inc": incarnation,
             "timeout": self.session_timeout_ms}).fetchone()
        if row is None:
            raise DuplicateNodeIdError(
                f"node.id {node_id} is already registered by a live broker (its last "
                f"heartbeat is within broker.session.timeout.ms={self.session_timeout_ms})")
        return Registration(node_id, incarnation, as_int(row[0]))

    def heartbeat(self, registration: Registration) -> bool:
        """Mark the broker alive now; False when its node id was taken over by another
        incarnation (the broker must stop serving: it is no longer part of the cluster)."""
        result = self._db.execute(
            f"UPDATE brokers SET heartbeat_ms = {NOW_MS} WHERE node_id = %s AND incarnation = %s",
            (registration.node_id, registration.incarnation))
        return result.rowcount == 1

    def deregister(self, registration: Registration) -> bool:
        """Leave the cluster at once (a controlled shutdown); False if the id is no longer
        this incarnation's."""
        result = self._db.execute(
            "DELETE FROM brokers WHERE node_id = %s AND incarnation = %s",
            (registration.node_id, registration.incarnation))
        return result.rowcount == 1

    def live_brokers(self) -> list[BrokerInfo]:
        """The brokers whose last heartbeat is within the session timeout, by node id."""
        rows = self._db.execute(
            f"SELECT node_id, host, port, rack, epoch FROM brokers "
            f"WHERE heartbeat_ms > {NOW_MS} - %s ORDER BY node_id",
            (self.session_timeout_ms,)).fetchall()
        return [BrokerInfo(as_int(node), as_str(host), as_int(port),
                           None if rack is None else as_str(rack), as_int(epoch))
                for node, host, port, rack, epoch in rows]
