"""Wakes Fetch long polls when any partition grows, instead of having them poll the disk."""

from __future__ import annotations

import asyncio
import contextlib


class AppendNotifier:
    """One event for every append anywhere; a waiter wakes on the next append after it began.
    The event exists only while someone waits: most appends (offset commits) have no Fetch
    waiting on them, and need not make one."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def notify(self) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self, timeout: float) -> None:
        """Until the next append anywhere, or `timeout` seconds."""
        event = self._event
        if event is None:
            event = self._event = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
