"""The member state machines on their own, answers handed in by hand: where the Java consumer
and librdkafka differ in what a member sends, and when."""

from __future__ import annotations

import pytest

from kgroups.assignors import ClusterMetadata
from kgroups.coordinator import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroups.errors import ErrorCode
from kgroups.member import ClassicMember, ClientFlavour, MemberSettings
from kgroups.records.consumer_protocol import encode_assignment
from kgroups.records.schema import ConsumerAssignment, TopicPartitions

ASSIGNMENT = encode_assignment(ConsumerAssignment((TopicPartitions("t", (0,)),)))
Answer = JoinGroupResponse | SyncGroupResponse | HeartbeatResponse


def _heartbeat_times(client: ClientFlavour) -> list[int]:
    """A follower joins at 0 (the rebalance ends at 10 ms), hears of a new rebalance at its
    second heartbeat and rejoins; that rebalance ends 500 ms after its JoinGroup. The times it
    sent heartbeats until 4,000 ms."""
    settings = MemberSettings("g", ("t",), heartbeat_interval_ms=1_000, processing_ms=20,
                              commit_interval_ms=0, client=client, client_id="m0")
    member = ClassicMember("m0", settings, ClusterMetadata({"t": 2}), 0)
    answers: list[tuple[int, Answer]] = []
    beats: list[int] = []
    joins = 0
    now = 0
    while now < 4_000:
        for at, answer in [a for a in answers if a[0] == now]:
            answers.remove((at, answer))
            member.on_response(answer, now)
        member.advance(now)
        for request in member.take_requests():
            if isinstance(request, HeartbeatRequest):
                beats.append(now)
                error = ErrorCode.REBALANCE_IN_PROGRESS if len(beats) == 2 else ErrorCode.NONE
                answers.append((now + 1, HeartbeatResponse(error)))
            elif isinstance(request, JoinGroupRequest):
                joins += 1
                took = 5 if joins == 1 else 490
                answers.append((now + took, JoinGroupResponse(
                    ErrorCode.NONE, "m0-1", joins, "consumer", "range", "leader")))
            elif isinstance(request, SyncGroupRequest):
                answers.append((now + 5, SyncGroupResponse(ErrorCode.NONE, ASSIGNMENT)))
        deadline = member.next_deadline(now + 1)
        now = min([at for at, _ in answers] + ([deadline] if deadline is not None else [])
                  + [4_000])
    return beats


@pytest.mark.parametrize("client, expected", [
    # Java: an interval after each JoinGroup answer; the rejoin waits for the next poll (2,020)
    # and its JoinGroup is answered at 2,510.
    (ClientFlavour.JAVA, [1_005, 2_005, 3_510]),
    # librdkafka: at once when first steady, then on that rhythm whatever rebalances happen.
    (ClientFlavour.LIBRDKAFKA, [10, 1_010, 2_010, 3_010]),
])
def test_librdkafka_keeps_its_heartbeat_rhythm_through_a_rebalance(
        client: ClientFlavour, expected: list[int]) -> None:
    assert _heartbeat_times(client) == expected
