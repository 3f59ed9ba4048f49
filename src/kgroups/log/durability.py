"""When an append may be acknowledged, and fsyncs shared between the appends that wait for one.

Kafka's flush settings decide (`log.flush.interval.messages` / `flush.messages`,
`log.flush.interval.ms` / `flush.ms`): by default an append is acknowledged once it is in the
log file (the page cache), which survives a crash of the process but not of the machine, and
fsyncs happen when a segment rolls, at shutdown and on the flush schedule. With
`flush.messages=1` every append is fsynced before it is acknowledged; then one fsync serves
every append that was waiting when it started (group commit).

A waiter needs an fsync that *began after* its call (one already running may have missed its
bytes), so each log has at most one fsync running and one gathering the next round of waiters.
The fsync runs in a worker thread so the event loop keeps serving requests meanwhile. A failed
fsync fails every waiter of its round (none of them is acknowledged) and, through the log, every
later one: see `PartitionLog.flush`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass

from kgroups.log.config import NEVER
from kgroups.log.partition_log import PartitionLog

# With no flush.ms set anywhere the flusher still wakes this often, to see new topics' settings.
_IDLE_CHECK_MS = 60_000

logger = logging.getLogger(__name__)


@dataclass
class _LogSync:
    running: asyncio.Future[None] | None = None
    next_round: asyncio.Future[None] | None = None
    fsync_started: bool = False  # False while the running round still lingers


class GroupCommit:
    """Shares fsyncs between concurrent `wait_durable` callers, per log.

    `linger_ms` (default 0) holds a starting fsync back briefly so that more appends join it:
    fewer fsyncs for more latency.
    """

    def __init__(self, *, linger_ms: float = 0.0, executor: Executor | None = None) -> None:
        if linger_ms < 0:
            raise ValueError(f"linger_ms must be >= 0, not {linger_ms}")
        self.linger_ms = linger_ms
        self.executor = executor
        self.fsyncs = 0
        self.crash: str | None = None  # the last unexpected (non-OSError) flush failure
        self._state: weakref.WeakKeyDictionary[PartitionLog, _LogSync] = (
            weakref.WeakKeyDictionary()
        )

    async def settle(self, log: PartitionLog) -> None:
        """Return once what was appended to `log` may be acknowledged: at once while fewer than
        its flush.messages are unflushed, else after an fsync that covers it."""
        if log.flush_due:
            await self.wait_durable(log)

    async def wait_durable(self, log: PartitionLog) -> None:
        """Return once everything appended to `log` before this call is on disk."""
        state = self._state.setdefault(log, _LogSync())
        if state.running is None:
            state.running = _quiet(asyncio.ensure_future(self._sync(log, state)))
            await asyncio.shield(state.running)
            return
        if not state.fsync_started:  # its fsync has not begun: it will cover this caller too
            await asyncio.shield(state.running)
            return
        if state.next_round is None:
            state.next_round = _quiet(
                asyncio.ensure_future(self._after(log, state, state.running)))
        await asyncio.shield(state.next_round)

    async def _after(
        self, log: PartitionLog, state: _LogSync, previous: asyncio.Future[None]
    ) -> None:
        # A failed earlier fsync was reported to its own waiters; this round tries afresh.
        with contextlib.suppress(Exception):
            await previous
        state.next_round = None
        state.running = _quiet(asyncio.ensure_future(self._sync(log, state)))
        await state.running

    async def _sync(self, log: PartitionLog, state: _LogSync) -> None:
        state.fsync_started = False
        try:
            if self.linger_ms:
                await asyncio.sleep(self.linger_ms / 1000)
            state.fsync_started = True
            await asyncio.get_running_loop().run_in_executor(self.executor, log.flush)
            self.fsyncs += 1
        except Exception as exc:
            # A disk error was logged by the log itself; anything else is a bug in the flusher,
            # which no waiter would log with its traceback.
            if not isinstance(exc, OSError):
                self.crash = f"{type(exc).__name__}: {exc}"
                logger.error("fsync of %s crashed: %s", log.directory, self.crash, exc_info=exc)
            raise
        finally:
            if state.next_round is None:
                state.running = None


def _quiet(round_: asyncio.Future[None]) -> asyncio.Future[None]:
    """Mark a round's failure as seen even if every waiter was cancelled: the log reported it
    (once, at ERROR), and "exception was never retrieved" would only repeat it later."""
    round_.add_done_callback(lambda done: done.cancelled() or done.exception())
    return round_


async def flush_on_schedule(group_commit: GroupCommit, logs: Callable[[], Iterable[PartitionLog]],
                            scheduler_interval_ms: int) -> None:
    """Kafka's log flusher: fsync each log whose oldest unflushed append is older than its
    flush.ms. It looks every log.flush.scheduler.interval.ms, and at least as often as the
    smallest flush.ms of any log, so a log's flush.ms is honoured even when the scheduler
    interval is left at its default (Kafka would then never look). Runs until cancelled.

    The logs are listed again after each sleep, and each is skipped once closed: a topic
    deleted meanwhile (even during another log's fsync) has nothing left to flush."""
    while True:
        finite = [log.config.flush_ms for log in logs() if log.config.flush_ms < NEVER]
        interval_ms = min([scheduler_interval_ms, *finite, _IDLE_CHECK_MS])
        await asyncio.sleep(max(interval_ms, 1) / 1000)
        now = time.monotonic()
        for log in list(logs()):
            if log.closed:
                continue
            age_ms = (now - log.last_flush) * 1000
            if log.unflushed_messages and age_ms >= log.config.flush_ms:
                with contextlib.suppress(OSError):  # logged by the log; it went offline
                    await group_commit.wait_durable(log)
