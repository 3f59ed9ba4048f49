"""The differential suite's fixture: `converse(script, known=...)` runs a conversation against
the session's Kafka and kgroups brokers (tests/kafka_harness.py) and asserts that the two
transcripts differ exactly by `known` (empty unless docs/compatibility.md lists a difference).

kgroups runs on its local data directory unless a test is parametrized over `kgroups_engine`
(diff_setup.ON_BOTH_ENGINES): then also as a one-broker cluster on a throwaway PostgreSQL
(docs/cluster.md), with the same settings, answering what the local engine answers."""

from __future__ import annotations

import pprint
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from diff_dialog import Script, differences, normalise, render, run_both
from diff_setup import TOPICS, create_topics, wait_coordinator
from tests.broker.servers import ServerProcess
from tests.kafka_harness import KAFKA_TEST_SETTINGS, kgroups_overrides
from tests.storage.conftest import new_database, postgres_server  # noqa: F401 (fixture)
from tests.storage.postgres_server import PostgresServer

Known = dict[str, tuple[Any, Any]]
Converse = Callable[..., dict[str, list[tuple[str, Any]]]]


# kgroups computing a consumer group's target in the heartbeat that moves its epoch, to pair
# with a Kafka so configured: the conversations that follow every step of a reconciliation
# compare against it.
SYNCHRONOUS_SETTINGS = {**KAFKA_TEST_SETTINGS, "group.consumer.assignment.interval.ms": "0"}


@pytest.fixture
def kgroups_engine() -> str:
    """The local data directory, unless the test is parametrized over both engines."""
    return "local"


@pytest.fixture(scope="session")
def differential_kafka(kafka_broker: Any) -> Any:
    """The session's Kafka with the shared topics (created once, when a conversation first
    needs it)."""
    create_topics(kafka_broker.bootstrap)
    return kafka_broker


@pytest.fixture(scope="session")
def differential_kgroups(kgroups_broker: Any) -> Any:
    """The session's kgroups (local data directory) with the shared topics."""
    create_topics(kgroups_broker.bootstrap)
    return kgroups_broker


@pytest.fixture
def differential_ports(request: pytest.FixtureRequest, differential_kafka: Any,
                       kgroups_engine: str) -> dict[str, int]:
    """The two brokers a conversation runs against; the PostgreSQL one starts only if a test
    asks for it."""
    kgroups = request.getfixturevalue(
        {"local": "differential_kgroups", "postgresql": "kgroups_postgres_broker"}[kgroups_engine])
    return {"kafka": differential_kafka.port, "kgroups": kgroups.port}


@pytest.fixture
def kgroups_on(request: pytest.FixtureRequest, kgroups_engine: str) -> ServerProcess:
    """The synchronous-assignment kgroups on the test's engine (`synchronous_kgroups` or
    `synchronous_kgroups_postgres`)."""
    name = {"local": "synchronous_kgroups",
            "postgresql": "synchronous_kgroups_postgres"}[kgroups_engine]
    server: ServerProcess = request.getfixturevalue(name)
    return server


@pytest.fixture(scope="session")
def synchronous_kgroups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """kgroups with group.consumer.assignment.interval.ms=0 on its data directory."""
    workdir = tmp_path_factory.mktemp("kgroups-sync")
    server = ServerProcess(workdir / "data", workdir / "server.log",
                           kgroups_overrides(SYNCHRONOUS_SETTINGS))
    server.start()
    create_topics(server.bootstrap)
    yield server
    server.close()


def _postgres_broker(postgres: PostgresServer, workdir: Path,
                     settings: dict[str, str]) -> ServerProcess:
    """A one-broker cluster (node 1) on a new database of `postgres`, the differential topics
    created, returning once it coordinates groups."""
    server = ServerProcess(workdir / "data", workdir / "server.log", (
        *kgroups_overrides(settings), f"kgroups.storage={new_database(postgres)}", "node.id=1"))
    server.start()
    wait_coordinator(server.bootstrap)
    create_topics(server.bootstrap)
    return server


@pytest.fixture(scope="session")
def kgroups_postgres_broker(tmp_path_factory: pytest.TempPathFactory,
                            postgres_server: PostgresServer,  # noqa: F811
                            ) -> Iterator[ServerProcess]:
    """`kgroups_broker`'s twin on the PostgreSQL engine."""
    server = _postgres_broker(postgres_server, tmp_path_factory.mktemp("kgroups-pg"),
                              dict(KAFKA_TEST_SETTINGS))
    yield server
    server.stop()
    server.close()


@pytest.fixture(scope="session")
def synchronous_kgroups_postgres(tmp_path_factory: pytest.TempPathFactory,
                                 postgres_server: PostgresServer,  # noqa: F811
                                 ) -> Iterator[ServerProcess]:
    """`synchronous_kgroups`'s twin on the PostgreSQL engine."""
    server = _postgres_broker(postgres_server, tmp_path_factory.mktemp("kgroups-pg-sync"),
                              SYNCHRONOUS_SETTINGS)
    yield server
    server.stop()
    server.close()


def group_name(request: pytest.FixtureRequest) -> str:
    """The test's name (readable in broker logs) plus a random tail (unique in the session)."""
    base = request.node.name.replace("[", "-").replace("]", "")
    return f"{base[:60]}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def converse(request: pytest.FixtureRequest, differential_ports: dict[str, int],
             tmp_path: Path) -> Converse:
    def run(script: Script, known: Known | None = None, *,
            ports: dict[str, int] | None = None) -> dict[str, list[tuple[str, Any]]]:
        transcripts = run_both(script, ports or differential_ports, group_name(request),
                               tuple(TOPICS))
        diff = differences(transcripts["kafka"], transcripts["kgroups"])
        expected = known or {}
        if diff != expected:
            dump = tmp_path / "transcripts.txt"
            dump.write_text("".join(
                f"===== {name}\n" + "".join(f"{label}\n{pprint.pformat(value, width=100)}\n"
                                             for label, value in normalise(transcript))
                for name, transcript in transcripts.items()))
            pytest.fail(f"Kafka and kgroups answered differently:\n{render(diff)}\n"
                        f"expected differences:\n{render(expected)}\n"
                        f"both transcripts: {dump}", pytrace=False)
        return transcripts

    return run
