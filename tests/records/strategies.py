"""Hypothesis strategies for the record model, shared by the records and log tests."""

from __future__ import annotations

from hypothesis import strategies as st

from kgroups.records.schema import (
    ConsumerAssignment,
    ConsumerSubscription,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicPartitions,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=20)
BLOB = st.binary(max_size=40)

offset_commit_keys = st.builds(OffsetCommitKey, TEXT, TEXT, INT32, st.sampled_from([0, 1]))
group_metadata_keys = st.builds(GroupMetadataKey, TEXT)


@st.composite
def offset_commit_values(draw: st.DrawFn) -> tuple[OffsetCommitValue, int]:
    """A value and a version that can hold every field it sets."""
    version = draw(st.integers(0, 4))
    return (
        OffsetCommitValue(
            offset=draw(INT64),
            metadata=draw(TEXT),
            commit_timestamp=draw(INT64),
            leader_epoch=draw(INT32) if version >= 3 else -1,
            expire_timestamp=draw(INT64) if version == 1 else None,
        ),
        version,
    )


@st.composite
def group_metadata_values(draw: st.DrawFn) -> tuple[GroupMetadataValue, int]:
    version = draw(st.integers(0, 4))
    members = []
    for _ in range(draw(st.integers(0, 3))):
        session_timeout = draw(INT32)
        members.append(
            MemberMetadata(
                member_id=draw(TEXT),
                client_id=draw(TEXT),
                client_host=draw(TEXT),
                session_timeout=session_timeout,
                rebalance_timeout=draw(INT32) if version >= 1 else session_timeout,
                subscription=draw(BLOB),
                assignment=draw(BLOB),
                group_instance_id=draw(st.none() | TEXT) if version >= 3 else None,
            )
        )
    return (
        GroupMetadataValue(
            protocol_type=draw(TEXT),
            generation=draw(INT32),
            protocol=draw(st.none() | TEXT),
            leader=draw(st.none() | TEXT),
            current_state_timestamp=draw(INT64) if version >= 2 else -1,
            members=tuple(members),
        ),
        version,
    )


topic_partitions = st.builds(
    TopicPartitions, TEXT, st.lists(INT32, max_size=5).map(tuple)
)


@st.composite
def subscriptions(draw: st.DrawFn) -> ConsumerSubscription:
    version = draw(st.integers(0, 3))
    return ConsumerSubscription(
        topics=tuple(draw(st.lists(TEXT, max_size=4))),
        user_data=draw(st.none() | BLOB),
        owned_partitions=tuple(draw(st.lists(topic_partitions, max_size=3)))
        if version >= 1
        else (),
        generation_id=draw(INT32) if version >= 2 else -1,
        rack_id=draw(st.none() | TEXT) if version >= 3 else None,
        version=version,
    )


assignments = st.builds(
    ConsumerAssignment,
    st.lists(topic_partitions, max_size=3).map(tuple),
    st.none() | BLOB,
    st.integers(0, 3),
)
