"""Failed writes are undone through the write path's one mechanism (a snapshot of what the
records changed): what a client sees afterwards, and that the log and memory agree again."""

from __future__ import annotations

from kgroups.coordinator import DeleteGroupsRequest
from kgroups.errors import ErrorCode

from .test_join import make
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
