"""group.max.size and group.initial.rebalance.delay.ms, side by side, on a pair of brokers of
their own (max size 2, initial delay 1.5 s: long enough for the script's next steps to land
inside it on a loaded machine) so the shared pair keeps its settings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from diff_dialog import Dialog
from diff_flows import new_member, send_join, wait_members
from diff_requests import describe, join
from diff_setup import create_topics
from tests.broker.conftest import ServerProcess

from kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker, kgroups_overrides

pytestmark = pytest.mark.kafka

LIMITS = {**KAFKA_TEST_SETTINGS, "group.max.size": "2", "group.initial.rebalance.delay.ms": "1500"}


@pytest.fixture(scope="module")
def limited_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    workdir = tmp_path_factory.mktemp("limits")
    kafka = KafkaBroker(workdir / "kafka", settings=LIMITS)
    kgroups = ServerProcess(workdir / "kgroups", workdir / "kgroups.log",
                            kgroups_overrides(LIMITS))
    brokers: tuple[Any, ...] = (kafka, kgroups)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda broker: broker.start(), brokers))
        for broker in brokers:
            create_topics(broker.bootstrap)
        yield {"kafka": kafka.port, "kgroups": kgroups.port}
    finally:
        kafka.close()
        kgroups.close()


def test_initial_delay_holds_the_first_join(converse, limited_ports) -> None:
    """The first join waits out the delay even when it is alone; a second member joining
    within it lands in the same first generation."""
    def script(d: Dialog) -> None:
        a = new_member(d, "a")
        first = send_join(d, a)
        d.record("a answered within 300 ms", first.arrived(0.3))
        wait_members(d, 1)
        b = new_member(d, "b")
        second = send_join(d, b)
        first.result()
        second.result()

    converse(script, ports=limited_ports)


def test_initial_delay_is_extended_while_members_keep_joining(converse, limited_ports) -> None:
    """b joins 300 ms into a's 1.5 s delay: at 1.5 s the delay is armed once more (a new
    member came), so a is still waiting at 2 s; both end in one generation."""
    def script(d: Dialog) -> None:
        a = new_member(d, "a")
        first = send_join(d, a)
        wait_members(d, 1)
        time.sleep(0.3)
        b = new_member(d, "b")
        second = send_join(d, b)
        d.record("a answered 2 s after joining", first.arrived(1.7))
        first.result()
        second.result()

    converse(script, ports=limited_ports)


def test_member_over_the_max_size_is_refused(converse, limited_ports) -> None:
    def script(d: Dialog) -> None:
        members = [new_member(d, name) for name in ("a", "b", "c")]
        joins = []
        for count, member in enumerate(members[:2], start=1):
            joins.append(send_join(d, member))
            wait_members(d, count)  # a joins first, so a leads on both brokers
        send_join(d, members[2]).result()
        for pending in joins:
            pending.result()
        members[0].conn.call(describe(d.group))

    converse(script, ports=limited_ports)


@pytest.mark.parametrize("version", [3, 9])
def test_max_size_in_a_stable_group(converse, limited_ports, version: int) -> None:
    def script(d: Dialog) -> None:
        members = [new_member(d, name, v=version) for name in ("a", "b")]
        joins = []
        for count, member in enumerate(members, start=1):
            joins.append(send_join(d, member, v=version))
            wait_members(d, count)
        for member, pending in zip(members, joins, strict=True):
            member.absorb(pending.result())
        c = d.connect("c")
        answer = c.call(join(d.group, v=version))
        if answer.member_id and version >= 4:
            c.call(join(d.group, answer.member_id, v=version))
        c.call(describe(d.group))

    converse(script, ports=limited_ports)
