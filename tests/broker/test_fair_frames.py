"""A client pipelining hundreds of requests does not push another client's request behind all
of them: each connection gets its turn, FRAMES_IN_A_ROW requests at a time, whether the broker
reads its own sockets or a network process relays them (`fair_frames`). Kafka reads one request
of a connection at a time, so a pipelining client cannot get ahead of the others there either.

Counted, not timed: when the second client's answer has arrived, how many of the flood's
answers had been sent before it (they are in the flooding socket's receive buffer by then, on
loopback). Before the turns the broker started every request of the flood first: all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import psutil
import pytest
from tests.broker.broker_wire_helpers import (
    await_commits,
    connect,
    create_topic,
    metadata_request,
    standalone_commits,
)

from kgroups.broker.net.connection import FRAMES_IN_A_ROW
from kgroups.broker.net.fair_frames import FairFrames
from kgroups.broker.wire import encode_request

TOPIC = "fair"
FLOOD = 400  # under queued.max.requests (500): the whole flood is read and started at once


class Taker:
    def __init__(self, name: str, started: list[tuple[str, bytes]]) -> None:
        self.name = name
        self._started = started

    def frame(self, payload: bytes) -> None:
        self._started.append((self.name, payload))


async def _passes(frames: FairFrames, started: list[Any]) -> list[list[Any]]:
    """What each later event-loop iteration started, until nothing more was."""
    passes = []
    while True:
        before = len(started)
        await asyncio.sleep(0)
        if len(started) == before:
            return passes
        passes.append(started[before:])


def test_connections_take_turns_in_order_and_a_dropped_one_starts_nothing_more() -> None:
    async def scenario() -> None:
        started: list[tuple[str, bytes]] = []
        frames = FairFrames(asyncio.get_running_loop())
        flood, late, gone = (Taker(name, started) for name in ("flood", "late", "gone"))
        for index in range(3 * FRAMES_IN_A_ROW):
            frames.add(flood, b"%d" % index)
        # Nothing waited: the first FRAMES_IN_A_ROW started at once, the rest wait.
        assert started == [("flood", b"%d" % index) for index in range(FRAMES_IN_A_ROW)]
        frames.add(gone, b"g0")
        frames.add(gone, b"g1")
        frames.add(late, b"l0")
        frames.drop(gone)
        passes = await _passes(frames, started)
        # The late connection's one frame starts in the first pass, beside the flood's.
        assert passes[0][:3] == [("flood", b"%d" % FRAMES_IN_A_ROW), ("late", b"l0"),
                                 ("flood", b"%d" % (FRAMES_IN_A_ROW + 1))]
        assert all(len(each) <= FRAMES_IN_A_ROW for each in passes)
        assert [payload for name, payload in started if name == "flood"] == [
            b"%d" % index for index in range(3 * FRAMES_IN_A_ROW)]
        assert not [entry for entry in started if entry[0] == "gone"]
        # Idle again: the next frame starts at once.
        frames.add(late, b"l1")
        assert started[-1] == ("late", b"l1")

    asyncio.run(scenario())


def test_each_read_starts_its_frames_at_once_while_none_waits() -> None:
    async def scenario() -> None:
        started: list[tuple[str, bytes]] = []
        frames = FairFrames(asyncio.get_running_loop())
        busy, quiet = Taker("busy", started), Taker("quiet", started)
        for index in range(FRAMES_IN_A_ROW):
            frames.add(busy, b"%d" % index)
        frames.read_done()
        frames.add(quiet, b"q0")  # a new read, nothing waiting: at once
        assert started[-1] == ("quiet", b"q0")
        for index in range(FRAMES_IN_A_ROW):
            frames.add(busy, b"more %d" % index)
        frames.read_done()
        frames.add(quiet, b"q1")  # the busy one's last frame waits: so does this one
        assert started[-1] != ("quiet", b"q1")
        passes = await _passes(frames, started)
        assert passes[0] == [("busy", b"more %d" % (FRAMES_IN_A_ROW - 1)), ("quiet", b"q1")]

    asyncio.run(scenario())


def _answers_waiting(sock: socket.socket) -> int:
    """Whole answers already in the socket's receive buffer."""
    sock.setblocking(False)
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    count = position = 0
    while position + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, position)
        if position + 4 + size > len(data):
            break
        position += 4 + size
        count += 1
    return count


def _metadata_requests(count: int) -> bytes:
    """Metadata requests for the topic: answered at once, each where it is read
    (`first_step`), not in a task of its own."""
    return b"".join(encode_request(index + 1, "broker-tests", metadata_request(TOPIC))
                    for index in range(count))


def _flood_answers_before_the_other(port: int,
                                    paused: Callable[[], AbstractContextManager[None]],
                                    flood_kind: str = "commits") -> int:
    """Both clients' requests are sent while the broker's reading is `paused`, so that both
    are there when it next reads (else, on a loaded machine, the broker could answer much of
    the flood before the other client's request is even sent)."""
    # Each commit of its own group: one group's requests take turns of their own in the
    # coordinator (GROUP_REQUESTS_PER_TURN).
    flood_groups = [f"flood-{index}" for index in range(FLOOD)]
    with connect(port) as admin:
        create_topic(admin, TOPIC, 1)
    await_commits(port, [*flood_groups, "other"], TOPIC)
    # The other client asks the same kind: a commit takes several loop iterations to be
    # answered (its task, the append), a Metadata none beyond the one that reads it.
    flood_requests, other_request = (
        (standalone_commits(flood_groups, TOPIC), standalone_commits(["other"], TOPIC))
        if flood_kind == "commits" else (_metadata_requests(FLOOD), _metadata_requests(1)))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as flood, \
            socket.create_connection(("127.0.0.1", port), timeout=30) as other:
        with paused():
            flood.sendall(flood_requests)
            other.sendall(other_request)
        (size,) = struct.unpack(">i", other.recv(4, socket.MSG_WAITALL))
        other.recv(size, socket.MSG_WAITALL)
        return _answers_waiting(flood)


def test_a_request_is_not_started_behind_another_clients_flood(inprocess_broker: Any) -> None:
    """The broker reading its own sockets (num.network.threads=0), its event loop held while
    the clients send."""
    @contextlib.contextmanager
    def loop_held() -> Iterator[None]:
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            holding.set()
            release.wait(30)

        inprocess_broker.loop.call_soon_threadsafe(hold)
        holding.wait(30)
        try:
            yield
        finally:
            release.set()

    assert _flood_answers_before_the_other(inprocess_broker.port, loop_held) < FLOOD // 2


@pytest.mark.slow
def test_a_request_is_not_answered_behind_a_flood_answered_at_once(
        start_kgroups_server: Any) -> None:
    """A flood of Metadata, each answered where it is read (`first_step`, no task to take
    turns with): the reader itself yields after FRAMES_IN_A_ROW of them. The broker is a
    process of its own, stopped while the clients send (in this process its answers, tens of
    microseconds each, would all be out before the test's thread could count them)."""
    server = start_kgroups_server("num.network.threads=0")
    assert server.process is not None
    broker = psutil.Process(server.process.pid)

    @contextlib.contextmanager
    def broker_stopped() -> Iterator[None]:
        broker.suspend()
        try:
            yield
        finally:
            broker.resume()

    assert _flood_answers_before_the_other(server.port, broker_stopped,
                                           "metadata") < FLOOD // 2


@pytest.mark.slow
def test_a_relayed_request_is_not_started_behind_another_clients_flood(
        start_kgroups_server: Any) -> None:
    """Frames relayed by a network process (stopped while the clients send), all of the flood
    in the channel ahead of the other client's one."""
    server = start_kgroups_server("num.network.threads=1")

    @contextlib.contextmanager
    def front_stopped() -> Iterator[None]:
        (front,) = server.network_processes()
        front.suspend()
        try:
            yield
        finally:
            front.resume()

    assert _flood_answers_before_the_other(server.port, front_stopped) < FLOOD // 2
