"""A request usually answered at once runs its first step where it is read, not in a task.

A task per request costs its creation, a step scheduled for the next event-loop iteration and a
done callback. A Heartbeat or a Metadata is answered by its first step, so for them that was
most of what the event loop itself cost per request: run where the reader cut them out of the
socket's bytes, they took ~10% fewer of the broker's instructions per Heartbeat and ~8% fewer
per Metadata (bench/request_path.py --instructions; bench/RESULTS.md). A request that does
wait after all (its group's turn, room in the memory budget, a write to be durable) goes on in
a task from where it stopped, exactly as if the task had run it from the start.

Only the APIs the intake names (`request_intake.ANSWERED_AT_ONCE`) start this way, and only
when none of the connection's earlier requests is still open: one still to take its first step
must reach the coordinator first (an OffsetFetch pipelined behind an OffsetCommit sees it). A
request that waits pays for the step it took outside a task (+1.5% per OffsetCommit, which
always waits for its write, hence not listed), and its first step runs with the reader's task
as the current one, which asyncio.timeout (Fetch's long poll) would take for its own and cancel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

Answer = Coroutine[Any, Any, bytes | None]


def start(loop: asyncio.AbstractEventLoop, work: Answer) -> asyncio.Future[bytes | None]:
    """Run `work`'s first step now; the future of its answer: done already when it was
    answered at once (or failed in that step), otherwise a task that runs it on from its first
    wait."""
    try:
        waited_on = work.send(None)
    except StopIteration as stop:
        answered: asyncio.Future[bytes | None] = loop.create_future()
        answered.set_result(stop.value)
        return answered
    except Exception as error:  # the handler failed: the connection's rules close it
        failed: asyncio.Future[bytes | None] = loop.create_future()
        failed.set_exception(error)
        return failed
    return loop.create_task(_Begun(work, waited_on))


class _Begun(Coroutine[Any, Any, bytes | None]):
    """A coroutine that has already taken its first step, for a task to run on: the task's
    first step hands it the future the coroutine waits on (the task then waits on it as if
    the coroutine had just yielded it), every later one goes to the coroutine itself."""

    __slots__ = ("_waited_on", "_work")

    def __init__(self, work: Answer, waited_on: Any) -> None:
        self._work = work
        self._waited_on = waited_on  # _TAKEN once the task has it

    def send(self, value: Any) -> Any:
        waited_on = self._waited_on
        if waited_on is not _TAKEN:
            self._waited_on = _TAKEN
            return waited_on
        return self._work.send(value)

    def throw(self, *error: Any) -> Any:
        """Cancelled before its first step, the task never learnt what the coroutine waits on:
        that future is cancelled as the task would have cancelled it (a group's turn given up,
        say), and the cancellation goes on into the coroutine."""
        waited_on = self._waited_on
        if waited_on is not _TAKEN:
            self._waited_on = _TAKEN
            if isinstance(waited_on, asyncio.Future):
                waited_on.cancel()
        return self._work.throw(*error)

    def close(self) -> None:
        self._work.close()

    def __await__(self) -> Generator[Any, None, bytes | None]:
        raise TypeError("a begun request is run by its task, not awaited")


_TAKEN = object()
