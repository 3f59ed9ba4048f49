"""The share-group offsets admin APIs in the core, as Kafka 4.3.1 answers them (seen on its
wire and in its log): alter and delete need an empty share group, an alter of an unknown group
makes it, altered partitions are initializing until the broker reports them initialized,
deleted topics are deleting until their state is gone, unknown topics and partitions answer
UNKNOWN_TOPIC_OR_PARTITION (first in an alter's answer, last in a delete's), and describe lists
what the group has state for."""

from __future__ import annotations

from tests.coordinator.harness import Harness
from tests.coordinator.test_share_groups import T1, hb, initialize, session

from kgroups.coordinator.share_messages import (
    AlterShareOffsetsRequest,
    AlterShareOffsetsResponse,
    DeleteShareOffsetsRequest,
    DeleteShareOffsetsResponse,
    DescribeShareOffsetsRequest,
    DescribeShareOffsetsResponse,
    ShareGroupInitializedRequest,
    ShareStateDeletedRequest,
)
from kgroups.errors import ErrorCode

UNKNOWN = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")


def alter(h: Harness, group: str, *topics: tuple[str, tuple[tuple[int, int], ...]]
          ) -> AlterShareOffsetsResponse:
    rid = h.rid()
    h.absorb(h.coordinator.share_offsets(AlterShareOffsetsRequest(rid, group, topics), h.now))
    reply = h.reply(rid)
    assert isinstance(reply, AlterShareOffsetsResponse)
    return reply


def delete(h: Harness, group: str, *topics: str) -> DeleteShareOffsetsResponse:
    rid = h.rid()
    h.absorb(h.coordinator.share_offsets(DeleteShareOffsetsRequest(rid, group, topics), h.now))
    reply = h.reply(rid)
    assert isinstance(reply, DeleteShareOffsetsResponse)
    return reply


def describe(h: Harness, group: str,
             topics: tuple[tuple[str, tuple[int, ...]], ...] | None = None
             ) -> DescribeShareOffsetsResponse:
    rid = h.rid()
    h.absorb(h.coordinator.share_offsets(DescribeShareOffsetsRequest(rid, group, topics), h.now))
    reply = h.reply(rid)
    assert isinstance(reply, DescribeShareOffsetsResponse)
    return reply


def listed(response: DescribeShareOffsetsResponse) -> dict[str, list[int]]:
    return {t.topic_name: [p for p, _, _ in t.partitions] for t in response.topics}


def test_a_group_with_members_is_refused() -> None:
    h = session()
    hb(h, "a", 0, ("t1",))
    assert (alter(h, "g", ("t1", ((0, 0),))).error, delete(h, "g", "t1").error_message) == (
        ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
    assert alter(h, "", ("t1", ((0, 0),))).error_message == "The group id is invalid."
    assert delete(h, "", "t1").error == ErrorCode.INVALID_GROUP_ID


def test_another_kinds_group_and_an_unknown_group_are_refused_with_kafkas_texts() -> None:
    h = session()
    h.commit("classic", {("t1", 0): 5})
    h.complete_writes()
    not_share = (ErrorCode.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")
    refused = alter(h, "classic", ("t1", ((0, 0),)))
    assert (refused.error, refused.error_message) == not_share
    refused = delete(h, "classic", "t1")
    assert (refused.error, refused.error_message) == not_share
    refused = delete(h, "none", "t1")
    assert (refused.error, refused.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                      "Group none not found.")


def test_describe_lists_what_the_group_has_state_for() -> None:
    h = session()
    assert listed(describe(h, "g")) == {}
    assert listed(describe(h, "g", (("t1", (0,)),))) == {"t1": [0]}
    joined = hb(h, "a", 0, ("t1",))
    assert listed(describe(h, "g")) == {}  # initializing, not initialized yet
    initialize(h, joined)
    assert listed(describe(h, "g")) == {"t1": [0, 1, 2]}
    (unknown,) = describe(h, "g", (("nope", (0,)),)).topics
    assert (unknown.topic_id, unknown.partitions) == (None, ((0, *UNKNOWN),))


def test_alter_an_empty_group_initializes_the_partitions_again() -> None:
    h = session()
    joined = hb(h, "a", 0, ("t1",))
    initialize(h, joined)
    hb(h, "a", -1)
    answer = alter(h, "g", ("t1", ((0, 5), (7, 0))), ("nope", ((0, 0),)))
    assert answer.error == ErrorCode.NONE
    assert [(t.topic_name, t.partitions) for t in answer.topics] == [
        ("nope", ((0, *UNKNOWN),)), ("t1", ((0, ErrorCode.NONE, None), (7, *UNKNOWN)))]
    assert answer.initialize == ((T1, "t1", 0, 5),)
    share = h.coordinator._groups["g"].share
    assert share is not None and share.initializing == {T1: ("t1", frozenset({0}))}
    h.absorb(h.coordinator.share_group_initialized(ShareGroupInitializedRequest(
        h.rid(), "g", ((T1, "t1", (0,)),)), h.now))
    assert share.initializing == {} and share.initialized == {T1: ("t1", frozenset({0, 1, 2}))}


def test_alter_of_an_unknown_group_makes_a_share_group() -> None:
    h = session()
    assert alter(h, "new", ("t1", ((1, 0),))).error == ErrorCode.NONE
    share = h.replayed()._groups["new"].share
    assert share is not None and share.initializing == {T1: ("t1", frozenset({1}))}


def test_delete_marks_the_topic_deleting_until_its_state_is_gone() -> None:
    h = session()
    joined = hb(h, "a", 0, ("t1",))
    initialize(h, joined)
    hb(h, "a", -1)
    answer = delete(h, "g", "t1", "nope")
    assert [(t.topic_name, t.partitions[0][1]) for t in answer.topics] == [
        ("t1", ErrorCode.NONE), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert answer.delete == ((T1, "t1", (0, 1, 2)),)
    share = h.coordinator._groups["g"].share
    assert share is not None and (share.initialized, share.deleting) == ({}, {T1: "t1"})
    h.absorb(h.coordinator.share_offsets(ShareStateDeletedRequest(h.rid(), "g", (T1,)), h.now))
    assert share.deleting == {}
    assert listed(describe(h, "g")) == {}
