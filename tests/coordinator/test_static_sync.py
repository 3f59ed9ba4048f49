"""Static membership and SyncGroup rules of the reference."""

from __future__ import annotations

from kgroups.errors import ErrorCode

from .harness import nth_uuid, subscription
from .test_join import make

E = ErrorCode


def static_stable(h, group: str, instances: tuple[str, ...], **join_args):
    """Static members joined and synced; returns ({instance: member id}, generation)."""
    joins = {i: h.join(group, instance=i, client_id=i, **join_args) for i in instances}
    h.advance(6000)
    ids = {i: h.reply(rid).member_id for i, rid in joins.items()}
    generation = h.reply(joins[instances[0]]).generation_id
    leader = h.reply(joins[instances[0]]).leader
    h.sync(group, leader, generation, {m: f"a-{m}".encode() for m in ids.values()})
    for member in ids.values():
        if member != leader:
            h.sync(group, member, generation)
    assert h.coordinator.group_view(group).state == "Stable"
    return ids, generation


def test_static_member_gets_instance_prefixed_id_without_member_id_required():
    h = make()
    rid = h.join("g", instance="i1")
    h.advance(3000)
    assert h.reply(rid).error is E.NONE and h.reply(rid).member_id == f"i1-{nth_uuid(1)}"


def test_unknown_instance_id_with_member_id_is_unknown_member():
    h = make()
    static_stable(h, "g", ("i1",))
    assert h.reply(h.join("g", f"i1-{nth_uuid(1)}", instance="nope")).error is E.UNKNOWN_MEMBER_ID


def test_known_instance_with_other_member_id_is_fenced():
    h = make()
    static_stable(h, "g", ("i1", "i2"))
    assert h.reply(h.join("g", f"i2-{nth_uuid(2)}", instance="i1")).error is E.FENCED_INSTANCE_ID
    assert h.reply(h.heartbeat("g", f"i2-{nth_uuid(2)}", 1, "i1")).error is E.FENCED_INSTANCE_ID


def test_static_rejoin_in_stable_keeps_generation_and_persists_new_id():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"))
    leader = h.coordinator.group_view("g").leader
    follower_instance = next(i for i, m in ids.items() if m != leader)
    h.auto_complete = False
    rid = h.join("g", instance=follower_instance, version=8)
    assert h.reply(rid) is None, "answered only once the new member id is durable"
    h.complete_writes()
    response = h.reply(rid)
    assert response.error is E.NONE and response.generation_id == generation
    assert response.member_id != ids[follower_instance]
    assert response.leader == leader and response.members == ()
    view = h.coordinator.group_view("g")
    assert view.state == "Stable" and view.generation == generation
    assert response.member_id in {m.member_id for m in view.members}
    # The old incarnation is fenced.
    old = h.heartbeat("g", ids[follower_instance], generation, follower_instance)
    assert h.reply(old).error is E.FENCED_INSTANCE_ID
    assert h.replayed().group_view("g") == view


def test_static_leader_rejoin_v9_gets_skip_assignment_and_members():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"))
    leader_instance = next(i for i, m in ids.items() if m == h.coordinator.group_view("g").leader)
    response = h.reply(h.join("g", instance=leader_instance, version=9))
    assert response.skip_assignment is True
    assert response.leader == response.member_id
    assert len(response.members) == 2 and response.generation_id == generation


def test_static_leader_rejoin_before_v9_is_told_the_old_leader():
    h = make()
    ids, _generation = static_stable(h, "g", ("i1", "i2"))
    old_leader = h.coordinator.group_view("g").leader
    leader_instance = next(i for i, m in ids.items() if m == old_leader)
    response = h.reply(h.join("g", instance=leader_instance, version=8))
    assert response.skip_assignment is False and response.leader == old_leader
    assert response.member_id != old_leader and response.members == ()


def test_failed_static_replacement_is_reverted():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"))
    before = h.coordinator.group_view("g")
    h.auto_complete = False
    rid = h.join("g", instance="i2")
    h.complete_writes(error=E.NOT_ENOUGH_REPLICAS)
    assert h.reply(rid).error is E.COORDINATOR_NOT_AVAILABLE
    assert h.reply(rid).member_id == ""
    assert h.coordinator.group_view("g") == before
    assert h.reply(h.heartbeat("g", ids["i2"], generation, "i2")).error is E.NONE


def test_static_rejoin_rebalances_only_when_the_selected_protocol_changes():
    h = make()
    static_stable(h, "g", ("i1", "i2"))
    sub = subscription("t")
    # i1 only speaks range, so range stays selected: no rebalance.
    h.join("g", instance="i2", protocols=(("rr", sub), ("range", sub)))
    assert h.coordinator.group_view("g").state == "Stable"
    h2 = make()
    static_stable(h2, "g", ("i1",))
    # The only member now prefers rr: the selected protocol would change.
    rid = h2.join("g", instance="i1", protocols=(("rr", sub), ("range", sub)))
    # ...so it rebalances; being the only member, the join phase completes at once.
    assert h2.reply(rid).generation_id == 2 and h2.reply(rid).protocol_name == "rr"
    assert h2.coordinator.group_view("g").state == "CompletingRebalance"


def test_static_rejoin_in_completing_rebalance_triggers_rebalance_and_fences_old_sync():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"), session=60_000)
    leader = h.coordinator.group_view("g").leader
    follower_instance = next(i for i, m in ids.items() if m != leader)
    h.join("g", leader, instance=next(i for i, m in ids.items() if m == leader), session=60_000)
    h.join("g", ids[follower_instance], instance=follower_instance, session=60_000)
    assert h.coordinator.group_view("g").state == "CompletingRebalance"
    parked = h.sync("g", ids[follower_instance], generation + 1, instance=follower_instance)
    assert h.reply(parked) is None
    h.join("g", instance=follower_instance, session=60_000)
    assert h.reply(parked).error is E.FENCED_INSTANCE_ID
    assert h.coordinator.group_view("g").state == "PreparingRebalance"


def test_static_members_survive_join_completion_without_rejoining():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"), session=120_000)
    h.join("g", ids["i1"], instance="i1", protocols=(("range", subscription("x")),))
    h.advance(30_000)
    view = h.coordinator.group_view("g")
    assert view.generation == generation + 1
    assert {m.group_instance_id for m in view.members} == {"i1", "i2"}


def test_leave_by_instance_id_removes_static_member():
    from kgroups.coordinator import MemberIdentity

    h = make()
    ids, _ = static_stable(h, "g", ("i1", "i2"))
    response = h.reply(h.leave("g", MemberIdentity("", "i2"), MemberIdentity("", "zz")))
    assert [m.error for m in response.members] == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert h.coordinator.group_view("g").state == "PreparingRebalance"
    assert ids["i2"] not in {m.member_id for m in h.coordinator.group_view("g").members}


# -- SyncGroup -----------------------------------------------------------------------------------


def test_sync_unknown_group_or_member():
    h = make()
    assert h.reply(h.sync("g", "m", 1)).error is E.UNKNOWN_MEMBER_ID
    static_stable(h, "g", ("i1",))
    assert h.reply(h.sync("g", "stranger", 1)).error is E.UNKNOWN_MEMBER_ID


def test_sync_on_empty_group_is_unknown_member():
    from kgroups.coordinator import MemberIdentity

    h = make()
    ids, generation = static_stable(h, "g", ("i1",))
    h.leave("g", MemberIdentity(ids["i1"], "i1"))
    h.advance(30_000)
    assert h.coordinator.group_view("g").state == "Empty"
    assert h.reply(h.sync("g", ids["i1"], generation + 1)).error is E.UNKNOWN_MEMBER_ID


def test_sync_wrong_generation_is_illegal():
    h = make()
    ids, generation = static_stable(h, "g", ("i1",))
    assert h.reply(h.sync("g", ids["i1"], generation + 5)).error is E.ILLEGAL_GENERATION


def test_sync_protocol_mismatch_is_inconsistent():
    h = make()
    ids, generation = static_stable(h, "g", ("i1",))
    member = ids["i1"]
    bad_type = h.sync("g", member, generation, protocol_type="connect", protocol_name="range")
    assert h.reply(bad_type).error is E.INCONSISTENT_GROUP_PROTOCOL
    bad_name = h.sync("g", member, generation, protocol_type="consumer", protocol_name="rr")
    assert h.reply(bad_name).error is E.INCONSISTENT_GROUP_PROTOCOL
    good = h.sync("g", member, generation, protocol_type="consumer", protocol_name="range")
    assert h.reply(good).error is E.NONE


def test_sync_during_preparing_rebalance():
    h = make()
    ids, generation = static_stable(h, "g", ("i1", "i2"))
    h.join("g", ids["i1"], instance="i1", protocols=(("range", subscription("x")),))
    assert h.reply(h.sync("g", ids["i2"], generation, instance="i2")).error is (
        E.REBALANCE_IN_PROGRESS
    )


def test_leader_sync_is_persisted_before_anyone_is_answered():
    h = make()
    a = h.join("g", instance="i1")
    b = h.join("g", instance="i2")
    h.advance(6000)
    generation = h.reply(a).generation_id
    leader = h.reply(a).leader
    follower = h.reply(b).member_id if h.reply(b).member_id != leader else h.reply(a).member_id
    h.auto_complete = False
    follower_sync = h.sync("g", follower, generation)
    assert h.reply(follower_sync) is None
    leader_sync = h.sync("g", leader, generation, {leader: b"mine"})
    assert h.reply(leader_sync) is None and h.reply(follower_sync) is None
    assert h.coordinator.group_view("g").state == "CompletingRebalance"
    (write,) = h.pending
    stored = {m.member_id: m.assignment for m in write.records[0].value.members}
    assert stored == {leader: b"mine", follower: b""}, "missing members get empty assignments"
    h.complete_writes()
    assert h.reply(leader_sync).assignment == b"mine"
    assert h.reply(follower_sync).assignment == b"" and h.reply(follower_sync).error is E.NONE
    assert h.coordinator.group_view("g").state == "Stable"
    # Stable: the stored assignment is returned.
    assert h.reply(h.sync("g", leader, generation)).assignment == b"mine"


def test_failed_assignment_write_answers_the_error_and_rebalances():
    h = make()
    a = h.join("g", instance="i1")
    h.advance(3000)
    member = h.reply(a).member_id
    h.auto_complete = False
    rid = h.sync("g", member, 1, {member: b"x"})
    h.complete_writes(error=E.NOT_LEADER_OR_FOLLOWER)
    assert h.reply(rid).error is E.NOT_COORDINATOR
    assert h.coordinator.group_view("g").state == "PreparingRebalance"
    assert h.log == {} or all(not records for records in h.log.values())
