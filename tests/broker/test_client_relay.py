"""A network process's client socket (`client_relay`): frames cut out of the bytes as they come
and relayed whole and in order, answers written in order and joined per event-loop iteration,
and every limit of the broker's own sockets kept: frame sizes, SASL's smaller limit and one frame
at a time before authentication, queued.max.requests, the memory budget, a client that does not
read its answers, one client's burst taking turns, idle connections, and a client that leaves
mid-frame or after its last frame.

The relay runs against a recording transport and link, so each rule is seen exactly: what was
relayed, written, reported taken, and whether reading is paused."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from kgroups.broker.config import BrokerConfig
from kgroups.broker.net.client_relay import ClientRelay
from kgroups.broker.net.connection import FRAMES_IN_A_ROW
from kgroups.broker.net.memory_budget import MemoryBudget
from kgroups.broker.security.listeners import Listener

PLAIN = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
SASL = Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 9093)


class RecordingTransport:
    """What the relay asks of its transport; `held` is what it keeps unsent (a client that does
    not read), reported back through pause_writing as asyncio's transports do."""

    def __init__(self) -> None:
        self.reading = True
        self.written: list[bytes] = []
        self.held = 0
        self.closed = False
        self.aborted = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else None

    def set_write_buffer_limits(self, high: int) -> None:
        assert high == 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.written.append(data)

    def get_write_buffer_size(self) -> int:
        return self.held

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True


class RecordingLink:
    """The broker process as the relay sees it."""

    def __init__(self) -> None:
        self.announced: list[int] = []
        self.frames: list[bytes] = []
        self.taken_bytes = 0
        self.ended = False

    def announce(self, relay: ClientRelay, peer: object) -> None:
        self.announced.append(relay.connection_id)

    def identify(self, relay: ClientRelay, principal: str) -> None:
        raise AssertionError("a plain listener names no principal")

    def forward(self, relay: ClientRelay, frame: bytes) -> None:
        self.frames.append(frame)

    def taken(self, relay: ClientRelay, count: int) -> None:
        self.taken_bytes += count

    def gone(self, relay: ClientRelay) -> None:
        self.ended = True


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


async def turn() -> None:
    """One event-loop iteration: what the relay scheduled for it has run."""
    await asyncio.sleep(0)


def relay_for(*overrides: str, listener: Listener = PLAIN, admitted: bool = True,
              budget: MemoryBudget | None = None,
              ) -> tuple[ClientRelay, RecordingTransport, RecordingLink]:
    config = BrokerConfig.build(overrides=overrides)
    link = RecordingLink()
    relay = ClientRelay(config, budget or MemoryBudget(-1, 60), link, 7, listener, admitted)
    transport = RecordingTransport()
    relay.connection_made(transport)  # type: ignore[arg-type]
    return relay, transport, link


def test_frames_are_relayed_whole_and_in_order_however_the_bytes_arrive() -> None:
    async def scenario() -> None:
        relay, _, link = relay_for()
        stream = frame(b"first") + frame(b"") + frame(b"third" * 100)
        for cut in (1, 3, 4, 6, 9, 10, 11, 40):
            relay.data_received(stream[:cut])
            stream = stream[cut:]
        relay.data_received(stream)
        assert link.frames == [b"first", b"", b"third" * 100]
    run(scenario)


def test_answers_leave_in_order_joined_per_iteration_and_are_reported_taken() -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for()
        relay.data_received(frame(b"a") + frame(b"b") + frame(b"c"))
        relay.answer(b"answer-a")
        relay.answer(b"")  # acks=0: nothing is owed to the client
        relay.answer(b"answer-c")
        assert transport.written == []  # written once the iteration's answers are in
        await turn()
        assert transport.written == [b"answer-aanswer-c"]
        assert link.taken_bytes == len(b"answer-aanswer-c")
    run(scenario)


def test_a_frame_over_the_size_limit_closes_before_its_body_is_read(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for("socket.request.max.bytes=100")
        relay.data_received(frame(b"x" * 100))  # at the limit: served
        relay.data_received(struct.pack(">i", 101))
        assert link.frames == [b"x" * 100]
        assert transport.closed
        relay.data_received(b"y" * 101)
        assert len(link.frames) == 1
    with caplog.at_level(logging.WARNING, "kgroups.server"):
        run(scenario)
    assert [r.getMessage() for r in caplog.records if "frame_size_invalid" in r.getMessage()]


def test_a_negative_frame_size_closes_the_connection(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for()
        relay.data_received(struct.pack(">i", -1))
        assert transport.closed and link.frames == []
    with caplog.at_level(logging.WARNING, "kgroups.server"):
        run(scenario)
    assert "frame_size_invalid" in caplog.text


def test_before_authenticating_a_sasl_client_sends_small_frames_one_at_a_time(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for("sasl.server.max.receive.size=64", listener=SASL)
        relay.data_received(frame(b"handshake") + frame(b"authenticate"))
        assert link.frames == [b"handshake"]  # the second waits for the first's answer
        assert not transport.reading
        relay.answer(b"handshake-answer")
        assert link.frames == [b"handshake", b"authenticate"]
        relay.authenticated()  # the broker process says so before the answer that did it
        relay.answer(b"authenticated")
        relay.data_received(frame(b"m" * 65) + frame(b"n"))  # larger than SASL's limit now
        assert link.frames[2:] == [b"m" * 65, b"n"]
        assert transport.reading

        refused, refused_transport, refused_link = relay_for(
            "sasl.server.max.receive.size=64", listener=SASL)
        refused.data_received(frame(b"m" * 65))
        assert refused_transport.closed and refused_link.frames == []
    with caplog.at_level(logging.WARNING, "kgroups.server"):
        run(scenario)
    assert "sasl_receive_size_exceeded" in caplog.text


def test_no_more_than_queued_max_requests_are_in_flight() -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for("queued.max.requests=2")
        relay.data_received(b"".join(frame(bytes([i])) for i in range(5)))
        assert link.frames == [b"\0", b"\1"]
        assert not transport.reading
        relay.answer(b"0")
        assert link.frames[2:] == [b"\2"]
        relay.answer(b"1")
        relay.answer(b"2")
        assert link.frames[3:] == [b"\3", b"\4"]
        assert not transport.reading  # two in flight again
        relay.answer(b"3")
        assert transport.reading
    run(scenario)


def test_one_clients_burst_takes_turns_with_the_others() -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for()
        count = 2 * FRAMES_IN_A_ROW + 3
        relay.data_received(b"".join(frame(str(i).encode()) for i in range(count)))
        assert len(link.frames) == FRAMES_IN_A_ROW
        assert not transport.reading  # the rest waits in the relay, not in the socket too
        relay.data_received(frame(b"late"))  # bytes already on their way are kept, in order
        await turn()
        assert len(link.frames) == 2 * FRAMES_IN_A_ROW
        await turn()
        assert link.frames == [str(i).encode() for i in range(count)] + [b"late"]
        assert transport.reading
    run(scenario)


def test_a_client_that_does_not_read_its_answers_is_not_read_either() -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for()
        relay.data_received(frame(b"a"))
        transport.held = 10  # the kernel took none of it: the transport keeps it
        relay.answer(b"x" * 10)
        await turn()
        relay.pause_writing()
        relay.data_received(frame(b"b"))
        assert link.frames == [b"a"] and not transport.reading
        assert link.taken_bytes == 0
        transport.held = 0
        relay.resume_writing()
        assert link.frames == [b"a", b"b"] and transport.reading
        assert link.taken_bytes == 10
    run(scenario)


def test_a_frame_waits_for_room_in_the_memory_budget() -> None:
    async def scenario() -> None:
        budget = MemoryBudget(100, close_after=60)
        other, _, _ = relay_for(budget=budget)
        other.data_received(frame(b"o" * 90))  # another connection holds 90 of 100
        relay, transport, link = relay_for(budget=budget)
        relay.data_received(frame(b"r" * 50))
        await turn()
        assert link.frames == [] and not transport.reading
        other.answer(b"")  # its frame's reservation ends with its answer
        for _ in range(3):
            await turn()
        assert link.frames == [b"r" * 50] and transport.reading
        assert budget.held_by(relay) == 50
        relay.answer(b"")
        assert budget.held_by(relay) == 0
    run(scenario)


def test_the_memory_budget_evicts_the_biggest_holder(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        budget = MemoryBudget(100, close_after=0.01)
        relay, transport, link = relay_for(budget=budget)
        relay.data_received(frame(b"a" * 100))
        await asyncio.sleep(0.05)
        assert transport.aborted
        relay.connection_lost(None)
        assert budget.total == 0 and link.ended
    with caplog.at_level(logging.WARNING, "kgroups.server"):
        run(scenario)
    assert "reason=memory_budget" in caplog.text


def test_a_client_that_leaves_after_its_frames_still_gets_their_answers() -> None:
    async def scenario() -> None:
        relay, transport, _ = relay_for()
        relay.data_received(frame(b"a") + frame(b"b"))
        assert relay.eof_received()  # keep the socket open to write
        assert not transport.closed
        relay.answer(b"A")
        relay.answer(b"B")
        await turn()
        assert transport.written == [b"AB"] and transport.closed
    run(scenario)


def test_frames_a_limit_held_back_are_still_answered_after_the_client_leaves() -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for("queued.max.requests=2")
        relay.data_received(b"".join(frame(bytes([i])) for i in range(5)))
        relay.eof_received()
        for i in range(5):
            assert link.frames == [bytes([j]) for j in range(min(i + 2, 5))]
            assert not transport.closed
            relay.answer(str(i).encode())
        await turn()
        assert transport.written == [b"01234"] and transport.closed
    run(scenario)


@pytest.mark.parametrize(("sent", "reason"), [
    (b"\0\0", "reason=truncated_size_prefix received=2"),
    (frame(b"abcdef")[:7], "reason=truncated_frame size=6 received=3"),
    (frame(b"whole") + b"\0", "reason=truncated_size_prefix received=1"),
    (frame(b"whole") + frame(b"abcdef")[:5], "reason=truncated_frame size=6 received=1"),
])
def test_a_client_that_leaves_mid_frame_is_logged_and_closed(
        caplog: pytest.LogCaptureFixture, sent: bytes, reason: str) -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for()
        relay.data_received(sent)
        relay.eof_received()
        assert transport.closed and link.frames == ([b"whole"] if b"whole" in sent else [])
    with caplog.at_level(logging.WARNING, "kgroups.server"):
        run(scenario)
    assert reason in caplog.text


def test_an_idle_connection_is_closed_but_not_one_waiting_for_an_answer(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        waiting, waiting_transport, _ = relay_for("connections.max.idle.ms=50")
        waiting.data_received(frame(b"long poll"))
        _, idle_transport, _ = relay_for("connections.max.idle.ms=50")
        await asyncio.sleep(0.2)
        assert idle_transport.closed and not waiting_transport.closed
    with caplog.at_level(logging.WARNING, "kgroups.server"):
        run(scenario)
    assert caplog.text.count("reason=idle") == 1


def test_nothing_is_relayed_before_the_broker_process_admits_the_connection() -> None:
    async def scenario() -> None:
        relay, transport, link = relay_for(admitted=False)
        assert link.announced == [7]
        relay.data_received(frame(b"early"))
        assert link.frames == [] and not transport.reading
        relay.admit()
        assert link.frames == [b"early"] and transport.reading

        refused, refused_transport, refused_link = relay_for(admitted=False)
        refused.refused()
        assert refused_transport.closed
        refused.connection_lost(None)
        assert refused_link.ended
    run(scenario)


def test_a_close_from_the_broker_process_writes_the_answers_before_it() -> None:
    async def scenario() -> None:
        relay, transport, _ = relay_for()
        relay.data_received(frame(b"a") + frame(b"b"))
        relay.answer(b"A")
        relay.close_from_broker()
        relay.answer(b"B")  # after the close: owed to no one
        await turn()
        assert transport.written == [b"A"] and transport.closed
    run(scenario)
