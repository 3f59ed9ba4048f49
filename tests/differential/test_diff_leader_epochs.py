"""OffsetForLeaderEpoch (API 23) against Kafka 4.3.1 on one broker: the versions served, and
each partition's answer (error, epoch, end offset) for the epochs a consumer or a follower may
ask about, an empty partition, and partitions and topics that do not exist."""

from __future__ import annotations

from typing import Any

import pytest
from diff_dialog import Dialog
from diff_requests import api_versions
from test_diff_delete_records import make_topic
from tests.broker.broker_wire_helpers import nested_of, request_of

pytestmark = pytest.mark.kafka

OFFSET_FOR_LEADER_EPOCH = 23


def epochs_request(asked: dict[str, list[tuple[int, int, int]]], v: int = 4,
                   replica_id: int = -1) -> Any:
    """For each topic, (partition, current leader epoch, leader epoch) entries."""
    return request_of(OFFSET_FOR_LEADER_EPOCH, v, replica_id=replica_id, topics=tuple(
        nested_of(OFFSET_FOR_LEADER_EPOCH, v, "OffsetForLeaderTopic", topic=topic,
                  partitions=tuple(nested_of(OFFSET_FOR_LEADER_EPOCH, v,
                                             "OffsetForLeaderPartition", partition=partition,
                                             current_leader_epoch=current, leader_epoch=epoch)
                                   for partition, current, epoch in entries))
        for topic, entries in asked.items()))


def test_versions_served(converse: Any) -> None:
    def script(d: Dialog) -> None:
        answer = d.connect("a").call(api_versions(), record=False)
        (entry,) = [k for k in answer.api_keys if int(k.api_key) == OFFSET_FOR_LEADER_EPOCH]
        d.record("OffsetForLeaderEpoch", [int(entry.min_version), int(entry.max_version)])

    converse(script)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_end_offsets_of_epochs(converse: Any, version: int) -> None:
    def script(d: Dialog) -> None:
        c = d.connect("a")
        topic = f"ole-{d.group}"
        make_topic(c, topic, partitions=2, records=5)  # partition 1 stays empty
        c.call(epochs_request({
            topic: [(0, -1, 0), (0, -1, -1), (0, -1, 1), (0, -1, 7), (0, 0, 0),
                    (1, -1, 0), (1, -1, 3), (9, -1, 0)],
            f"ole-missing-{d.group}": [(0, -1, 0)],
        }, v=version))
        c.call(epochs_request({topic: [(0, -1, 0)]}, v=version, replica_id=-2))

    converse(script)


def test_a_single_node_checks_no_current_leader_epoch(converse: Any) -> None:
    """The one known difference (docs/compatibility.md): Kafka's broker leads at epoch 0 and
    checks a client's epoch against it; a single kgroups node keeps no epochs (its Metadata
    gives -1) and checks none, as in its Fetch and ListOffsets."""
    def script(d: Dialog) -> None:
        c = d.connect("a")
        topic = f"ole-{d.group}"
        make_topic(c, topic, records=2)
        for current in (0, 1):
            (answer,) = c.call(epochs_request({topic: [(0, current, 0)]}),
                               record=False).topics[0].partitions
            d.record(f"current epoch {current}", (int(answer.error_code),
                                                  int(answer.leader_epoch),
                                                  int(answer.end_offset)))

    # Kafka: UNKNOWN_LEADER_EPOCH (75), no epoch, no offset; kgroups: epoch 0 ends at 2.
    converse(script, known={"1 current epoch 1[0]": (75, 0), "1 current epoch 1[1]": (-1, 0),
                            "1 current epoch 1[2]": (-1, 2)})
