"""Kafka's DumpLogSegments (--offsets-decoder) reads the share-group records kgroups encodes
(types 10-15, tombstones included) exactly as `kgroups offsets dump` does."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tests.tools.test_log_files import assert_same_records

from kgroups.log.batch import build_batch
from kgroups.records.codec import encode_key, encode_value
from kgroups.records.schema import RecordKey, RecordValue
from kgroups.records.share_group import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareTopicPartitions,
)

pytestmark = pytest.mark.kafka

TOPIC = uuid.UUID(int=0x5F4D3C2B1A0948778665544332211000)
OTHER = uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF)


def test_dump_log_segments_reads_kgroups_share_group_records(tmp_path: Path) -> None:
    records: list[tuple[RecordKey, RecordValue | None]] = [
        (ShareGroupMemberMetadataKey("g", "m1"),
         ShareGroupMemberMetadataValue("rack-a", "client", "/127.0.0.1", ("orders", "payments"))),
        (ShareGroupMemberMetadataKey("g", "m2"),
         ShareGroupMemberMetadataValue(None, "client", "/127.0.0.1", ())),
        (ShareGroupMetadataKey("g"), ShareGroupMetadataValue(7, -1234567890123)),
        (ShareGroupTargetAssignmentMemberKey("g", "m1"),
         ShareGroupTargetAssignmentMemberValue(((TOPIC, (0, 2)), (OTHER, (1,))))),
        (ShareGroupTargetAssignmentMetadataKey("g"),
         ShareGroupTargetAssignmentMetadataValue(7, 1_700_000_000_000)),
        (ShareGroupTargetAssignmentMetadataKey("g"), ShareGroupTargetAssignmentMetadataValue(8)),
        (ShareGroupCurrentMemberAssignmentKey("g", "m1"),
         ShareGroupCurrentMemberAssignmentValue(7, 6, 0, ((TOPIC, (0, 2)),))),
        (ShareGroupStatePartitionMetadataKey("g"), ShareGroupStatePartitionMetadataValue(
            (ShareTopicPartitions(TOPIC, "orders", (1,)),),
            (ShareTopicPartitions(OTHER, "payments", (0, 1)),), ((TOPIC, "orders"),))),
        (ShareGroupCurrentMemberAssignmentKey("g", "m1"), None),
        (ShareGroupTargetAssignmentMemberKey("g", "m1"), None),
        (ShareGroupMemberMetadataKey("g", "m1"), None),
        (ShareGroupStatePartitionMetadataKey("g"), None),
        (ShareGroupMetadataKey("g"), None),
    ]
    directory = tmp_path / "__consumer_offsets-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(build_batch(
        [(encode_key(key), None if value is None else encode_value(value), 1_700_000_000_000)
         for key, value in records]))
    decoded = assert_same_records(directory)
    assert [r["key"]["type"] for r in decoded] == [10, 10, 11, 13, 12, 12, 14, 15, 14, 13, 10,
                                                    15, 11]
    assert decoded[7]["value"]["data"]["deletingTopics"] == [
        {"topicId": "X008KxoJSHeGZVRDMiEQAA", "topicName": "orders"}]
