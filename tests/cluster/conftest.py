"""Clusters of `kgroups serve` subprocesses on one throwaway PostgreSQL server.

Each broker is started as an operator would start it: `--storage URL`, its own node.id, port
and data directory. A test gets a fresh database, so brokers of different tests never meet."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8
from tests.broker.servers import ServerProcess
from tests.storage.conftest import postgres_server, postgres_url  # noqa: F401 (fixtures)

from kgroups.errors import ErrorCode
from kgroups.storage.postgresql import PostgresStore
from kgroups.tools.wire_client import KafkaWireClient, WireError


@dataclass
class Cluster:
    url: str
    root: Path
    brokers: dict[int, ServerProcess] = field(default_factory=dict)

    def start(self, node_id: int) -> ServerProcess:
        broker = ServerProcess(self.root / f"data-{node_id}", self.root / f"broker-{node_id}.log",
                               (f"kgroups.storage={self.url}", f"node.id={node_id}"))
        broker.start()
        self.brokers[node_id] = broker
        return broker

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.bootstrap for broker in self.brokers.values())

    def running(self) -> dict[int, ServerProcess]:
        return {node: broker for node, broker in self.brokers.items()
                if broker.process is not None and broker.process.poll() is None}

    def coordinator(self, group: str, asked: int, key_type: int = 0) -> int | None:
        """The node id broker `asked` names the group's (key_type 1: the transactional id's)
        coordinator; None while it has none."""
        broker = self.brokers[asked]
        try:
            with KafkaWireClient(broker.host, broker.port, timeout=5) as client:
                (found,) = client.call(FindCoordinatorRequest(
                    key_type=i8(key_type), coordinator_keys=(group,))).coordinators
        except WireError:
            return None
        if ErrorCode(found.error_code) != ErrorCode.NONE:
            return None
        return int(found.node_id)

    def wait_coordinator(self, group: str, asked: int, other_than: int | None = None,
                         timeout_s: float = 30.0, key_type: int = 0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            node = self.coordinator(group, asked, key_type)
            if node is not None and node != other_than:
                return node
            time.sleep(0.1)
        raise AssertionError(f"no coordinator for {group} (other than {other_than}) "
                             f"within {timeout_s} s")

    def signal(self, node_id: int, signum: signal.Signals) -> None:
        process = self.brokers[node_id].process
        assert process is not None
        os.kill(process.pid, signum)

    def store(self) -> PostgresStore:
        return PostgresStore.open(self.url)

    def close(self) -> None:
        """Kill the brokers still running (a stopped one is continued first, or it would not
        die) and close every broker's pipe (left open it is collected, and warned about,
        during whatever test runs next)."""
        for broker in self.brokers.values():
            if broker.process is not None and broker.process.poll() is None:
                os.kill(broker.process.pid, signal.SIGCONT)
                broker.kill()
            broker.close()


@pytest.fixture
def cluster(postgres_url: str, tmp_path: Path) -> Iterator[Cluster]:  # noqa: F811
    """Three brokers, nodes 1-3, each having taken its share of the leases."""
    started = Cluster(postgres_url, tmp_path)
    try:
        for node in (1, 2, 3):
            started.start(node)
        with contextlib.closing(started.store()) as store:
            _wait_balanced(store)
        yield started
    finally:
        started.close()


def _wait_balanced(store: PostgresStore, timeout_s: float = 30.0) -> None:
    """Until every live broker leads some `__consumer_offsets` partition."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = {broker.node_id for broker in store.registry.live_brokers()}
        leaders = {row.leader for row in store.leadership()
                   if row.topic == "__consumer_offsets" and row.current}
        if len(live) == 3 and leaders == live:
            return
        time.sleep(0.2)
    raise AssertionError("the three brokers did not share the leases")
