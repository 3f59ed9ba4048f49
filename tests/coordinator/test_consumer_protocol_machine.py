"""Any interleaving of consumer-protocol heartbeats (each member reporting what it was last
told it owns, as a real member would), joins, leaves, lost responses, session timeouts and
topics growing never gives a partition to two members at once, converges to the target once
members stop changing, and replays to the same state."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tests.coordinator.test_consumer_protocol import (
    T1,
    Session,
    assert_exclusive,
    topics,
)

from kgroups.coordinator.consumer_group import ConsumerGroupState
from kgroups.errors import ErrorCode

NAMES = ("a", "b", "c", "d")


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.s = Session()
        self.partitions = 4
        self.s.coordinator.set_topics(topics(t1=self.partitions))
        self.members: dict[str, tuple[int, tuple]] = {}  # name -> (epoch, owned)
        self.lost: set[str] = set()  # members whose last response never arrived

    def _heartbeat(self, name: str, *, keep_response: bool = True) -> None:
        epoch, owned = self.members[name]
        # After a lost response a client sends a full heartbeat (every field), as clients do.
        response = self.s.hb(name, epoch, owned=owned, full=name in self.lost)
        self.lost.discard(name)
        if not keep_response:
            self.lost.add(name)
        if response.error == ErrorCode.FENCED_MEMBER_EPOCH:
            # A fenced client drops its partitions and rejoins at epoch 0 under the same id.
            del self.members[name]
            self.join(name)
            return
        if response.error != ErrorCode.NONE:
            assert response.error == ErrorCode.UNKNOWN_MEMBER_ID  # removed: it is gone
            del self.members[name]
            return
        if keep_response:
            assignment = response.assignment if response.assignment is not None else owned
            self.members[name] = (response.member_epoch, assignment)

    @rule(name=st.sampled_from(NAMES))
    def join(self, name: str) -> None:
        if name in self.members:
            return
        response = self.s.hb(name, 0)
        assert response.error == ErrorCode.NONE
        self.members[name] = (response.member_epoch, response.assignment)

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        self._heartbeat(data.draw(st.sampled_from(sorted(self.members))))

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def response_lost(self, data: st.DataObject) -> None:
        self._heartbeat(data.draw(st.sampled_from(sorted(self.members))), keep_response=False)

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.members)))
        assert self.s.hb(name, -1).error == ErrorCode.NONE
        del self.members[name]

    @rule()
    def time_passes(self) -> None:
        self.s.advance(46_000)  # every silent member's session ends
        self.members = {n: v for n, v in self.members.items()
                        if n in self.s.group().members}

    @precondition(lambda self: self.partitions < 8)
    @rule()
    def topic_grows(self) -> None:
        self.partitions += 2
        self.s.coordinator.set_topics(topics(t1=self.partitions))

    @invariant()
    def exclusive_and_replayable(self) -> None:
        group = self.s.coordinator._groups.get("cg")
        if group is None or group.consumer is None:
            return
        assert_exclusive(self.s)
        # What members believe they own never overlaps either.
        believed = [(T1, p) for _, owned in self.members.values()
                    for _, parts in owned or () for p in parts]
        assert len(believed) == len(set(believed))
        assert self.s.replayed()._groups["cg"].consumer == group.consumer

    def teardown(self) -> None:
        """Members that keep heartbeating reach the target: Stable, every partition held."""
        for _ in range(4):
            for name in sorted(self.members):
                if name in self.members:
                    self._heartbeat(name)
        if self.members:
            group = self.s.group()
            assert group.state() == ConsumerGroupState.STABLE
            held = sorted(p for _, owned in self.members.values() for _, ps in owned for p in ps)
            assert held == list(range(self.partitions))


ConsumerGroupMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                                  deadline=None)
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
