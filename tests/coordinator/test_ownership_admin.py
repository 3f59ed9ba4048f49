"""Placement, loading/unloading, DescribeGroups/ListGroups and configuration."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroups.coordinator import (
    DescribeGroupsRequest,
    GroupCoordinator,
    GroupCoordinatorConfig,
    ListGroupsRequest,
    partition_for,
)
from kgroups.coordinator.placement import java_abs, java_string_hash
from kgroups.errors import ErrorCode

from .harness import Harness, counting_uuids
from .test_join import make, stable

E = ErrorCode


def test_partition_for_matches_kafka_vectors():
    assert partition_for("testgroup", 50) == 27
    assert partition_for("my-group", 50) == 12
    assert partition_for("test-my-group", 50) == 33


def test_java_hash_wraps_and_abs_of_int_min_is_zero():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("polygenelubricants") == -(2**31)  # Java's famous INT_MIN string
    assert java_abs(-(2**31)) == 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("😀") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogates count


@given(st.text(max_size=40), st.integers(min_value=1, max_value=200))
def test_partition_is_always_in_range(group_id, partitions):
    assert 0 <= partition_for(group_id, partitions) < partitions


def test_not_owned_partition_answers_not_coordinator():
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(offsets_topic_num_partitions=4), new_uuid=counting_uuids())
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=4))
    h.coordinator = coordinator
    assert h.reply(h.join("g")).error is E.NOT_COORDINATOR
    assert h.reply(h.heartbeat("g", "m", 1)).error is E.NOT_COORDINATOR
    commit = h.reply(h.commit("g", {("t", 0): 1}))
    assert commit.topics[0].partitions[0].error is E.NOT_COORDINATOR
    rid = h.rid()
    h.absorb(coordinator.describe_groups(DescribeGroupsRequest(rid, ("g",)), h.now))
    assert h.reply(rid).groups[0].error is E.NOT_COORDINATOR


def test_loading_partition_answers_load_in_progress():
    h = make()
    partition = h.partition_of("g")
    h.absorb(h.coordinator.unload_partition(partition, h.now))
    h.coordinator.begin_loading(partition)
    assert h.reply(h.join("g")).error is E.COORDINATOR_LOAD_IN_PROGRESS
    rid = h.rid()
    h.absorb(h.coordinator.list_groups(ListGroupsRequest(rid), h.now))
    assert h.reply(rid).error is E.COORDINATOR_LOAD_IN_PROGRESS
    h.absorb(h.coordinator.load_partition(partition, [], h.now))
    assert h.reply(h.join("g")).error is E.MEMBER_ID_REQUIRED


def test_unload_completes_parked_requests_with_not_coordinator_and_drops_groups():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    h.join("g", a)
    h.join("g", b)
    follower = a if h.coordinator.group_view("g").leader != a else b
    parked_sync = h.sync("g", follower, generation + 1)
    stable(h, "elsewhere", 1)
    assert h.partition_of("elsewhere") != h.partition_of("g")
    h.absorb(h.coordinator.unload_partition(h.partition_of("g"), h.now))
    assert h.reply(parked_sync).error is E.NOT_COORDINATOR
    assert h.coordinator.group_view("g") is None
    assert h.coordinator.group_view("elsewhere") is not None
    assert h.partition_of("g") not in h.coordinator.owned_partitions


def test_unload_fails_pending_writes_with_not_coordinator():
    h = make()
    h.auto_complete = False
    rid = h.commit("g", {("t", 0): 1})
    h.absorb(h.coordinator.unload_partition(h.partition_of("g"), h.now))
    assert h.reply(rid).topics[0].partitions[0].error is E.NOT_COORDINATOR


def test_unload_answers_parked_joins():
    h = make()
    rid, _ = h.join_dynamic("g")
    h.absorb(h.coordinator.unload_partition(h.partition_of("g"), h.now))
    assert h.reply(rid).error is E.NOT_COORDINATOR


def test_loading_rebuilds_state_and_rearms_heartbeats():
    h = make()
    (a, _b), generation = stable(h, "g", 2)
    h.commit("g", {("t", 0): 4}, generation=generation, member_id=a)
    fresh = h.replayed()
    assert fresh.group_view("g") == h.coordinator.group_view("g")
    # Loaded members that never heartbeat expire after their session timeout.
    deadline = fresh.next_deadline()
    assert deadline is not None and deadline <= h.now + 10_000
    fresh.advance_time(h.now + 10_000)
    # Both sessions ran out: the members are gone and the group moved on to Empty.
    assert fresh.group_view("g").state == "Empty"
    assert fresh.group_view("g").generation == generation + 1


def test_loading_rejects_bad_input_clearly():
    h = make()
    with pytest.raises(ValueError, match="already loaded"):
        h.coordinator.load_partition(0, [], h.now)
    with pytest.raises(ValueError, match="no __consumer_offsets partition 9"):
        h.coordinator.begin_loading(9)
    stable(h, "g", 1)
    elsewhere = (h.partition_of("g") + 1) % 4
    fresh = GroupCoordinator(h.config, new_uuid=counting_uuids())
    with pytest.raises(ValueError, match="belong elsewhere"):
        fresh.load_partition(elsewhere, h.log[h.partition_of("g")], h.now)


def test_describe_groups():
    h = make()
    (a,), _ = stable(h, "g", 1)
    rid = h.rid()
    h.absorb(h.coordinator.describe_groups(DescribeGroupsRequest(rid, ("g", "unknown")), h.now))
    described, unknown = h.reply(rid).groups
    assert described.state == "Stable" and described.protocol_data == "range"
    assert described.protocol_type == "consumer"
    assert described.members[0].member_id == a and described.members[0].assignment == a.encode()
    assert unknown.state == "Dead" and unknown.error is E.NONE
    rid = h.rid()
    h.absorb(h.coordinator.describe_groups(DescribeGroupsRequest(rid, ("unknown",), 6), h.now))
    assert h.reply(rid).groups[0].error is E.GROUP_ID_NOT_FOUND
    h.join("g", a)  # leader rejoin: not Stable, so no member metadata
    rid = h.rid()
    h.absorb(h.coordinator.describe_groups(DescribeGroupsRequest(rid, ("g",)), h.now))
    (described,) = h.reply(rid).groups
    assert described.protocol_data == "" and described.members[0].metadata == b""
    # As Kafka, the assignment of the last generation stays visible until the next one.
    assert described.members[0].assignment == a.encode()


def test_list_groups_filters_states_case_insensitively():
    h = make()
    stable(h, "g1", 1)
    h.commit("simple", {("t", 0): 1})
    rid = h.rid()
    h.absorb(h.coordinator.list_groups(ListGroupsRequest(rid, ("stable",)), h.now))
    assert [(g.group_id, g.state) for g in h.reply(rid).groups] == [("g1", "Stable")]
    rid = h.rid()
    h.absorb(h.coordinator.list_groups(ListGroupsRequest(rid), h.now))
    assert {g.group_id for g in h.reply(rid).groups} == {"g1", "simple"}


def test_events_report_state_changes():
    h = make()
    stable(h, "g", 1)
    states = [(e.old_state, e.new_state) for e in h.events if e.group_id == "g"]
    assert states == [
        (None, "Empty"),
        ("Empty", "PreparingRebalance"),
        ("PreparingRebalance", "CompletingRebalance"),
        ("CompletingRebalance", "Stable"),
    ]


def test_config_from_properties_uses_kafka_names():
    config = GroupCoordinatorConfig.from_properties(
        {"group.max.size": "5", "offsets.topic.num.partitions": " 3 ", "unrelated.key": "x"}
    )
    assert config.group_max_size == 5 and config.offsets_topic_num_partitions == 3
    assert config.group_initial_rebalance_delay_ms == 3000
    assert config.offsets_retention_ms == 10080 * 60_000
    with pytest.raises(ValueError, match=r"group\.max\.size must be an integer"):
        GroupCoordinatorConfig.from_properties({"group.max.size": "many"})
    with pytest.raises(ValueError, match="must be >= 0"):
        GroupCoordinatorConfig(group_initial_rebalance_delay_ms=-1)
    with pytest.raises(ValueError, match="must not exceed"):
        GroupCoordinatorConfig(group_min_session_timeout_ms=10, group_max_session_timeout_ms=5)


def test_bulk_image_from_encoded_records_equals_record_replay():
    from kgroups.coordinator import PartitionImage
    from kgroups.records.codec import encode_record

    h = make()
    (a, _b), generation = stable(h, "g", 2)
    h.commit("g", {("t", 0): 4, ("t", 1): 5}, generation=generation, member_id=a)
    h.commit("simple", {("x", 0): 1}, retention=60_000, version=2)
    h.commit("simple", {("x", 1): 2}, metadata="meta")
    fresh = GroupCoordinator(h.config, new_uuid=counting_uuids())
    for partition in range(4):
        image = PartitionImage()
        image.apply_raw(encode_record(record) for record in h.log.get(partition, []))
        fresh.load_image(partition, image, h.now)
    assert fresh.group_views() == h.replayed().group_views() == h.coordinator.group_views()


def test_bulk_image_rejects_a_corrupt_record():
    from kgroups.coordinator import PartitionImage

    with pytest.raises(ValueError):
        PartitionImage().apply_raw([(b"\x00\x01\x00\x05ab", b"\x00\x03")])
