"""Builds data directories in Kafka's on-disk layout for the pipeline tests, with the project's
own encoders (`kgroups.records`, `kgroups.log.batch`): no binary fixtures, every byte derives
from the events a test declares, so a test can state what the tables must say."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from kgroups.log.batch import build_batch
from kgroups.records.codec import encode_key, encode_value
from kgroups.records.consumer_protocol import encode_assignment, encode_subscription
from kgroups.records.schema import (
    ConsumerAssignment,
    ConsumerSubscription,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicPartitions,
)

OFFSETS_PARTITIONS = 50


def coordinator_partition(group: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """Kafka's placement: abs(Java String.hashCode(group)) % partitions (abs(MIN) = 0)."""
    code = 0
    for unit in group.encode("utf-16-be").hex(" ", 2).split():
        code = (code * 31 + int(unit, 16)) & 0xFFFFFFFF
    signed = code - (1 << 32) if code >= 1 << 31 else code
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


@dataclass
class _Partition:
    batches: list[list[bytes]] = field(default_factory=lambda: [[]])  # segments of batches
    next_offset: int = 0


class OffsetsLogBuilder:
    """Appends __consumer_offsets records (one batch per call, as the coordinator writes) and
    writes them as `__consumer_offsets-<p>/<base>.log` segments."""

    def __init__(self) -> None:
        self._partitions: dict[int, _Partition] = {}

    def _append(self, group: str, records: list[tuple[bytes, bytes | None, int]],
                **batch_options: object) -> int:
        partition = self._partitions.setdefault(coordinator_partition(group), _Partition())
        base = partition.next_offset
        partition.batches[-1].append(build_batch(records, base_offset=base, **batch_options))
        partition.next_offset += len(records)
        return base

    def roll(self, group: str) -> None:
        """Start a new segment in the partition of `group`, as Kafka does at segment.bytes."""
        self._partitions.setdefault(coordinator_partition(group), _Partition()).batches.append([])

    def commit(self, group: str, offsets: dict[tuple[str, int], int], ts: int,
               metadata: str = "", leader_epoch: int = -1, **batch_options: object) -> int:
        records = [
            (encode_key(OffsetCommitKey(group, topic, partition)),
             encode_value(OffsetCommitValue(offset, metadata, ts, leader_epoch)), ts)
            for (topic, partition), offset in offsets.items()
        ]
        return self._append(group, records, **batch_options)

    def delete_offsets(self, group: str, partitions: list[tuple[str, int]], ts: int) -> int:
        records = [(encode_key(OffsetCommitKey(group, t, p)), None, ts) for t, p in partitions]
        return self._append(group, records)

    def generation(self, group: str, generation: int, assignment: dict[str, list[tuple[str, int]]],
                   ts: int, protocol: str = "range",
                   instance_ids: dict[str, str] | None = None) -> int:
        """A consumer group's generation: member id -> assigned (topic, partition)s."""
        members = []
        for member_id, partitions in assignment.items():
            topics = sorted({t for t, _ in partitions}) or ["unassigned"]
            by_topic: dict[str, list[int]] = {}
            for topic, p in partitions:
                by_topic.setdefault(topic, []).append(p)
            members.append(
                MemberMetadata(
                    member_id=member_id,
                    client_id=f"client-{member_id}",
                    client_host=f"/10.0.0.{len(members) + 1}",
                    session_timeout=45000,
                    rebalance_timeout=300000,
                    subscription=encode_subscription(ConsumerSubscription(tuple(topics))),
                    assignment=encode_assignment(ConsumerAssignment(tuple(
                        TopicPartitions(t, tuple(ps)) for t, ps in sorted(by_topic.items())
                    ))),
                    group_instance_id=(instance_ids or {}).get(member_id),
                )
            )
        value = GroupMetadataValue(
            protocol_type="consumer", generation=generation, protocol=protocol,
            leader=next(iter(assignment), None), current_state_timestamp=ts,
            members=tuple(members),
        )
        return self._append(group, [(encode_key(GroupMetadataKey(group)), encode_value(value), ts)])

    def transaction_marker(self, group: str, producer_id: int, commit: bool, ts: int) -> int:
        """The control batch ending `producer_id`'s transaction in the partition of `group`:
        key (version 0, type 1 commit / 0 abort), value (version 0, coordinator epoch 0)."""
        key = struct.pack(">hh", 0, 1 if commit else 0)
        return self._append(group, [(key, struct.pack(">hi", 0, 0), ts)], control=True,
                            transactional=True, producer_id=producer_id, producer_epoch=0)

    def records(self, group: str, pairs: list[tuple[object, object | None]], ts: int) -> int:
        """Any records (key, value or None for a tombstone) in one batch: a KIP-848 consumer
        group writes its state as several records at once."""
        return self._append(group, [(encode_key(key), None if value is None else  # type: ignore[arg-type]
                                     encode_value(value), ts) for key, value in pairs])  # type: ignore[arg-type]

    def delete_group(self, group: str, ts: int) -> int:
        return self._append(group, [(encode_key(GroupMetadataKey(group)), None, ts)])

    def write(self, data_dir: Path) -> list[Path]:
        """Write every partition's segments; returns the segment files."""
        written = []
        for number, partition in sorted(self._partitions.items()):
            directory = data_dir / f"__consumer_offsets-{number}"
            directory.mkdir(parents=True, exist_ok=True)
            for batches in partition.batches:
                if not batches:
                    continue
                first = int.from_bytes(batches[0][:8], "big")
                path = directory / segment_name(first)
                path.write_bytes(b"".join(batches))
                written.append(path)
        return written


def write_topic_log(data_dir: Path, topic: str, partition: int,
                    batches: list[tuple[int, int]]) -> Path:
    """A data topic partition: each (record count, timestamp) becomes one batch."""
    directory = data_dir / f"{topic}-{partition}"
    directory.mkdir(parents=True, exist_ok=True)
    offset = 0
    parts = []
    for count, ts in batches:
        parts.append(build_batch([(None, b"x", ts)] * count, base_offset=offset))
        offset += count
    path = directory / segment_name(0)
    path.write_bytes(b"".join(parts))
    return path
