"""FindCoordinator for what kgroups does not serve yet, beside Kafka 4.3.1 in the same state:
transactions (Kafka here with `transaction.state.log.replication.factor=3` on one node, so its
transaction coordinator never becomes available, as kgroups' never is) and share groups (off by
default in Kafka 4.3.1), and key types neither knows. The codes are Kafka's; the only
difference is the text of a transactional lookup, where kgroups says why (docs/compatibility.md,
"FindCoordinator when there is no coordinator")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from diff_dialog import Dialog, differences, run_both
from diff_requests import find_coordinator

import kgroups
from kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker

pytestmark = pytest.mark.kafka

VERSIONS = (1, 3, 4, 6)
KEY_TYPES = (1, 2, 3, -1)  # transaction, share, two types Kafka does not know


@pytest.fixture(scope="module")
def without_transactions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    kafka = KafkaBroker(tmp_path_factory.mktemp("kafka-no-txn"), settings={
        **KAFKA_TEST_SETTINGS, "transaction.state.log.replication.factor": "3"})
    kafka.start()
    try:
        with kgroups.serve_in_background() as served:
            yield {"kafka": kafka.port, "kgroups": served.port}
    finally:
        kafka.stop()


def test_find_coordinator_for_features_not_served(without_transactions: dict[str, int]) -> None:
    def script(d: Dialog) -> None:
        client = d.connect("a")
        for version in VERSIONS:
            for key_type in KEY_TYPES:
                client.call(find_coordinator(f"{d.group}-key", v=version, key_type=key_type),
                            f"v{version} key type {key_type}")

    transcripts = run_both(script, without_transactions, "not-served", ())
    ours = "transactions are not supported"
    assert differences(transcripts["kafka"], transcripts["kgroups"]) == {
        "0 v1 key type 1.error_message": ("The coordinator is not available.", ours),
        "4 v3 key type 1.error_message": ("The coordinator is not available.", ours),
        "8 v4 key type 1.coordinators[0].error_message": ("", ours),
        "12 v6 key type 1.coordinators[0].error_message": ("", ours),
    }
