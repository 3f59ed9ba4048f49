"""The group APIs over a socket to an in-process broker, in every advertised version: what each
version carries reaches the coordinator, and each answer comes back in that version's shape."""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

import pytest
from broker_wire_helpers import connect, create_topic, fetch_request, nested_of, request_of
from tests.broker.servers import InProcessBroker

from kgroups.coordinator import partition_for
from kgroups.errors import ErrorCode
from kgroups.log.batch import iter_batches
from kgroups.records.codec import decode_record
from kgroups.records.schema import OffsetCommitKey, OffsetCommitValue
from kgroups.tools.wire_client import KafkaWireClient

FAST = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=200")
JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT, FETCH = 11, 14, 12, 13, 8, 9
DESCRIBE, LIST, DELETE, OFFSET_DELETE = 15, 16, 42, 47


def _ready(make_inprocess_broker: Any, *overrides: str) -> InProcessBroker:
    """A broker whose __consumer_offsets is loaded (until then groups answer
    COORDINATOR_LOAD_IN_PROGRESS, which is what clients retry on)."""
    broker: InProcessBroker = make_inprocess_broker(*FAST, *overrides)
    broker.call(broker.broker.coordinator.wait_loaded)
    with connect(broker.port) as client:
        create_topic(client, "events", 2)  # the topic the tests commit offsets for
    return broker


def _join(client: KafkaWireClient, version: int, group: str, member_id: str = "",
          session_ms: int = 10_000, instance_id: str | None = None) -> Any:
    return client.call(request_of(
        JOIN, version, group_id=group, session_timeout=datetime.timedelta(milliseconds=session_ms),
        rebalance_timeout=datetime.timedelta(milliseconds=session_ms), member_id=member_id,
        group_instance_id=instance_id, protocol_type="consumer", reason=None,
        protocols=(nested_of(JOIN, version, "JoinGroupRequestProtocol", name="range",
                           metadata=b"subscription"),),
    ))


def _join_until_member(client: KafkaWireClient, version: int, group: str, **kwargs: Any) -> Any:
    """v4+ first answers MEMBER_ID_REQUIRED with the id to rejoin with, as Kafka does."""
    answer = _join(client, version, group, **kwargs)
    if answer.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        assert version >= 4
        answer = _join(client, version, group, member_id=answer.member_id, **kwargs)
    return answer


def _commit(client: KafkaWireClient, version: int, group: str, generation: int, member: str,
            offsets: dict[int, int]) -> dict[int, int]:
    request = request_of(
        COMMIT, version, group_id=group, generation_id_or_member_epoch=generation,
        member_id=member, group_instance_id=None,
        retention_time=datetime.timedelta(milliseconds=-1),  # v2-v4: the broker's default
        topics=(nested_of(COMMIT, version, "OffsetCommitRequestTopic", name="events",
                        partitions=tuple(
                            nested_of(COMMIT, version, "OffsetCommitRequestPartition",
                                    partition_index=p, committed_offset=o,
                                    committed_leader_epoch=-1, committed_metadata="m")
                            for p, o in offsets.items())),),
    )
    (topic,) = client.call(request).topics
    return {int(p.partition_index): int(p.error_code) for p in topic.partitions}


def _fetch(client: KafkaWireClient, version: int, group: str) -> dict[int, int]:
    if version >= 8:
        request = request_of(FETCH, version, require_stable=False, groups=(nested_of(
            FETCH, version, "OffsetFetchRequestGroup", group_id=group, member_id=None,
            member_epoch=-1, topics=None),))
        (fetched,) = client.call(request).groups
        assert fetched.error_code == ErrorCode.NONE
        topics = fetched.topics
    else:
        topics_arg = None if version >= 2 else (nested_of(
            FETCH, version, "OffsetFetchRequestTopic", name="events", partition_indexes=(0, 1)),)
        topics = client.call(request_of(FETCH, version, group_id=group, topics=topics_arg,
                                      require_stable=False)).topics
    return {int(p.partition_index): int(p.committed_offset)
            for topic in topics for p in topic.partitions}


VERSION_SETS = [
    # join, sync, heartbeat, leave, commit, fetch
    (0, 0, 0, 0, 2, 1),
    (3, 2, 2, 2, 4, 3),
    (5, 3, 3, 3, 7, 7),
    (9, 5, 4, 5, 9, 9),
]


@pytest.mark.parametrize(("join_v", "sync_v", "hb_v", "leave_v", "commit_v", "fetch_v"),
                         VERSION_SETS)
def test_member_lifecycle_in_each_version(
    make_inprocess_broker, join_v: int, sync_v: int, hb_v: int, leave_v: int,  # type: ignore[no-untyped-def]
    commit_v: int, fetch_v: int,
) -> None:
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        joined = _join_until_member(client, join_v, "life")
        assert joined.error_code == ErrorCode.NONE
        assert joined.generation_id == 1
        assert joined.leader == joined.member_id
        assert joined.protocol_name == "range"
        assert [m.metadata for m in joined.members] == [b"subscription"]
        member = joined.member_id

        sync = client.call(request_of(
            SYNC, sync_v, group_id="life", generation_id=1, member_id=member,
            group_instance_id=None, protocol_type="consumer", protocol_name="range",
            assignments=(nested_of(SYNC, sync_v, "SyncGroupRequestAssignment", member_id=member,
                                 assignment=b"all-of-it"),)))
        assert (sync.error_code, sync.assignment) == (ErrorCode.NONE, b"all-of-it")

        heartbeat = client.call(request_of(HEARTBEAT, hb_v, group_id="life", generation_id=1,
                                         member_id=member, group_instance_id=None))
        assert heartbeat.error_code == ErrorCode.NONE
        stale = client.call(request_of(HEARTBEAT, hb_v, group_id="life", generation_id=7,
                                     member_id=member, group_instance_id=None))
        assert stale.error_code == ErrorCode.ILLEGAL_GENERATION

        assert _commit(client, commit_v, "life", 1, member, {0: 42, 1: 7}) == {0: 0, 1: 0}
        assert _fetch(client, fetch_v, "life") == {0: 42, 1: 7}

        if leave_v < 3:
            left = client.call(request_of(LEAVE, leave_v, group_id="life", member_id=member))
            assert left.error_code == ErrorCode.NONE
        else:
            left = client.call(request_of(LEAVE, leave_v, group_id="life", members=(nested_of(
                LEAVE, leave_v, "MemberIdentity", member_id=member, group_instance_id=None,
                reason=None),)))
            assert left.error_code == ErrorCode.NONE
            assert [(m.member_id, m.error_code) for m in left.members] == [(member, 0)]

        (described,) = client.call(request_of(DESCRIBE, 5, groups=("life",),
                                            include_authorized_operations=False)).groups
        assert (described.group_state, described.members) == ("Empty", ())
        assert _fetch(client, fetch_v, "life") == {0: 42, 1: 7}


@pytest.mark.parametrize("version", range(0, 10))
def test_join_errors_in_every_version(make_inprocess_broker, version: int) -> None:  # type: ignore[no-untyped-def]
    with connect(_ready(make_inprocess_broker).port) as client:
        assert _join(client, version, "").error_code == ErrorCode.INVALID_GROUP_ID
        bad_session = _join(client, version, "g", session_ms=10)
        assert bad_session.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        # Before v7 ProtocolName is not nullable: the error answer carries "" and still decodes.
        assert bad_session.protocol_name in ("", None)


@pytest.mark.parametrize(("protocol_type", "protocol_name"), [(None, "range"), ("consumer", None)])
def test_sync_v5_without_protocol_type_or_name_is_inconsistent(  # type: ignore[no-untyped-def]
        make_inprocess_broker, protocol_type: str | None, protocol_name: str | None) -> None:
    """From v5 both fields are mandatory: Kafka 4.3 answers INCONSISTENT_GROUP_PROTOCOL even for
    the group's own leader; v4 has neither field and syncs."""
    with connect(_ready(make_inprocess_broker).port) as client:
        joined = _join_until_member(client, 9, "mandatory")

        def sync(version: int) -> Any:
            return client.call(request_of(
                SYNC, version, group_id="mandatory", generation_id=joined.generation_id,
                member_id=joined.member_id, group_instance_id=None, protocol_type=protocol_type,
                protocol_name=protocol_name, assignments=()))

        assert sync(5).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert sync(4).error_code == ErrorCode.NONE


def test_texts_kafka_puts_beside_error_codes(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    """As Kafka 4.3: DescribeGroups v6 says a group is not found in words; FindCoordinator's
    success message is the error name "NONE" before v4 and empty from v4 (batched)."""
    with connect(_ready(make_inprocess_broker).port) as client:
        (missing,) = client.call(request_of(DESCRIBE, 6, groups=("nobody",),
                                          include_authorized_operations=False)).groups
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert missing.error_message == "Group nobody not found."
        found = client.call(request_of(10, 3, key="g", key_type=0))
        assert (found.error_code, found.error_message) == (ErrorCode.NONE, "NONE")
        batch = request_of(10, 4, key_type=0, coordinator_keys=("g",))
        (batched,) = client.call(batch).coordinators
        assert (batched.error_code, batched.error_message) == (ErrorCode.NONE, "")


def test_member_without_heartbeats_expires_on_the_loop_timer(
    make_inprocess_broker, caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client, caplog.at_level(logging.INFO, "kgroups.coordinator"):
        joined = _join_until_member(client, 9, "quiet", session_ms=300)
        client.call(request_of(SYNC, 5, group_id="quiet", generation_id=joined.generation_id,
                             member_id=joined.member_id, group_instance_id=None,
                             protocol_type="consumer", protocol_name="range", assignments=()))
        deadline = time.monotonic() + 10
        state = "Stable"
        while state != "Empty" and time.monotonic() < deadline:
            time.sleep(0.1)
            (described,) = client.call(request_of(DESCRIBE, 5, groups=("quiet",),
                                                include_authorized_operations=False)).groups
            state = described.group_state
        assert state == "Empty"
        heartbeat = client.call(request_of(HEARTBEAT, 4, group_id="quiet", generation_id=1,
                                         member_id=joined.member_id, group_instance_id=None))
        assert heartbeat.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    removed = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith("member_removed ")]
    assert removed == [f"member_removed group=quiet member={joined.member_id} instance=- "
                       "reason=session_timeout"]


def test_list_groups_filters_by_state_and_type(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        _commit(client, 9, "simple-one", -1, "", {0: 1})
        _join_until_member(client, 9, "joining")

        def listed(version: int, **filters: Any) -> list[tuple[str, str]]:
            response = client.call(request_of(LIST, version, **filters))
            assert response.error_code == ErrorCode.NONE
            return sorted((g.group_id, getattr(g, "group_state", "")) for g in response.groups)

        assert [g for g, _ in listed(0)] == ["joining", "simple-one"]
        assert listed(4, states_filter=("empty",)) == [("simple-one", "Empty")]
        assert listed(5, states_filter=(), types_filter=("consumer",)) == []
        assert [g for g, _ in listed(5, states_filter=(), types_filter=("Classic",))] == [
            "joining", "simple-one"]


def test_delete_groups_and_offset_delete(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        _commit(client, 9, "to-trim", -1, "", {0: 5, 1: 6})
        trimmed = client.call(request_of(OFFSET_DELETE, 0, group_id="to-trim", topics=(nested_of(
            OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name="events", partitions=(nested_of(
                OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=0),)),)))
        assert trimmed.error_code == ErrorCode.NONE
        assert [(p.partition_index, p.error_code) for p in trimmed.topics[0].partitions] == [(0, 0)]
        assert _fetch(client, 9, "to-trim") == {1: 6}

        joined = _join_until_member(client, 9, "busy")
        assert joined.error_code == ErrorCode.NONE
        expected = {
            0: {"to-trim": ErrorCode.NONE, "busy": ErrorCode.NON_EMPTY_GROUP,
                "never-was": ErrorCode.GROUP_ID_NOT_FOUND},
            2: {"to-trim": ErrorCode.GROUP_ID_NOT_FOUND, "busy": ErrorCode.NON_EMPTY_GROUP,
                "never-was": ErrorCode.GROUP_ID_NOT_FOUND},
        }
        for version, outcome in expected.items():
            results = client.call(request_of(
                DELETE, version, groups_names=("to-trim", "busy", "never-was"))).results
            assert {r.group_id: ErrorCode(int(r.error_code)) for r in results} == outcome
        assert _fetch(client, 9, "to-trim") == {}


def test_commits_for_partitions_the_broker_lacks_are_refused_alone(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        # Partition 5 of `events` (which has 2) is refused; 0 and 1 are committed.
        assert _commit(client, 9, "partial", -1, "", {0: 3, 5: 9, 1: 4}) == {
            0: ErrorCode.NONE, 5: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 1: ErrorCode.NONE}
        assert _fetch(client, 9, "partial") == {0: 3, 1: 4}
        # Nothing known at all: the coordinator is not even asked, so no group appears.
        assert _commit(client, 9, "ghost", -1, "", {7: 1}) == {
            7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        listed = client.call(request_of(LIST, 4, states_filter=())).groups
        assert sorted(g.group_id for g in listed) == ["partial"]


def test_consumer_offsets_is_a_topic_clients_fetch_and_decode(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = _ready(make_inprocess_broker)
    with connect(broker.port) as client:
        _commit(client, 9, "visible", -1, "", {1: 77})
        partition = partition_for("visible", 50)
        response = client.call(fetch_request("__consumer_offsets", partition, 0))
        (data,) = response.responses[0].partitions
        assert data.error_code == ErrorCode.NONE
        records = [decode_record(record.key, record.value)
                   for batch in iter_batches(bytes(data.records or b""))
                   for record in batch.records]
    commits = [r for r in records if isinstance(r.key, OffsetCommitKey)]
    assert [(r.key.group, r.key.topic, r.key.partition) for r in commits] == [
        ("visible", "events", 1)]
    assert isinstance(commits[0].value, OffsetCommitValue)
    assert (commits[0].value.offset, commits[0].value.metadata) == (77, "m")


def test_consumer_offsets_is_compacted_in_the_background(make_inprocess_broker) -> None:  # type: ignore[no-untyped-def]
    broker = _ready(make_inprocess_broker, "offsets.topic.segment.bytes=2048",
                    "log.cleaner.backoff.ms=100")
    partition = partition_for("churn", 50)
    log = broker.broker.logs.get("__consumer_offsets", partition)
    assert log is not None
    with connect(broker.port) as client:
        for offset in range(100):
            assert _commit(client, 9, "churn", -1, "", {0: offset}) == {0: ErrorCode.NONE}

        def stored_commits() -> list[int]:
            stored: list[int] = []
            position = log.log_start_offset
            while position < log.log_end_offset:
                (data,) = client.call(fetch_request("__consumer_offsets", partition,
                                                    position)).responses[0].partitions
                for batch in iter_batches(bytes(data.records or b"")):
                    position = batch.last_offset + 1
                    stored += [decode_record(r.key, r.value).value.offset  # type: ignore[union-attr]
                               for r in batch.records]
            return stored

        deadline = time.monotonic() + 20
        while len(stored_commits()) == 100 and time.monotonic() < deadline:
            time.sleep(0.1)
        remaining = stored_commits()
        # Superseded commits in closed segments are gone; the active segment keeps its own.
        assert len(remaining) < 100
        assert remaining[-1] == 99
        assert _fetch(client, 9, "churn") == {0: 99}
