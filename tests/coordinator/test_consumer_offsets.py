"""OffsetCommit and OffsetFetch against a consumer-protocol group, as Kafka 4.3.1 checks them
(its answers on the wire: tests/differential/test_diff_consumer_protocol.py): the member epoch,
KIP-1251's per-partition assignment epochs for an older one, unknown members, and requests
from outside the group (admin clients)."""

from __future__ import annotations

import pytest
from tests.coordinator.test_consumer_protocol import T1, G, Session, topics

from kgroups.coordinator import OffsetFetchGroup, OffsetFetchRequest
from kgroups.errors import ErrorCode


@pytest.fixture
def s() -> Session:
    session = Session()
    session.coordinator.set_topics(topics(t1=3))
    return session


def commit_errors(s: Session, partitions, **kwargs) -> list[ErrorCode]:
    response = s.reply(s.commit(G, {("t1", p): 5 for p in partitions}, **kwargs))
    return [p.error for t in response.topics for p in t.partitions]


def fetch_error(s: Session, member_id: str | None, member_epoch: int) -> ErrorCode:
    rid = s.rid()
    s.absorb(s.coordinator.offset_fetch(OffsetFetchRequest(
        rid, (OffsetFetchGroup(G, None, member_id, member_epoch),)), s.now))
    (group,) = s.reply(rid).groups
    return group.error


def test_an_older_epoch_commits_only_partitions_held_since_then(s: Session) -> None:
    a = s.hb("a", 0)  # epoch 2, every partition assigned at epoch 2
    assert commit_errors(s, [0, 1], generation=2, member_id="a") == [ErrorCode.NONE] * 2
    assert commit_errors(s, [0], generation=3, member_id="a") == [ErrorCode.STALE_MEMBER_EPOCH]
    assert commit_errors(s, [0], generation=1, member_id="a") == [ErrorCode.STALE_MEMBER_EPOCH]
    s.hb("b", 0)  # epoch 3: a must give one partition up
    revoking = s.hb("a", 2, owned=a.assignment)
    s.hb("a", 2, owned=revoking.assignment)  # revoked: a is at epoch 3
    assert s.group().members["a"].member_epoch == 3
    kept = revoking.assignment[0][1]
    gone = ({0, 1, 2} - set(kept)).pop()
    # Epoch 2 still holds for what a kept since epoch 2; one partition it gave up fails all.
    assert commit_errors(s, kept, generation=2, member_id="a") == [ErrorCode.NONE] * len(kept)
    assert commit_errors(s, [*kept, gone], generation=2, member_id="a") == \
        [ErrorCode.STALE_MEMBER_EPOCH] * 3
    # The epochs survive a replay (they are written in the current-assignment record).
    assert s.replayed()._groups[G].consumer.members["a"].epochs == {(T1, p): 2 for p in kept}


def test_commits_from_outside_the_group(s: Session) -> None:
    s.hb("a", 0)
    assert commit_errors(s, [0], generation=2, member_id="zz") == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert commit_errors(s, [0]) == [ErrorCode.UNKNOWN_MEMBER_ID]  # admin: group not empty
    assert commit_errors(s, [0], generation=2, member_id="a", version=8) == \
        [ErrorCode.UNSUPPORTED_VERSION]
    s.hb("a", -1)
    assert commit_errors(s, [0]) == [ErrorCode.NONE]  # an empty group takes it
    assert commit_errors(s, [0], generation=2, member_id="a") == [ErrorCode.UNKNOWN_MEMBER_ID]


def test_offset_fetch_checks_member_and_epoch(s: Session) -> None:
    s.hb("a", 0)
    assert fetch_error(s, "a", 2) == ErrorCode.NONE
    assert fetch_error(s, None, -1) == ErrorCode.NONE  # an admin client
    assert fetch_error(s, "a", 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert fetch_error(s, "a", 3) == ErrorCode.STALE_MEMBER_EPOCH
    assert fetch_error(s, "a", -1) == ErrorCode.STALE_MEMBER_EPOCH
    assert fetch_error(s, "zz", 2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert fetch_error(s, "", -1) == ErrorCode.UNKNOWN_MEMBER_ID
