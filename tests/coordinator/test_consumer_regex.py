"""Regex subscriptions and topic changes in the core, as Kafka 4.3.1 handles them (its
behaviour on the wire is checked by tests/differential/test_diff_consumer_protocol.py):
RE2 syntax with RE2/J's error messages, resolution after the heartbeat that asks for it,
re-resolution when topics are created (at most once per 10 s), the group epoch moving when a
subscribed topic is created, grown or deleted, regex records (type 16) replayed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from tests.coordinator.harness import Harness, synchronous_config

from kgroups.coordinator import GroupCoordinatorConfig, ListGroupsRequest
from kgroups.coordinator.consumer_group import TopicInfo
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.errors import ErrorCode
from kgroups.records.consumer_group import (
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)

G = "rg"
IDS = {name: uuid.UUID(int=i + 1) for i, name in
       enumerate(("orders-a", "orders-b", "payments", "orders-c", "__consumer_offsets"))}


def catalogue(**partitions: int) -> dict[str, TopicInfo]:
    return {name.replace("_", "-") if name.startswith("orders") else name:
            TopicInfo(IDS[name.replace("_", "-") if name.startswith("orders") else name], count)
            for name, count in partitions.items()}


@dataclass
class Session(Harness):
    config: GroupCoordinatorConfig = field(default_factory=synchronous_config)

    def hb(self, member: str, epoch: int, *, regex: str | None = None,
           names: tuple[str, ...] | None = None, owned=None) -> ConsumerGroupHeartbeatResponse:
        joining = epoch == 0
        request_id = self.rid()
        self.absorb(self.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
            request_id, G, member, epoch,
            rebalance_timeout_ms=30_000 if joining else -1,
            subscribed_topic_names=names, subscribed_topic_regex=regex,
            topic_partitions=() if joining else owned,
        ), self.now))
        response = self.reply(request_id)
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        return response

    def group(self):
        return self.coordinator._groups[G].consumer

    def regex_records(self) -> list[tuple[str, tuple[str, ...] | None]]:
        return [(r.key.regular_expression, None if r.value is None else r.value.topics)
                for r in self.log.get(self.partition_of(G), [])
                if isinstance(r.key, ConsumerGroupRegularExpressionKey)]


@pytest.fixture
def s() -> Session:
    session = Session()
    session.coordinator.set_topics(catalogue(orders_a=2, payments=1))
    return session


def names(s: Session, response: ConsumerGroupHeartbeatResponse) -> dict[str, tuple[int, ...]]:
    by_id = {v: k for k, v in IDS.items()}
    return {by_id[t]: p for t, p in response.assignment or ()}


@pytest.mark.parametrize(("regex", "description"), [
    ("(", "missing closing )"),
    ("[a-", "missing closing ]"),
    ("a**", "invalid nested repetition operator"),
    ("a{1001}", "invalid repeat count"),
    (r"x\Z", "invalid escape sequence"),
    ("(?=x)", "invalid or unsupported Perl syntax"),
    (r"\1", "invalid escape sequence"),
    (")", "regexp/syntax: internal error"),
    (r"a\C", "invalid escape sequence"),  # RE2 takes \C (any byte); RE2/J does not
])
def test_invalid_regex_is_refused_with_re2j_wording_and_creates_no_group(
    s: Session, regex: str, description: str
) -> None:
    response = s.hb("m", 0, regex=regex)
    assert response.error == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert response.error_message == (
        f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}.")
    rid = s.rid()
    s.absorb(s.coordinator.list_groups(ListGroupsRequest(rid), s.now))
    assert s.reply(rid).groups == ()


def test_regex_is_resolved_after_the_joining_heartbeat_then_assigned(s: Session) -> None:
    joined = s.hb("m", 0, regex="orders-.*")
    # Answered from the group as it was: a member, nothing to assign yet.
    assert (joined.error, joined.member_epoch, joined.assignment) == (ErrorCode.NONE, 1, ())
    # The resolution followed (whole-name matches only) and moved the group epoch.
    assert s.regex_records() == [("orders-.*", ("orders-a",))]
    assert (s.group().group_epoch, s.group().assignment_epoch) == (2, 1)
    assigned = s.hb("m", 1, owned=())
    assert assigned.member_epoch == 2
    assert names(s, assigned) == {"orders-a": (0, 1)}


def test_regex_matches_whole_names_with_re2_syntax_internal_topics_included(s: Session) -> None:
    s.coordinator.set_topics(catalogue(orders_a=1, payments=1, __consumer_offsets=1))
    s.hb("m", 0, regex="(?i)PAY.*|__.*")
    assert s.regex_records() == [("(?i)PAY.*|__.*", ("__consumer_offsets", "payments"))]
    s.hb("n", 0, regex="rders-.*")  # a substring match is no match
    s.advance(10_001)
    s.hb("n", s.group().members["n"].member_epoch, owned=())
    assert ("rders-.*", ()) in s.regex_records()


def test_created_topic_is_picked_up_at_most_once_per_ten_seconds(s: Session) -> None:
    s.hb("m", 0, regex="orders-.*")
    epoch = s.hb("m", 1, owned=()).member_epoch
    held = (("orders-a", (0, 1)),)
    s.coordinator.set_topics(catalogue(orders_a=2, orders_b=3, payments=1))
    s.advance(5_000)
    quiet = s.hb("m", epoch, owned=((IDS["orders-a"], (0, 1)),))
    assert quiet.member_epoch == epoch and s.group().group_epoch == epoch  # too soon
    s.advance(5_001)
    s.hb("m", epoch, owned=((IDS["orders-a"], (0, 1)),))
    assert s.regex_records()[-1] == ("orders-.*", ("orders-a", "orders-b"))
    grown = s.hb("m", epoch, owned=((IDS["orders-a"], (0, 1)),))
    assert grown.member_epoch == epoch + 1
    assert names(s, grown) == {**dict(held), "orders-b": (0, 1, 2)}


def test_partitions_added_or_topic_deleted_move_the_group_epoch_and_target(s: Session) -> None:
    s.coordinator.set_topics(catalogue(orders_a=2, orders_b=1, payments=1))
    a = s.hb("a", 0, names=("orders-a", "orders-b"))
    owned = tuple(a.assignment or ())
    s.coordinator.set_topics(catalogue(orders_a=4, orders_b=1, payments=1))
    grown = s.hb("a", a.member_epoch, owned=owned)
    assert grown.member_epoch == a.member_epoch + 1
    assert names(s, grown) == {"orders-a": (0, 1, 2, 3), "orders-b": (0,)}
    s.coordinator.set_topics(catalogue(orders_a=4, payments=1))
    revoking = s.hb("a", grown.member_epoch, owned=tuple(grown.assignment or ()))
    # The deleted topic's partition is revoked first; then the member moves to the new epoch.
    assert revoking.member_epoch == grown.member_epoch
    assert names(s, revoking) == {"orders-a": (0, 1, 2, 3)}
    shrunk = s.hb("a", grown.member_epoch, owned=tuple(revoking.assignment or ()))
    assert shrunk.member_epoch == grown.member_epoch + 1
    assert s.group().targets["a"] == {IDS["orders-a"]: frozenset(range(4))}


def test_unrelated_topic_changes_leave_the_group_alone(s: Session) -> None:
    a = s.hb("a", 0, names=("payments",))
    s.coordinator.set_topics(catalogue(orders_a=5, orders_c=1, payments=1))
    again = s.hb("a", a.member_epoch, owned=tuple(a.assignment or ()))
    assert (again.member_epoch, again.assignment) == (a.member_epoch, None)


def test_last_subscriber_leaving_or_switching_tombstones_the_regex(s: Session) -> None:
    s.hb("a", 0, regex="orders-.*")
    s.hb("b", 0, regex="orders-.*")
    s.advance(10_001)
    s.hb("a", s.group().members["a"].member_epoch, regex="pay.*", owned=())
    assert s.regex_records()[-1] == ("pay.*", ("payments",))
    s.hb("b", -1)
    assert s.regex_records()[-1] == ("orders-.*", None)
    assert set(s.group().resolved_regexes) == {"pay.*"}


def test_replay_rebuilds_resolved_regexes_byte_for_byte(s: Session) -> None:
    s.hb("m", 0, regex="orders-.*")
    s.hb("m", 1, owned=())
    fresh = s.replayed()
    assert fresh._groups[G].consumer == s.group()
    (resolved,) = s.group().resolved_regexes.values()
    assert resolved.topics == {"orders-a"}
    record = next(r for r in s.log[s.partition_of(G)]
                  if isinstance(r.value, ConsumerGroupRegularExpressionValue))
    assert record.value.timestamp == s.now and record.value.version > 0


def test_regexes_are_resolved_again_after_the_refresh_interval() -> None:
    config = synchronous_config(group_consumer_regex_refresh_interval_ms=20_000)
    s = Session(config=config)
    s.coordinator.set_topics(catalogue(orders_a=1))
    s.hb("m", 0, regex="orders-.*")
    epoch = s.hb("m", 1, owned=()).member_epoch
    s.advance(15_000)
    s.hb("m", epoch, owned=((IDS["orders-a"], (0,)),))
    assert len(s.regex_records()) == 1  # nothing new, interval not over
    s.advance(5_001)
    s.hb("m", epoch, owned=((IDS["orders-a"], (0,)),))
    assert len(s.regex_records()) == 2  # resolved again: same topics, no new epoch
    assert s.group().group_epoch == epoch
    with pytest.raises(ValueError, match=r"group\.consumer\.regex\.refresh\.interval\.ms"):
        GroupCoordinatorConfig(group_consumer_regex_refresh_interval_ms=9_999)
