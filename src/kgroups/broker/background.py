"""Background tasks that say so when they die, and leave a mark in the broker's state.

An asyncio task that raises and is never awaited leaves at most "Task exception was never
retrieved" when it is garbage collected, with nothing in the broker showing that the work it
did (loading __consumer_offsets, cleaning logs) has stopped. Every long-lived task the broker
starts goes through `BackgroundTasks.spawn`, which logs a crash at ERROR with its traceback,
records it in `failures` and lets the owner react (a crashed loader fails the partitions it
had not finished, so their groups get a definite answer instead of loading forever).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

logger = logging.getLogger("kgroups.background")

CrashHandler = Callable[[BaseException], None]


class BackgroundTasks:
    """The tasks of one owner (the coordinator runtime, the broker), cancelled together."""

    def __init__(self) -> None:
        self.failures: dict[str, str] = {}  # task name -> "ExceptionType: message"
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(
        self, name: str, work: Coroutine[Any, Any, Any], on_crash: CrashHandler | None = None
    ) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(partial(self._finished, name, on_crash))
        return task

    def _finished(self, name: str, on_crash: CrashHandler | None, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        assert error is not None
        self.failures[name] = f"{type(error).__name__}: {error}"
        logger.error("background task %s crashed: %s", name, self.failures[name], exc_info=error)
        if on_crash is not None:
            on_crash(error)

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
