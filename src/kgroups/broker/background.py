"""Background tasks that say so when they die, are started again, and leave a mark in metrics.

An asyncio task that raises and is never awaited leaves at most "Task exception was never
retrieved" when it is garbage collected, with nothing in the broker showing that the work it
did (loading __consumer_offsets, cleaning logs, flushing on schedule) has stopped. Every task the
broker starts goes through `BackgroundTasks`:

- `spawn` runs work that is done once (the offsets loader, the wait on one fsync): a crash is
  logged at ERROR with its traceback, recorded in `failures` and handed to the owner (a crashed
  loader fails the partitions it had not finished, so their groups get a definite answer).
- `supervise` runs a loop that must keep running (the log cleaner, the log flusher, the offsets
  cleaner): a crash is logged the same way, once, and the loop is started again after a
  backoff that doubles from `Backoff.first_s` up to `Backoff.cap_s`, so a bug that fires on
  every round costs one log line per cap, never a spin; a loop that ran longer than the cap
  before crashing starts again from the shortest wait.

Crashes and restarts are counted per task name in `TaskCounts`, shared by every owner of one
broker (its own tasks, the coordinator's, the network processes' restarts), and served as
Prometheus counters (`kgroups_background_task_crashes_total`,
`kgroups_background_task_restarts_total`, see kgroups.broker.metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any

logger = logging.getLogger("kgroups.background")

CrashHandler = Callable[[BaseException], None]


@dataclass
class TaskCounts:
    """Crashes and restarts by task name, since the broker started."""

    crashes: Counter[str] = field(default_factory=Counter)
    restarts: Counter[str] = field(default_factory=Counter)


@dataclass
class Backoff:
    """Waits before restarting something that keeps failing: `first_s`, doubling to `cap_s`."""

    first_s: float = 0.5
    cap_s: float = 10.0
    _next_s: float = field(default=0.0, init=False)

    def next_delay(self, ran_s: float) -> float:
        """The wait before the next start, after a run of `ran_s` seconds that failed."""
        if ran_s >= self.cap_s or not self._next_s:
            self._next_s = self.first_s
        delay = self._next_s
        self._next_s = min(self._next_s * 2, self.cap_s)
        return delay


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class BackgroundTasks:
    """The tasks of one owner (the coordinator runtime, the broker), cancelled together."""

    def __init__(self, counts: TaskCounts | None = None, backoff: Backoff | None = None) -> None:
        self.failures: dict[str, str] = {}  # task name -> "ExceptionType: message", the last
        self.counts = counts if counts is not None else TaskCounts()
        self._backoff = backoff or Backoff()
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(
        self, name: str, work: Coroutine[Any, Any, Any], on_crash: CrashHandler | None = None
    ) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(partial(self._finished, name, on_crash))
        return task

    def supervise(self, name: str, start: Callable[[], Coroutine[Any, Any, Any]]
                  ) -> asyncio.Task[Any]:
        """Run `start()` until it returns or the owner stops, starting it again after each
        crash (see the module)."""
        return self.spawn(name, self._keep_running(name, start))

    async def _keep_running(self, name: str,
                            start: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        backoff = Backoff(self._backoff.first_s, self._backoff.cap_s)
        while True:
            started = time.monotonic()
            try:
                await start()
                return
            except Exception as error:
                delay = backoff.next_delay(time.monotonic() - started)
                self._crashed(name, error, f"; restarting in {delay:g} s")
            await asyncio.sleep(delay)
            self.counts.restarts[name] += 1

    def _crashed(self, name: str, error: BaseException, then: str = "") -> None:
        self.failures[name] = describe(error)
        self.counts.crashes[name] += 1
        logger.error("background task %s crashed: %s%s", name, self.failures[name], then,
                     exc_info=error)

    def _finished(self, name: str, on_crash: CrashHandler | None, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        assert error is not None
        self._crashed(name, error)
        if on_crash is not None:
            on_crash(error)

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
