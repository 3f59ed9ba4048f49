"""A request of an API answered at once runs its first step where it is read (`first_step`): its
answer is there without a task, a failure is its future's, and one that waits after all goes on
in a task exactly where it stopped, cancellable as if a task had run it from the start."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import (
    await_commits,
    connect,
    create_topic,
    read_frame,
    standalone_commits,
)

from kgroups.broker.net import first_step
from kgroups.broker.wire import (
    build,
    decode_response,
    encode_request,
    request_type,
    response_type,
    sibling,
)

TOPIC = "first-step"


def _run(scenario: Any) -> Any:
    return asyncio.run(scenario())


def test_an_answer_at_once_needs_no_task() -> None:
    steps: list[str] = []

    async def work() -> bytes:
        steps.append("ran")
        return b"answer"

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        answered = first_step.start(loop, work())
        # Done before the event loop ran anything: no task was made for it.
        assert steps == ["ran"]
        assert not isinstance(answered, asyncio.Task)
        assert answered.result() == b"answer"

    _run(scenario)


def test_a_first_step_failure_is_the_futures() -> None:
    async def work() -> bytes:
        raise ValueError("no such thing")

    async def scenario() -> None:
        failed = first_step.start(asyncio.get_running_loop(), work())
        with pytest.raises(ValueError, match="no such thing"):
            failed.result()

    _run(scenario)


def test_a_request_that_waits_goes_on_in_a_task_from_where_it_stopped() -> None:
    steps: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[int] = loop.create_future()

        async def work() -> bytes:
            steps.append("first")
            given = await turn
            steps.append(f"then {given}")
            await asyncio.sleep(0)  # and any later wait, as in a task
            return b"answer %d" % given

        answer = first_step.start(loop, work())
        assert steps == ["first"]
        assert isinstance(answer, asyncio.Task)
        await asyncio.sleep(0)
        assert not answer.done()  # still waiting for its turn
        turn.set_result(7)
        assert await answer == b"answer 7"
        assert steps == ["first", "then 7"]

    _run(scenario)


@pytest.mark.parametrize("before_its_first_step", [True, False])
def test_a_waiting_request_cancelled_gives_up_what_it_waits_for(
    before_its_first_step: bool,
) -> None:
    """Cancelled (its connection closed) before its task ever ran or while it waits, the
    request's wait is cancelled, as a task that had run it from the start cancels it, and the
    request's own clean-up runs (a group's turn handed back)."""
    cleaned: list[bool] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()

        async def work() -> bytes:
            try:
                await turn
            except asyncio.CancelledError:
                cleaned.append(True)
                raise
            return b"never"

        answer = first_step.start(loop, work())
        if not before_its_first_step:
            await asyncio.sleep(0)
        answer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await answer
        assert turn.cancelled()
        assert cleaned == [True]

    _run(scenario)


def test_a_fetch_pipelined_behind_a_commit_sees_it(inprocess_broker: Any) -> None:
    """OffsetFetch is answered at once, but not ahead of a request of its connection still to
    start: pipelined behind an OffsetCommit, it reads the committed offset, as from Kafka,
    which takes a connection's requests one after another."""
    with connect(inprocess_broker.port) as admin:
        create_topic(admin, TOPIC, 1)
    await_commits(inprocess_broker.port, ["ordered"], TOPIC)
    fetch = request_type(9, 8)
    fetch_frame = encode_request(2, "broker-tests", build(fetch, groups=(build(
        sibling(fetch, "OffsetFetchRequestGroup"), group_id="ordered", topics=(build(
            sibling(fetch, "OffsetFetchRequestTopics"), name=TOPIC, partition_indexes=(0,)),)),),
        require_stable=False))
    with socket.create_connection(("127.0.0.1", inprocess_broker.port), timeout=30) as sock:
        sock.sendall(standalone_commits(["ordered"], TOPIC, first_offset=4242) + fetch_frame)
        _, committed = decode_response(response_type(8, 8), read_frame(sock))
        _, answer = decode_response(response_type(9, 8), read_frame(sock))
    assert int(committed.topics[0].partitions[0].error_code) == 0
    (group,) = answer.groups
    (topic,) = group.topics
    assert [int(p.committed_offset) for p in topic.partitions] == [4242]
