"""The differential suite's fixture: `converse(script, known=...)` runs a conversation against
the session's Kafka and kgroups brokers (tests/kafka_harness.py) and asserts that the two
transcripts differ exactly by `known` (empty unless docs/compatibility.md lists a difference)."""

from __future__ import annotations

import pprint
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from diff_dialog import Script, differences, normalise, render, run_both
from tests.broker.broker_wire_helpers import create_topic, metadata_request

from kgroups.broker.wire_client import KafkaWireClient

# Topics every conversation may commit offsets for (each conversation has its own groups).
TOPICS = {"diff-t": 3, "diff-u": 2}

Known = dict[str, tuple[Any, Any]]
Converse = Callable[..., dict[str, list[tuple[str, Any]]]]


def _create_topics(bootstrap: str) -> None:
    host, port = bootstrap.rsplit(":", 1)
    with KafkaWireClient(host, int(port), client_id="differential-setup") as client:
        for name, partitions in TOPICS.items():
            create_topic(client, name, partitions)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            response = client.call(metadata_request(*TOPICS, auto_create=False))
            if all(int(t.error_code) == 0 and len(t.partitions) == TOPICS[t.name]
                   and all(int(p.leader_id) >= 0 for p in t.partitions)
                   for t in response.topics):
                return
            time.sleep(0.05)
    raise AssertionError(f"topics never got leaders on {bootstrap}")


@pytest.fixture(scope="session")
def differential_ports(kafka_broker: Any, kgroups_broker: Any) -> dict[str, int]:
    for broker in (kafka_broker, kgroups_broker):
        _create_topics(broker.bootstrap)
    return {"kafka": kafka_broker.port, "kgroups": kgroups_broker.port}


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
