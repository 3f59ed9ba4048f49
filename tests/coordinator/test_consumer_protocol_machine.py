"""Any interleaving of consumer-protocol heartbeats (each member reporting what it was last
told it owns, as a real member would), joins by topic names or by regex, subscription switches,
leaves, lost responses, session timeouts, and topics created, grown and deleted never gives a
partition to two members at once, converges to the target once members stop changing, and
replays to the same state."""

from __future__ import annotations

import itertools
import uuid
from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tests.coordinator.test_consumer_protocol import G, Session, assert_exclusive

from kgroups.coordinator.consumer_group import ConsumerGroupState, TopicInfo
from kgroups.coordinator.consumer_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kgroups.coordinator.regex_subscriptions import REFRESH_MIN_INTERVAL_MS
from kgroups.errors import ErrorCode

NAMES = ("a", "b", "c", "d")
# A member subscribes to t1 by name or to the topics that come and go by regex.
SUBSCRIPTIONS = {"names": (("t1",), ""), "regex": ((), "t[23]")}
Owned = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.s = Session()
        self.ids = (uuid.UUID(int=n) for n in itertools.count(1))
        self.topics: dict[str, TopicInfo] = {"t1": TopicInfo(next(self.ids), 4)}
        self.s.coordinator.set_topics(self.topics)
        self.members: dict[str, tuple[int, Owned]] = {}  # name -> (epoch, owned)
        self.subscription: dict[str, str] = {}  # name -> key of SUBSCRIPTIONS
        self.lost: set[str] = set()  # members whose last response never arrived

    def _send(self, name: str, epoch: int, owned: Owned | None, *,
              full: bool) -> ConsumerGroupHeartbeatResponse:
        names, regex = SUBSCRIPTIONS[self.subscription[name]]
        request_id = self.s.rid()
        self.s.absorb(self.s.coordinator.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
            request_id, G, name, epoch, rebalance_timeout_ms=30_000 if full else -1,
            subscribed_topic_names=names if full else None,
            subscribed_topic_regex=regex if full else None,
            topic_partitions=owned), self.s.now))
        response = self.s.reply(request_id)
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        return response

    def _heartbeat(self, name: str, *, keep_response: bool = True, full: bool = False) -> None:
        epoch, owned = self.members[name]
        # After a lost response a client sends a full heartbeat (every field), as clients do.
        response = self._send(name, epoch, owned, full=full or name in self.lost)
        self.lost.discard(name)
        if not keep_response:
            self.lost.add(name)
        if response.error == ErrorCode.FENCED_MEMBER_EPOCH:
            # A fenced client drops its partitions and rejoins at epoch 0 under the same id.
            del self.members[name]
            self._join(name)
            return
        if response.error != ErrorCode.NONE:
            assert response.error == ErrorCode.UNKNOWN_MEMBER_ID  # removed: it is gone
            del self.members[name]
            return
        if keep_response:
            assignment = response.assignment if response.assignment is not None else owned
            self.members[name] = (response.member_epoch, assignment)

    def _join(self, name: str) -> None:
        response = self._send(name, 0, (), full=True)
        assert response.error == ErrorCode.NONE
        self.members[name] = (response.member_epoch, response.assignment or ())

    def _forget_expired(self) -> None:
        self.members = {n: v for n, v in self.members.items() if n in self.s.group().members}

    @rule(name=st.sampled_from(NAMES), subscription=st.sampled_from(sorted(SUBSCRIPTIONS)))
    def join(self, name: str, subscription: str) -> None:
        if name in self.members:
            return
        self.subscription[name] = subscription
        self._join(name)

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        self._heartbeat(data.draw(st.sampled_from(sorted(self.members))))

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def switch_subscription(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.members)))
        self.subscription[name] = "regex" if self.subscription[name] == "names" else "names"
        self._heartbeat(name, full=True)

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def response_lost(self, data: st.DataObject) -> None:
        self._heartbeat(data.draw(st.sampled_from(sorted(self.members))), keep_response=False)

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.members)))
        assert self._send(name, -1, None, full=False).error == ErrorCode.NONE
        del self.members[name]

    @rule(ms=st.sampled_from((REFRESH_MIN_INTERVAL_MS + 1, 46_000)))
    def time_passes(self, ms: int) -> None:
        self.s.advance(ms)  # past the regex refresh interval, or every silent session
        self._forget_expired()

    @rule(topic=st.sampled_from(("t1", "t2", "t3")), partitions=st.integers(1, 3))
    def topic_created_or_grown(self, topic: str, partitions: int) -> None:
        old = self.topics.get(topic)
        if old is None:
            self.topics[topic] = TopicInfo(next(self.ids), partitions)
        elif old.partitions < 8:
            self.topics[topic] = TopicInfo(old.topic_id, old.partitions + partitions)
        self.s.coordinator.set_topics(self.topics, self.s.now)

    @rule(topic=st.sampled_from(("t1", "t2", "t3")))
    def topic_deleted(self, topic: str) -> None:
        self.topics.pop(topic, None)
        self.s.coordinator.set_topics(self.topics, self.s.now)

    @invariant()
    def exclusive_and_replayable(self) -> None:
        group = self.s.coordinator._groups.get(G)
        if group is None or group.consumer is None:
            return
        assert_exclusive(self.s)
        # What members believe they own never overlaps either.
        believed = [(t, p) for _, owned in self.members.values()
                    for t, parts in owned or () for p in parts]
        assert len(believed) == len(set(believed))
        assert self.s.replayed()._groups[G].consumer == group.consumer
        # The counts heartbeats read instead of walking every member agree with the members.
        consumer = group.consumer
        members = consumer.members.values()
        assert consumer.topic_refs == Counter(t for m in members for t in m.subscribed_topic_names)
        assert consumer.regex_refs == Counter(
            m.subscribed_topic_regex for m in members if m.subscribed_topic_regex)
        matched = (t for r in consumer.resolved_regexes.values() for t in r.topics)
        assert consumer.subscribed_topics() == {*consumer.topic_refs, *matched}

    def teardown(self) -> None:
        """Members that keep heartbeating reach the target: Stable, every partition of the
        topics they subscribe to (by name or through the regex) held."""
        if not self.members:
            return
        self.s.advance(REFRESH_MIN_INTERVAL_MS + 1)  # any due regex refresh may happen
        self._forget_expired()
        for _ in range(6):
            for name in sorted(self.members):
                if name in self.members:
                    self._heartbeat(name)
        if not self.members:
            return
        assert self.s.group().state() == ConsumerGroupState.STABLE
        wanted = {t for n in self.members for t in (
            ("t1",) if self.subscription[n] == "names" else ("t2", "t3"))}
        expected = sorted((info.topic_id, p) for t, info in self.topics.items() if t in wanted
                          for p in range(info.partitions))
        held = sorted((t, p) for _, owned in self.members.values() for t, ps in owned
                      for p in ps)
        assert held == expected


ConsumerGroupMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                                  deadline=None)
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
