"""Share groups (KIP-932) in the core: the heartbeat conversation and the records Kafka 4.3.1
writes for it (seen in its log: tests/differential/test_diff_share_groups.py compares the
answers on the wire), share-partition initialization, leaving, session expiry, describe,
ListGroups/DeleteGroups, and replay."""

from __future__ import annotations

import uuid

from tests.coordinator.harness import Harness
from tests.coordinator.test_txn_offsets import txn_commit

from kgroups.coordinator import GroupCoordinatorConfig
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from kgroups.coordinator.share_messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareGroupInitializedRequest,
)
from kgroups.errors import ErrorCode
from kgroups.records.share_group import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
)

T1 = uuid.UUID(int=0xA1)


def session(**settings: object) -> Harness:
    h = Harness(config=GroupCoordinatorConfig(**settings))  # type: ignore[arg-type]
    h.coordinator.set_topics({"t1": TopicInfo(T1, 3)}, h.now)
    return h


def hb(h: Harness, member: str, epoch: int, topics: tuple[str, ...] | None = None,
       group: str = "g", rack: str | None = None) -> ShareGroupHeartbeatResponse:
    rid = h.rid()
    h.absorb(h.coordinator.share_group_heartbeat(ShareGroupHeartbeatRequest(
        rid, group, member, epoch, rack, topics, "c", "/h"), h.now))
    reply = h.reply(rid)
    assert isinstance(reply, ShareGroupHeartbeatResponse)
    return reply


def initialize(h: Harness, response: ShareGroupHeartbeatResponse, group: str = "g") -> None:
    h.absorb(h.coordinator.share_group_initialized(ShareGroupInitializedRequest(
        h.rid(), group, response.initialize), h.now))


def describe(h: Harness, *groups: str) -> ShareGroupDescribeResponse:
    rid = h.rid()
    h.absorb(h.coordinator.share_group_describe(ShareGroupDescribeRequest(rid, groups), h.now))
    reply = h.reply(rid)
    assert isinstance(reply, ShareGroupDescribeResponse)
    return reply


def kinds(h: Harness, since: int = 0) -> list[tuple[str, bool]]:
    return [(type(r.key).__name__, r.value is not None)
            for r in h.log[h.partition_of("g")][since:]]


def _records_written(h: Harness) -> dict[int, int]:
    """How many records each __consumer_offsets partition holds: unchanged means nothing
    was written."""
    return {partition: len(records) for partition, records in h.log.items()}


def test_request_checks_answer_as_kafka() -> None:
    h = session()
    assert (hb(h, "m", 0, ("t1",), group="").error_message) == "GroupId can't be empty."
    assert hb(h, "", 0, ("t1",)).error == ErrorCode.INVALID_REQUEST
    assert hb(h, "m", 0).error_message == "SubscribedTopicNames must be set in first request."
    assert hb(h, "m", 0, ()).error_message == "SubscribedTopicNames must be set in first request."
    assert hb(h, "m", -3, ("t1",)).error_message == "MemberEpoch is invalid."
    assert hb(h, "m", 0, ("t1",), rack="").error_message == "RackId can't be empty."
    missing = hb(h, "m", 1, ("t1",))
    assert (missing.error, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                      "Share group g not found.")
    assert not any(h.log.values())


def test_join_records_then_initialization_then_assignment() -> None:
    """Kafka's sequence: the join writes member, epoch 2, target (empty), assignment epoch,
    current assignment and the partitions initializing; once initialized the next heartbeat
    bumps the epoch and, the assignment interval over, the member gets every partition."""
    h = session()
    joined = hb(h, "a", 0, ("t1",))
    assert (joined.error, joined.member_epoch, joined.assignment) == (ErrorCode.NONE, 2, ())
    assert joined.heartbeat_interval_ms == 5000
    assert joined.initialize == ((T1, "t1", (0, 1, 2)),)
    assert kinds(h) == [("ShareGroupMemberMetadataKey", True), ("ShareGroupMetadataKey", True),
                        ("ShareGroupTargetAssignmentMemberKey", True),
                        ("ShareGroupTargetAssignmentMetadataKey", True),
                        ("ShareGroupCurrentMemberAssignmentKey", True),
                        ("ShareGroupStatePartitionMetadataKey", True)]
    initialize(h, joined)
    h.advance(500)
    bumped = hb(h, "a", 2)
    assert (bumped.member_epoch, bumped.assignment) == (2, None)
    assert h.coordinator._groups["g"].share.group_epoch == 3
    h.advance(600)
    assigned = hb(h, "a", 2)
    assert (assigned.member_epoch, assigned.assignment) == (3, ((T1, (0, 1, 2)),))
    assert hb(h, "a", 3).assignment is None  # unchanged


def _stable_pair(h: Harness) -> tuple[ShareGroupHeartbeatResponse, ShareGroupHeartbeatResponse]:
    first = hb(h, "a", 0, ("t1",))
    initialize(h, first)
    h.advance(1100)
    a = hb(h, "a", 2)
    h.advance(1100)
    b = hb(h, "b", 0, ("t1",))
    return hb(h, "a", a.member_epoch), b


def test_second_member_shares_the_partitions_without_revocation() -> None:
    """The newcomer gets one partition at once; the first member keeps the other two (which
    one moves follows Kafka's hash order: tests/assignors/test_share_simple_oracle.py)."""
    h = session()
    a, b = _stable_pair(h)
    assert b.member_epoch == 4 and b.assignment is not None and a.assignment is not None
    ((_, given),) = b.assignment
    ((_, kept),) = a.assignment
    assert a.member_epoch == 4 and len(given) == 1 and len(kept) == 2
    assert set(given) | set(kept) == {0, 1, 2}


def test_more_members_than_partitions_share_them() -> None:
    h = session()
    h.coordinator.set_topics({"t1": TopicInfo(T1, 1)}, h.now)
    first = hb(h, "a", 0, ("t1",))
    initialize(h, first)
    h.advance(1100)
    hb(h, "a", 2)
    h.advance(1100)
    b = hb(h, "b", 0, ("t1",))
    assert b.assignment == ((T1, (0,)),)
    assert hb(h, "a", 3).assignment is None  # still has partition 0, now at epoch 4


def test_joiners_within_the_interval_take_the_assignment_epoch() -> None:
    h = session()
    _stable_pair(h)
    c = hb(h, "c", 0, ("t1",))
    assert (c.member_epoch, c.assignment) == (4, ())
    assert describe(h, "g").groups[0].group_epoch == 5


def test_fencing_messages() -> None:
    h = session()
    hb(h, "a", 0, ("t1",))
    ahead = hb(h, "a", 3)
    assert ahead.error == ErrorCode.FENCED_MEMBER_EPOCH
    assert ahead.error_message == (
        "The share group member has a greater member epoch (3) than the one known by the "
        "group coordinator (2). The member must abandon all its partitions and rejoin.")
    behind = hb(h, "a", 1)
    assert behind.error_message == (
        "The share group member has a smaller member epoch (1) than the one known by the "
        "group coordinator (2), and it does not match the previous member epoch (0). The "
        "member must abandon all its partitions and rejoin.")
    unknown = hb(h, "z", 2)
    assert (unknown.error, unknown.error_message) == (
        ErrorCode.UNKNOWN_MEMBER_ID, "Member z is not a member of group g.")


def test_leave_removes_the_member_and_bumps_the_epoch() -> None:
    h = session()
    hb(h, "a", 0, ("t1",))
    hb(h, "b", 0, ("t1",))
    start = len(h.log[h.partition_of("g")])
    left = hb(h, "b", -1)
    assert (left.error, left.member_id, left.member_epoch, left.heartbeat_interval_ms) == (
        ErrorCode.NONE, "b", -1, 0)
    assert kinds(h, start) == [("ShareGroupCurrentMemberAssignmentKey", False),
                               ("ShareGroupTargetAssignmentMemberKey", False),
                               ("ShareGroupMemberMetadataKey", False),
                               ("ShareGroupMetadataKey", True)]
    again = hb(h, "b", -1)
    assert (again.error, again.error_message) == (ErrorCode.UNKNOWN_MEMBER_ID,
                                                  "Member b is not a member of group g.")
    assert [r.member_id for r in h.removals] == ["b"]


def test_session_timeout_removes_a_silent_member() -> None:
    h = session(group_share_session_timeout_ms=45000)
    hb(h, "a", 0, ("t1",))
    h.advance(45001)
    assert describe(h, "g").groups[0].members == ()
    assert describe(h, "g").groups[0].state == "Empty"


def test_describe_and_list_and_delete() -> None:
    h = session()
    hb(h, "a", 0, ("t1",))
    described = describe(h, "g", "nope").groups
    assert (described[0].state, described[0].assignor_name, described[0].group_epoch) == (
        "Stable", "simple", 2)
    assert [m.member_id for m in described[0].members] == ["a"]
    assert (described[1].error, described[1].error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
    rid = h.rid()
    h.absorb(h.coordinator.list_groups(ListGroupsRequest(rid), h.now))
    listed = h.reply(rid)
    assert isinstance(listed, ListGroupsResponse)
    assert [(g.group_id, g.protocol_type, g.state, g.group_type) for g in listed.groups] == [
        ("g", "share", "Stable", "share")]
    rid = h.rid()
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(rid, ("g",)), h.now))
    deleted = h.reply(rid)
    assert isinstance(deleted, DeleteGroupsResponse)
    assert deleted.results == (("g", ErrorCode.NON_EMPTY_GROUP),)
    hb(h, "a", -1)
    rid = h.rid()
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(rid, ("g",)), h.now))
    assert h.reply(rid).results == (("g", ErrorCode.NONE),)  # type: ignore[union-attr]
    assert describe(h, "g").groups[0].error == ErrorCode.GROUP_ID_NOT_FOUND
    assert "g" not in h.replayed().group_views()


def test_share_groups_outlive_the_offsets_cleanup() -> None:
    """Kafka's periodic cleanup deletes empty groups left without offsets, but never a share
    group (its offsets live in the share coordinator): one with a member keeps it, an empty
    one stays listed until DeleteGroups, and nothing is written for either."""
    h = session(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    joined = hb(h, "a", 0, ("t1",))
    hb(h, "b", 0, ("t1",), group="idle")
    hb(h, "b", 1, group="idle")
    hb(h, "b", -1, group="idle")
    written = _records_written(h)
    epoch = joined.member_epoch
    for _ in range(30):  # 120 s: twelve checks, the retention passed twice over
        h.advance(4000)
        beat = hb(h, "a", epoch)
        assert beat.error == ErrorCode.NONE, beat.error_message
        epoch = beat.member_epoch
    assert [(g.group_id, g.state, [m.member_id for m in g.members])
            for g in describe(h, "g", "idle").groups] == [("g", "Stable", ["a"]),
                                                          ("idle", "Empty", [])]
    assert _records_written(h) == written
    assert h.replayed()._groups["g"].share == h.coordinator._groups["g"].share


def test_consumer_offsets_are_refused_to_a_share_group() -> None:
    """A share group is not a consumer group (Kafka's ShareGroup validation): OffsetCommit,
    TxnOffsetCommit and OffsetDelete answer GROUP_ID_NOT_FOUND and nothing is written, with a
    member or without (tests/differential compares the wire answers with Kafka's)."""
    h = session()
    joined = hb(h, "a", 0, ("t1",))
    for _ in ("with-member", "empty"):
        written = _records_written(h)
        simple, member = (h.commit("g", {("t1", 0): 5}),
                          h.commit("g", {("t1", 1): 5}, generation=joined.member_epoch,
                                   member_id="a"))
        assert [p.error for rid in (simple, member) for t in h.reply(rid).topics
                for p in t.partitions] == [ErrorCode.GROUP_ID_NOT_FOUND] * 2
        assert txn_commit(h, "g", {("t1", 2): 5}) == [ErrorCode.GROUP_ID_NOT_FOUND]
        rid = h.rid()
        h.absorb(h.coordinator.offset_delete(OffsetDeleteRequest(rid, "g", (("t1", (0,)),)),
                                             h.now))
        assert h.reply(rid) == OffsetDeleteResponse(ErrorCode.GROUP_ID_NOT_FOUND)
        assert h.fetch("g") == {}
        assert _records_written(h) == written
        hb(h, "a", -1)


def test_a_classic_join_to_a_share_group_is_refused() -> None:
    """JoinGroup with a share group's id, from a new, a known or a static member, answers
    INCONSISTENT_GROUP_PROTOCOL with no member id (Kafka 4.3.1's answer), and the share group
    is left as it was."""
    h = session()
    hb(h, "a", 0, ("t1",))
    before = describe(h, "g").groups
    for member, instance, version in (("", None, 0), ("", None, 9), ("a", None, 9),
                                      ("m-1", "i-1", 9)):
        rid = h.join("g", member, instance=instance, version=version)
        answer = h.reply(rid)
        assert (answer.error, answer.member_id, answer.generation_id) == (
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "", -1)
    assert describe(h, "g").groups == before


def test_consumer_and_streams_heartbeats_with_a_share_groups_id_are_refused() -> None:
    """A KIP-848 or KIP-1071 member joining with a share group's id is told the group is not
    of its type (Kafka 4.3.1's answer for the consumer protocol, compared on the wire in
    tests/differential), with a member or without; the share group keeps only its share part."""
    from tests.coordinator.test_consumer_protocol import Session as ConsumerSession
    from tests.coordinator.test_streams_protocol import Session as StreamsSession

    for kind, harness in (("consumer", ConsumerSession()), ("streams", StreamsSession())):
        harness.coordinator.set_topics({"t1": TopicInfo(T1, 3)}, harness.now)
        hb(harness, "a", 0, ("t1",), group="cg")
        for moment in ("with-member", "empty"):
            answer = (harness.hb("c1", 0) if kind == "consumer"
                      else harness.hb("c1", 0, group="cg"))
            assert (answer.error, answer.error_message) == (
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group cg is not a {kind} group."), moment
            if moment == "with-member":
                assert hb(harness, "a", -1, group="cg").error == ErrorCode.NONE
        group = harness.coordinator._groups["cg"]
        assert (group.consumer, group.streams) == (None, None) and group.share is not None


def test_a_share_heartbeat_with_a_streams_groups_id_is_refused() -> None:
    """A share member joining with a live streams group's id is told it is not a share group
    (Kafka 4.3.1's answer, compared on the wire in tests/differential/test_diff_streams.py);
    the streams group gets no share part."""
    from tests.coordinator.test_streams_protocol import Session as StreamsSession

    harness = StreamsSession()
    harness.coordinator.set_topics({"words": TopicInfo(uuid.UUID(int=0xB1), 3),
                                    "t1": TopicInfo(T1, 3)}, harness.now)
    assert harness.hb("m1", 0, group="sg").error == ErrorCode.NONE
    answer = hb(harness, "s1", 0, ("t1",), group="sg")
    assert (answer.error, answer.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                    "Group sg is not a share group.")
    group = harness.coordinator._groups["sg"]
    assert group.share is None and group.streams is not None


def test_replay_rebuilds_the_group() -> None:
    h = session()
    _stable_pair(h)
    live = h.coordinator._groups["g"].share
    rebuilt = h.replayed()._groups["g"].share
    assert rebuilt == live
    assert rebuilt is not None and rebuilt.initialized == {T1: ("t1", frozenset({0, 1, 2}))}


def test_a_consumer_group_is_not_a_share_group() -> None:
    h = session()
    h.join_dynamic("classic")
    refused = hb(h, "a", 0, ("t1",), group="classic")
    assert (refused.error, refused.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")
    assert describe(h, "classic").groups[0].error_message == "Group classic is not a share group."


def test_the_keys_written_are_the_share_group_types() -> None:
    h = session()
    hb(h, "a", 0, ("t1",))
    assert {type(r.key) for r in h.log[h.partition_of("g")]} == {
        ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareGroupTargetAssignmentMemberKey,
        ShareGroupTargetAssignmentMetadataKey, ShareGroupCurrentMemberAssignmentKey,
        ShareGroupStatePartitionMetadataKey}


def test_initializing_partitions_of_an_earlier_coordinator_are_asked_for_again() -> None:
    """The initialization a coordinator asked for may never have finished before it went away:
    the one that loads the group asks for it again at the next heartbeat, once."""
    h = session()
    joined = hb(h, "a", 0, ("t1",))
    assert joined.initialize == ((T1, "t1", (0, 1, 2)),)
    assert hb(h, "a", 2).initialize == ()  # still in flight: not asked twice
    h.coordinator = h.replayed()
    h.coordinator.set_topics({"t1": TopicInfo(T1, 3)}, h.now)
    assert hb(h, "a", 2).initialize == ((T1, "t1", (0, 1, 2)),)
    assert hb(h, "a", 2).initialize == ()


def test_metrics_summary_names_share_groups() -> None:
    h = session()
    _stable_pair(h)
    (summary,) = [s for s in h.coordinator.group_summaries() if s.group_id == "g"]
    assert (summary.group_type, summary.state, summary.member_count) == ("share", "Stable", 2)
    assert summary.assigned == (("t1", 0), ("t1", 1), ("t1", 2))
