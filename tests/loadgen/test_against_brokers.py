"""The load generator's members against real brokers (`kgroups serve` and Apache Kafka 4.3.1,
the session brokers of tests/kafka_harness.py): they form a group in which every partition is
owned exactly once, the broker sees the same members, a member that leaves hands its partitions
to the others, and a broker that goes away ends the run with the reason instead of a hang."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from kgroups import serve_in_background
from kgroups.loadgen import LoadError, LoadGenerator
from kgroups.member import MemberSettings, Protocol
from kgroups.tools.admin import connect_to_coordinator, describe_group
from kgroups.tools.topic_admin import create_topic
from kgroups.tools.wire_client import KafkaWireClient

MEMBERS = 50
PARTITIONS = 64
PROTOCOLS = [pytest.param(Protocol.EAGER, "range", id="eager"),
             pytest.param(Protocol.COOPERATIVE, "cooperative-sticky", id="cooperative"),
             pytest.param(Protocol.CONSUMER, "uniform", id="consumer")]


def _settings(protocol: Protocol, assignor: str, topic: str) -> MemberSettings:
    """Quick heartbeats (the session brokers accept sessions from 500 ms), so a rebalance is
    heard of in well under a second; the consumer protocol's interval is the broker's (5 s)."""
    return MemberSettings(f"loadgen-{uuid.uuid4().hex[:8]}", (topic,), protocol, assignor,
                          session_timeout_ms=6_000, heartbeat_interval_ms=300)


def _topic(host: str, port: int) -> str:
    name = f"loadgen-{uuid.uuid4().hex[:8]}"
    with KafkaWireClient(host, port) as client:
        create_topic(client, name, PARTITIONS, {})
    return name


def _described(host: str, port: int, group_id: str) -> tuple[str, dict[str, frozenset[Any]]]:
    """The group's state and each member's partitions, as the broker itself describes them."""
    with KafkaWireClient(host, port) as bootstrap, \
            connect_to_coordinator(bootstrap, group_id) as client:
        group = describe_group(client, group_id)
    return group.state, {m.member_id: frozenset(m.partitions) for m in group.members}


def _assert_owned_once(generator: LoadGenerator) -> None:
    owners = generator.owners()
    assert set(owners) == generator.partitions
    assert all(len(names) == 1 for names in owners.values())


@pytest.mark.parametrize(("protocol", "assignor"), PROTOCOLS)
def test_members_form_a_stable_group_owning_every_partition_once(
        any_broker: Any, protocol: Protocol, assignor: str) -> None:
    topic = _topic(any_broker.host, any_broker.port)
    settings = _settings(protocol, assignor, topic)

    async def run() -> set[str]:
        generator = await LoadGenerator.connect(any_broker.host, any_broker.port, settings)
        await generator.start_members(MEMBERS)
        await generator.wait_stable(timeout_s=60)
        _assert_owned_once(generator)
        ours = {running.member.member_id: running.member.owned
                for running in generator.members.values()}
        assert await asyncio.to_thread(_described, any_broker.host, any_broker.port,
                                       settings.group_id) == ("Stable", ours)
        # The group stays put: the members keep heartbeating (the consumer protocol's every
        # 5 s), without errors.
        heard = generator.tally.heartbeats
        await generator.hold(6.0)
        assert generator.stable() and generator.tally.heartbeats >= heard + MEMBERS
        assert not generator.tally.failures
        await generator.shutdown()
        return set(ours)

    assert len(asyncio.run(run())) == MEMBERS


@pytest.mark.parametrize(("protocol", "assignor"), PROTOCOLS)
def test_a_member_that_leaves_hands_its_partitions_to_the_others(
        any_broker: Any, protocol: Protocol, assignor: str) -> None:
    topic = _topic(any_broker.host, any_broker.port)
    settings = _settings(protocol, assignor, topic)

    async def run() -> None:
        generator = await LoadGenerator.connect(any_broker.host, any_broker.port, settings)
        await generator.start_members(8)
        await generator.wait_stable(timeout_s=60)
        leaver = next(name for name, running in generator.members.items()
                      if running.member.owned)
        held = generator.members[leaver].member.owned
        await generator.close_member(leaver)
        assert not generator.stable()  # its partitions have no owner for now
        await generator.wait_stable(timeout_s=60)
        _assert_owned_once(generator)
        owners = generator.owners()
        assert all(owners[p][0] != leaver for p in held)
        assert generator.tally.sent[
            "ConsumerGroupHeartbeat" if protocol is Protocol.CONSUMER else "LeaveGroup"] > 0
        await generator.shutdown()

    asyncio.run(run())


def test_a_broker_that_goes_away_ends_the_run_with_the_reason() -> None:
    async def run() -> None:
        with serve_in_background() as broker:
            topic = await asyncio.to_thread(_topic, broker.host, broker.port)
            generator = await LoadGenerator.connect(
                broker.host, broker.port, _settings(Protocol.EAGER, "range", topic))
            await generator.start_members(5)
            await generator.wait_stable(timeout_s=30)
        # The broker has stopped and closed every connection (this loop waited meanwhile).
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(LoadError, match="closed the connection"):
            await generator.hold(30)
        assert loop.time() - began < 5
        assert set(generator.tally.failures) == set(generator.members)
        await generator.shutdown()

    asyncio.run(asyncio.wait_for(run(), 60))
