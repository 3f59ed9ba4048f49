"""The topics every conversation may commit offsets for, created alike on each broker; and the
choice of kgroups' storage engine a conversation runs against.

A module of its own rather than part of conftest.py: test modules import it by name, and the
name `conftest` belongs to whichever directory's conftest pytest loaded last.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8
from tests.broker.broker_wire_helpers import create_topic, metadata_request

from kgroups.log.batch import iter_batches
from kgroups.tools.wire_client import KafkaWireClient, WireError

# Each conversation has groups of its own; these topics are shared.
TOPICS = {"diff-t": 3, "diff-u": 2}

# The kgroups side of a conversation on each storage engine: the local data directory (the
# session's `kgroups serve`) and PostgreSQL (a one-broker cluster on a throwaway server). A test
# so marked runs twice; the fixtures `differential_ports` and `kgroups_on` pick the broker.
ON_BOTH_ENGINES = pytest.mark.parametrize("kgroups_engine", [
    "local", pytest.param("postgresql", marks=(pytest.mark.postgresql, pytest.mark.kafka))])


def create_topics(bootstrap: str) -> None:
    """TOPICS on the broker at `bootstrap`, returning once every partition has a leader (Kafka
    refuses commits for partitions its metadata does not have yet)."""
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


def wait_coordinator(bootstrap: str, timeout_s: float = 30.0) -> None:
    """Until the broker at `bootstrap` answers FindCoordinator for a group: a cluster broker
    does once it has taken the lease of `__consumer_offsets-0` and loaded it."""
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with KafkaWireClient(host, int(port), client_id="differential-setup") as client:
                (found,) = client.call(FindCoordinatorRequest(
                    key_type=i8(0), coordinator_keys=("differential-probe",))).coordinators
            if int(found.error_code) == 0:
                return
        except WireError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{bootstrap} never became a group coordinator")


def offsets_log_records(data_dir: Path) -> list[tuple[bytes, bytes | None]]:
    """The (key, value) of every record of a broker's `__consumer_offsets-0` segments, in log
    order (control batches left out): what a broker wrote, to read back byte for byte."""
    records = []
    for segment in sorted((data_dir / "__consumer_offsets-0").glob("*.log")):
        for batch in iter_batches(segment.read_bytes()):
            records += [(bytes(r.key), None if r.value is None else bytes(r.value))
                        for r in batch.records if r.key is not None and not batch.is_control]
    return records
