"""group.max.size and group.initial.rebalance.delay.ms, side by side, on a pair of brokers of
their own (max size 2, initial delay 1.5 s: long enough for the script's next steps to land
inside it on a loaded machine) so the shared pair keeps its settings; the consumer protocol's
group.consumer.max.size, group.consumer.assignors and heartbeat interval on the same pair."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from diff_dialog import Dialog
from diff_flows import new_member, send_join, wait_members
from diff_requests import describe, join
from diff_setup import create_topics
from tests.broker.servers import ServerProcess

from kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker, kgroups_overrides
from kgroups.broker.wire import build, request_type

pytestmark = pytest.mark.kafka

LIMITS = {**KAFKA_TEST_SETTINGS, "group.max.size": "2", "group.initial.rebalance.delay.ms": "1500",
          "group.consumer.max.size": "2", "group.consumer.assignors": "range",
          "group.consumer.heartbeat.interval.ms": "6000",
          "group.consumer.min.heartbeat.interval.ms": "6000",
          # Kafka 4.3 computes the target at once, as kgroups does (test_diff_consumer_protocol).
          "group.consumer.assignment.interval.ms": "0",
          "group.consumer.assignor.offload.enable": "false"}


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


def test_consumer_group_size_assignors_and_heartbeat_interval(converse, limited_ports) -> None:
    """A member asking for an assignor not in group.consumer.assignors, a third member of a
    group of at most two (v1 and v0), the configured heartbeat interval."""
    def script(d: Dialog) -> None:
        conn = d.connect("c")

        def heartbeat(member: str, assignor: str | None = None, v: int = 1) -> None:
            cls = request_type(68, v)
            fields: dict[str, Any] = {} if v == 0 else {"subscribed_topic_regex": None}
            answer = conn.call(build(cls, group_id=d.group, member_id=member, member_epoch=0,
                                     instance_id=None, rack_id=None,
                                     rebalance_timeout=datetime.timedelta(seconds=30),
                                     subscribed_topic_names=("diff-t",),
                                     server_assignor=assignor, topic_partitions=(), **fields),
                               record=False)
            d.record("hb", (int(answer.error_code), answer.error_message, answer.member_id,
                            int(answer.member_epoch), answer.heartbeat_interval))

        heartbeat("m1")
        heartbeat("m2", "uniform")
        heartbeat("m3", "range")
        heartbeat("m4")
        heartbeat("", v=0)
        (group,) = conn.call(build(request_type(69, 1), group_ids=(d.group,),
                                   include_authorized_operations=False), record=False).groups
        d.record("describe", (int(group.error_code), group.group_state, group.assignor_name,
                              sorted((m.member_id, m.subscribed_topic_regex)
                                     for m in group.members)))

    converse(script, ports=limited_ports)
