"""Relayed frames started in turns, one connection after another, so a flood from one client
never stalls another's request behind it.

A network process relays every connection's frames through one channel, in the order it read
them: a client pipelining a thousand JoinGroups puts them all in the channel ahead of another
client's OffsetCommit, and handed on in that order the commit waited for every one of them (50
ms and more in bench/join_storm.py). Kafka reads one request of a connection at a time, so a
pipelining client cannot get ahead of the others there either. Here the broker process takes
every frame out of the channel as it comes and starts up to FRAMES_IN_A_ROW of a read at once
while none waits; the rest wait, each connection's in order, and are started FRAMES_IN_A_ROW
per event-loop iteration, round-robin over the connections that have frames waiting; the
answers of the ones started leave between those slices.

What it holds is bounded by the network process: it forwards a frame only within its budget of
bytes and requests in flight per connection, and counts it until the answer comes back.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from kgroups.broker.net.connection import FRAMES_IN_A_ROW


class FrameTaker(Protocol):
    def frame(self, payload: bytes) -> None: ...


class FairFrames:
    """Frames waiting to start, per connection; `add` in arrival order, `drop` when the
    connection is gone, `read_done` after each read of the channel. While none waits, a frame
    starts at once, up to FRAMES_IN_A_ROW per read: the turns cost the common case (a few
    requests per connection in flight) no event-loop iteration of latency, which a pipelined
    client's throughput pays for (bench/broker.py's commits: 7% when every frame waited for
    the next pass)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[FrameTaker, deque[bytes]] = {}
        self._turns: deque[FrameTaker] = deque()  # connections with frames, next first
        self._started = 0  # frames started since the last read or pass
        self._due = False

    def add(self, connection: FrameTaker, payload: bytes) -> None:
        if not self._waiting and self._started < FRAMES_IN_A_ROW:
            self._started += 1
            connection.frame(payload)
            return
        frames = self._waiting.get(connection)
        if frames is None:
            frames = self._waiting[connection] = deque()
            self._turns.append(connection)
        frames.append(payload)
        self._pass_soon()

    def read_done(self) -> None:
        """The channel handed on what one read brought: the next read's frames may start at
        once again (while none waits)."""
        self._started = 0

    def drop(self, connection: FrameTaker) -> None:
        """The connection is gone: its waiting frames are owed to no one."""
        self._waiting.pop(connection, None)

    def _pass_soon(self) -> None:
        if not self._due:
            self._due = True
            self._loop.call_soon(self._start_some)

    def _start_some(self) -> None:
        """Start up to FRAMES_IN_A_ROW waiting frames, one per connection in turn; the rest
        wait for the next event-loop iteration."""
        self._due = False
        self._started = 0
        waiting, turns = self._waiting, self._turns
        try:
            while turns and self._started < FRAMES_IN_A_ROW:
                connection = turns.popleft()
                frames = waiting.get(connection)
                if frames is None:  # dropped
                    continue
                payload = frames.popleft()
                if frames:
                    turns.append(connection)
                else:
                    del waiting[connection]
                self._started += 1
                connection.frame(payload)
        finally:
            if turns:
                self._pass_soon()
