"""The share coordinator's shard without I/O: each request's record, applied once durable, and
the same records replayed after a restart (through their bytes) rebuild the same state and the
same fencing; a snapshot after every `snapshot_every` updates; a deleted share-partition
forgets its epochs."""

from __future__ import annotations

import random
import uuid

from kgroups.errors import ErrorCode
from kgroups.records.share_state import (
    ShareSnapshotValue,
    StateBatch,
    decode_share_state_key,
    decode_share_state_value,
    encode_share_state_key,
    encode_share_state_value,
)
from kgroups.share_coordinator.shard import (
    Answer,
    ShareCoordinatorShard,
    StateRecord,
    WriteRequest,
)

TOPIC = uuid.UUID("0b0a8f6c-5c1e-4a53-9b7e-2f1d3c4b5a69")
NOW = 1_700_000_000_000


def _partitions(topic_id: uuid.UUID) -> int | None:
    return 4 if topic_id == TOPIC else None


class Log:
    """A shard whose records go through their bytes into a log, as the runtime's do."""

    def __init__(self, snapshot_every: int = 500, num_partitions: int = 50) -> None:
        self.shard = ShareCoordinatorShard(snapshot_every, num_partitions)
        self.records: list[tuple[bytes, bytes | None]] = []

    def apply(self, answer: Answer) -> Answer:
        if answer.record is not None:
            key = encode_share_state_key(answer.record.key)
            value = answer.record.value
            self.records.append((key, None if value is None else encode_share_state_value(value)))
            self.shard.replay(answer.record, len(self.records) - 1)
        return answer

    def replayed(self) -> ShareCoordinatorShard:
        shard = ShareCoordinatorShard(self.shard.snapshot_every, self.shard.num_partitions)
        for offset, (key_bytes, value_bytes) in enumerate(self.records):
            key = decode_share_state_key(key_bytes)
            shard.replay(StateRecord(key, decode_share_state_value(key, value_bytes)), offset)
        return shard

    def kinds(self) -> str:
        return "".join("D" if value is None else "S" if key[1] == 0 else "U"
                       for key, value in self.records)


def _write(log: Log, partition: int, state_epoch: int, leader_epoch: int, start: int,
           *batches: tuple[int, int, int, int], delivered: int = -1) -> ErrorCode:
    request = WriteRequest(state_epoch, leader_epoch, start,
                           tuple(StateBatch(*b) for b in batches), delivered)
    return log.apply(log.shard.write("g", TOPIC, partition, request, _partitions, NOW)).error


def test_a_replay_rebuilds_the_state_and_its_fencing() -> None:
    log = Log(snapshot_every=4)
    rng = random.Random(7)
    for partition in range(3):
        log.apply(log.shard.initialize("g", TOPIC, partition, 0, 0, _partitions, NOW))
    for step in range(60):
        partition = rng.randrange(3)
        first = rng.randrange(0, 80)
        if rng.random() < 0.1:
            log.apply(log.shard.read("g", TOPIC, partition, step // 10, _partitions, NOW))
        _write(log, partition, 0, -1, rng.choice((-1, first // 2)),
               (first, first + rng.randrange(5), rng.choice((0, 2, 4)), rng.randrange(1, 4)))
    replayed = log.replayed()
    assert replayed.states == log.shard.states
    assert "S" in log.kinds()[3:]  # snapshots were written along the way, not only updates
    for partition in range(3):
        live = log.shard.read("g", TOPIC, partition, 0, _partitions, NOW)
        again = replayed.read("g", TOPIC, partition, 0, _partitions, NOW)
        assert (live.error, live.state) == (again.error, again.state)


def test_a_snapshot_follows_every_configured_count_of_updates() -> None:
    log = Log(snapshot_every=2)
    log.apply(log.shard.initialize("g", TOPIC, 0, 0, 10, _partitions, NOW))
    for offset in range(10, 17):
        assert _write(log, 0, 0, 0, -1, (offset, offset, 2, 1)) == ErrorCode.NONE
    assert log.kinds() == "SUUSUUSU"
    (snapshot_bytes,) = [v for k, v in log.records[-2:-1]]
    key = decode_share_state_key(log.records[-2][0])
    snapshot = decode_share_state_value(key, snapshot_bytes)
    assert snapshot is not None and snapshot.state_batches == (StateBatch(10, 15, 2, 1),)
    assert snapshot.snapshot_epoch == 2


def test_epochs_fence_and_a_delete_forgets_them() -> None:
    log = Log()
    assert log.apply(log.shard.initialize("g", TOPIC, 1, 3, 0, _partitions, NOW)).error \
        == ErrorCode.NONE
    assert log.apply(log.shard.read("g", TOPIC, 1, 5, _partitions, NOW)).record is not None
    assert _write(log, 1, 3, 4, 0) == ErrorCode.FENCED_LEADER_EPOCH
    assert _write(log, 1, 2, 5, 0) == ErrorCode.FENCED_STATE_EPOCH
    assert _write(log, 1, 3, 5, 0) == ErrorCode.NONE
    assert log.apply(log.shard.initialize("g", TOPIC, 1, 2, 0, _partitions, NOW)).error \
        == ErrorCode.FENCED_STATE_EPOCH
    assert log.apply(log.shard.delete("g", TOPIC, 1, _partitions)).record is not None
    assert log.apply(log.shard.initialize("g", TOPIC, 1, 0, 0, _partitions, NOW)).error \
        == ErrorCode.NONE
    assert log.apply(log.shard.read("g", TOPIC, 1, 0, _partitions, NOW)).error == ErrorCode.NONE
    assert log.kinds() == "SUUDS"
    assert log.replayed().states == log.shard.states


def test_unknown_topics_partitions_and_uninitialized_share_partitions() -> None:
    shard = ShareCoordinatorShard()
    other = uuid.UUID(int=1)
    assert shard.initialize("g", other, 0, 0, 0, _partitions, NOW).error \
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert shard.initialize("g", TOPIC, 4, 0, 0, _partitions, NOW).error \
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    refused = shard.read("g", TOPIC, 0, 0, _partitions, NOW)
    assert (refused.error, refused.message) == (
        ErrorCode.INVALID_REQUEST, "Read operation on uninitialized share partition not allowed.")
    summary = shard.read_summary("g", TOPIC, 0, _partitions)
    assert summary.error == ErrorCode.NONE and summary.state is not None
    assert summary.state.start_offset == -1
    assert shard.delete("g", TOPIC, 0, _partitions) == Answer()


def test_records_before_the_oldest_latest_snapshot_are_redundant() -> None:
    """Kafka's rule: per __share_group_state partition, the oldest of its share-partitions'
    latest snapshots (a tombstone counts once, then its share-partition is forgotten)."""
    log = Log(snapshot_every=1, num_partitions=1)  # both share-partitions in partition 0
    first, other, partition = 0, 1, 0
    assert log.shard.redundant_offset(partition) is None
    log.apply(log.shard.initialize("g", TOPIC, first, 0, 0, _partitions, NOW))  # offset 0
    assert log.shard.redundant_offset(partition) is None  # offset 0: nothing before it
    log.apply(log.shard.initialize("g", TOPIC, other, 0, 0, _partitions, NOW))  # 1
    _write(log, first, 0, 0, 0, (0, 0, 2, 1))  # 2: update
    _write(log, first, 0, 0, 0, (1, 1, 2, 1))  # 3: snapshot
    assert log.kinds() == "SSUS"
    assert log.shard.redundant_offset(partition) == 1  # `other`'s snapshot still needed
    log.apply(log.shard.delete("g", TOPIC, other, _partitions))  # 4: tombstone
    assert log.shard.redundant_offset(partition) == 3
    _write(log, first, 0, 0, 0, (2, 2, 2, 1))  # 5: update
    _write(log, first, 0, 0, 0, (3, 3, 2, 1))  # 6: snapshot
    assert log.shard.redundant_offset(partition) == 6


def test_cold_share_partitions_are_snapshotted_once() -> None:
    log = Log()
    log.apply(log.shard.initialize("g", TOPIC, 0, 0, 0, _partitions, NOW))
    _write(log, 0, 0, 0, 0, (0, 4, 2, 1))
    assert log.shard.cold_snapshots(NOW + 1000, 5000) == []
    (cold,) = log.shard.cold_snapshots(NOW + 5000, 5000)
    assert cold.value is not None and cold.value.snapshot_epoch == 1
    assert isinstance(cold.value, ShareSnapshotValue)
    assert cold.value.state_batches == (StateBatch(0, 4, 2, 1),)
    log.apply(Answer(record=cold))
    assert log.shard.cold_snapshots(NOW + 99_999, 5000) == []  # every one refreshed already
