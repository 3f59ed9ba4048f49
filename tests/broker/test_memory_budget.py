"""The broker's memory budget (queued.max.request.bytes) across all connections.

The slow tests run `kgroups serve` as a subprocess and watch its RSS with psutil while hostile
clients try to make it hold memory: it may not grow past the budget plus its headroom plus
RSS_SLACK, must shrink back to within 10% of where it was once they are gone, and a healthy
client must be answered all along.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from broker_wire_helpers import connect, create_topic, fetch_request, produce_request
from memory_pressure import (
    MIB,
    FrameTrickler,
    HealthyClient,
    Hostile,
    LongPollFetcher,
    NeverReadingFetcher,
    RssSampler,
    fill_topic,
)
from tests.broker.servers import InProcessBroker, ServerProcess

from kgroups.broker.config import BrokerConfig, ConfigError
from kgroups.broker.net.memory_budget import MemoryBudget
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, iter_batches

pytestmark = pytest.mark.alone

BUDGET = 128 * MIB
CLOSE_MS = 1000
# Beyond the budget and its headroom: the answer being built when the budget fills, each
# connection's read-ahead (the event loop's stream buffer) and the interpreter's own churn.
RSS_SLACK = 32 * MIB


class _Holder:
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.evicted: tuple[int, int, int] | None = None

    def evict(self, held: int, total: int, limit: int) -> None:
        self.evicted = (held, total, limit)


def test_a_reservation_waits_until_room_is_released() -> None:
    async def scenario() -> list[str]:
        budget = MemoryBudget(100, close_after=60)
        first, second = _Holder("a"), _Holder("b")
        budget.set_held(first, 90)
        order: list[str] = []

        async def reserve() -> None:
            await budget.wait_for(lambda: budget.allows(50, light=False))
            budget.set_held(second, 50)
            order.append("reserved")

        waiter = asyncio.create_task(reserve())
        await asyncio.sleep(0.05)
        order.append("released")
        budget.set_held(first, 40)
        await waiter
        return order

    assert asyncio.run(scenario()) == ["released", "reserved"]


def test_a_client_that_reads_its_answers_may_use_the_headroom() -> None:
    async def scenario() -> None:
        budget = MemoryBudget(800, close_after=60)
        budget.set_held(_Holder("hog"), 800)
        assert not budget.allows(10, light=False)
        assert budget.allows(10, light=True)
        assert not budget.allows(budget.headroom + 1, light=True)
        assert MemoryBudget(-1, close_after=60).allows(10**12, light=False)

    asyncio.run(scenario())


def test_a_release_lets_one_waiter_on_at_a_time() -> None:
    """Each woken waiter charges before the next is considered, so a crowd of paused requests
    cannot all pass on one release."""

    async def scenario() -> int:
        budget = MemoryBudget(100, close_after=60)
        hog, crowd = _Holder("hog"), _Holder("crowd")
        budget.set_held(hog, 100)

        async def answer() -> None:
            await budget.wait_for(lambda: budget.allows(0, light=False))
            budget.set_held(crowd, budget.held_by(crowd) + 60)  # its answer, charged at once

        tasks = [asyncio.create_task(answer()) for _ in range(20)]
        await asyncio.sleep(0.01)
        budget.set_held(hog, 0)
        await asyncio.sleep(0.05)
        passed = sum(task.done() for task in tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return passed

    assert asyncio.run(scenario()) == 2  # 0 -> 60 -> 120: the third finds no room


def test_a_waiter_whose_connection_closed_leaves_on_recheck() -> None:
    """A connection closed while its frame waits for room (idle, a failed handler) stops
    waiting at once instead of keeping the budget exhausted until room appears."""

    async def scenario() -> bool:
        budget = MemoryBudget(100, close_after=60)
        budget.set_held(_Holder("hog"), 100)
        closed = False
        waiter = asyncio.create_task(
            budget.wait_for(lambda: closed or budget.allows(50, light=False)))
        await asyncio.sleep(0.01)
        closed = True
        budget.recheck()
        await asyncio.wait_for(waiter, 1)
        return budget.exhausted and budget.total == 100

    assert asyncio.run(scenario())


def test_the_biggest_holder_is_closed_when_the_budget_stays_exhausted() -> None:
    async def scenario() -> tuple[_Holder, _Holder, int]:
        budget = MemoryBudget(100, close_after=0.05)
        small, big = _Holder("small"), _Holder("big")
        budget.set_held(small, 30)
        budget.set_held(big, 80)
        await asyncio.sleep(0.2)
        return small, big, budget.total

    small, big, total = asyncio.run(scenario())
    assert big.evicted == (80, 110, 100)
    assert small.evicted is None  # 30 of 100 is not exhausted
    assert total == 30


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["queued.max.request.bytes=1000"], "queued.max.request.bytes"),
        (["socket.send.buffer.bytes=0"], "socket.send.buffer.bytes"),
        (["socket.receive.buffer.bytes=x"], "socket.receive.buffer.bytes"),
        (["fetch.max.bytes=100"], "fetch.max.bytes"),
        (["kgroups.memory.exhausted.close.ms=0"], "kgroups.memory.exhausted.close.ms"),
    ],
)
def test_memory_settings_are_validated(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.build(overrides=overrides)


def test_memory_settings_defaults_and_no_limit() -> None:
    config = BrokerConfig.build()
    assert config.queued_max_request_bytes == 256 * MIB
    assert config.socket_send_buffer_bytes == config.socket_receive_buffer_bytes == 102400
    assert config.fetch_max_bytes == 57671680
    unlimited = BrokerConfig.build(overrides=["queued.max.request.bytes=-1",
                                              "socket.send.buffer.bytes=-1"])
    assert unlimited.queued_max_request_bytes == -1


def test_a_frame_larger_than_a_read_chunk_is_served(inprocess_broker: InProcessBroker) -> None:
    """Frames over 256 KiB are read chunk by chunk into one buffer; the request still decodes
    and its records are stored byte for byte."""
    value = bytes(range(256)) * 3500  # ~875 KiB
    batch = build_batch([(b"k", value, 1_700_000_000_000)])
    with connect(inprocess_broker.port) as client:
        create_topic(client, "big")
        response = client.call(produce_request("big", 0, batch))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        fetched = client.call(fetch_request("big", 0, 0, max_bytes=2 * MIB))
    records = fetched.responses[0].partitions[0].records
    (stored,) = [r.value for b in iter_batches(bytes(records)) for r in b.records]
    assert stored == value


Figures = list[tuple[int, int, int]]  # per broker process: RSS before, peak, after


def _measure(server: ServerProcess, hostile: list[Hostile], seconds: float, done: int,
             then: Callable[[], None] | None = None) -> tuple[Figures, HealthyClient]:
    """(RSS before, peak, after) of each broker process while `hostile` run until `done` of
    them are closed or `seconds` pass, with a healthy client running throughout; `then` runs
    once they started."""
    # The broker process and its network processes: each holds the budget's worth at most.
    assert server.process is not None
    samplers = [RssSampler(pid) for pid in
                (server.process.pid, *(p.pid for p in server.network_processes()))]
    healthy = HealthyClient(server.port).start()
    befores = [sampler.settled(1.5) for sampler in samplers]
    for sampler in samplers:
        sampler.start()
    for client in hostile:
        client.start()
    if then is not None:
        then()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and sum(c.closed_by_broker for c in hostile) < done:
        time.sleep(0.2)
    for client in hostile:
        client.close()
    peaks = [sampler.close() for sampler in samplers]
    afters = [sampler.settled(3.0) for sampler in samplers]
    healthy.close()
    return list(zip(befores, peaks, afters, strict=True)), healthy


def _check(server: ServerProcess, figures: Figures, healthy: HealthyClient) -> None:
    for before, peak, after in figures:
        assert peak - before <= BUDGET + BUDGET // 8 + RSS_SLACK, (before, peak)
        assert after <= before * 1.10, (before, after)
    assert healthy.failures == 0
    assert healthy.calls >= 20
    assert healthy.worst < 10, healthy.worst
    assert "Traceback" not in server.log_text()


@pytest.mark.parametrize("network_threads", [0, 1])
def test_clients_that_never_read_their_fetches_cannot_outgrow_the_budget(
    start_kgroups_server,  # type: ignore[no-untyped-def]
    network_threads: int,
) -> None:
    """In one process, and with a network process (whose answers the broker process counts
    until the kernel took them)."""
    server = start_kgroups_server(f"queued.max.request.bytes={BUDGET}",
                                  f"kgroups.memory.exhausted.close.ms={CLOSE_MS}",
                                  f"num.network.threads={network_threads}")
    fill_topic(server.port, "t", 8)
    fetchers: list[Hostile] = [NeverReadingFetcher(server.port, topic="t") for _ in range(4)]
    least_closed = 3 if network_threads else 1  # see below
    figures, healthy = _measure(server, fetchers, 30, done=least_closed)
    _check(server, figures, healthy)
    closed = sum(f.closed_by_broker for f in fetchers)
    # The biggest holders are closed while the budget stays exhausted; the last one left may
    # then hold less than the budget and is not closed (1 run in 3 on an idle machine). A
    # socket read in the broker process takes turns with the others (FRAMES_IN_A_ROW
    # requests), so its first answers wait in its transport, and stop its reading, before it
    # has read more: after the first close the others may all fit in the budget.
    assert closed >= least_closed
    assert server.log_text().count("reason=memory_budget") == closed


@pytest.mark.slow
def test_ten_trickled_100_mib_frames_cannot_outgrow_the_budget(
    start_kgroups_server,  # type: ignore[no-untyped-def]
) -> None:
    """One 100 MiB frame fits the 128 MiB budget at a time; the others wait unread (TCP pushes
    back) and each holder is closed after the budget has stayed exhausted for a second."""
    server = start_kgroups_server(f"queued.max.request.bytes={BUDGET}",
                                  f"kgroups.memory.exhausted.close.ms={CLOSE_MS}")
    tricklers: list[Hostile] = [FrameTrickler(server.port) for _ in range(10)]
    figures, healthy = _measure(server, tricklers, 12, done=10)
    _check(server, figures, healthy)
    log = server.log_text()
    assert log.count("reason=memory_budget") >= 3
    assert log.count("reason=memory_budget") == sum(t.closed_by_broker for t in tricklers)


@pytest.mark.slow
def test_long_polls_woken_together_cannot_outgrow_the_budget(
    start_kgroups_server,  # type: ignore[no-untyped-def]
) -> None:
    """600 unread Fetches waiting at the end of a topic are woken by one append: each reads only
    while the budget has room, instead of 600 answers of 1 MiB being built at once. (With 2,000
    the interpreter's small-object arenas keep a one-time ~9 MiB high-water mark after they
    are gone, which is not the budget's to bound: kept below the 10% check here.)"""
    server = start_kgroups_server(f"queued.max.request.bytes={BUDGET}",
                                  f"kgroups.memory.exhausted.close.ms={CLOSE_MS}")
    fill_topic(server.port, "lp", 1)  # offsets 0-14: the log and the Fetch path warmed up
    pollers: list[Hostile] = [LongPollFetcher(server.port, topic="lp", offset=15, count=150)
                              for _ in range(4)]

    def append_after_the_polls_queued() -> None:
        time.sleep(3)
        fill_topic(server.port, "lp", 2, create=False)

    figures, healthy = _measure(server, pollers, 30, done=4,
                                            then=append_after_the_polls_queued)
    _check(server, figures, healthy)
    assert sum(p.closed_by_broker for p in pollers) == 4
