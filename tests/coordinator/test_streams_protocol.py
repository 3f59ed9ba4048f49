"""KIP-1071's streams protocol in the core: request checks, the topology and its statuses, group
and member epochs, revoke-before-assign of active tasks, fencing, leaving, session and rebalance
timeouts, the initial rebalance delay and assignment interval, endpoints, describe and replay."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from tests.coordinator.harness import Harness

from kgroups.coordinator import GroupCoordinatorConfig
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.effects import RemovalReason
from kgroups.coordinator.streams_group import StreamsMemberState
from kgroups.coordinator.streams_messages import (
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
    StreamsStatus,
)
from kgroups.errors import ErrorCode
from kgroups.records.streams_group import StreamsGroupTopologyValue, Subtopology
from kgroups.records.streams_group import TopicInfo as Topic

G = "sg"
WORDS = Subtopology("0", source_topics=("words",), repartition_sink_topics=("app-rep",),
                    state_changelog_topics=(Topic("app-store-changelog"),))
COUNTS = Subtopology("1", repartition_source_topics=(Topic("app-rep"),),
                     state_changelog_topics=(Topic("app-count-changelog"),))
TOPOLOGY = StreamsGroupTopologyValue(0, (WORDS, COUNTS))
SIMPLE = StreamsGroupTopologyValue(0, (Subtopology("0", source_topics=("words",)),))


def streams_config(**settings: object) -> GroupCoordinatorConfig:
    """No initial delay and no assignment interval: every step of a rebalance is a heartbeat
    (the differential suite runs Kafka so too)."""
    values = {"group_streams_initial_rebalance_delay_ms": 0,
              "group_streams_assignment_interval_ms": 0, **settings}
    return GroupCoordinatorConfig(**values)  # type: ignore[arg-type]


@dataclass
class Session(Harness):
    config: GroupCoordinatorConfig = field(default_factory=streams_config)

    def hb(self, member: str, epoch: int, *, topology: StreamsGroupTopologyValue | None = None,
           active=(), standby=(), warmup=(), process: str | None = None,
           endpoint: tuple[str, int] | None = None, endpoint_epoch: int = 0,
           rebalance: int = 30_000, **fields) -> StreamsGroupHeartbeatResponse:
        joining = epoch == 0
        request_id = self.rid()
        self.absorb(self.coordinator.streams_group_heartbeat(StreamsGroupHeartbeatRequest(
            request_id, fields.pop("group", G), member, epoch,
            endpoint_information_epoch=endpoint_epoch,
            rebalance_timeout_ms=rebalance if joining else -1,
            topology=topology if topology is not None else (SIMPLE if joining else None),
            active_tasks=None if active is None else tuple(active),
            standby_tasks=None if standby is None else tuple(standby),
            warmup_tasks=None if warmup is None else tuple(warmup),
            process_id=process if process is not None else f"p-{member}",
            user_endpoint=endpoint, client_id="client", client_host="/127.0.0.1", **fields,
        ), self.now))
        response = self.reply(request_id)
        assert isinstance(response, StreamsGroupHeartbeatResponse)
        return response

    def describe(self, *groups: str):
        request_id = self.rid()
        self.absorb(self.coordinator.streams_group_describe(
            StreamsGroupDescribeRequest(request_id, groups), self.now))
        response = self.reply(request_id)
        assert isinstance(response, StreamsGroupDescribeResponse)
        return response.groups

    def group(self):
        return self.coordinator._groups[G].streams


def topics(**partitions: int) -> dict[str, TopicInfo]:
    return {name: TopicInfo(uuid.uuid5(uuid.NAMESPACE_OID, name), count)
            for name, count in partitions.items()}


@pytest.fixture
def s() -> Session:
    session = Session()
    session.coordinator.set_topics(topics(words=4))
    return session


def test_first_member_gets_every_task_at_the_group_epoch(s: Session) -> None:
    r = s.hb("m1", 0)
    assert (r.error, r.member_id, r.member_epoch) == (ErrorCode.NONE, "m1", 2)
    assert r.active_tasks == (("0", (0, 1, 2, 3)),)
    assert r.standby_tasks == () and r.warmup_tasks == ()
    assert r.heartbeat_interval_ms == 5000
    assert r.status == ()
    again = s.hb("m1", 2, active=r.active_tasks)
    assert (again.member_epoch, again.active_tasks) == (2, None)  # unchanged: not repeated


def test_second_member_waits_for_the_first_to_revoke(s: Session) -> None:
    r1 = s.hb("m1", 0)
    r2 = s.hb("m2", 0)
    assert r2.member_epoch == 3 and r2.active_tasks == ()  # its tasks are still m1's
    r1 = s.hb("m1", 2, active=r1.active_tasks)
    assert r1.member_epoch == 2  # stays until it revokes
    kept = r1.active_tasks
    assert kept is not None and sum(len(p) for _, p in kept) == 2
    assert s.group().members["m1"].state is StreamsMemberState.UNREVOKED_TASKS
    r2 = s.hb("m2", 3, active=())
    assert r2.active_tasks is None and r2.member_epoch == 3  # nothing released yet
    r1 = s.hb("m1", 2, active=kept)
    assert r1.member_epoch == 3
    r2 = s.hb("m2", 3, active=())
    given = r2.active_tasks
    assert given is not None
    mine = {p for _, ps in kept for p in ps}
    theirs = {p for _, ps in given for p in ps}
    assert mine | theirs == {0, 1, 2, 3} and not mine & theirs
    assert s.group().state() == "Stable"


def test_request_checks_in_kafkas_order(s: Session) -> None:
    assert s.hb("", 0).error_message == "MemberId can't be empty."
    assert s.hb("m", 0, rebalance=-1).error_message == \
        "RebalanceTimeoutMs must be provided in first request."
    assert s.hb("m", 0, active=None).error_message == "ActiveTasks must be empty when (re-)joining."
    assert s.hb("m", 0, warmup=[("0", (0,))]).error_message == "WarmupTasks are not supported yet."
    assert s.hb("m", 0, instance_id="i").error_message == "Static membership is not yet supported."
    bad = StreamsGroupTopologyValue(0, (Subtopology("0", ("words",), state_changelog_topics=(
        Topic("cl", 3),)),))
    r = s.hb("m", 0, topology=bad)
    assert (r.error, r.error_message) == (
        ErrorCode.STREAMS_INVALID_TOPOLOGY,
        "Changelog topic cl must have an undefined partition count, but it is set to 3.")
    r = s.hb("m", -3, active=None, standby=None, warmup=None)
    assert r.error_message == "MemberEpoch is -3, but must be greater than or equal to -2."
    r = s.hb("m", 1, active=(), standby=None, warmup=())
    assert r.error_message == "If one task-type is non-null, all must be non-null."
    r = s.hb("m", 1, topology=SIMPLE)
    assert r.error_message == "Topology can only be provided when (re-)joining."
    r = s.hb("m", 5)
    assert (r.error, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                          "Streams group sg not found.")
    assert G not in s.coordinator._groups  # refused requests create nothing


def test_fencing_and_unknown_members(s: Session) -> None:
    r = s.hb("m1", 0)
    assert s.hb("m1", 7).error == ErrorCode.FENCED_MEMBER_EPOCH
    smaller = s.hb("m1", 1)
    assert smaller.error == ErrorCode.FENCED_MEMBER_EPOCH
    assert smaller.error_message == (
        "The streams group member has a smaller member epoch (1) than the one known by the "
        "group coordinator (2). The member must abandon all its partitions and rejoin.")
    unknown = s.hb("zz", 2)
    assert (unknown.error, unknown.error_message) == (
        ErrorCode.UNKNOWN_MEMBER_ID, "Member zz is not a member of group sg.")
    assert s.hb("m1", r.member_epoch, active=r.active_tasks).error == ErrorCode.NONE


def test_topology_statuses_and_internal_topics(s: Session) -> None:
    r = s.hb("m1", 0, topology=TOPOLOGY)
    assert r.status == ((StreamsStatus.MISSING_INTERNAL_TOPICS,
                         # in a Java hash set's order, as Kafka lists them
                         "Internal topics are missing: app-count-changelog, app-rep, "
                         "app-store-changelog"),)
    assert {t.name: t.partitions for t in r.creatable_topics} == {
        "app-rep": 4, "app-store-changelog": 4, "app-count-changelog": 4}
    assert r.active_tasks == ()
    assert s.group().state() == "NotReady"
    s.coordinator.set_topics(topics(**{"words": 4, "app-rep": 4, "app-store-changelog": 4,
                                       "app-count-changelog": 4}))
    r = s.hb("m1", r.member_epoch, active=())
    assert r.status == ()
    assert r.active_tasks == (("0", (0, 1, 2, 3)), ("1", (0, 1, 2, 3)))
    assert s.group().state() == "Stable"


def test_missing_source_and_copartitioning(s: Session) -> None:
    missing = StreamsGroupTopologyValue(0, (Subtopology("0", ("nope2", "nope1", "words")),))
    assert s.hb("m1", 0, topology=missing).status == (
        (StreamsStatus.MISSING_SOURCE_TOPICS, "Source topics nope1, nope2 are missing."),)
    s.coordinator.set_topics(topics(words=4, other=2))
    from kgroups.records.streams_group import CopartitionGroup
    joined = StreamsGroupTopologyValue(0, (Subtopology(
        "0", ("words", "other"), copartition_groups=(CopartitionGroup((0, 1)),)),))
    assert s.hb("m1", 0, topology=joined, group="g2").status == (
        (StreamsStatus.INCORRECTLY_PARTITIONED_TOPICS,
         "Following topics do not have the same number of partitions: [{other=2, words=4}]"),)


def test_a_second_topology_is_refused(s: Session) -> None:
    s.hb("m1", 0)
    other = StreamsGroupTopologyValue(0, (Subtopology("0", ("other",)),))
    r = s.hb("m2", 0, topology=other)
    assert (r.error, r.error_message) == (ErrorCode.INVALID_REQUEST,
                                          "Topology updates are not supported yet.")
    assert "m2" not in s.group().members


def test_leave_and_session_timeout_free_tasks(s: Session) -> None:
    r1 = s.hb("m1", 0)
    s.hb("m2", 0)
    left = s.hb("m1", -1, active=None, standby=None, warmup=None)
    assert (left.error, left.member_epoch) == (ErrorCode.NONE, -1)
    assert list(s.group().members) == ["m2"]
    assert s.group().group_epoch == 4
    r2 = s.hb("m2", 3, active=())
    assert r2.active_tasks == (("0", (0, 1, 2, 3)),)
    s.advance(45_001)
    assert not s.group().members
    assert s.removals[-1].reason is RemovalReason.SESSION_TIMEOUT
    assert r1.member_epoch == 2


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(s: Session) -> None:
    r1 = s.hb("m1", 0, rebalance=1000)
    s.hb("m2", 0)
    s.hb("m1", r1.member_epoch, active=r1.active_tasks)  # asked to revoke
    s.advance(1001)
    assert "m1" not in s.group().members
    assert s.removals[-1].reason is RemovalReason.REBALANCE_TIMEOUT


def test_initial_delay_and_assignment_interval() -> None:
    s = Session(config=GroupCoordinatorConfig(group_streams_initial_rebalance_delay_ms=3000))
    s.coordinator.set_topics(topics(words=2))
    r = s.hb("m1", 0)
    assert (5, "Assignment delayed due to the configured initial rebalance delay.") in r.status
    assert r.active_tasks == ()
    s.advance(3000)
    # The delay's end computes nothing (as Kafka 4.3.1: described, the group is still
    # Assigning); the member's next heartbeat does.
    (described,) = s.describe(G)
    assert (described.state, described.group_epoch, described.assignment_epoch) == (
        "Assigning", 2, 1)
    r = s.hb("m1", r.member_epoch, active=())
    assert r.active_tasks == (("0", (0, 1)),)
    r2 = s.hb("m2", 0)
    assert (5, "Assignment delayed due to the configured assignment interval.") in r2.status
    s.advance(1000)
    r2 = s.hb("m2", r2.member_epoch, active=())
    assert r2.status == () and s.group().assignment_epoch == s.group().group_epoch


def test_endpoints_are_told_when_the_epoch_moves(s: Session) -> None:
    r1 = s.hb("m1", 0, endpoint=("h1", 1))
    assert r1.partitions_by_user_endpoint is not None
    (only,) = r1.partitions_by_user_endpoint
    assert only.endpoint == ("h1", 1) and only.active == (("words", (0, 1, 2, 3)),)
    r2 = s.hb("m2", 0, endpoint=("h2", 2))
    assert r2.endpoint_information_epoch == 1
    assert {e.endpoint for e in r2.partitions_by_user_endpoint or ()} == {("h1", 1), ("h2", 2)}
    same = s.hb("m2", r2.member_epoch, active=(), endpoint_epoch=r2.endpoint_information_epoch)
    assert same.partitions_by_user_endpoint is None


def test_describe(s: Session) -> None:
    r = s.hb("m1", 0)
    (described,) = s.describe(G)
    assert (described.error, described.state, described.group_epoch,
            described.assignment_epoch, described.topology_epoch) == (
        ErrorCode.NONE, "Stable", 2, 2, 0)
    assert described.subtopologies is not None
    assert described.subtopologies[0].source_topics == ("words",)
    (member,) = described.members
    assert member.assignment[0] == r.active_tasks
    (missing,) = s.describe("nope")
    assert (missing.error, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                      "Group nope not found.")


def test_replay_rebuilds_the_group(s: Session) -> None:
    r1 = s.hb("m1", 0, endpoint=("h", 9))
    s.hb("m2", 0)
    s.hb("m1", r1.member_epoch, active=r1.active_tasks)
    live = s.group()
    fresh = s.replayed()
    rebuilt = fresh._groups[G].streams
    assert rebuilt == live
    assert rebuilt.active_owners == live.active_owners


def test_a_failed_write_takes_the_heartbeat_back(s: Session) -> None:
    """The records of a refused write are undone: the group a first heartbeat created is gone,
    and a later heartbeat's new member and epoch are as before."""
    def refused_join(member: str) -> StreamsGroupHeartbeatResponse:
        s.auto_complete = False
        request_id = s.rid()
        s.absorb(s.coordinator.streams_group_heartbeat(StreamsGroupHeartbeatRequest(
            request_id, G, member, 0, rebalance_timeout_ms=1000, topology=SIMPLE,
            active_tasks=(), standby_tasks=(), warmup_tasks=(), process_id="p"), s.now))
        (write,) = s.pending
        s.lost_with(write)
        s.absorb(s.coordinator.write_completed(write.write_id, ErrorCode.NOT_COORDINATOR,
                                               s.now))
        s.auto_complete = True
        response = s.reply(request_id)
        assert isinstance(response, StreamsGroupHeartbeatResponse)
        return response

    assert refused_join("m1").error is ErrorCode.NOT_COORDINATOR
    assert G not in s.coordinator._groups
    r1 = s.hb("m1", 0)
    live = s.group()
    before = (live.group_epoch, dict(live.members["m1"].assigned.active), dict(live.targets))
    assert refused_join("m2").error is ErrorCode.NOT_COORDINATOR
    assert (live.group_epoch, dict(live.members["m1"].assigned.active),
            dict(live.targets)) == before
    assert list(live.members) == ["m1"] and r1.member_epoch == live.group_epoch


def test_standby_tasks_go_to_another_process() -> None:
    """With group.streams.num.standby.replicas 1, a stateful task's standby is placed on a
    process that does not run it active, and not until that process holds nothing of it."""
    s = Session(config=streams_config(group_streams_num_standby_replicas=1))
    stateful = StreamsGroupTopologyValue(0, (Subtopology(
        "0", ("words",), state_changelog_topics=(Topic("app-store-changelog"),)),))
    s.coordinator.set_topics(topics(words=2, **{"app-store-changelog": 2}))
    r1 = s.hb("m1", 0, topology=stateful)
    assert r1.active_tasks == (("0", (0, 1)),) and r1.standby_tasks == ()
    r2 = s.hb("m2", 0, topology=stateful)
    r1 = s.hb("m1", r1.member_epoch, active=r1.active_tasks)
    r1 = s.hb("m1", r1.member_epoch, active=r1.active_tasks or ())
    r2 = s.hb("m2", r2.member_epoch, active=())
    s.hb("m1", r1.member_epoch, active=r1.active_tasks or ())  # its standby was unreleased
    group = s.group()
    assert s.group().state() == "Stable"
    assert group.last_assignment_configs == (("num.standby.replicas", "1"),)
    for member in group.members.values():
        active = member.assigned.active.get("0", frozenset())
        standby = member.assigned.standby.get("0", frozenset())
        assert not active & standby
    held = {p for m in group.members.values() for p in m.assigned.standby.get("0", ())}
    assert held == {0, 1}


def test_a_member_asking_for_shutdown_is_told_to_everyone(s: Session) -> None:
    r1 = s.hb("m1", 0)
    r2 = s.hb("m2", 0)
    s.hb("m1", r1.member_epoch, active=r1.active_tasks, shutdown_application=True)
    told = s.hb("m2", r2.member_epoch, active=())
    assert (StreamsStatus.SHUTDOWN_APPLICATION,
            "Streams group member m1 encountered a fatal error and requested a shutdown for "
            "the entire application.") in told.status


def test_a_loaded_group_reports_its_state_before_any_heartbeat(s: Session) -> None:
    r = s.hb("m1", 0)
    fresh = s.replayed()
    fresh.set_topics(topics(words=4))
    rebuilt = fresh._groups[G].streams
    assert rebuilt is not None and rebuilt.state() == "Stable"
    assert rebuilt.members["m1"].member_epoch == r.member_epoch
