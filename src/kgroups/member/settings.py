"""What a simulated consumer is configured with: Kafka's consumer settings, in milliseconds.

The names follow the Java consumer's properties (`session.timeout.ms`, `max.poll.interval.ms`,
`heartbeat.interval.ms`, `auto.commit.interval.ms`, `group.instance.id`), so a scenario reads
like the client configuration it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

TopicPartition = tuple[str, int]


class Protocol(Enum):
    """How the member rebalances: the classic protocol revoking everything (eager) or only what
    moves (cooperative, KIP-429), or KIP-848's consumer protocol (`group.protocol=consumer`)."""

    EAGER = "eager"
    COOPERATIVE = "cooperative"
    CONSUMER = "consumer"


class ClientFlavour(Enum):
    """Where the Java consumer and librdkafka differ in what the simulator models.

    JAVA: group work that needs the application thread (sending JoinGroup after a rebalance is
    announced, running the revocation and assignment callbacks) waits for the next `poll()`.
    LIBRDKAFKA: its background thread rejoins and reconciles as soon as it learns of a
    rebalance, without waiting for the application to poll."""

    JAVA = "java"
    LIBRDKAFKA = "librdkafka"


@dataclass(frozen=True, slots=True)
class MemberSettings:
    group_id: str
    topics: tuple[str, ...]
    protocol: Protocol = Protocol.EAGER
    # Classic: the client-side strategy (range, roundrobin, sticky, cooperative-sticky).
    # Consumer protocol: the server-side assignor named in the heartbeat (uniform, range).
    assignor: str = "range"
    instance_id: str | None = None
    session_timeout_ms: int = 45_000
    max_poll_interval_ms: int = 300_000
    heartbeat_interval_ms: int = 3_000
    # 0 turns periodic auto-commits off (commits still go out before partitions are revoked).
    commit_interval_ms: int = 5_000
    # One turn of the application's poll loop: the time it takes to process what poll returned.
    processing_ms: int = 100
    client: ClientFlavour = ClientFlavour.JAVA
    # `client.id`: the coordinator builds a classic member id from it (or from the instance id),
    # and the range and round-robin assignors hand out partitions in member id order.
    client_id: str = ""
