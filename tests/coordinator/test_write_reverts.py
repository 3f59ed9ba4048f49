"""Failed writes are undone through the write path's one mechanism (each record's key goes back
to the value it held, `journal`): what a client sees afterwards, and that the log and memory agree
again, for classic groups, consumer groups and the conversions between them."""

from __future__ import annotations

import copy

from kgroups.coordinator import DeleteGroupsRequest
from kgroups.coordinator.consumer_messages import ConsumerGroupHeartbeatRequest
from kgroups.coordinator.group import GroupState
from kgroups.errors import ErrorCode

from .test_consumer_protocol import G as CG
from .test_consumer_protocol import Session, topics
from .test_join import make
from .test_migration import G, classic_group, partitions_of
from .test_static_sync import static_stable

E = ErrorCode


def persisted(h, group: str):
    """The group as a coordinator rebuilt from the log has it."""
    return h.replayed().group_view(group)


def test_reverted_static_replacement_answers_its_join_once_and_leaves_nothing_parked():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"))
    h.auto_complete = False
    rid = h.join("g", instance="i2")
    h.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert h.reply(rid).error is E.COORDINATOR_NOT_AVAILABLE
    # The old member is back as it was: not waiting in a join, so it is timed out normally and
    # a fail-over answers nothing twice (the harness refuses a second reply to one request).
    assert h.reply(h.heartbeat("g", ids["i2"], generation, "i2")).error is E.NONE
    h.absorb(h.coordinator.unload_partition(h.partition_of("g"), h.now))
    assert h.coordinator.group_view("g") is None


def test_two_failed_replacements_of_one_instance_leave_the_persisted_member():
    h = make()
    ids, _generation = static_stable(h, "g", ("i1", "i2"))
    before = h.coordinator.group_view("g")
    h.auto_complete = False
    first = h.join("g", instance="i2")
    second = h.join("g", instance="i2")  # the same instance restarted again meanwhile
    assert h.reply(first).error is E.FENCED_INSTANCE_ID
    h.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert h.reply(second).error is E.COORDINATOR_NOT_AVAILABLE
    assert h.coordinator.group_view("g") == before == persisted(h, "g")
    assert {m.member_id for m in before.members} == set(ids.values())


def test_commit_landing_during_a_failed_deletion_stays_with_the_restored_group():
    h = make()
    h.commit("g", {("t", 0): 1})
    h.auto_complete = False
    h.commit("g", {("t", 1): 2})
    rid = h.rid()
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(rid, ("g",)), h.now))
    (commit, deletion) = h.pending
    assert {(r.key.topic, r.key.partition) for r in deletion.records[:-1]} == {("t", 0), ("t", 1)}
    h.pending = [commit]
    h.complete_writes()  # the commit lands while the group is Dead, awaiting its deletion
    h.pending = [deletion]
    h.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert h.reply(rid).results == (("g", E.COORDINATOR_NOT_AVAILABLE),)
    assert h.coordinator.group_view("g").state == "Empty"
    assert h.fetch("g") == {("t", 0): 1, ("t", 1): 2}
    assert persisted(h, "g") == h.coordinator.group_view("g")


def test_deletion_covers_a_commit_sent_before_its_group_existed():
    h = make()
    h.auto_complete = False
    h.commit("g", {("t", 0): 1})  # the group does not exist yet: the commit will create it
    h.commit("g", {("t", 1): 2})  # ...and this one is in flight meanwhile
    h.pending, later = h.pending[:1], h.pending[1:]
    h.complete_writes()
    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(h.rid(), ("g",)), h.now))
    h.pending = later + h.pending
    h.complete_writes()
    assert h.coordinator.group_view("g") is None
    assert persisted(h, "g") is None


# -- the consumer protocol and migration -------------------------------------------------------


def test_a_failed_heartbeat_write_takes_back_the_member_it_added() -> None:
    s = Session()
    s.coordinator.set_topics(topics(t1=6))
    s.hb("a", 0)
    before = s.group()
    epoch = before.group_epoch
    s.auto_complete = False
    request = s.rid()
    s.absorb(s.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        request, CG, "b", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t1",),
        topic_partitions=()), s.now))
    assert "b" in s.group().members  # applied at once, as Kafka shows it
    s.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert s.reply(request).error is E.COORDINATOR_NOT_AVAILABLE
    assert list(s.group().members) == ["a"] and s.group().group_epoch == epoch
    assert s.group() == s.replayed()._groups[CG].consumer


def test_a_failure_fails_the_later_writes_of_its_partition_newest_first() -> None:
    """Kafka's rule: the revert goes back to the failed write's offset, so the joins built on it
    fail too; the group their records created is gone, as the log has none of it."""
    s = Session()
    s.coordinator.set_topics(topics(t1=6))
    s.auto_complete = False
    first, second = s.rid(), s.rid()
    for request, member in ((first, "a"), (second, "b")):
        s.absorb(s.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
            request, CG, member, 0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=("t1",), topic_partitions=()), s.now))
    (head, tail) = s.pending
    s.pending = []
    s.absorb(s.coordinator.write_completed(head.write_id, E.NOT_ENOUGH_REPLICAS, s.now))
    assert s.reply(first).error is s.reply(second).error is E.COORDINATOR_NOT_AVAILABLE
    assert s.coordinator.group_view(CG) is None
    # The shell's report for the later write changes nothing any more.
    s.absorb(s.coordinator.write_completed(tail.write_id, None, s.now))
    assert s.coordinator.group_view(CG) is None


def test_a_failed_upgrade_write_gives_back_the_classic_group() -> None:
    s, c = classic_group()
    before = s.coordinator.group_view(G)
    s.auto_complete = False
    request = s.rid()
    s.absorb(s.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        request, G, "a", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t1",),
        topic_partitions=()), s.now))
    assert s.coordinator._groups[G].consumer is not None  # converted while in flight
    s.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert s.reply(request).error is E.COORDINATOR_NOT_AVAILABLE
    group = s.coordinator._groups[G]
    assert group.consumer is None and s.coordinator.group_view(G) == before
    assert s.coordinator.group_view(G) == s.replayed().group_view(G)
    assert s.beat(c, before.generation) == E.NONE  # its member never noticed


def test_a_failed_downgrade_write_gives_back_the_consumer_group() -> None:
    s, c = classic_group()
    s.hb("a", 0)
    joined = s.rejoin(c, owned=(0, 1, 2, 3, 4, 5))
    s.rejoin(c, owned=partitions_of(s.sync_classic(c, joined.generation_id).assignment))
    consumer = copy.deepcopy(s.consumer())
    s.auto_complete = False
    request = s.rid()
    s.absorb(s.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        request, G, "a", -1), s.now))
    assert s.coordinator._groups[G].consumer is None  # downgraded while in flight
    s.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert s.reply(request).error is E.COORDINATOR_NOT_AVAILABLE
    assert s.consumer() == consumer == s.replayed()._groups[G].consumer
    assert s.coordinator._groups[G].state is GroupState.EMPTY  # a consumer group's classic side
    assert s.coordinator.next_deadline() is not None


def test_a_group_made_over_a_deletion_in_flight_goes_when_the_deletion_fails() -> None:
    s = Session()
    s.coordinator.set_topics(topics(t1=6))
    s.commit(CG, {("t1", 0): 1})
    s.auto_complete = False
    s.commit(CG, {("t1", 1): 2})  # lands while the group awaits its deletion
    s.absorb(s.coordinator.delete_groups(DeleteGroupsRequest(s.rid(), (CG,)), s.now))
    joining = s.rid()
    s.absorb(s.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        joining, CG, "a", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t1",),
        topic_partitions=()), s.now))
    assert s.coordinator._groups[CG].consumer is not None  # a new group, over the Dead one
    commit, deletion, _join = s.pending
    s.pending = [commit]
    s.complete_writes()
    s.absorb(s.coordinator.write_completed(deletion.write_id, E.NOT_ENOUGH_REPLICAS, s.now))
    assert s.reply(joining).error is E.COORDINATOR_NOT_AVAILABLE
    assert s.coordinator.group_view(CG) == persisted(s, CG)
    assert s.fetch(CG) == {("t1", 0): 1, ("t1", 1): 2}
