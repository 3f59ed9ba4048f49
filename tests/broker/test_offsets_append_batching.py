"""Offset commits of one event-loop turn share a batch of their `__consumer_offsets`
partition (as Kafka's coordinator batches its appends), and none is answered before the batch
holding it is appended, or, where flush.messages asks for it, on disk.

A client pipelining commits gets them read, and handled, in one loop turn; each used to be
its own batch (a header, a CRC and a write per commit).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import (
    await_commits,
    commit_errors,
    connect,
    create_topic,
    standalone_commits,
)

from kgroups.broker.topics import OFFSETS_TOPIC
from kgroups.broker.wire import build, request_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.batch import iter_batches

GROUP = "batched"
TOPIC = "committed"
COMMITS = 40


def _ready(broker: Any) -> None:
    """The topic exists and the coordinator answers commits (its partitions loaded)."""
    with connect(broker.port) as admin:
        create_topic(admin, TOPIC, 1)
    await_commits(broker.port, [GROUP], TOPIC)


def _batches(broker: Any) -> list[int]:
    """The record count of each batch of the group's __consumer_offsets partition."""
    partition = broker.broker.coordinator.shard.partition_of(GROUP)
    log = broker.broker.logs.get(OFFSETS_TOPIC, partition)
    data = b"".join(segment.pread(segment.size, 0) for segment in log.segments())
    return [len(batch.records) for batch in iter_batches(data)]


def _committed(broker: Any) -> int:
    fetch = request_type(9, 8)
    with connect(broker.port) as client:
        (group,) = client.call(build(fetch, groups=(build(
            sibling(fetch, "OffsetFetchRequestGroup"), group_id=GROUP, member_id=None,
            member_epoch=-1, topics=None),), require_stable=False)).groups
    return int(group.topics[0].partitions[0].committed_offset)


def test_pipelined_commits_share_batches_and_all_land(inprocess_broker: Any) -> None:
    _ready(inprocess_broker)
    before = _batches(inprocess_broker)
    with socket.create_connection(("127.0.0.1", inprocess_broker.port), timeout=30) as sock:
        sock.sendall(standalone_commits([GROUP] * COMMITS, TOPIC))
        assert commit_errors(sock, COMMITS) == [ErrorCode.NONE] * COMMITS
    added = _batches(inprocess_broker)[len(before):]
    assert sum(added) == COMMITS  # every commit's record, once
    assert len(added) < COMMITS / 4, added  # read in one or a few loop turns: a few batches
    assert _committed(inprocess_broker) == COMMITS - 1  # the last one wins, in order


def test_no_commit_is_answered_before_the_fsync_that_holds_it(
    make_inprocess_broker: Any,
) -> None:
    """flush.messages=1: every append must be on disk before its commit is answered; with
    the fsync held back, none of a pipelined burst is answered, and all are once it runs."""
    broker = make_inprocess_broker("flush.messages=1")
    _ready(broker)
    group_commit = broker.broker.group_commit
    wait_durable = group_commit.wait_durable
    release: asyncio.Event | None = None

    async def held(log: Any) -> None:
        assert release is not None
        await release.wait()
        await wait_durable(log)

    async def hold() -> None:
        nonlocal release
        release = asyncio.Event()
        group_commit.wait_durable = held

    broker.call(hold)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        sock.sendall(standalone_commits([GROUP] * COMMITS, TOPIC, first_offset=100))
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1)
        sock.settimeout(30)

        async def let_go() -> None:
            assert release is not None
            release.set()

        broker.call(let_go)
        assert commit_errors(sock, COMMITS) == [ErrorCode.NONE] * COMMITS
    assert _committed(broker) == 100 + COMMITS - 1
