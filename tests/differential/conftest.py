"""The differential suite's fixture: `converse(script, known=...)` runs a conversation against
the session's Kafka and kgroups brokers (tests/kafka_harness.py) and asserts that the two
transcripts differ exactly by `known` (empty unless docs/compatibility.md lists a difference)."""

from __future__ import annotations

import pprint
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from diff_dialog import Script, differences, normalise, render, run_both
from diff_setup import TOPICS, create_topics
from tests.broker.servers import ServerProcess
from tests.kafka_harness import KAFKA_TEST_SETTINGS, kgroups_overrides

Known = dict[str, tuple[Any, Any]]
Converse = Callable[..., dict[str, list[tuple[str, Any]]]]


@pytest.fixture(scope="session")
def differential_ports(kafka_broker: Any, kgroups_broker: Any) -> dict[str, int]:
    for broker in (kafka_broker, kgroups_broker):
        create_topics(broker.bootstrap)
    return {"kafka": kafka_broker.port, "kgroups": kgroups_broker.port}


@pytest.fixture(scope="session")
def synchronous_kgroups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """kgroups computing a consumer group's target in the heartbeat that moves its epoch
    (group.consumer.assignment.interval.ms=0), to pair with a Kafka so configured: the
    conversations that follow every step of a reconciliation compare against it."""
    workdir = tmp_path_factory.mktemp("kgroups-sync")
    server = ServerProcess(workdir / "data", workdir / "server.log", kgroups_overrides(
        {**KAFKA_TEST_SETTINGS, "group.consumer.assignment.interval.ms": "0"}))
    server.start()
    create_topics(server.bootstrap)
    yield server
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
