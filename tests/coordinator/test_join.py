"""JoinGroup rules of the reference, driven with an explicit clock."""

from __future__ import annotations

from kgroups.coordinator import GroupCoordinatorConfig, JoinGroupResponse
from kgroups.errors import ErrorCode

from .harness import Harness, counting_uuids, nth_uuid, subscription

E = ErrorCode


def make(**overrides) -> Harness:
    return Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=4, **overrides))


def stable(h: Harness, group: str, count: int, **join_args) -> tuple[list[str], int]:
    """Bring `count` dynamic members to Stable; returns (member ids, generation)."""
    joins = [h.join_dynamic(group, client_id=f"c{i}", **join_args) for i in range(count)]
    h.advance(h.config.group_initial_rebalance_delay_ms * 2)
    responses = [h.reply(rid) for rid, _ in joins]
    assert all(r.error is E.NONE for r in responses), responses
    generation = responses[0].generation_id
    leader = responses[0].leader
    h.sync(group, leader, generation, {m: m.encode() for _, m in joins})
    for _, member in joins:
        if member != leader:
            h.sync(group, member, generation)
    assert h.coordinator.group_view(group).state == "Stable"
    return [m for _, m in joins], generation


def test_empty_group_id_is_invalid():
    h = make()
    assert h.reply(h.join("")).error is E.INVALID_GROUP_ID


def test_session_timeout_outside_bounds_is_rejected():
    h = make()
    assert h.reply(h.join("g", session=5999)).error is E.INVALID_SESSION_TIMEOUT
    assert h.reply(h.join("g", session=1_800_001)).error is E.INVALID_SESSION_TIMEOUT
    assert h.coordinator.group_view("g") is None


def test_unknown_member_id_on_missing_group():
    h = make()
    assert h.reply(h.join("g", "ghost")).error is E.UNKNOWN_MEMBER_ID
    assert h.coordinator.group_view("g") is None


def test_empty_protocol_type_or_list_is_inconsistent():
    h = make()
    assert h.reply(h.join("g", protocol_type="")).error is E.INCONSISTENT_GROUP_PROTOCOL
    assert h.reply(h.join("g", protocols=())).error is E.INCONSISTENT_GROUP_PROTOCOL


def test_v4_dynamic_member_gets_member_id_required_then_joins():
    h = make()
    response = h.reply(h.join("g", client_id="app"))
    assert response.error is E.MEMBER_ID_REQUIRED
    assert response.member_id == f"app-{nth_uuid(1)}"
    assert h.coordinator.group_view("g").members == ()
    rid = h.join("g", response.member_id, client_id="app")
    assert h.reply(rid) is None  # parked during the initial delay
    h.advance(3000)
    joined = h.reply(rid)
    assert joined.error is E.NONE and joined.generation_id == 1
    member_id = f"app-{nth_uuid(1)}"
    assert joined.leader == member_id and [m.member_id for m in joined.members] == [member_id]
    assert joined.protocol_name == "range"


def test_v3_member_joins_without_member_id_round_trip():
    h = make()
    rid = h.join("g", version=3, client_id="old")
    h.advance(3000)
    assert h.reply(rid).member_id == f"old-{nth_uuid(1)}" and h.reply(rid).error is E.NONE


def test_pending_member_blocks_join_completion_and_expires_after_session():
    h = make(group_initial_rebalance_delay_ms=0)
    (members, generation) = stable(h, "g", 1)
    # A new member asks for an id but never comes back.
    assert h.reply(h.join("g", session=10_000)).error is E.MEMBER_ID_REQUIRED
    rejoin = h.join("g", members[0])  # the leader's rejoin starts a rebalance
    assert h.reply(rejoin) is None, "the pending member blocks completion"
    h.advance(10_000)  # pending member expires after its session timeout
    assert h.reply(rejoin).error is E.NONE
    assert h.reply(rejoin).generation_id == generation + 1


def test_dead_group_answers_coordinator_not_available():
    h = make()
    h.commit("g", {("t", 0): 1})
    h.auto_complete = False
    from kgroups.coordinator import DeleteGroupsRequest

    h.absorb(h.coordinator.delete_groups(DeleteGroupsRequest(h.rid(), ("g",)), h.now))
    assert h.coordinator.group_view("g").state == "Dead"
    assert h.reply(h.join("g")).error is E.COORDINATOR_NOT_AVAILABLE


def test_protocol_not_supported_by_every_member_is_inconsistent():
    h = make()
    stable(h, "g", 1)
    other = (("roundrobin", subscription("t")),)
    assert h.reply(h.join("g", protocols=other)).error is E.INCONSISTENT_GROUP_PROTOCOL
    wrong_type = h.join("g", protocol_type="connect")
    assert h.reply(wrong_type).error is E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_selection_by_votes():
    h = make()
    sub = subscription("t")
    a = h.join_dynamic("g", protocols=(("range", sub), ("roundrobin", sub)))
    b = h.join_dynamic("g", protocols=(("roundrobin", sub), ("range", sub)))
    c = h.join_dynamic("g", protocols=(("roundrobin", sub), ("sticky", sub), ("range", sub)))
    h.advance(6000)
    assert {h.reply(rid).protocol_name for rid, _ in (a, b, c)} == {"roundrobin"}


def test_protocol_vote_tie_goes_as_in_kafka_hash_map_order():
    """One vote each for roundrobin, sticky and range: Kafka keeps the first of the tied names
    in its HashMap's iteration order, which is "sticky" (checked against Kafka 4.3.1 in
    tests/differential), not the alphabetical "range"."""
    h = make()
    sub = subscription("t")
    preferences = (("roundrobin", "range", "sticky"), ("sticky", "roundrobin", "range"),
                   ("range", "roundrobin", "sticky"))
    joins = [h.join_dynamic("g", protocols=tuple((name, sub) for name in order))
             for order in preferences]
    h.advance(6000)
    assert {h.reply(rid).protocol_name for rid, _ in joins} == {"sticky"}


def test_group_max_size_counts_awaiting_members_while_preparing():
    h = make(group_max_size=2)
    a = h.join_dynamic("g")
    b = h.join_dynamic("g")
    assert h.reply(h.join("g")).error is E.GROUP_MAX_SIZE_REACHED
    h.advance(6000)
    assert h.reply(a[0]).error is E.NONE and h.reply(b[0]).error is E.NONE
    # Once formed, the cap counts all members.
    assert h.reply(h.join("g")).error is E.GROUP_MAX_SIZE_REACHED
    assert len(h.coordinator.group_view("g").members) == 2


def test_group_loaded_over_max_size_is_forced_to_rebalance():
    h = make()
    stable(h, "g", 3)
    capped = _load_with(h, GroupCoordinatorConfig(offsets_topic_num_partitions=4, group_max_size=2))
    assert capped.group_view("g").state == "PreparingRebalance"


def _load_with(h: Harness, config: GroupCoordinatorConfig):
    from kgroups.coordinator import GroupCoordinator

    fresh = GroupCoordinator(config, new_uuid=counting_uuids())
    for partition in range(config.offsets_topic_num_partitions):
        fresh.load_partition(partition, h.log.get(partition, []), h.now)
    return fresh


def test_existing_member_in_preparing_rebalance_is_updated_and_waits():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    first = h.join("g", a)  # leader rejoin -> PreparingRebalance
    assert h.coordinator.group_view("g").state == "PreparingRebalance"
    new_sub = (("range", subscription("t", "u")),)
    second = h.join("g", b, protocols=new_sub)
    response = h.reply(first)
    assert response.generation_id == generation + 1
    assert h.reply(second).generation_id == generation + 1
    assert {m.metadata for m in response.members} >= {subscription("t", "u")}


def test_completing_rebalance_same_protocols_resends_current_generation():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    h.join("g", a)
    h.join("g", b)
    assert h.coordinator.group_view("g").state == "CompletingRebalance"
    again = h.reply(h.join("g", a))
    assert again.error is E.NONE and again.generation_id == generation + 1
    assert len(again.members) == 2, "the leader gets the member list again"
    follower = h.reply(h.join("g", b))
    assert follower.members == () and follower.generation_id == generation + 1
    assert h.coordinator.group_view("g").state == "CompletingRebalance"


def test_completing_rebalance_changed_protocols_triggers_rebalance():
    h = make()
    (a, b), _ = stable(h, "g", 2)
    h.join("g", a)
    h.join("g", b)
    h.join("g", b, protocols=(("range", subscription("x")),))
    assert h.coordinator.group_view("g").state == "PreparingRebalance"


def test_stable_follower_unchanged_gets_current_generation_without_rebalance():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    response = h.reply(h.join("g", follower))
    assert response.error is E.NONE and response.generation_id == generation
    assert h.coordinator.group_view("g").state == "Stable"


def test_stable_leader_join_or_changed_metadata_triggers_rebalance():
    h = make()
    (a, b), _ = stable(h, "g", 2)
    leader = h.coordinator.group_view("g").leader
    h.join("g", leader)
    assert h.coordinator.group_view("g").state == "PreparingRebalance"
    h2 = make()
    (a, b), _ = stable(h2, "g", 2)
    follower = b if h2.coordinator.group_view("g").leader == a else a
    h2.join("g", follower, protocols=(("range", subscription("other")),))
    assert h2.coordinator.group_view("g").state == "PreparingRebalance"


def test_member_id_on_empty_group_is_unknown():
    h = make()
    (a,), _ = stable(h, "g", 1)
    h.leave("g", _identity(a))
    h.advance(30_000)
    assert h.coordinator.group_view("g").state == "Empty"
    assert h.reply(h.join("g", a)).error is E.UNKNOWN_MEMBER_ID


def _identity(member_id: str, instance: str | None = None):
    from kgroups.coordinator import MemberIdentity

    return MemberIdentity(member_id, instance)


def test_rebalance_timeout_is_max_over_members():
    h = make()
    (a, b), generation = stable(h, "g", 2, session=60_000)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    changed = (("range", subscription("t", "u")),)
    rid = h.join("g", follower, rebalance=50_000, protocols=changed, session=60_000)
    h.advance(49_999)
    assert h.reply(rid) is None, "the join phase lasts the largest rebalance timeout"
    h.advance(1)
    assert h.reply(rid).generation_id == generation + 1
    assert [m.member_id for m in h.reply(rid).members] == [follower]


def test_initial_delay_extends_while_members_keep_joining():
    h = make(group_initial_rebalance_delay_ms=3000)
    first, _ = h.join_dynamic("g", rebalance=10_000)  # delay 3000, remaining 7000
    h.advance(2000)
    h.join_dynamic("g", rebalance=10_000)
    h.advance(1000)  # t=3000: a member joined -> re-arm min(3000, 7000); remaining 4000
    assert h.reply(first) is None
    h.advance(2999)
    assert h.reply(first) is None
    h.advance(1)  # t=6000: nobody new -> complete
    assert h.reply(first).generation_id == 1 and len(h.reply(first).members) == 2


def test_initial_delay_stops_extending_when_remaining_is_used_up():
    h = make(group_initial_rebalance_delay_ms=3000)
    first, _ = h.join_dynamic("g", rebalance=4000)  # delay 3000, remaining 1000
    for _ in range(3):
        h.advance(1000)
        h.join_dynamic("g", rebalance=4000)
    # t=3000 re-arm with min(3000, 1000)=1000 and remaining max(1000-3000, 0)=0; t=4000 done.
    h.advance(1000)
    assert h.reply(first) is not None and h.reply(first).error is E.NONE


def test_all_joined_does_not_cut_the_initial_delay_short():
    h = make(group_initial_rebalance_delay_ms=3000)
    rid, _ = h.join_dynamic("g")
    h.advance(2999)
    assert h.reply(rid) is None
    h.advance(1)
    assert h.reply(rid).error is E.NONE


def test_join_completion_drops_silent_dynamic_members_and_keeps_static_ones():
    h = make()
    a, a_id = h.join_dynamic("g", session=60_000)
    _b, b_id = h.join_dynamic("g", session=60_000)
    s = h.join("g", instance="static-1", session=60_000)
    h.advance(6000)
    generation = h.reply(a).generation_id
    leader = h.reply(a).leader
    h.sync("g", leader, generation)
    for member in (a_id, b_id, h.reply(s).member_id):
        if member != leader:
            h.sync("g", member, generation)
    rejoin = h.join("g", a_id, protocols=(("range", subscription("t", "u")),), session=60_000)
    h.advance(30_000)
    response = h.reply(rejoin)
    assert response.generation_id == generation + 1
    members = {m.member_id for m in h.coordinator.group_view("g").members}
    assert a_id in members and b_id not in members and h.reply(s).member_id in members


def test_leader_that_did_not_rejoin_is_replaced():
    h = make()
    (a, b), _generation = stable(h, "g", 2, session=60_000)
    leader = h.coordinator.group_view("g").leader
    follower = b if leader == a else a
    rid = h.join("g", follower, protocols=(("range", subscription("new")),))
    h.advance(30_000)
    assert h.reply(rid).leader == follower
    assert h.coordinator.group_view("g").leader == follower


def test_no_members_left_goes_empty_with_next_generation_persisted():
    h = make()
    (a,), generation = stable(h, "g", 1)
    h.leave("g", _identity(a))
    h.advance(30_000)
    view = h.coordinator.group_view("g")
    assert view.state == "Empty" and view.generation == generation + 1
    assert h.replayed().group_view("g") == view


def test_pending_sync_timeout_removes_members_that_never_sync():
    h = make()
    (a, b), generation = stable(h, "g", 2, session=60_000)
    h.join("g", a, session=60_000)
    h.join("g", b, session=60_000)
    leader = h.coordinator.group_view("g").leader
    h.sync("g", leader, generation + 1, {leader: b"x"})
    h.advance(30_000)
    view = h.coordinator.group_view("g")
    assert [m.member_id for m in view.members] == [leader]
    assert view.state == "PreparingRebalance"


def test_new_member_still_waiting_after_join_timeout_gets_unknown_member_id():
    h = make(group_new_member_join_timeout_ms=300_000)
    # A member that does not rejoin (long session) keeps the join phase open for a long time.
    (a, _b), _generation = stable(h, "g", 2, session=400_000)
    rid = h.join("g", a, rebalance=600_000, session=400_000)
    late, late_id = h.join_dynamic("g", rebalance=600_000, session=400_000)
    h.advance(300_000)
    assert h.reply(late).error is E.UNKNOWN_MEMBER_ID
    assert late_id not in {m.member_id for m in h.coordinator.group_view("g").members}
    assert h.reply(rid) is None


def test_join_response_is_released_once_all_members_rejoin():
    h = make()
    (a, b), generation = stable(h, "g", 2)
    first = h.join("g", a)
    assert h.reply(first) is None
    second = h.join("g", b)
    assert h.reply(first).generation_id == h.reply(second).generation_id == generation + 1
    assert isinstance(h.reply(first), JoinGroupResponse)
