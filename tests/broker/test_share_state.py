"""The share coordinator on a kgroups broker: its state survives a restart and a kill -9 of
`kgroups serve` (a write answered is never lost), `__share_group_state` is created as Kafka
creates it, a ShareSnapshot follows every `share.coordinator.snapshot.update.records.per.snapshot`
ShareUpdates in the log, and the in-process ShareStatePersister (what the share partitions and
the group coordinator call) reads what the wire APIs wrote and the other way round."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.broker.broker_wire_helpers import (
    connect,
    create_topic,
    list_offsets_request,
    metadata_request,
    nested_of,
    request_of,
)
from tests.broker.servers import InProcessBroker, ServerProcess

from kgroups.broker.share_state_runtime import SHARE_STATE_TOPIC
from kgroups.errors import ErrorCode
from kgroups.log.batch import iter_batches
from kgroups.records.share_state import decode_share_state_key
from kgroups.share.persisted import (
    DeliveryState,
    PersistedBatch,
    PersistedShareState,
    SharePartitionKey,
)
from kgroups.share_coordinator.placement import coordinator_key, state_partition
from kgroups.tools.wire_client import KafkaWireClient, WireError

INITIALIZE, READ, WRITE, DESCRIBE_CONFIGS, FIND_COORDINATOR = 83, 84, 85, 32, 10
TOPIC = "jobs"


def _topic_id(client: KafkaWireClient) -> uuid.UUID:
    """The topic's id, after looking the share coordinator up, which creates
    __share_group_state (before that its APIs answer NOT_COORDINATOR, as Kafka's do)."""
    created = create_topic(client, TOPIC, 2)
    assert int(created.error_code) == 0  # type: ignore[attr-defined]
    answer = client.call(metadata_request(TOPIC, auto_create=False))
    topic_id: uuid.UUID = answer.topics[0].topic_id
    found = client.call(request_of(FIND_COORDINATOR, 6, key_type=2, coordinator_keys=(
        coordinator_key("any", topic_id, 0),))).coordinators[0]
    assert int(found.error_code) == ErrorCode.NONE
    return topic_id


def _initialize(client: KafkaWireClient, group: str, topic_id: uuid.UUID, partition: int,
                start_offset: int) -> int:
    answer = client.call(request_of(INITIALIZE, 0, group_id=group, topics=(nested_of(
        INITIALIZE, 0, "InitializeStateData", topic_id=topic_id, partitions=(nested_of(
            INITIALIZE, 0, "PartitionData", partition=partition, state_epoch=0,
            start_offset=start_offset),)),)))
    return int(answer.results[0].partitions[0].error_code)


def _write(client: KafkaWireClient, group: str, topic_id: uuid.UUID, partition: int,
           start_offset: int, batches: list[tuple[int, int, int, int]]) -> int:
    state_batches = tuple(nested_of(WRITE, 1, "StateBatch", first_offset=first,
                                    last_offset=last, delivery_state=state,
                                    delivery_count=count)
                          for first, last, state, count in batches)
    answer = client.call(request_of(WRITE, 1, group_id=group, topics=(nested_of(
        WRITE, 1, "WriteStateData", topic_id=topic_id, partitions=(nested_of(
            WRITE, 1, "PartitionData", partition=partition, state_epoch=0, leader_epoch=0,
            start_offset=start_offset, delivery_complete_count=-1,
            state_batches=state_batches),)),)))
    return int(answer.results[0].partitions[0].error_code)


def _read(client: KafkaWireClient, group: str, topic_id: uuid.UUID, partition: int
          ) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    """(error, start offset, batches)."""
    answer = client.call(request_of(READ, 0, group_id=group, topics=(nested_of(
        READ, 0, "ReadStateData", topic_id=topic_id, partitions=(nested_of(
            READ, 0, "PartitionData", partition=partition, leader_epoch=0),)),)))
    result = answer.results[0].partitions[0]
    return (int(result.error_code), int(result.start_offset),
            [(int(b.first_offset), int(b.last_offset), int(b.delivery_state),
              int(b.delivery_count)) for b in result.state_batches])


def _record_types(data_dir: Path, group: str, topic_id: uuid.UUID, partition: int) -> str:
    """The share-partition's records in its __share_group_state partition: S a ShareSnapshot,
    U a ShareUpdate, D a tombstone."""
    index = state_partition(coordinator_key(group, topic_id, partition))
    data = b"".join(p.read_bytes() for p in sorted(
        (data_dir / f"{SHARE_STATE_TOPIC}-{index}").glob("*.log")))
    kinds = []
    for batch in iter_batches(data):
        for record in batch.records:
            key = decode_share_state_key(record.key)
            if (key.group_id, key.topic_id, key.partition) == (group, topic_id, partition):
                kinds.append("D" if record.value is None else "S" if key.snapshot else "U")
    return "".join(kinds)


def test_state_survives_restart_and_snapshots_follow_the_configured_count(
        start_kgroups_server: Callable[..., ServerProcess]) -> None:
    server = start_kgroups_server(
        "share.coordinator.snapshot.update.records.per.snapshot=3")
    with connect(server.port) as client:
        topic_id = _topic_id(client)
        assert _initialize(client, "workers", topic_id, 1, 100) == ErrorCode.NONE
        for offset in range(100, 109):  # one record acknowledged per write
            assert _write(client, "workers", topic_id, 1, -1,
                          [(offset, offset, 2, 1)]) == ErrorCode.NONE
        assert _write(client, "workers", topic_id, 1, 105, [(109, 112, 0, 1)]) == ErrorCode.NONE
        before = _read(client, "workers", topic_id, 1)
    assert before == (0, 105, [(105, 108, 2, 1), (109, 112, 0, 1)])
    # A snapshot (carrying the whole merged state) after every three updates, as Kafka
    # (tests/records/test_share_state.py compares the records with Kafka's).
    assert _record_types(server.data_dir, "workers", topic_id, 1) == "SUUUSUUUSUU"
    assert server.stop() == 0
    server.start()
    with connect(server.port) as client:
        assert _read(client, "workers", topic_id, 1) == before
        assert _read(client, "workers", topic_id, 0)[0] == ErrorCode.INVALID_REQUEST


def test_an_answered_write_survives_kill_9(
        start_kgroups_server: Callable[..., ServerProcess]) -> None:
    """Writes from a client thread while the broker is SIGKILLed: every write that was
    answered NONE is in the state read after the restart (offsets acknowledged one by one, so
    the state says exactly which writes were kept)."""
    server = start_kgroups_server()
    with connect(server.port) as client:
        topic_id = _topic_id(client)
        assert _initialize(client, "kill-9", topic_id, 0, 0) == ErrorCode.NONE
    answered: list[int] = []
    ten_answered = threading.Event()

    def write_until_killed() -> None:
        try:
            with connect(server.port) as writer:
                for offset in range(100_000):
                    if _write(writer, "kill-9", topic_id, 0, -1,
                              [(offset, offset, 2, 1)]) != ErrorCode.NONE:
                        return
                    answered.append(offset)
                    if len(answered) == 10:
                        ten_answered.set()
        except WireError:  # the broker died mid-call
            return

    thread = threading.Thread(target=write_until_killed)
    thread.start()
    assert ten_answered.wait(30)
    server.kill()
    thread.join(30)
    server.start()
    with connect(server.port) as client:
        error, start, batches = _read(client, "kill-9", topic_id, 0)
    assert error == ErrorCode.NONE and start == 0
    kept = {offset for first, last, state, _ in batches if state == 2
            for offset in range(first, last + 1)}
    assert set(answered) <= kept
    assert kept == set(range(len(kept)))  # nothing past a write that was never made


def _log_start(client: KafkaWireClient, partition: int) -> int:
    answer = client.call(list_offsets_request(SHARE_STATE_TOPIC, partition, -2))
    return int(answer.topics[0].partitions[0].offset)


def test_records_no_longer_needed_are_pruned_and_the_state_stays(
        start_kgroups_server: Callable[..., ServerProcess]) -> None:
    """With Kafka's housekeeping made quick: the share-partition's log start moves past its
    superseded records (a fresh snapshot of a quiet share-partition lets it move), and the
    state replayed from what is left is the state before."""
    server = start_kgroups_server(
        "share.coordinator.snapshot.update.records.per.snapshot=2",
        "share.coordinator.state.topic.prune.interval.ms=100",
        "share.coordinator.cold.partition.snapshot.interval.ms=300")
    with connect(server.port) as client:
        topic_id = _topic_id(client)
        assert _initialize(client, "pruned", topic_id, 0, 0) == ErrorCode.NONE
        for offset in range(7):
            assert _write(client, "pruned", topic_id, 0, -1,
                          [(offset, offset, 2, 1)]) == ErrorCode.NONE
        before = _read(client, "pruned", topic_id, 0)
        partition = state_partition(coordinator_key("pruned", topic_id, 0))
        deadline = time.monotonic() + 20
        while _log_start(client, partition) < 8 and time.monotonic() < deadline:
            time.sleep(0.1)
        start = _log_start(client, partition)
    assert before == (0, 0, [(0, 6, 2, 1)])
    assert start >= 8  # past the seven writes: the cold snapshot after them is all it needs
    assert server.stop() == 0
    server.start()
    with connect(server.port) as client:
        assert _read(client, "pruned", topic_id, 0) == before


def test_the_topic_is_created_as_kafka_creates_it(kgroups_server: ServerProcess) -> None:
    with connect(kgroups_server.port) as client:
        create_topic(client, "before", 1)
        before = client.call(metadata_request("before", auto_create=False)).topics[0].topic_id
        # No lookup yet: no __share_group_state, and its APIs say this is not the coordinator.
        assert _initialize(client, "configs", before, 0, 0) == ErrorCode.NOT_COORDINATOR
        topic_id = _topic_id(client)
        assert _initialize(client, "configs", topic_id, 0, 0) == ErrorCode.NONE
        answer = client.call(metadata_request(SHARE_STATE_TOPIC, auto_create=False))
        configs = client.call(request_of(DESCRIBE_CONFIGS, 4, resources=(nested_of(
            DESCRIBE_CONFIGS, 4, "DescribeConfigsResource", resource_type=2,
            resource_name=SHARE_STATE_TOPIC, configuration_keys=None),),
            include_synonyms=False, include_documentation=False))
    (topic,) = answer.topics
    assert topic.is_internal and len(topic.partitions) == 50
    values = {c.name: c.value for c in configs.results[0].configs}
    # Kafka keeps every record and prunes the log itself: deleted, never compacted.
    assert values["cleanup.policy"] == "delete" and values["retention.ms"] == "-1"
    assert values["segment.bytes"] == "104857600"


def _persisted(start: int, *batches: tuple[int, int, DeliveryState, int]
               ) -> PersistedShareState:
    return PersistedShareState(0, 0, start, tuple(PersistedBatch(*b) for b in batches), 2)


def test_the_persister_and_the_wire_share_one_state(inprocess_broker: InProcessBroker) -> None:
    runtime: Any = inprocess_broker.broker.share_state
    with connect(inprocess_broker.port) as client:
        topic_id = _topic_id(client)
    key = SharePartitionKey("persisted", topic_id.bytes, 1)

    async def never_initialized() -> Any:
        return await runtime.read(key, 0)

    assert inprocess_broker.call(never_initialized).error == ErrorCode.INVALID_REQUEST

    async def initialize_and_write() -> Any:
        assert await runtime.initialize(key, 0, 40) == ErrorCode.NONE
        assert await runtime.write(key, _persisted(
            40, (40, 44, DeliveryState.ACKNOWLEDGED, 1),
            (45, 49, DeliveryState.AVAILABLE, 2))) == ErrorCode.NONE
        return await runtime.read(key, 0), await runtime.read_summary(key, 0)

    read, summary = inprocess_broker.call(initialize_and_write)
    assert read.error == ErrorCode.NONE and read.state == _persisted(
        40, (40, 44, DeliveryState.ACKNOWLEDGED, 1), (45, 49, DeliveryState.AVAILABLE, 2))
    assert summary.state == PersistedShareState(0, 0, 40, (), 2)
    with connect(inprocess_broker.port) as client:
        assert _read(client, "persisted", topic_id, 1) == (
            0, 40, [(40, 44, 2, 1), (45, 49, 0, 2)])
        assert _write(client, "persisted", topic_id, 1, 45, []) == ErrorCode.NONE

    async def delete() -> Any:
        after_write = await runtime.read(key, 0)
        assert await runtime.delete(key) == ErrorCode.NONE
        return after_write, await runtime.read(key, 0)

    after_write, after_delete = inprocess_broker.call(delete)
    assert after_write.state.start_offset == 45
    assert after_write.state.batches == (PersistedBatch(45, 49, DeliveryState.AVAILABLE, 2),)
    assert after_delete.error == ErrorCode.INVALID_REQUEST


def test_a_cluster_broker_says_it_is_not_the_share_coordinator(
        inprocess_broker: InProcessBroker) -> None:
    """In cluster mode a share-partition whose `__share_group_state` partition this broker
    does not lead (docs/share-groups.md, "In a cluster"): every call answers NOT_COORDINATOR,
    never "no state" (which would start a share partition afresh) and never a write taken."""
    runtime: Any = inprocess_broker.broker.share_state
    runtime._cluster_mode = True  # what Broker sets for a broker on kgroups.storage
    key = SharePartitionKey("cluster", uuid.uuid4().bytes, 0)

    async def calls() -> list[Any]:
        return [(await runtime.read(key, 0)).error, await runtime.initialize(key, 0, 0),
                await runtime.write(key, _persisted(0)), await runtime.delete(key),
                (await runtime.read_summary(key, 0)).error]

    assert inprocess_broker.call(calls) == [ErrorCode.NOT_COORDINATOR] * 5
