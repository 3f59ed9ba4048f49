"""The timer queue: exact deadlines and firing order, and a heap that stays as small as the
number of armed timers however often they are re-armed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.coordinator.timers import TimerQueue


class ModelQueue:
    """The obvious implementation: every armed key with its deadline and schedule order."""

    def __init__(self) -> None:
        self.armed: dict[int, tuple[int, int]] = {}
        self.sequence = 0

    def schedule(self, key: int, deadline: int) -> None:
        self.sequence += 1
        self.armed[key] = (deadline, self.sequence)

    def next_deadline(self) -> int | None:
        return min(self.armed.values())[0] if self.armed else None

    def pop_due(self, now: int) -> int | None:
        if not self.armed:
            return None
        key = min(self.armed, key=self.armed.__getitem__)
        if self.armed[key][0] > now:
            return None
        del self.armed[key]
        return key


operations = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), st.integers(0, 30), st.integers(0, 1_000)),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("cancel_below"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("pop_due"), st.just(0), st.integers(0, 1_000)),
    ),
    max_size=400,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_queue_fires_like_the_obvious_model(ops: list[tuple[str, int, int]]) -> None:
    queue, model = TimerQueue(), ModelQueue()
    for op, key, value in ops:
        if op == "schedule":
            queue.schedule(key, value)
            model.schedule(key, value)
        elif op == "cancel":
            queue.cancel(key)
            model.armed.pop(key, None)
        elif op == "cancel_below":
            queue.cancel_where(lambda k, bound=key: isinstance(k, int) and k < bound)
            model.armed = {k: slot for k, slot in model.armed.items() if k >= key}
        else:
            while (fired := model.pop_due(value)) is not None:
                assert queue.pop_due(value) == fired
            assert queue.pop_due(value) is None
        assert queue.next_deadline() == model.next_deadline()
        assert len(queue) == len(model.armed)
        assert queue.queued_entries <= 2 * len(model.armed) + 64


def test_heartbeats_do_not_grow_the_heap_and_expiry_stays_exact() -> None:
    members, heartbeats, session_ms = 50, 200, 10_000
    queue = TimerQueue()
    now = 0
    for _ in range(heartbeats):
        now += 100
        for member in range(members):
            queue.schedule(("session", member), now + member + session_ms)
        assert queue.pop_due(now) is None
    assert len(queue) == members
    assert queue.queued_entries == members
    # The first member's session, last refreshed at `now`, ends exactly session_ms later.
    assert queue.next_deadline() == now + session_ms
    assert queue.pop_due(now + session_ms - 1) is None
    assert queue.pop_due(now + session_ms) == ("session", 0)
    assert queue.queued_entries == members - 1


def test_cancelled_timers_do_not_accumulate() -> None:
    queue = TimerQueue()
    queue.schedule("stays", 10_000_000)
    for member in range(10_000):
        queue.schedule(("session", member), 1_000_000 + member)
        queue.cancel(("session", member))
    assert len(queue) == 1
    assert queue.queued_entries <= 2 + 64
    assert queue.next_deadline() == 10_000_000


def test_moving_a_deadline_earlier_fires_at_the_earlier_time() -> None:
    queue = TimerQueue()
    queue.schedule("join", 5_000)
    queue.schedule("join", 1_000)
    assert queue.next_deadline() == 1_000
    assert queue.pop_due(1_000) == "join"
    assert queue.pop_due(10_000) is None
    assert queue.next_deadline() is None
