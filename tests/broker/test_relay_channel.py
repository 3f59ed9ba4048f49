"""The channel between a network process and the broker process hands a burst of messages on in
slices, one per event-loop iteration, so the broker's first answers leave while it still works
on the rest (a whole burst handled at once made both processes wait on each other in turns);
order is kept, reading pauses while a slice waits, and nothing is handed on once the channel
is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kgroups.broker.net.relay_channel import HEADER, MESSAGES_PER_PASS, Channel, Kind


class RecordingTransport:
    """What the channel asks of its transport: reading paused and resumed, bytes written."""

    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        pass


def burst(count: int) -> bytes:
    """`count` FRAME messages of connection 7, payload i, as one read from the socket."""
    return b"".join(HEADER.pack(Kind.FRAME, 7, len(payload)) + payload
                    for payload in (str(i).encode() for i in range(count)))


def channel_with_log(per_pass: int | None = MESSAGES_PER_PASS,
                     handed: Callable[[], None] | None = None,
                     ) -> tuple[Channel, RecordingTransport, list[tuple[int, int, bytes]]]:
    received: list[tuple[int, int, bytes]] = []
    channel = Channel(lambda *message: received.append(message), lambda: None, per_pass,
                      handed)
    transport = RecordingTransport()
    channel.connection_made(transport)  # type: ignore[arg-type]
    return channel, transport, received


async def passes_until_idle(channel: Channel, received: list[Any]) -> list[int]:
    """How many messages each later event-loop iteration handed on, until none was left."""
    sizes = []
    while True:
        before = len(received)
        await asyncio.sleep(0)
        if len(received) == before:
            return sizes
        sizes.append(len(received) - before)


def test_a_burst_is_handed_on_in_slices_in_order() -> None:
    asyncio.run(_a_burst_is_handed_on_in_slices_in_order())


async def _a_burst_is_handed_on_in_slices_in_order() -> None:
    channel, transport, received = channel_with_log()
    count = 3 * MESSAGES_PER_PASS + 5

    channel.data_received(burst(count))
    assert len(received) == MESSAGES_PER_PASS
    assert transport.paused  # the socket is not read while a slice waits

    later = await passes_until_idle(channel, received)
    assert later == [MESSAGES_PER_PASS, MESSAGES_PER_PASS, 5]
    assert [payload for _, _, payload in received] == [str(i).encode() for i in range(count)]
    assert all(kind == Kind.FRAME and connection == 7 for kind, connection, _ in received)
    assert not transport.paused and transport.pauses == 1


def test_the_broker_process_end_takes_a_whole_burst_at_once() -> None:
    """Its FairFrames slices the work per connection instead, which needs every frame in hand
    (a frame behind a flood would otherwise wait for the whole flood to be handed on)."""
    asyncio.run(_the_broker_process_end_takes_a_whole_burst_at_once())


async def _the_broker_process_end_takes_a_whole_burst_at_once() -> None:
    reads: list[int] = []  # messages handed on before each `handed` call
    channel, transport, received = channel_with_log(None, lambda: reads.append(len(received)))
    count = 3 * MESSAGES_PER_PASS + 5

    channel.data_received(burst(count))
    assert [payload for _, _, payload in received] == [str(i).encode() for i in range(count)]
    assert await passes_until_idle(channel, received) == []
    assert transport.pauses == 0
    assert reads == [count]  # told once, after the read's last message


def test_a_message_split_across_reads_waits_for_its_end_without_pausing() -> None:
    asyncio.run(_a_message_split_across_reads_waits_for_its_end_without_pausing())


async def _a_message_split_across_reads_waits_for_its_end_without_pausing() -> None:
    channel, transport, received = channel_with_log()
    data = burst(MESSAGES_PER_PASS + 1)
    cut = len(data) - 2  # the last message's payload is incomplete

    channel.data_received(data[:cut])
    assert len(received) == MESSAGES_PER_PASS
    assert not transport.paused  # nothing whole waits: read on
    channel.data_received(data[cut:])
    assert [payload for _, _, payload in received][-1] == str(MESSAGES_PER_PASS).encode()


def test_nothing_is_handed_on_once_the_channel_is_lost() -> None:
    asyncio.run(_nothing_is_handed_on_once_the_channel_is_lost())


async def _nothing_is_handed_on_once_the_channel_is_lost() -> None:
    channel, _, received = channel_with_log()
    channel.data_received(burst(2 * MESSAGES_PER_PASS))
    channel.connection_lost(None)

    assert await passes_until_idle(channel, received) == []
    assert len(received) == MESSAGES_PER_PASS
