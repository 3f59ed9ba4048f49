"""One memory budget for every connection of the broker (queued.max.request.bytes).

Per-connection limits alone do not bound a broker: four clients that pipeline Fetches and never
read their answers made it hold 2 GB. So every connection reports what it holds to this one
account: the frames it has reserved (a request's bytes count from before its body is read until
its handler finishes) and the responses its client has not taken yet (computed, queued in
order, or in the transport's buffer). The budget then

- makes a connection wait before reading a frame or starting a handler while the total is over
  the limit (the connection stops reading, so TCP pushes back on its client);
- lets a connection whose client is keeping up (it holds no unread response) go on within a
  small headroom above the limit, so a healthy client is still served while others are paused;
- closes the connection that holds the most, one at a time, while the budget stays exhausted
  (over the limit, or someone waiting for room) for `close_after` seconds: paused clients that
  never read or never finish their frame would otherwise hold their share forever.

Waiters queue in arrival order, each with its own condition. A release wakes the first waiter
whose condition holds, and only that one; the next is considered once it has run on (a Fetch of
data already on disk has then charged its answer). So a release never wakes the thousands of
requests a few paused clients may have queued, and a burst of wakes cannot all pass at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

# Connections that hold nothing unread may go this far over the limit (a fraction of it), so
# they keep being served while the clients that hold the budget are paused.
HEADROOM_FRACTION = 8


class Holder(Protocol):
    """A connection, as the budget sees it."""

    peer: str

    def evict(self, held: int, total: int, limit: int) -> None:
        """Close at once (abort), dropping everything held, with one log line saying why."""


class MemoryBudget:
    """Bytes held across connections; `limit` < 0 means no limit (Kafka's -1)."""

    def __init__(self, limit: int, close_after: float) -> None:
        self.limit = limit
        self.headroom = limit // HEADROOM_FRACTION if limit >= 0 else 0
        self._close_after = close_after
        self._held: dict[Holder, int] = {}
        self.total = 0
        # Blocked in wait_for, in arrival order (a dict: cancelled waiters leave in O(1)).
        self._waiters: dict[asyncio.Future[None], Callable[[], bool]] = {}
        self._eviction: asyncio.TimerHandle | None = None

    @property
    def unlimited(self) -> bool:
        return self.limit < 0

    def held_by(self, holder: Holder) -> int:
        return self._held.get(holder, 0)

    def set_held(self, holder: Holder, amount: int) -> None:
        """What `holder` holds now (it tracks its own bytes; the budget keeps the sum).

        Called for every request, so the common case (under the limit, no waiter, no eviction
        timer armed) only updates the sum: neither waking nor watching would change anything."""
        held = self._held
        previous = held.get(holder, 0)
        if amount == previous:
            return
        if amount:
            held[holder] = amount
        else:
            del held[holder]
        self.total += amount - previous
        if self._waiters:
            if amount < previous:
                self._wake()
        elif self._eviction is None and (self.limit < 0 or self.total < self.limit):
            return
        self._watch()

    def forget(self, holder: Holder) -> None:
        """The connection is gone: nothing it held counts any more."""
        self.set_held(holder, 0)

    def allows(self, extra: int, light: bool) -> bool:
        """Whether `extra` more bytes fit, for a connection that holds no unread response
        (`light`) or one that does. Unlimited budgets allow everything."""
        limit = self.limit
        if limit < 0:  # unlimited (not the property: this runs twice per request)
            return True
        room = limit + (self.headroom if light else 0)
        return self.total + extra <= room if extra else self.total < room

    async def wait_for(self, fits: Callable[[], bool]) -> None:
        """Until `fits()` holds. Returns without suspending when it already holds, so the
        caller acts (reserves, or runs its handler) before anyone else runs."""
        if fits():
            return
        loop = asyncio.get_running_loop()
        while True:
            turn: asyncio.Future[None] = loop.create_future()
            self._waiters[turn] = fits
            self._watch()
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    loop.call_soon(self._wake)  # woken, then cancelled: pass the turn on
                raise
            finally:
                self._waiters.pop(turn, None)
                self._watch()
            if fits():
                # The next waiter is considered once this one has acted on its room.
                loop.call_soon(self._wake)
                return

    def recheck(self) -> None:
        """A waiter's condition may now hold without a release (its connection closed)."""
        self._wake()

    def _wake(self) -> None:
        """Let the first waiter whose condition holds go on."""
        for turn, fits in self._waiters.items():
            if not turn.done() and fits():
                del self._waiters[turn]
                turn.set_result(None)
                return

    @property
    def exhausted(self) -> bool:
        return not self.unlimited and (self.total >= self.limit or bool(self._waiters))

    def _watch(self) -> None:
        """Arm the eviction timer when the budget becomes exhausted, disarm it when not."""
        if self.exhausted and self._held:
            if self._eviction is None:
                self._eviction = asyncio.get_running_loop().call_later(
                    self._close_after, self._evict)
        elif self._eviction is not None:
            self._eviction.cancel()
            self._eviction = None

    def _evict(self) -> None:
        self._eviction = None
        if not (self.exhausted and self._held):
            return
        holder, held = max(self._held.items(), key=lambda item: item[1])
        total = self.total
        self.forget(holder)
        holder.evict(held, total, self.limit)
        self._watch()
