"""FindCoordinator for keys neither broker serves, beside Kafka 4.3.1 in the same state: a
share-partition key (type 2) that names no share-partition, and key types neither knows. The
codes and texts are Kafka's. (Transactional lookups are served:
tests/differential/test_diff_transactions.py; well-formed share-partition keys:
tests/differential/test_diff_share_state.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from diff_dialog import Dialog, differences, run_both
from diff_requests import find_coordinator

import kgroups
from kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker

pytestmark = pytest.mark.kafka

VERSIONS = (1, 3, 4, 6)
KEY_TYPES = (2, 3, -1)  # share (a key naming no share-partition), two types Kafka does not know


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    kafka = KafkaBroker(tmp_path_factory.mktemp("kafka-no-share"), settings=KAFKA_TEST_SETTINGS)
    kafka.start()
    try:
        with kgroups.serve_in_background() as served:
            yield {"kafka": kafka.port, "kgroups": served.port}
    finally:
        kafka.stop()


def test_find_coordinator_for_features_not_served(brokers: dict[str, int]) -> None:
    def script(d: Dialog) -> None:
        client = d.connect("a")
        for version in VERSIONS:
            for key_type in KEY_TYPES:
                client.call(find_coordinator(f"{d.group}-key", v=version, key_type=key_type),
                            f"v{version} key type {key_type}")

    transcripts = run_both(script, brokers, "not-served", ())
    assert differences(transcripts["kafka"], transcripts["kgroups"]) == {}
