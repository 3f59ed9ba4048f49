"""OffsetCommit / OffsetFetch / expiry / DeleteGroups / OffsetDelete rules of the reference."""

from __future__ import annotations

from kgroups.coordinator import (
    DeleteGroupsRequest,
    OffsetDeleteRequest,
    OffsetFetchGroup,
    OffsetFetchRequest,
)
from kgroups.errors import ErrorCode
from kgroups.records.schema import OffsetCommitKey

from .harness import subscription
from .test_join import make, stable

E = ErrorCode
DAY = 86_400_000


def errors(h, rid):
    return {(t.name, p.partition): p.error for t in h.reply(rid).topics for p in t.partitions}


def test_commit_to_missing_group_with_negative_generation_creates_simple_group():
    h = make()
    rid = h.commit("simple", {("t", 0): 42, ("t", 1): 7})
    assert set(errors(h, rid).values()) == {E.NONE}
    view = h.coordinator.group_view("simple")
    assert view.state == "Empty" and view.protocol_type is None
    assert h.fetch("simple", (("t", (0, 1, 2)),)) == {("t", 0): 42, ("t", 1): 7, ("t", 2): -1}


def test_commit_to_missing_group_with_generation():
    h = make()
    assert set(errors(h, h.commit("g", {("t", 0): 1}, generation=3)).values()) == {
        E.GROUP_ID_NOT_FOUND
    }
    old = h.commit("g", {("t", 0): 1}, generation=3, version=8)
    assert set(errors(h, old).values()) == {E.ILLEGAL_GENERATION}
    assert h.coordinator.group_view("g") is None


def test_generation_minus_one_without_member_only_while_empty():
    h = make()
    (a,), generation = stable(h, "g", 1)
    assert set(errors(h, h.commit("g", {("t", 0): 1})).values()) == {E.UNKNOWN_MEMBER_ID}
    ok = h.commit("g", {("t", 0): 1}, generation=generation, member_id=a)
    assert set(errors(h, ok).values()) == {E.NONE}
    wrong = h.commit("g", {("t", 0): 1}, generation=generation + 1, member_id=a)
    assert set(errors(h, wrong).values()) == {E.ILLEGAL_GENERATION}
    stranger = h.commit("g", {("t", 0): 1}, generation=generation, member_id="x")
    assert set(errors(h, stranger).values()) == {E.UNKNOWN_MEMBER_ID}


def test_commit_during_completing_rebalance_is_rebalance_in_progress():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    h.join("g", a)
    h.join("g", b)
    rid = h.commit("g", {("t", 0): 1}, generation=generation + 1, member_id=a)
    assert set(errors(h, rid).values()) == {E.REBALANCE_IN_PROGRESS}


def test_commit_during_preparing_rebalance_is_accepted():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    h.join("g", a, protocols=(("range", subscription("q")),))
    rid = h.commit("g", {("t", 0): 9}, generation=generation, member_id=b)
    assert set(errors(h, rid).values()) == {E.NONE}


def test_metadata_over_limit_fails_only_that_partition():
    h = make(offset_metadata_max_bytes=5)
    rid = h.commit("g", {("t", 0): 1}, metadata="toolong")
    assert errors(h, rid) == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}
    assert h.coordinator.group_view("g") is None
    ok = h.commit("g", {("t", 0): 1}, metadata="12345")
    assert errors(h, ok) == {("t", 0): E.NONE}


def test_commit_is_answered_only_after_the_write_and_failure_is_reported():
    h = make()
    h.auto_complete = False
    rid = h.commit("g", {("t", 0): 5})
    assert h.reply(rid) is None
    # A fetch behind the commit waits for its answer: it never sees an offset not yet durable.
    waiting = h.send_fetch("g", (("t", (0,)),))
    assert h.reply(waiting) is None
    h.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert set(errors(h, rid).values()) == {E.COORDINATOR_NOT_AVAILABLE}
    assert h.fetched(waiting) == {("t", 0): -1}
    assert h.fetch("g", (("t", (0,)),)) == {("t", 0): -1}
    rid = h.commit("g", {("t", 0): 6})
    waiting = h.send_fetch("g", (("t", (0,)),))
    h.complete_writes()
    assert set(errors(h, rid).values()) == {E.NONE}
    assert h.fetched(waiting) == {("t", 0): 6}
    assert h.fetch("g", (("t", (0,)),)) == {("t", 0): 6}


def test_a_fetch_waits_for_the_commits_before_it_and_no_later_one():
    """Behind two commits of its group, a fetch is answered once both are, with the second's
    offset; a commit written after it does not hold it back (a group committing without
    pause would otherwise starve its fetches)."""
    h = make()
    h.auto_complete = False
    first = h.commit("g", {("t", 0): 5})
    second = h.commit("g", {("t", 0): 6})
    waiting = h.send_fetch("g", (("t", (0,)),))
    other_group = h.send_fetch("g2", (("t", (0,)),))
    assert h.fetched(other_group) == {("t", 0): -1}  # nothing of its own in flight
    later = h.commit("g", {("t", 0): 7})
    assert h.reply(waiting) is None
    h.complete_writes(count=2)
    assert set(errors(h, first).values()) == set(errors(h, second).values()) == {E.NONE}
    assert h.reply(later) is None
    assert h.fetched(waiting) == {("t", 0): 6}


def test_commit_records_v3_shape_or_expire_timestamp_with_retention():
    h = make()
    h.commit("g", {("t", 0): 5})
    h.commit("g", {("t", 1): 6}, retention=1000, version=2)
    records = h.log[h.partition_of("g")]
    assert records[0].key == OffsetCommitKey("g", "t", 0)
    assert records[0].value.expire_timestamp is None
    assert records[0].value.commit_timestamp == h.now and records[0].value.leader_epoch == 5
    assert records[1].value.expire_timestamp == h.now + 1000


def test_v1_commit_timestamp_is_kept():
    h = make()
    h.commit("g", {("t", 0): 5}, commit_timestamp=1234, version=1)
    assert h.log[h.partition_of("g")][0].value.commit_timestamp == 1234


def test_fetch_all_partitions_and_many_groups():
    h = make()
    h.commit("g1", {("b", 1): 11, ("a", 0): 10})
    h.commit("g2", {("c", 0): 20})
    rid = h.rid()
    h.absorb(
        h.coordinator.offset_fetch(
            OffsetFetchRequest(
                rid, (OffsetFetchGroup("g1"), OffsetFetchGroup("g2"), OffsetFetchGroup("g3"))
            ),
            h.now,
        )
    )
    groups = h.reply(rid).groups
    assert [g.group_id for g in groups] == ["g1", "g2", "g3"]
    assert [(t.name, [p.offset for p in t.partitions]) for t in groups[0].topics] == [
        ("a", [10]),
        ("b", [11]),
    ]
    assert groups[2].topics == () and groups[2].error is E.NONE


def test_expiry_of_empty_group_counts_from_when_it_became_empty_then_deletes_it():
    h2 = make(offsets_retention_minutes=60, offsets_retention_check_interval_ms=60_000)
    (a,), generation = stable(h2, "g", 1)
    h2.commit("g", {("t", 0): 1}, generation=generation, member_id=a)
    for _ in range(100):  # keep the member alive for 800 s
        h2.advance(8000)
        h2.heartbeat("g", a, generation)
    from kgroups.coordinator import MemberIdentity

    h2.leave("g", MemberIdentity(a))
    h2.advance(30_000)
    assert h2.coordinator.group_view("g").state == "Empty"
    h2.advance(3_600_000 - 60_000)
    assert h2.fetch("g", (("t", (0,)),)) == {("t", 0): 1}, "an hour since Empty has not passed"
    h2.advance(120_000)
    assert h2.coordinator.group_view("g") is None
    tail = h2.log[h2.partition_of("g")][-2:]
    assert tail[0].key == OffsetCommitKey("g", "t", 0) and tail[0].value is None
    assert tail[1].value is None, "group tombstone"
    assert h2.replayed().group_view("g") is None


def test_stable_consumer_group_expires_only_unsubscribed_topics():
    h = make(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    (a,), generation = stable(h, "g", 1, protocols=(("range", subscription("t")),))
    h.commit("g", {("t", 0): 1, ("old", 0): 2}, generation=generation, member_id=a)
    for _ in range(12):
        h.advance(8000)
        h.heartbeat("g", a, generation)
    assert h.fetch("g") == {("t", 0): 1}


def test_explicit_expire_timestamp_overrides():
    h = make(offsets_retention_minutes=10080, offsets_retention_check_interval_ms=10_000)
    h.commit("g", {("t", 0): 1}, retention=20_000, version=2)
    h.commit("g", {("t", 1): 1})
    h.advance(30_000)
    assert h.fetch("g") == {("t", 1): 1}


def test_simple_group_offsets_expire_by_commit_time():
    h = make(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    h.commit("g", {("t", 0): 1})
    h.advance(30_000)
    h.commit("g", {("t", 1): 1})
    h.advance(40_000)
    assert h.fetch("g") == {("t", 1): 1}


def test_delete_groups():
    h = make()
    h.commit("empty", {("t", 0): 1})
    stable(h, "busy", 1)
    rid = h.rid()
    h.absorb(
        h.coordinator.delete_groups(DeleteGroupsRequest(rid, ("empty", "busy", "none")), h.now)
    )
    assert dict(h.reply(rid).results) == {
        "empty": E.NONE,
        "busy": E.NON_EMPTY_GROUP,
        "none": E.GROUP_ID_NOT_FOUND,
    }
    assert h.coordinator.group_view("empty") is None
    assert h.replayed().group_view("empty") is None
    records = h.log[h.partition_of("empty")]
    assert [r.value for r in records[-2:]] == [None, None]


def test_failed_delete_groups_is_reverted():
    h = make()
    h.commit("g", {("t", 0): 1})
    h.auto_complete = False
    rid = h.rid()
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(rid, ("g",)), h.now))
    assert h.reply(rid) is None
    h.complete_writes(error=E.KAFKA_STORAGE_ERROR)
    assert dict(h.reply(rid).results) == {"g": E.NOT_COORDINATOR}
    assert h.coordinator.group_view("g").state == "Empty"
    assert h.fetch("g") == {("t", 0): 1}


def test_offset_delete():
    h = make()
    (a,), generation = stable(h, "g", 1, protocols=(("range", subscription("t")),))
    h.commit("g", {("t", 0): 1, ("u", 0): 2}, generation=generation, member_id=a)
    rid = h.rid()
    h.absorb(
        h.coordinator.offset_delete(
            OffsetDeleteRequest(rid, "g", (("t", (0,)), ("u", (0, 1)))), h.now
        )
    )
    response = h.reply(rid)
    assert response.error is E.NONE
    assert {(t.name, p.partition): p.error for t in response.topics for p in t.partitions} == {
        ("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC,
        ("u", 0): E.NONE,
        ("u", 1): E.NONE,
    }
    assert h.fetch("g") == {("t", 0): 1}
    assert h.replayed().group_view("g").offsets == h.coordinator.group_view("g").offsets


def test_offset_delete_errors():
    h = make()
    rid = h.rid()
    h.absorb(h.coordinator.offset_delete(OffsetDeleteRequest(rid, "g", (("t", (0,)),)), h.now))
    assert h.reply(rid).error is E.GROUP_ID_NOT_FOUND
    stable(h, "connect", 1, protocol_type="connect")
    rid = h.rid()
    h.absorb(
        h.coordinator.offset_delete(OffsetDeleteRequest(rid, "connect", (("t", (0,)),)), h.now)
    )
    assert h.reply(rid).error is E.NON_EMPTY_GROUP
