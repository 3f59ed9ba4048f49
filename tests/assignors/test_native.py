"""The compiled sticky steps (native/sticky_assign, built by `make install`) give exactly what
their Python references give: the same user data bytes, the same claim rows in the same order,
the same per-member dicts in the same key order, and so the same `kgroups assign` output."""

from __future__ import annotations

import json
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

from kgroups.assignors import ClusterMetadata, MemberSubscription, create_assignor, sticky_native
from kgroups.assignors.claims import claims_from_mappings, claims_from_mappings_in_python
from kgroups.assignors.scenario import all_well_formed_in_python, assign_scenario
from kgroups.assignors.space import GroupAssignment, PartitionSpace
from kgroups.assignors.user_data import (
    encode_sticky_user_data,
    encode_sticky_user_data_of_group_in_python,
    sticky_claims,
    sticky_claims_in_python,
)

compiled = pytest.importorskip(
    "kgroups_sticky_assign", reason="the compiled sticky steps are built by `make install`"
)

int32s = st.integers(-(2**31), 2**31 - 1)
histories = st.dictionaries(
    st.text(max_size=8), st.lists(int32s, max_size=6), max_size=5
)


@given(st.lists(st.tuples(histories, int32s), max_size=8))
def test_user_data_bytes_are_the_python_references(members: list) -> None:
    assignments = [a for a, _ in members]
    generations = [g for _, g in members]
    reference = encode_sticky_user_data_of_group_in_python(assignments, generations)
    assert compiled.encode_sticky_user_data_of_group(assignments, generations) == reference
    # Tuples (what a member's own assignor keeps) and read-only mappings write the same.
    as_tuples = [MappingProxyType({t: tuple(p) for t, p in a.items()}) for a in assignments]
    assert compiled.encode_sticky_user_data_of_group(as_tuples, generations) == reference


@pytest.mark.parametrize(
    ("assignment", "generation"), [({"t": [2**31]}, 1), ({"t": [-(2**31) - 1]}, 1), ({}, 2**31)]
)
def test_out_of_int32_is_an_overflow_on_both_paths(assignment: dict, generation: int) -> None:
    for encode in (encode_sticky_user_data_of_group_in_python,
                   compiled.encode_sticky_user_data_of_group):
        with pytest.raises(OverflowError):
            encode([assignment], [generation])


# A few names, so that blobs and the partition space share some: one a prefix of another, one
# not ASCII, one ending in NUL, and the empty name.
topic_names = st.sampled_from(["a", "b", "ab", "\u00e9t\u00e9", "a\x00", ""])
sorted_histories = st.dictionaries(
    topic_names,
    st.lists(st.integers(0, 2**31 - 1), unique=True, max_size=6).map(sorted),
    max_size=5,
)


def _kafka_python_form(history: dict, generation: int) -> bytes:
    """kafka-python's encoding: the Java layout behind an int16 schema version."""
    return StickyAssignorUserData(sorted(history.items()), generation).encode()


blobs = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.tuples(sorted_histories, int32s).map(lambda m: encode_sticky_user_data(*m)),
    st.tuples(sorted_histories, int32s).map(lambda m: _kafka_python_form(*m)),
    # A well-formed blob cut short or with bytes left over.
    st.tuples(sorted_histories, st.integers(-6, 6)).map(
        lambda m: (lambda b: b[: len(b) + m[1]] if m[1] < 0 else b + b"\x00" * m[1])(
            encode_sticky_user_data(m[0], 3)
        )
    ),
)


@given(st.lists(blobs, max_size=8), st.sets(topic_names))
def test_claims_are_the_python_references_rows(members: list, topics: set) -> None:
    """Every column, row for row, and the unreadable flags; names the space lacks read as
    -1 on both paths."""
    space = PartitionSpace.build(
        ClusterMetadata(dict.fromkeys(topics, 5)), [MemberSubscription.of("m", topics)]
    )
    claims, unreadable = sticky_claims(space, members)
    reference, reference_unreadable = sticky_claims_in_python(space, members)
    for column in ("member", "topic", "partition", "generation"):
        assert np.array_equal(getattr(claims, column), getattr(reference, column)), column
    assert np.array_equal(unreadable, reference_unreadable)


@settings(max_examples=200)
@given(
    st.lists(st.integers(1, 7), min_size=1, max_size=6),
    st.integers(1, 6),
    st.randoms(use_true_random=False),
)
def test_per_member_dicts_are_the_python_references(
    counts: list, member_count: int, random
) -> None:
    topics = [f"t{i}" for i in range(len(counts))]
    space = PartitionSpace.build(
        ClusterMetadata(dict(zip(topics, counts, strict=True))),
        [MemberSubscription.of("m", topics)],
    )
    owner = np.array([random.randrange(-1, member_count) for _ in range(space.size)], np.int32)
    ids = [f"member-{random.randrange(100)}-{i}" for i in range(member_count)]
    assignment = GroupAssignment(space, ids, owner)
    ours, reference = assignment.as_dict(), assignment.all_grouped_in_python(owner)
    assert json.dumps(ours) == json.dumps(reference)


def _one_joins(topic_count: int, partitions: int, consumers: int, strategy: str) -> dict:
    """The benchmark's shape at a smaller scale: every member with the partitions a fresh
    assignment gave it, in generation 7, and one new member."""
    topics = [f"topic-{i:03d}" for i in range(topic_count)]
    fresh = [MemberSubscription.of(f"consumer-{i:04d}", topics) for i in range(consumers)]
    cluster = ClusterMetadata(dict.fromkeys(topics, partitions))
    previous = create_assignor(strategy).assign(cluster, fresh).as_dict()
    members: dict = {
        member_id: {"topics": topics, "owned": owned, "generation": 7}
        for member_id, owned in previous.items()
    }
    members["consumer-new"] = {"topics": topics[: topic_count // 2]}
    return {"topics": dict.fromkeys(topics, partitions), "members": members}


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_assign_scenario_output_is_the_python_paths(strategy: str, monkeypatch) -> None:
    """`kgroups assign` prints the same JSON, byte for byte, with or without the compiled
    steps (an unequal subscription, so sticky's general path runs too)."""
    scenario = _one_joins(40, 150, 120, strategy)
    ours = json.dumps(assign_scenario(strategy, scenario, compare=True))
    monkeypatch.setattr(sticky_native, "compiled", None)
    assert json.dumps(assign_scenario(strategy, scenario, compare=True)) == ours


class _DictSubclass(dict):
    pass


names = st.sampled_from(["a", "b", "c"])
maybe_ints = st.one_of(
    st.integers(-(2**31) - 1, 2**31), st.booleans(), st.integers(2**63, 2**64), st.just(1.0)
)
member_specs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "topics": st.one_of(st.lists(names, max_size=3), st.lists(maybe_ints, max_size=2),
                                st.tuples(names), st.none()),
            "owned": st.one_of(
                st.dictionaries(names, st.lists(maybe_ints, max_size=3), max_size=3),
                st.dictionaries(names, st.tuples(st.integers(0, 3)), max_size=2),
                st.none(),
            ),
            "generation": st.one_of(maybe_ints, st.none(), st.text(max_size=1)),
            "rack": st.one_of(st.none(), names, st.integers(0, 1)),
            "instance_id": st.one_of(st.none(), names, st.integers(0, 1)),
        },
    ),
    st.builds(_DictSubclass, topics=st.lists(names, min_size=1)),
    st.lists(names, max_size=1),
)


@settings(max_examples=500)
@given(st.lists(member_specs, min_size=1, max_size=4), st.sets(names))
def test_member_checks_are_the_python_references(specs: list, known: set) -> None:
    """The whole-group check that lets a scenario skip checking members one by one says yes
    to exactly the groups the Python reference says yes to."""
    assert compiled.all_members_well_formed(specs, known) == all_well_formed_in_python(
        specs, known
    )


@given(
    st.lists(
        st.one_of(
            st.dictionaries(topic_names, st.lists(int32s, max_size=4), max_size=4),
            st.dictionaries(topic_names, st.tuples(st.integers(0, 9)), max_size=2).map(
                MappingProxyType
            ),
        ),
        max_size=6,
    ),
    st.sets(topic_names),
)
def test_owned_partition_claims_are_the_python_references_rows(owned: list, topics: set) -> None:
    """Cooperative members' owned partitions read into the same claim rows, in the same order
    (names the space lacks as -1, nothing owned as no claims with no generations)."""
    space = PartitionSpace.build(
        ClusterMetadata(dict.fromkeys(topics, 5)), [MemberSubscription.of("m", topics)]
    )
    generations = list(range(len(owned)))
    claims = claims_from_mappings(space, owned, generations)
    reference = claims_from_mappings_in_python(space, owned, generations)
    for column in ("member", "topic", "partition", "generation"):
        assert np.array_equal(getattr(claims, column), getattr(reference, column)), column
