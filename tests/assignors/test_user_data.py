"""Sticky user data is byte-for-byte Java's StickyAssignorUserData (checked against kafka-python's
schema-driven encoder of the same schema), and bad bytes never break a rebalance."""

from __future__ import annotations

import struct
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

from kgroups.assignors import MemberSubscription, StickyAssignor, user_data
from kgroups.assignors.model import ClusterMetadata
from kgroups.assignors.space import PartitionSpace
from kgroups.assignors.user_data import (
    UserDataError,
    decode_generation,
    decode_sticky_user_data,
    encode_generation,
    encode_sticky_user_data,
    encode_sticky_user_data_of_group,
    sticky_claims,
)

assignments = st.dictionaries(
    st.text(min_size=1, max_size=12),
    st.lists(st.integers(0, 2**31 - 1), unique=True, min_size=1, max_size=6).map(sorted),
    max_size=5,
)


@given(assignments, st.integers(-1, 2**31 - 1))
def test_layout_matches_the_java_schema(assignment: dict, generation: int) -> None:
    ours = encode_sticky_user_data(assignment, generation)
    reference = StickyAssignorUserData(sorted(assignment.items()), generation).encode(
        version=1, header=False
    )
    assert ours == reference
    decoded = decode_sticky_user_data(ours)
    assert decoded.previous_assignment == {t: tuple(p) for t, p in assignment.items()}
    assert decoded.generation == generation


unsorted_assignments = st.dictionaries(
    st.text(max_size=12), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6), max_size=5
)


@given(
    st.lists(st.tuples(unsorted_assignments, st.integers(-(2**31), 2**31 - 1)), max_size=6),
    st.integers(1, 8),
)
def test_a_whole_group_is_written_as_each_member_writes_its_own(
    members: list, entries_at_once: int
) -> None:
    """`assign_scenario` writes every member's user data in one go (in slices of a few
    entries here); each blob is still the Java layout of that member's own history, topics in
    name order and partitions ascending whatever order they were given in."""
    with patch.object(user_data, "_ENTRIES_AT_ONCE", entries_at_once):
        blobs = encode_sticky_user_data_of_group([a for a, _ in members], [g for _, g in members])
    for (assignment, generation), blob in zip(members, blobs, strict=True):
        entries = sorted((topic, sorted(parts)) for topic, parts in assignment.items())
        reference = StickyAssignorUserData(entries, generation).encode(version=1, header=False)
        assert blob == reference == encode_sticky_user_data(assignment, generation)


def test_version_0_has_no_generation_and_reads_as_none() -> None:
    v0 = StickyAssignorUserData([("t", [3, 1])], -1).encode(version=0, header=False)
    decoded = decode_sticky_user_data(v0)
    assert decoded.previous_assignment == {"t": (3, 1)}
    assert decoded.generation == -1


def test_kafka_python_version_prefixed_form_is_read() -> None:
    prefixed = StickyAssignorUserData([("t", [0, 2])], 9).encode()
    assert prefixed[:2] == b"\x00\x01"
    assert decode_sticky_user_data(prefixed).previous_assignment == {"t": (0, 2)}
    assert decode_sticky_user_data(prefixed).generation == 9


@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00\x00", b"\x00\x00\x00\x01\x00\x05ab", b"\xff\xff\xff\xff", b"\x00" * 4 + b"xyz"],
)
def test_garbage_is_a_user_data_error(garbage: bytes) -> None:
    with pytest.raises(UserDataError):
        decode_sticky_user_data(garbage)


def test_a_topic_name_that_is_not_utf8_is_a_user_data_error() -> None:
    blob = b"\x00\x00\x00\x01\x00\x02\xff\xfe\x00\x00\x00\x00"
    with pytest.raises(UserDataError, match="UTF-8"):
        decode_sticky_user_data(blob)


def test_a_member_with_garbage_user_data_still_gets_partitions() -> None:
    members = [
        MemberSubscription.of("m1", ["t"], user_data=b"\x01\x02\x03"),
        MemberSubscription.of("m2", ["t"], user_data=encode_sticky_user_data({"t": [0, 1]}, 3)),
    ]
    result = StickyAssignor().assign(ClusterMetadata({"t": 2}), members).as_dict()
    assert result == {"m1": {"t": [1]}, "m2": {"t": [0]}}


def test_sticky_member_reports_what_it_was_given() -> None:
    assignor = StickyAssignor()
    assert assignor.subscription_user_data(frozenset({"t"})) is None
    assignor.on_assignment({"t": [4, 2]}, 12)
    decoded = decode_sticky_user_data(assignor.subscription_user_data(frozenset({"t"})) or b"")
    assert decoded.previous_assignment == {"t": (2, 4)}
    assert decoded.generation == 12


def test_cooperative_generation_is_one_int32() -> None:
    assert encode_generation(7) == struct.pack(">i", 7)
    assert decode_generation(encode_generation(-1)) == -1
    with pytest.raises(UserDataError):
        decode_generation(b"\x00")


blobs = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.tuples(assignments, st.integers(-1, 99)),
)


@given(st.lists(blobs, max_size=8))
def test_whole_group_parse_matches_each_members_data(members: list) -> None:
    """The leader's lockstep parse of every blob equals reading each blob on its own, and a
    garbled blob only loses its own member's history."""
    encoded = [encode_sticky_user_data(*m) if isinstance(m, tuple) else m for m in members]
    topics = sorted({t for m in members if isinstance(m, tuple) for t in m[0]} | {"other"})
    space = PartitionSpace.build(
        ClusterMetadata(dict.fromkeys(topics, 2**31 - 1)), [MemberSubscription.of("m", topics)]
    )
    claims, unreadable = sticky_claims(space, encoded)
    for i, blob in enumerate(encoded):
        rows = claims.member == i
        got = sorted(zip(claims.topic[rows].tolist(), claims.partition[rows].tolist(), strict=True))
        try:
            expected_data = decode_sticky_user_data(blob) if blob else None
        except UserDataError:
            expected_data = None
            assert unreadable[i]
        expected = sorted(
            (space.index[t], p)
            for t, parts in (expected_data.previous_assignment if expected_data else {}).items()
            for p in parts
        )
        assert got == expected
        if isinstance(members[i], tuple):
            original = sorted((space.index[t], p) for t, ps in members[i][0].items() for p in ps)
            assert got == original
            assert claims.generation[i] == members[i][1]
