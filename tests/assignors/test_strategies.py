"""Behaviour of each strategy beyond the seed's examples: racks, static members, generations,
topics without metadata, the registry."""

from __future__ import annotations

import numpy as np
import pytest

from kgroups.assignors import (
    AssignmentInputError,
    ClusterMetadata,
    CooperativeStickyAssignor,
    GroupAssignment,
    MemberSubscription,
    PartitionAssignor,
    RangeAssignor,
    RebalanceProtocol,
    StickyAssignor,
    assign_scenario,
    choose_strategy,
    create_assignor,
    interface,
    register_assignor,
    registered_names,
)
from kgroups.assignors.space import PartitionSpace


def _assignment(strategy: str, topics: dict, members: dict) -> dict:
    return assign_scenario(strategy, {"topics": topics, "members": members})["assignment"]


def test_range_prefers_partitions_with_a_replica_in_the_members_rack() -> None:
    topics = {"t": {"partitions": 4, "racks": [["a"], ["b"], ["a"], ["b"]]}}
    racked = {"m1": {"topics": ["t"], "rack": "a"}, "m2": {"topics": ["t"], "rack": "b"}}
    assert _assignment("range", topics, racked) == {"m1": {"t": [0, 2]}, "m2": {"t": [1, 3]}}
    unracked = {"m1": {"topics": ["t"]}, "m2": {"topics": ["t"]}}
    assert _assignment("range", topics, unracked) == {"m1": {"t": [0, 1]}, "m2": {"t": [2, 3]}}


def test_range_keeps_co_partitioned_topics_aligned_under_racks() -> None:
    racks = [["a"], ["b"], ["a"], ["b"]]
    topics = {
        "orders": {"partitions": 4, "racks": racks},
        "users": {"partitions": 4, "racks": racks},
    }
    members = {m: {"topics": ["orders", "users"], "rack": r} for m, r in (("m1", "a"), ("m2", "b"))}
    result = _assignment("range", topics, members)
    assert result["m1"] == {"orders": [0, 2], "users": [0, 2]}
    assert result["m2"] == {"orders": [1, 3], "users": [1, 3]}


def test_range_fills_quotas_when_racks_cannot_all_match() -> None:
    topics = {"t": {"partitions": 3, "racks": [["a"], ["a"], ["a"]]}}
    members = {"m1": {"topics": ["t"], "rack": "a"}, "m2": {"topics": ["t"], "rack": "b"}}
    assert _assignment("range", topics, members) == {"m1": {"t": [0, 1]}, "m2": {"t": [2]}}


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_static_members_come_before_dynamic_ones_by_instance_id(strategy: str) -> None:
    members = {
        "a-dynamic": {"topics": ["t"]},
        "z-static": {"topics": ["t"], "instance_id": "i-1"},
    }
    result = _assignment(strategy, {"t": 3}, members)
    assert len(result["z-static"]["t"]) == 2
    assert result["z-static"]["t"][0] == 0


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_sticky_orders_members_by_member_id_even_when_static(strategy: str) -> None:
    """Kafka's sticky assignors never look at group.instance.id: a Java leader gives the extra
    partition to the first member id, static or not, and so does kgroups."""
    members = {
        "a-dynamic": {"topics": ["t"]},
        "z-static": {"topics": ["t"], "instance_id": "i-1"},
    }
    assert _assignment(strategy, {"t": 3}, members) == {
        "a-dynamic": {"t": [0, 2]},
        "z-static": {"t": [1]},
    }


def test_topics_without_metadata_are_skipped() -> None:
    cluster = ClusterMetadata({"known": 2})
    members = [MemberSubscription.of("m", ["known", "not-yet-created"])]
    for name in ("range", "roundrobin", "sticky", "cooperative-sticky", "uniform"):
        result = create_assignor(name).assign(cluster, members)
        assert result.as_dict() == {"m": {"known": [0, 1]}}


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_higher_generation_wins_a_contested_partition(strategy: str) -> None:
    members = {
        "m1": {"topics": ["t"], "owned": {"t": [0, 1]}, "generation": 5},
        "m2": {"topics": ["t"], "owned": {"t": [1]}, "generation": 4},
    }
    result = assign_scenario(strategy, {"topics": {"t": 2}, "members": members})
    assert result["assignment"]["m1"] == {"t": [0]}
    if strategy == "cooperative-sticky":
        # m1 holds t1 at the newer generation, so the move to m2 is staged.
        assert result["revoked"]["m1"] == {"t": [1]}
        assert result["assignment"]["m2"] == {}
    else:
        assert result["assignment"]["m2"] == {"t": [1]}


def test_equal_generations_claiming_one_partition_both_lose_it() -> None:
    members = {
        "m1": {"topics": ["t"], "owned": {"t": [0, 1, 2]}, "generation": 5},
        "m2": {"topics": ["t"], "owned": {"t": [2, 3]}, "generation": 5},
        "m3": {"topics": ["t"]},
    }
    result = assign_scenario("cooperative-sticky", {"topics": {"t": 6}, "members": members})
    # Partition 2 has no trusted owner, and both claimers may still be reading it: as in Kafka,
    # nobody gets it this round, both revoke it, and the follow-up rebalance places it.
    assert result["assignment"] == {"m1": {"t": [0, 1]}, "m2": {"t": [3]}, "m3": {"t": [4, 5]}}
    assert result["revoked"] == {"m1": {"t": [2]}, "m2": {"t": [2]}, "m3": {}}
    follow_up = {
        "m1": {"topics": ["t"], "owned": {"t": [0, 1]}, "generation": 6},
        "m2": {"topics": ["t"], "owned": {"t": [3]}, "generation": 6},
        "m3": {"topics": ["t"], "owned": {"t": [4, 5]}, "generation": 6},
    }
    assert assign_scenario("cooperative-sticky", {"topics": {"t": 6}, "members": follow_up})[
        "assignment"] == {"m1": {"t": [0, 1]}, "m2": {"t": [2, 3]}, "m3": {"t": [4, 5]}}


def test_cooperative_stages_every_move_of_a_leaving_heavy_member() -> None:
    members = {
        "m1": {"topics": ["t"], "owned": {"t": [0, 1, 2, 3]}, "generation": 2},
        "m2": {"topics": ["t"], "generation": 2},
    }
    result = assign_scenario("cooperative-sticky", {"topics": {"t": 4}, "members": members})
    assert result["assignment"] == {"m1": {"t": [0, 1]}, "m2": {}}
    assert result["revoked"] == {"m1": {"t": [2, 3]}, "m2": {}}


def test_owned_partitions_of_unsubscribed_or_vanished_topics_are_dropped() -> None:
    members = {
        "m1": {"topics": ["a"], "owned": {"b": [0], "a": [7]}, "generation": 1},
        "m2": {"topics": ["a", "b"]},
    }
    result = assign_scenario("cooperative-sticky", {"topics": {"a": 2, "b": 1}, "members": members})
    assert result["revoked"] == {"m1": {}, "m2": {}}
    assert result["assignment"]["m2"]["b"] == [0]


def test_strategies_declare_their_protocols() -> None:
    assert create_assignor("cooperative-sticky").supported_protocols[0] is (
        RebalanceProtocol.COOPERATIVE
    )
    for name in ("range", "roundrobin", "sticky", "uniform"):
        assert create_assignor(name).supported_protocols == (RebalanceProtocol.EAGER,)


class _EverythingToFirst(PartitionAssignor):
    name = "everything-to-first"

    def assign(self, cluster, group_subscription):  # type: ignore[no-untyped-def]
        members = sorted(m.member_id for m in group_subscription)
        space = PartitionSpace.build(cluster, group_subscription)
        return GroupAssignment(space, members, np.zeros(space.size, dtype=np.int32))


def test_custom_assignors_are_found_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interface, "_REGISTRY", dict(interface._REGISTRY))
    register_assignor(_EverythingToFirst.name, _EverythingToFirst)
    members = {"b": {"topics": ["t"]}, "a": {"topics": ["t"]}}
    assert _assignment("everything-to-first", {"t": 2}, members) == {"a": {"t": [0, 1]}, "b": {}}
    assert "everything-to-first" in registered_names()


class _Forgetful(StickyAssignor):
    """A custom sticky variant whose members send no history."""

    name = "forgetful-sticky"

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        return None


def test_scenario_members_send_a_custom_strategys_own_user_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """assign_scenario writes the built-in sticky's user data for the whole group at once; a
    strategy of its own (here a sticky subclass) still gets what its instances write."""
    monkeypatch.setattr(interface, "_REGISTRY", dict(interface._REGISTRY))
    register_assignor(_Forgetful.name, _Forgetful)
    members = {
        "m1": {"topics": ["t"], "owned": {"t": [1]}, "generation": 3},
        "m2": {"topics": ["t"], "owned": {"t": [0]}, "generation": 3},
    }
    assert _assignment("sticky", {"t": 2}, members) == {"m1": {"t": [1]}, "m2": {"t": [0]}}
    assert _assignment(_Forgetful.name, {"t": 2}, members) == {"m1": {"t": [0]}, "m2": {"t": [1]}}


def test_unknown_strategy_is_a_clear_error() -> None:
    with pytest.raises(AssignmentInputError, match="unknown assignment strategy 'bogus'"):
        create_assignor("bogus")


def test_coordinator_choice_takes_the_most_first_votes_among_common_strategies() -> None:
    choice = choose_strategy(
        [["cooperative-sticky", "range"], ["range", "cooperative-sticky"], ["range"]]
    )
    assert choice == "range"
    assert choose_strategy([["sticky", "range"], ["sticky", "range"]]) == "sticky"
    with pytest.raises(AssignmentInputError, match="share no"):
        choose_strategy([["sticky"], ["range"]])


def test_a_member_listed_twice_is_rejected() -> None:
    cluster = ClusterMetadata({"t": 1})
    twice = [MemberSubscription.of("m", ["t"]), MemberSubscription.of("m", ["t"])]
    with pytest.raises(AssignmentInputError, match="appears twice"):
        RangeAssignor().assign(cluster, twice)


@pytest.mark.parametrize(
    "strategy", ["range", "roundrobin", "sticky", "cooperative-sticky", "uniform"]
)
def test_an_empty_group_or_unknown_topics_assign_nothing(strategy: str) -> None:
    assignor = create_assignor(strategy)
    assert assignor.assign(ClusterMetadata({"t": 3}), []).as_dict() == {}
    lonely = [MemberSubscription.of("m", ["missing"])]
    assert assignor.assign(ClusterMetadata({"t": 3}), lonely).as_dict() == {"m": {}}


def test_cooperative_reads_the_generation_from_user_data_for_old_subscriptions() -> None:
    """Subscriptions before v2 carry no generation; cooperative-sticky's own user data does."""
    cluster = ClusterMetadata({"t": 2})
    older = CooperativeStickyAssignor()
    older.on_assignment({"t": [0, 1]}, 5)
    members = [
        MemberSubscription.of(
            "m1", ["t"], {"t": [0, 1]}, user_data=older.subscription_user_data(frozenset({"t"}))
        ),
        MemberSubscription.of("m2", ["t"], {"t": [1]}, generation=4),
    ]
    result = CooperativeStickyAssignor().assign(cluster, members)
    # m1's generation 5 beats m2's 4, so m1 owns t-1 and must revoke it before m2 gets it.
    assert result.revoked("m1") == {"t": [1]}
    assert result.partitions("m1") == {"t": [0]}
    assert result.partitions("m2") == {}
    garbled = [members[0], MemberSubscription.of("m2", ["t"], user_data=b"\x01")]
    assert CooperativeStickyAssignor().assign(cluster, garbled).counts() == {"m1": 1, "m2": 0}


def test_a_rack_member_with_no_replica_racks_known_still_gets_its_range() -> None:
    topics = {"racked": {"partitions": 2, "racks": [["a"], ["b"]]}, "plain": 2}
    members = {
        "m1": {"topics": ["racked", "plain"], "rack": "a"},
        "m2": {"topics": ["racked", "plain"], "rack": "b"},
    }
    result = _assignment("range", topics, members)
    assert result == {"m1": {"plain": [0], "racked": [0]}, "m2": {"plain": [1], "racked": [1]}}


def test_registry_and_choice_reject_empty_input() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        register_assignor("", RangeAssignor)
    with pytest.raises(AssignmentInputError, match="no members"):
        choose_strategy([])


RACKED_TOPIC = {"t": {"partitions": 4, "racks": [["a"], ["b"], ["a"], ["b"]]}}


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_sticky_places_partitions_in_the_members_racks(strategy: str) -> None:
    """KIP-881 as Kafka applies it: a fresh group gets rack-local partitions (round-robin
    alone would give m1 partitions 0 and 2, both remote)."""
    members = {"m1": {"topics": ["t"], "rack": "b"}, "m2": {"topics": ["t"], "rack": "a"}}
    assert _assignment(strategy, RACKED_TOPIC, members) == {
        "m1": {"t": [1, 3]},
        "m2": {"t": [0, 2]},
    }


def test_cooperative_sticky_revokes_partitions_held_outside_the_members_rack() -> None:
    """Stickiness yields to locality: m1 (rack a) gives up partition 1 (only in rack b) and m2
    partition 2; each moves to the other member in the follow-up round."""
    members = {
        "m1": {"topics": ["t"], "rack": "a", "owned": {"t": [0, 1]}, "generation": 3},
        "m2": {"topics": ["t"], "rack": "b", "owned": {"t": [2, 3]}, "generation": 3},
    }
    result = assign_scenario("cooperative-sticky", {"topics": RACKED_TOPIC, "members": members})
    assert result["assignment"] == {"m1": {"t": [0]}, "m2": {"t": [3]}}
    assert result["revoked"] == {"m1": {"t": [1]}, "m2": {"t": [2]}}


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_sticky_with_unequal_subscriptions_places_partitions_in_the_members_racks(
    strategy: str,
) -> None:
    """Unequal subscriptions (Kafka's general path) are rack-aware too: `a` must take `y` and
    one of `x`, and takes the one in its rack, leaving `b` the one in its own (without racks
    `a`, first in member order, took `x` 1 once both held one)."""
    topics = {"x": {"partitions": 2, "racks": [["r1"], ["r2"]]},
              "y": {"partitions": 1, "racks": [["r1"]]}}
    members = {"a": {"topics": ["x", "y"], "rack": "r1"}, "b": {"topics": ["x"], "rack": "r2"}}
    assert _assignment(strategy, topics, members) == {"a": {"x": [0], "y": [0]},
                                                       "b": {"x": [1]}}


def test_sticky_with_unequal_subscriptions_moves_the_partitions_in_the_takers_rack() -> None:
    """When balancing moves partitions, the taker gets the ones in its rack: `a` (no rack)
    held all four of `x`; `c` (rack r1) takes two, the two with a replica in r1 (without racks
    the highest two, one of them remote); `b` reads `y` too and takes that."""
    topics = {"x": {"partitions": 4, "racks": [["r1", "r2"], ["r2"], ["r1", "r2"], ["r2"]]},
              "y": {"partitions": 1, "racks": [["r2"]]}}
    members = {
        "a": {"topics": ["x"], "owned": {"x": [0, 1, 2, 3]}, "generation": 1},
        "b": {"topics": ["x", "y"], "rack": "r2", "generation": 1},
        "c": {"topics": ["x"], "rack": "r1", "generation": 1},
    }
    assert _assignment("sticky", topics, members) == {"a": {"x": [1, 3]}, "b": {"y": [0]},
                                                      "c": {"x": [0, 2]}}


def test_sticky_with_unequal_subscriptions_and_seventy_racks_places_each_partition_locally(
) -> None:
    """More racks than one integer can hold as a bit set (their sets are then grouped row by
    row): member k is in rack (3k mod 70), the only rack with a replica of partition 3k mod 70,
    and gets that partition (without racks member k would get partition k)."""
    racks = [f"r{i:02d}" for i in range(70)]
    topics = {"x": {"partitions": 70, "racks": [[rack] for rack in racks]}, "y": 1}
    members: dict = {f"m{k:02d}": {"topics": ["x"], "rack": racks[3 * k % 70]}
                     for k in range(70)}
    members["n"] = {"topics": ["y"]}
    assignment = _assignment("sticky", topics, members)
    assert assignment["n"] == {"y": [0]}
    assert {m: a["x"] for m, a in assignment.items() if m != "n"} == {
        f"m{k:02d}": [3 * k % 70] for k in range(70)}
