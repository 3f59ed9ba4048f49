"""ListGroups and DescribeGroups on KIP-848 consumer groups, side by side with Kafka 4.3.1.

Admin tools list groups of both protocols together and describe each with the API of its
type, so a consumer group must be listed with its type and its consumer-group state (Empty,
Assigning, Reconciling, Stable), and DescribeGroups (the classic describe) must answer about it
as Kafka does. Each conversation lets its member reach the target assignment first (polling,
unrecorded): Kafka 4.3 computes targets on a timer, kgroups in the heartbeat
(docs/compatibility.md), and only the settled group is compared.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest
from diff_dialog import Connection, Dialog
from diff_flows import form_group
from diff_requests import commit, describe, list_groups
from diff_setup import ON_BOTH_ENGINES

from kgroups.broker.wire import build, request_type, sibling

pytestmark = pytest.mark.kafka

TOPIC = "diff-t"  # 3 partitions (diff_setup.TOPICS)


def _heartbeat(conn: Connection, group: str, member: str, epoch: int,
               owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None) -> Any:
    cls = request_type(68, 1)
    return conn.call(build(
        cls, group_id=group, member_id=member, member_epoch=epoch, instance_id=None,
        rack_id=None, rebalance_timeout=datetime.timedelta(milliseconds=30_000 if epoch == 0
                                                             else -1),
        subscribed_topic_names=(TOPIC,) if epoch == 0 else None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=None if owned is None else tuple(
            build(sibling(cls, "TopicPartitions"), topic_id=t, partitions=ps)
            for t, ps in owned)), record=False)


def settled_member(d: Dialog, group: str, name: str) -> Connection:
    """A consumer-protocol member of `group` holding all of TOPIC's partitions at a stable
    epoch (heartbeats unrecorded); returns its connection, still in the group."""
    conn = d.connect(name)
    member = str(uuid.uuid4())
    epoch, owned = 0, ()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        response = _heartbeat(conn, group, member, epoch, owned)
        assert int(response.error_code) == 0, response
        epoch = int(response.member_epoch)
        if response.assignment is not None:
            owned = tuple((t.topic_id, tuple(sorted(t.partitions)))
                          for t in response.assignment.topic_partitions)
            if sum(len(ps) for _, ps in owned) == 3:
                return conn
        time.sleep(0.05)
    raise AssertionError(f"{d.broker}: {group} never assigned {TOPIC}'s partitions")


def _own(d: Dialog, response: Any) -> list[tuple[str, str, str, str]]:
    return sorted((g.group_id, g.protocol_type, getattr(g, "group_state", ""),
                   getattr(g, "group_type", ""))
                  for g in response.groups if g.group_id.startswith(d.group))


def _groups_of_both_protocols(d: Dialog) -> Connection:
    """A classic group, a group with offsets only, and a live consumer group."""
    a = d.connect("a")
    a.call(commit(d.group + "-simple", {(TOPIC, 0): 1}), record=False)
    form_group(d, ["m"])
    settled_member(d, d.group + "-consumer", "c")
    return a


@pytest.mark.parametrize("version", range(0, 6))
def test_list_groups_versions_with_a_consumer_group(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        a = _groups_of_both_protocols(d)
        answer = a.call(list_groups(v=version), record=False)
        d.record("own groups", _own(d, answer))

    converse(script)


@pytest.mark.parametrize(("types", "states"), [
    (("consumer",), ()), (("CONSUMER", "classic"), ()), (("classic",), ()),
    ((), ("Stable",)), (("consumer",), ("stable",)), (("consumer",), ("Empty",)),
    ((), ("Reconciling", "Assigning")),
])
def test_list_groups_filters_with_a_consumer_group(converse, types: tuple[str, ...],
                                                   states: tuple[str, ...]) -> None:
    def script(d: Dialog) -> None:
        a = _groups_of_both_protocols(d)
        answer = a.call(list_groups(types=types, states=states), record=False)
        d.record("own groups", _own(d, answer))

    converse(script)


@pytest.mark.parametrize("version", range(0, 7))
def test_describe_groups_on_a_consumer_group(converse, version: int) -> None:
    def script(d: Dialog) -> None:
        member = settled_member(d, d.group, "c")
        admin = d.connect("admin")
        admin.call(describe(d.group, v=version))
        _heartbeat(member, d.group, str(uuid.uuid4()), -1, None)  # an unknown member leaving
        admin.call(describe(d.group, v=version))

    converse(script)


@ON_BOTH_ENGINES
def test_a_consumer_group_whose_member_left_is_listed_empty(converse) -> None:
    def script(d: Dialog) -> None:
        conn = d.connect("c")
        member = str(uuid.uuid4())
        assert int(_heartbeat(conn, d.group, member, 0, ()).error_code) == 0
        _heartbeat(conn, d.group, member, -1, None)
        answer = conn.call(list_groups(), record=False)
        d.record("own groups", _own(d, answer))
        conn.call(describe(d.group))
        conn.call(build(request_type(69, 1), group_ids=(d.group,),
                        include_authorized_operations=False))

    converse(script)
