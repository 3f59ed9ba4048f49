"""Consumer groups through failures, on a real `kgroups serve`: a static member restarting
without a rebalance, a SIGKILLed member expiring after its session timeout, and broker restarts
(graceful and kill -9) keeping committed offsets and group state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from group_interop_helpers import (
    FAST_GROUP_OVERRIDES,
    TrackedConsumer,
    create_topic,
    describe,
    produce,
    stable_with,
    wait_until,
)
from tests.broker.servers import ServerProcess

from kgroups.tools.admin import AdminError

pytestmark = pytest.mark.interop

PARTITIONS = 4


def _pump(*members: TrackedConsumer) -> None:
    for member in members:
        member.pump()


def test_static_member_restart_keeps_partitions_without_rebalance(
    start_kgroups_server,  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    create_topic(server.bootstrap, "static-topic", PARTITIONS)
    settings = {"session.timeout.ms": 10_000}
    first = TrackedConsumer(server.bootstrap, "static-group", "static-topic", "static-a",
                            **{"group.instance.id": "instance-a"}, **settings)
    other = TrackedConsumer(server.bootstrap, "static-group", "static-topic", "static-b",
                            **{"group.instance.id": "instance-b"}, **settings)
    restarted: TrackedConsumer | None = None
    try:
        wait_until(stable_with(server.bootstrap, "static-group", 2), "a Stable group of 2",
                   pump=lambda: _pump(first, other))
        wait_until(lambda: len(first.owned) + len(other.owned) == PARTITIONS,
                   "both members assigned", pump=lambda: _pump(first, other))
        partitions_before = set(first.owned)
        other_events = list(other.events)
        members_before = {m.group_instance_id: m.member_id
                          for m in describe(server.bootstrap, "static-group").members}

        first.close()  # a static member sends no LeaveGroup: the group keeps its slot
        restarted = TrackedConsumer(server.bootstrap, "static-group", "static-topic",
                                    "static-a-again", **{"group.instance.id": "instance-a"},
                                    **settings)
        wait_until(lambda: restarted is not None and bool(restarted.owned),
                   "the restarted member's assignment", pump=lambda: _pump(restarted, other))
        for _ in range(10):
            _pump(restarted, other)

        assert restarted.owned == partitions_before
        assert other.events == other_events  # no revocation, no new assignment: no rebalance
        after = describe(server.bootstrap, "static-group")
        assert after.state == "Stable"
        members_after = {m.group_instance_id: m.member_id for m in after.members}
        assert members_after["instance-b"] == members_before["instance-b"]
        assert members_after["instance-a"] != members_before["instance-a"]  # a fresh member id
    finally:
        other.close()
        if restarted is not None:
            restarted.close()


_MEMBER_SCRIPT = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                         "session.timeout.ms": int(sys.argv[4]), "heartbeat.interval.ms": 200,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([sys.argv[3]], on_assign=lambda c, ps: print("assigned", flush=True))
    while True:
        consumer.poll(0.1)
""")


def test_sigkilled_member_is_removed_after_its_session_timeout(
    start_kgroups_server,  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    create_topic(server.bootstrap, "kill-topic", PARTITIONS)
    session_timeout_ms = 3000
    victim = subprocess.Popen(
        [sys.executable, "-c", _MEMBER_SCRIPT, server.bootstrap, "kill-group", "kill-topic",
         str(session_timeout_ms)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    survivor = TrackedConsumer(server.bootstrap, "kill-group", "kill-topic", "survivor",
                               **{"session.timeout.ms": session_timeout_ms})
    try:
        wait_until(stable_with(server.bootstrap, "kill-group", 2), "a Stable group of 2",
                   pump=survivor.pump)
        wait_until(lambda: 0 < len(survivor.owned) < PARTITIONS, "a shared assignment",
                   pump=survivor.pump)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        killed_at = time.monotonic()

        wait_until(lambda: survivor.owned == set(range(PARTITIONS)),
                   "the survivor owning every partition", pump=survivor.pump)
        # The coordinator waited for the session timeout before moving the partitions (the
        # survivor's rebalance itself takes a little while longer).
        assert time.monotonic() - killed_at >= session_timeout_ms / 1000 * 0.9
        after = describe(server.bootstrap, "kill-group")
        assert after.state == "Stable"
        assert [m.client_id for m in after.members] == ["survivor"]
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(timeout=30)
        if victim.stdout is not None:
            victim.stdout.close()
        survivor.close()


def _describe_when_loaded(bootstrap: str, group_id: str):  # type: ignore[no-untyped-def]
    """Right after a restart the coordinator answers COORDINATOR_LOAD_IN_PROGRESS briefly."""
    found = []

    def ready() -> bool:
        try:
            found.append(describe(bootstrap, group_id))
        except AdminError as error:
            if "COORDINATOR_LOAD_IN_PROGRESS" not in str(error):
                raise
            return False
        return True

    wait_until(ready, f"{group_id} loaded")
    return found[-1]


@pytest.mark.parametrize("flush", ["", "log.flush.interval.messages=1"],
                         ids=["acked in the log file", "fsync before acking"])
@pytest.mark.parametrize("how", ["graceful", "kill -9"])
def test_offsets_and_group_state_survive_broker_restart(
    start_kgroups_server, how: str, flush: str  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES, *filter(None, [flush]))
    create_topic(server.bootstrap, "restart-topic", PARTITIONS)
    first_batch = [f"before-{i}".encode() for i in range(100)]
    produce(server.bootstrap, "restart-topic", first_batch, PARTITIONS)
    member = TrackedConsumer(server.bootstrap, "restart-group", "restart-topic", "restarter",
                             **{"session.timeout.ms": 30_000})
    try:
        wait_until(lambda: len(member.received) >= 100, "the first batch", pump=member.pump)
        before = describe(server.bootstrap, "restart-group")
        assert before.state == "Stable"
        assert sum(p.committed_offset or 0 for p in before.partitions) == 100

        if how == "kill -9":
            server.kill()
        else:
            assert server.stop() == 0
        server.start()

        after = _describe_when_loaded(server.bootstrap, "restart-group")
        # The group came back from __consumer_offsets with its member and assignment.
        assert (after.state, after.protocol_type, after.protocol) == (
            before.state, before.protocol_type, before.protocol)
        assert after.members == before.members
        assert [(p.topic, p.partition, p.committed_offset) for p in after.partitions] == [
            (p.topic, p.partition, p.committed_offset) for p in before.partitions]

        second_batch = [f"after-{i}".encode() for i in range(40)]
        produce(server.bootstrap, "restart-topic", second_batch, PARTITIONS)
        wait_until(lambda: len(member.received) >= 140, "the second batch", pump=member.pump)
    finally:
        member.close()
    assert sorted(member.received) == sorted(first_batch + second_batch)

    # A new consumer of the group starts from the committed offsets: only new data arrives.
    third_batch = [f"later-{i}".encode() for i in range(20)]
    produce(server.bootstrap, "restart-topic", third_batch, PARTITIONS)
    resumer = TrackedConsumer(server.bootstrap, "restart-group", "restart-topic", "resumer")
    try:
        wait_until(lambda: len(resumer.received) >= 20, "the third batch", pump=resumer.pump)
        for _ in range(10):
            resumer.pump()
    finally:
        resumer.close()
    assert sorted(resumer.received) == sorted(third_batch)
