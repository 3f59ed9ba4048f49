"""`assign_scenario`: run one strategy over a group described as plain JSON-shaped data.

This is what `kgroups assign` runs, and a convenient way to try strategies from a notebook.
Scenario shape (only a member's "topics" is required):

    {"topics": {"t1": 3, "t2": {"partitions": 2, "racks": [["a", "b"], ["c"]],
                                 "id": "Xr4Vm1dxQpKKg3sQ0pq6bw"}},
     "members": {"c1": {"topics": ["t1", "t2"], "owned": {"t1": [0]}, "generation": 4,
                        "rack": "a", "instance_id": "i-1"}}}

Each member's previous ownership reaches the strategy the way it would from a real member: the
member's own assignor instance is told about it (`on_assignment`) and its subscription carries
the resulting user data and owned partitions.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping
from itertools import chain
from typing import Any

import kgroups.assignors.sticky_native as sticky_native
from kgroups.assignors.interface import create_assignor
from kgroups.assignors.model import (
    NO_GENERATION,
    AssignmentInputError,
    ClusterMetadata,
    MemberSubscription,
)
from kgroups.assignors.space import PartitionSpace, collector_paused
from kgroups.assignors.sticky import StickyAssignor
from kgroups.assignors.user_data import encode_sticky_user_data_of_group

# Partition ids and generations are int32 on the wire, so no topic can have more partitions.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_PARTITIONS = INT32_MAX


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise AssignmentInputError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _lists_of_ints(values: Iterable[Any]) -> bool:
    """Every value a list of ints (bools excluded), checked by type over all of them at once:
    a scenario at Kafka's reference scale holds a million owned partitions."""
    lists = list(values)
    if not set(map(type, lists)) <= {list}:
        return False
    return set(map(type, chain.from_iterable(lists))) <= {int}


def parse_cluster(topics: Any) -> ClusterMetadata:
    _need(isinstance(topics, dict) and bool(topics), '"topics" must be a non-empty object')
    counts: dict[str, int] = {}
    racks: dict[str, tuple[frozenset[str], ...]] = {}
    ids: dict[str, uuid.UUID] = {}
    for topic, spec in topics.items():
        count: Any  # the scenario's JSON, checked just below
        if isinstance(spec, dict):
            count = spec.get("partitions")
            replica_racks = spec.get("racks")
            if spec.get("id") is not None:
                ids[topic] = _topic_id(topic, spec["id"])
        else:
            count, replica_racks = spec, None
        _need(
            _is_int(count) and 0 <= count <= MAX_PARTITIONS,
            f"topic {topic!r}: partitions must be an integer from 0 to {MAX_PARTITIONS}",
        )
        counts[topic] = count
        if replica_racks is not None:
            _need(
                isinstance(replica_racks, list)
                and len(replica_racks) == count
                and all(
                    isinstance(r, list) and all(isinstance(x, str) for x in r)
                    for r in replica_racks
                ),
                f"topic {topic!r}: racks must list one list of rack names per partition",
            )
            racks[topic] = tuple(frozenset(r) for r in replica_racks)
    return ClusterMetadata(counts, racks, ids)


def _topic_id(topic: str, text: Any) -> uuid.UUID:
    """A topic id as Kafka prints it (base64url of 16 bytes, e.g. kafka-topics --describe)
    or as a UUID string."""
    if isinstance(text, str):
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            if len(raw) == 16:
                return uuid.UUID(bytes=raw)
            return uuid.UUID(text)
        except ValueError:
            pass
    raise AssignmentInputError(f"topic {topic!r}: id must be a topic id as Kafka prints it")


def parse_members(member_specs: Any, cluster: ClusterMetadata) -> dict[str, MemberSubscription]:
    """Every member's subscription. The whole group is checked in a few passes over all its
    values at once (a scenario at Kafka's reference scale lists a million owned partitions);
    only when that finds a problem are members checked one by one, so the error names the
    first bad member and what is wrong with it."""
    _need(
        isinstance(member_specs, dict) and bool(member_specs),
        '"members" must be a non-empty object',
    )
    if not _all_well_formed(list(member_specs.values()), cluster):
        for member_id, spec in member_specs.items():
            _check_member(member_id, spec, cluster)
    return {
        member_id: MemberSubscription(
            member_id,
            frozenset(spec["topics"]),
            dict(spec.get("owned", {})),
            spec.get("generation", NO_GENERATION),
            spec.get("rack"),
            spec.get("instance_id"),
        )
        for member_id, spec in member_specs.items()
    }


def _all_well_formed(specs: list[Any], cluster: ClusterMetadata) -> bool:
    """True only if `_check_member` accepts every spec (by exact types, so it may refuse a
    spec that `_check_member` accepts, such as a dict subclass: that only costs the slow path).
    Decided by the compiled module where it is built, else by the Python reference."""
    known = {topic for topic, count in cluster.partition_counts.items() if count > 0}
    if sticky_native.compiled is not None:
        return bool(sticky_native.compiled.all_members_well_formed(specs, known))
    return all_well_formed_in_python(specs, known)


def all_well_formed_in_python(specs: list[Any], known: set[str]) -> bool:
    """`_all_well_formed` in Python: a few passes over all the group's values at once."""
    if not set(map(type, specs)) <= {dict}:
        return False
    topic_lists = [spec.get("topics") for spec in specs]
    owned = [spec.get("owned", {}) for spec in specs]
    generations = [spec.get("generation", NO_GENERATION) for spec in specs]
    names = [spec.get(key) for spec in specs for key in ("rack", "instance_id")]
    if not (
        set(map(type, topic_lists)) <= {list}
        and set(map(type, chain.from_iterable(topic_lists))) <= {str}
        and set(map(type, owned)) <= {dict}
        and set(map(type, generations)) <= {int}
        and set(map(type, names)) <= {str, type(None)}
        and _int32s(generations)
    ):
        return False
    if any(known.isdisjoint(topics) for topics in topic_lists):
        return False
    partition_lists = list(chain.from_iterable(map(dict.values, owned)))
    if not set(map(type, partition_lists)) <= {list}:
        return False
    partitions = list(chain.from_iterable(partition_lists))
    return set(map(type, partitions)) <= {int} and _int32s(partitions)


def _int32s(values: list[int]) -> bool:
    return not values or (min(values) >= INT32_MIN and max(values) <= INT32_MAX)


def _check_member(member_id: str, spec: Any, cluster: ClusterMetadata) -> None:
    """Raises AssignmentInputError naming what is wrong with this member's spec, if anything."""
    _need(isinstance(spec, dict), f"member {member_id!r} must be an object")
    topics = spec.get("topics")
    _need(
        isinstance(topics, list) and set(map(type, topics)) <= {str},
        f"member {member_id!r}: topics must be a list of topic names",
    )
    _need(
        any(cluster.partition_counts.get(t, 0) > 0 for t in topics),
        f"member {member_id!r} subscribes to no known topic with partitions ({topics})",
    )
    owned = spec.get("owned", {})
    _need(
        isinstance(owned, dict) and _lists_of_ints(owned.values()),
        f"member {member_id!r}: owned must map topic names to lists of partition numbers",
    )
    _need(
        _int32s(list(chain.from_iterable(owned.values()))),
        f"member {member_id!r}: owned partition numbers must be 32-bit integers",
    )
    generation = spec.get("generation", NO_GENERATION)
    _need(_is_int(generation), f"member {member_id!r}: generation must be an integer")
    _need(
        _int32s([generation]), f"member {member_id!r}: generation must be a 32-bit integer"
    )
    rack, instance_id = spec.get("rack"), spec.get("instance_id")
    _need(rack is None or isinstance(rack, str), f"member {member_id!r}: rack must be a string")
    _need(
        instance_id is None or isinstance(instance_id, str),
        f"member {member_id!r}: instance_id must be a string",
    )


def _as_members_would_send(
    strategy: str, members: list[MemberSubscription]
) -> list[MemberSubscription]:
    """Adds the user data each member's own assignor would put in its subscription, once told
    about the member's owned partitions (if any). The built-in `sticky` writes every member's
    at once (the bytes its instances write, a million topic entries at Kafka's reference
    scale); any other strategy, a replacement registered as "sticky" included, gets one
    instance per member as in a real group."""
    if type(create_assignor(strategy)) is StickyAssignor:
        histories = [member for member in members if member.owned]
        blobs = iter(
            encode_sticky_user_data_of_group(
                [member.owned for member in histories], [member.generation for member in histories]
            )
        )
        user_data = [next(blobs) if member.owned else None for member in members]
    else:
        user_data = [_user_data(strategy, member) for member in members]
    return [
        MemberSubscription(
            member.member_id,
            member.topics,
            member.owned,
            member.generation,
            member.rack,
            member.instance_id,
            data,
        )
        for member, data in zip(members, user_data, strict=True)
    ]


def _user_data(strategy: str, member: MemberSubscription) -> bytes | None:
    own_assignor = create_assignor(strategy)
    if member.owned:
        own_assignor.on_assignment(member.owned, member.generation)
    return own_assignor.subscription_user_data(member.topics)


def _moved(
    members: Mapping[str, MemberSubscription],
    space: PartitionSpace,
    assignment: Mapping[str, Mapping[str, list[int]]],
) -> int:
    """Previously owned partitions (that still exist) not kept by the member that owned them."""
    moved = 0
    for member_id, member in members.items():
        kept = assignment[member_id]
        for topic, partitions in member.owned.items():
            position = space.index.get(topic)
            count = 0 if position is None else int(space.counts[position])
            still_there = {p for p in partitions if 0 <= p < count}
            moved += len(still_there - set(kept.get(topic, ())))
    return moved


def assign_scenario(strategy: str, scenario: dict, compare: bool = False) -> dict:
    """Runs `strategy` over `scenario`; returns {"assignment": ...} plus "revoked" for
    cooperative strategies and, with `compare`, "balance" and "moved". Raises
    AssignmentInputError (a ValueError) with one clear sentence for any invalid input."""
    with collector_paused():
        return _assign_scenario(strategy, scenario, compare)


def _assign_scenario(strategy: str, scenario: dict, compare: bool) -> dict:
    create_assignor(strategy)
    _need(isinstance(scenario, dict), "the scenario must be a JSON object")
    cluster = parse_cluster(scenario.get("topics"))
    members = parse_members(scenario.get("members"), cluster)
    subscriptions = _as_members_would_send(strategy, list(members.values()))
    result = create_assignor(strategy).assign(cluster, subscriptions)

    output: dict[str, Any] = {"assignment": result.as_dict()}
    if result.revoked_from is not None:
        output["revoked"] = result.revoked_dict()
    if compare:
        counts = result.counts().values()
        output["balance"] = {"min": min(counts), "max": max(counts)}
        output["moved"] = _moved(members, result.space, output["assignment"])
    return output
