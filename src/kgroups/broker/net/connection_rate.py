"""max.connection.creation.rate: how many new connections a second the broker takes up, as a
whole and per listener (`listener.name.<name>.max.connection.creation.rate`).

Like Kafka, kgroups delays new connections beyond the rate instead of refusing them: a client
that reconnects in a loop, or a password guesser opening one connection per attempt (each
connection gets one SASL attempt), is slowed to the rate while the connections already open
are served as before. Up to one second's worth may arrive at once.
"""

from __future__ import annotations

import asyncio


class ConnectionRate:
    """A virtual-scheduling rate limiter: each admission books the next slot of 1/rate s."""

    def __init__(self, per_second: int) -> None:
        self._interval = 1.0 / per_second
        self._booked_until = 0.0  # when the last admitted connection's slot ends

    async def admit(self) -> None:
        now = asyncio.get_running_loop().time()
        self._booked_until = max(self._booked_until, now) + self._interval
        delay = self._booked_until - now - 1.0  # a second's worth passes without waiting
        if delay > 0:
            await asyncio.sleep(delay)


def limiter(raw: str | None) -> ConnectionRate | None:
    """None when unset (Kafka's default: no limit)."""
    if raw is None or not raw.strip():
        return None
    return ConnectionRate(max(1, int(raw)))
