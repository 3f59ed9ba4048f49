"""Wakes Fetch long polls when any partition grows, instead of having them poll the disk."""

from __future__ import annotations

import asyncio
import contextlib


class AppendNotifier:
    """One event for every append anywhere; a waiter wakes on the next append after it began."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        """Until the next append anywhere, or `timeout` seconds."""
        event = self._event
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
