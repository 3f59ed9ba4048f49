"""One client pipelining thousands of ConsumerGroupHeartbeat joins into one group must not stall
everyone else (issue 29): another client's OffsetCommit keeps being answered meanwhile, and the
joins themselves are all answered, fast.

Forming a group used to recompute the whole target assignment at every join (quadratic), each
join run to completion on the broker's one event loop, hundreds of a connection's pipelined
requests in one loop turn: 2,000 joins kept a bystander waiting for tens of seconds. Now the
target is computed at most once per group.consumer.assignment.interval.ms, and the core takes
at most GROUP_REQUESTS_PER_TURN requests of one group per loop turn.
"""

from __future__ import annotations

import datetime
import socket
import struct
import threading
import time
from collections import Counter
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import connect, create_topic

from kgroups.broker.coordinator_runtime import GROUP_REQUESTS_PER_TURN
from kgroups.broker.wire import (
    build,
    decode_response,
    encode_request,
    request_type,
    response_type,
    sibling,
)
from kgroups.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.alone]

JOINS = 2000
TOPIC = "storm"
# A bystander's commit is a millisecond's work; before the fix it waited far longer than this.
BYSTANDER_LIMIT_S = 3.0
JOINS_LIMIT_S = 60.0


def _joins(count: int) -> bytes:
    heartbeat = request_type(68, 1)
    return b"".join(encode_request(index + 1, "storm", build(
        heartbeat, group_id="storm-group", member_id=f"member-{index:05d}", member_epoch=0,
        instance_id=None, rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
        subscribed_topic_names=(TOPIC,), subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=())) for index in range(count))


def _read_answers(sock: socket.socket, count: int, last: type[Any] | None = None) -> list[Any]:
    """`count` heartbeat answers, the last one read as `last` when given."""
    reader = sock.makefile("rb")
    answers = []
    for index in range(count):
        schema = last if last is not None and index == count - 1 else response_type(68, 1)
        (size,) = struct.unpack(">i", reader.read(4))
        answers.append(decode_response(schema, reader.read(size))[1])
    return answers


def _commit(client: Any) -> int:
    """An offset commit for the bystander's group; its error code."""
    commit = request_type(8, 8)
    (topic,) = client.call(build(
        commit, group_id="bystander", generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=(build(
            sibling(commit, "OffsetCommitRequestTopic"), name=TOPIC, partitions=(build(
                sibling(commit, "OffsetCommitRequestPartition"), partition_index=0,
                committed_offset=7, committed_leader_epoch=-1, committed_metadata=""),)),))
    ).topics
    return int(topic.partitions[0].error_code)


def _storm_group_loading(client: Any) -> bool:
    """Whether the storm group's __consumer_offsets partition is still being loaded: an
    OffsetFetch says so without creating the group (a commit would make it a classic one)."""
    fetch = request_type(9, 8)
    (group,) = client.call(build(fetch, groups=(build(
        sibling(fetch, "OffsetFetchRequestGroup"), group_id="storm-group", topics=None),),
        require_stable=False)).groups
    return int(group.error_code) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def _await_coordinator(client: Any) -> None:
    """Until the coordinator has loaded the bystander's and the storm's __consumer_offsets
    partitions (COORDINATOR_LOAD_IN_PROGRESS): partitions load one after another, so one
    group answering says nothing of the other."""
    deadline = time.monotonic() + 60
    while (error := _commit(client)) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or \
            _storm_group_loading(client):
        assert time.monotonic() < deadline, "the coordinator never finished loading"
        time.sleep(0.1)
    assert error == ErrorCode.NONE


def test_one_group_gets_a_bounded_share_of_each_loop_turn(inprocess_broker: Any) -> None:
    """Counted, not timed: a burst of joins pipelined on one connection reaches the core at
    most GROUP_REQUESTS_PER_TURN per event-loop turn (plus those let go at the turn's start),
    however many the connection read at once."""
    broker = inprocess_broker.broker
    with connect(inprocess_broker.port) as admin:
        create_topic(admin, TOPIC, 8)
        _await_coordinator(admin)
    turns = [0]
    per_turn: Counter[int] = Counter()
    running = [True]

    def tick() -> None:  # once per loop iteration: each run re-queues itself for the next
        turns[0] += 1
        if running[0]:
            inprocess_broker.loop.call_soon(tick)

    shard = broker.coordinator.shard
    heartbeat = shard.consumer_group_heartbeat

    def counted(request: Any, now: int) -> Any:
        per_turn[turns[0]] += 1
        return heartbeat(request, now)

    async def install() -> None:
        shard.consumer_group_heartbeat = counted
        tick()

    inprocess_broker.call(install)
    joins = 600
    with socket.create_connection(("127.0.0.1", inprocess_broker.port), timeout=30) as storm:
        storm.sendall(_joins(joins))
        answers = _read_answers(storm, joins)
    running[0] = False
    assert {ErrorCode(int(a.error_code)) for a in answers} == {ErrorCode.NONE}
    assert sum(per_turn.values()) == joins
    assert max(per_turn.values()) <= 2 * GROUP_REQUESTS_PER_TURN, max(per_turn.values())


def test_a_describe_pipelined_after_the_joins_sees_them_all(inprocess_broker: Any) -> None:
    """Requests wait for their turn per group, in order: a ConsumerGroupDescribe sent behind a
    burst of joins on the same connection is answered with every one of them, as Kafka
    answers a connection's requests one after another."""
    with connect(inprocess_broker.port) as admin:
        create_topic(admin, TOPIC, 8)
        _await_coordinator(admin)
    joins = 300
    describe = encode_request(joins + 1, "storm", build(
        request_type(69, 1), group_ids=("storm-group",), include_authorized_operations=False))
    with socket.create_connection(("127.0.0.1", inprocess_broker.port), timeout=30) as storm:
        storm.sendall(_joins(joins) + describe)
        answers = _read_answers(storm, joins + 1, response_type(69, 1))
    (described,) = answers[-1].groups
    assert len(described.members) == joins


def test_a_join_storm_does_not_stall_another_client(kgroups_server: Any) -> None:
    with connect(kgroups_server.port) as admin:
        create_topic(admin, TOPIC, 8)
    with connect(kgroups_server.port) as bystander:
        _await_coordinator(bystander)
        bystander.timeout = BYSTANDER_LIMIT_S
        answers: list[Any] = []
        storm = socket.create_connection(("127.0.0.1", kgroups_server.port), timeout=JOINS_LIMIT_S)
        started = time.monotonic()

        def pipeline() -> None:
            storm.sendall(_joins(JOINS))
            answers.extend(_read_answers(storm, JOINS))

        thread = threading.Thread(target=pipeline, daemon=True)
        thread.start()
        waits = []
        try:
            while thread.is_alive():
                before = time.monotonic()
                # WireError once it waits past BYSTANDER_LIMIT_S
                assert _commit(bystander) == ErrorCode.NONE
                waits.append(time.monotonic() - before)
                time.sleep(0.01)
            thread.join()
        finally:
            storm.close()
    elapsed = time.monotonic() - started
    assert len(answers) == JOINS, f"{len(answers)} of {JOINS} joins answered in {elapsed:.1f} s"
    assert {ErrorCode(int(a.error_code)) for a in answers} == {ErrorCode.NONE}
    assert waits and max(waits) < BYSTANDER_LIMIT_S
    # The first member got the target computed at its join; those joining within the interval
    # are at that epoch too, with nothing assigned until the next computation.
    assert {int(a.member_epoch) for a in answers} == {int(answers[0].member_epoch)}
