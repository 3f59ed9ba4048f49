"""The topics every conversation may commit offsets for, created alike on each broker.

A module of its own rather than part of conftest.py: test modules import it by name, and the
name `conftest` belongs to whichever directory's conftest pytest loaded last.
"""

from __future__ import annotations

import time

from tests.broker.broker_wire_helpers import create_topic, metadata_request

from kgroups.tools.wire_client import KafkaWireClient

# Each conversation has groups of its own; these topics are shared.
TOPICS = {"diff-t": 3, "diff-u": 2}


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
