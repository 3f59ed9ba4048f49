"""KIP-932 ShareGroupHeartbeat and ShareGroupDescribe conversations, side by side with Kafka
4.3.1: request errors, joining, fencing, unknown members, leaving, describe, and the assignment
once the group's share-partitions are initialized (a partition shared when members outnumber
partitions). Topic ids differ between the brokers, so each transcript names topics by name,
and an assignment is recorded as how many partitions of each topic a member holds: which ones
follows the hash of the topic's id (the assignor's choice for equal ids is checked against
Kafka's own by tests/assignors/test_share_simple_oracle.py); every partition being held is
checked on each broker. Member ids are the client's own (v1), the same on both brokers."""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import diff_requests
import pytest
from diff_dialog import Connection, Dialog
from kio.schema.alter_share_group_offsets.v0 import request as A
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_offsets.v0 import request as X
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_share_group_offsets.v1 import request as D
from kio.schema.list_groups.v5.request import ListGroupsRequest
from tests.broker.broker_wire_helpers import metadata_request

from kgroups.broker.wire import build, request_type

pytestmark = pytest.mark.kafka

TOPIC = "diff-t"  # 3 partitions (tests/differential/diff_setup.py)
ASSIGNMENT_INTERVAL_S = 1.1  # past group.share.assignment.interval.ms (1 s) on both brokers


def heartbeat(group: str, member: str, epoch: int, topics: list[str] | None = None,
              rack: str | None = None) -> Any:
    return build(request_type(76, 1), group_id=group, member_id=member, member_epoch=epoch,
                 rack_id=rack, subscribed_topic_names=None if topics is None else tuple(topics))


class ShareMember:
    """One share member on its own connection; records what it is told with topic ids replaced
    by names."""

    def __init__(self, d: Dialog, name: str, group: str | None = None) -> None:
        self.d = d
        self.name = name
        self.group = group or d.group
        self.conn: Connection = d.connect(name)
        response = self.conn.call(metadata_request(TOPIC, "diff-u", auto_create=False),
                                  record=False)
        self.by_id: dict[uuid.UUID, str] = {t.topic_id: t.name for t in response.topics}
        self.epoch = 0

    def send(self, epoch: int | None = None, *, record: bool = True, **fields: Any) -> Any:
        epoch = self.epoch if epoch is None else epoch
        if epoch == 0:
            fields.setdefault("topics", [TOPIC])
        response = self.conn.call(heartbeat(self.group, fields.pop("member", self.name), epoch,
                                            **fields), record=False)
        assignment = None
        if response.assignment is not None:
            assignment = sorted((self.by_id.get(t.topic_id), len(t.partitions))
                                for t in response.assignment.topic_partitions)
        if record:
            self.d.record(f"hb[{self.name}]", {
                "error": int(response.error_code), "message": response.error_message,
                "member_id": response.member_id, "epoch": int(response.member_epoch),
                "interval": int(response.heartbeat_interval.total_seconds() * 1000),
                "assignment": assignment})
        if int(response.error_code) == 0 and epoch >= 0:
            self.epoch = int(response.member_epoch)
        return response, assignment

    def until_assigned(self, timeout_s: float = 20.0, topics: tuple[str, ...] = ()) -> None:
        """Heartbeat (unrecorded) until the member holds partitions (of each of `topics`, when
        given), then record where it stands: how soon depends on the share coordinator, the
        end state does not."""
        deadline = time.monotonic() + timeout_s
        held = None
        while time.monotonic() < deadline:
            _, assignment = self.send(record=False)
            held = assignment if assignment is not None else held
            if held and {name for name, _ in held} >= set(topics):
                self.d.record(f"assigned[{self.name}]", {"epoch": self.epoch, "held": held})
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.d.broker}: {self.name} was never assigned partitions")

    def describe(self, *groups: str, all_held: bool = False) -> None:
        """`all_held`: every partition of the topic must be held by some member (once every
        member has heartbeated since the last target)."""
        response = self.conn.call(build(request_type(77, 1), group_ids=groups or (self.group,),
                                        include_authorized_operations=False), record=False)
        for g in response.groups:
            held = {(t.topic_name, p) for m in g.members for t in m.assignment.topic_partitions
                    for p in t.partitions}
            if all_held:
                assert held == {(TOPIC, p) for p in range(3)}, (self.d.broker, held)
        self.d.record(f"describe[{self.name}]", [{
            "group_id": g.group_id, "error": int(g.error_code), "message": g.error_message,
            "state": g.group_state, "epoch": int(g.group_epoch),
            "assignment_epoch": int(g.assignment_epoch), "assignor": g.assignor_name,
            "members": sorted(({
                "member_id": m.member_id, "rack_id": m.rack_id, "epoch": int(m.member_epoch),
                "client_id": m.client_id, "topics": sorted(m.subscribed_topic_names),
                "assignment": sorted((self.by_id.get(t.topic_id), t.topic_name,
                                      len(t.partitions))
                                     for t in m.assignment.topic_partitions)}
                for m in g.members), key=lambda m: m["member_id"])}
            for g in response.groups])


def test_request_errors(converse) -> None:
    def script(d: Dialog) -> None:
        a = ShareMember(d, "a")
        a.send(0, member="")
        a.conn.call(heartbeat("", "a", 0, [TOPIC]))
        a.send(0, topics=None)
        a.send(0, topics=[])
        a.send(-3)
        a.send(0, rack="")
        a.send(1)  # no such group
        a.send(-1)  # leaving a group that does not exist

    converse(script)


def test_join_fence_describe_leave(converse) -> None:
    def script(d: Dialog) -> None:
        a, b = ShareMember(d, "a"), ShareMember(d, "b")
        a.send(0)
        # Once the partitions are initialized (the group epoch moves when they become
        # assignable: how soon depends on the share coordinator, on both brokers).
        a.until_assigned()
        a.send(a.epoch + 1)  # ahead: fenced
        a.send(a.epoch - 1)  # behind, and not the previous epoch: fenced
        b.send(1, member="stranger")
        a.describe(d.group, f"{d.group}-missing", "")
        b.send(0, topics=[TOPIC, "diff-u"])
        b.send(-1)
        b.send(-1)  # gone already
        a.describe()

    converse(script)


def test_partitions_assigned_once_initialized_then_shared(converse) -> None:
    def script(d: Dialog) -> None:
        a = ShareMember(d, "a")
        a.send(0)
        a.until_assigned()
        time.sleep(ASSIGNMENT_INTERVAL_S)
        b = ShareMember(d, "b")
        b.send(0)
        a.send()
        a.describe(all_held=True)

    converse(script)


def test_more_members_than_partitions(converse) -> None:
    def script(d: Dialog) -> None:
        members = [ShareMember(d, name) for name in ("a", "b", "c", "d")]
        members[0].send(0)
        members[0].until_assigned()
        for member in members[1:]:
            time.sleep(ASSIGNMENT_INTERVAL_S)
            member.send(0)
        time.sleep(ASSIGNMENT_INTERVAL_S)
        for member in members:
            member.send()
        members[0].describe(all_held=True)

    converse(script)


def _offsets_call(d: Dialog, conn: Connection, label: str, request: Any) -> None:
    """An offsets admin call recorded without topic ids (they differ between the brokers)."""
    response = conn.call(request, record=False)
    d.record(label, _without_ids(dataclasses.asdict(response)))


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k != "topic_id"}
    if isinstance(value, list | tuple):
        return [_without_ids(v) for v in value]
    return value


def describe_offsets(group: str, topics: list[tuple[str, list[int]]] | None = None) -> Any:
    return D.DescribeShareGroupOffsetsRequest(groups=(D.DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=None if topics is None else tuple(
            D.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(ps))
            for t, ps in topics)),))


def alter_offsets(group: str, topics: list[tuple[str, list[tuple[int, int]]]]) -> Any:
    return A.AlterShareGroupOffsetsRequest(group_id=group, topics=tuple(
        A.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(
            A.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
            for p, o in ps)) for t, ps in topics))


def delete_offsets(group: str, topics: list[str]) -> Any:
    return X.DeleteShareGroupOffsetsRequest(group_id=group, topics=tuple(
        X.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics))


def test_offsets_admin_apis(converse) -> None:
    def script(d: Dialog) -> None:
        a = ShareMember(d, "a")
        admin = d.connect("admin")
        a.send(0)
        a.until_assigned()
        _offsets_call(d, admin, "describe", describe_offsets(d.group))
        _offsets_call(d, admin, "describe-some", describe_offsets(d.group, [(TOPIC, [0, 1])]))
        _offsets_call(d, admin, "alter-busy", alter_offsets(d.group, [(TOPIC, [(0, 0)])]))
        _offsets_call(d, admin, "delete-busy", delete_offsets(d.group, [TOPIC]))
        _offsets_call(d, admin, "alter-no-id", alter_offsets("", [(TOPIC, [(0, 0)])]))
        _offsets_call(d, admin, "delete-no-id", delete_offsets("", [TOPIC]))
        a.send(-1)
        _offsets_call(d, admin, "alter", alter_offsets(
            d.group, [(TOPIC, [(0, 0), (1, 0), (7, 0)]), ("diff-nope", [(0, 0)])]))
        _offsets_call(d, admin, "described", describe_offsets(d.group))
        _offsets_call(d, admin, "delete", delete_offsets(d.group, [TOPIC, "diff-nope"]))
        _offsets_call(d, admin, "gone", describe_offsets(d.group))
        _offsets_call(d, admin, "unknown-group", describe_offsets(f"{d.group}-none"))

    converse(script)


def test_list_describe_and_delete_groups(converse) -> None:
    def script(d: Dialog) -> None:
        a = ShareMember(d, "a")
        admin = d.connect("admin")
        a.send(0)
        a.until_assigned()
        listed = admin.call(ListGroupsRequest(states_filter=(), types_filter=()), record=False)
        d.record("listed", [dataclasses.asdict(g) for g in listed.groups
                            if g.group_id == d.group])
        admin.call(DescribeGroupsRequest(groups=(d.group,), include_authorized_operations=False))
        admin.call(DeleteGroupsRequest(groups_names=(d.group,)))
        a.send(-1)
        admin.call(DeleteGroupsRequest(groups_names=(d.group,)))
        a.describe()
        _offsets_call(d, admin, "state-gone", describe_offsets(d.group))

    converse(script)


def test_rejoin_subscription_change_and_other_group_types(converse) -> None:
    def script(d: Dialog) -> None:
        a = ShareMember(d, "a")
        a.send(0)
        a.until_assigned()  # once the partitions are initialized (as above)
        a.send(0)  # the same member joining again
        a.send(topics=[TOPIC, "diff-u"])  # a subscription change moves the group epoch
        a.until_assigned(topics=(TOPIC, "diff-u"))
        a.send(topics=["diff-u", TOPIC])  # the same topics in another order do not
        a.describe()
        consumer = d.connect("consumer")
        consumer.call(diff_requests.consumer_join(f"{d.group}-c", "c1", (TOPIC,)),
                      record=False)
        ShareMember(d, "s", group=f"{d.group}-c").send(0)  # a consumer group's id
        a.describe(f"{d.group}-c")

    converse(script)


def _share_group_then(d: Dialog, calls: Any) -> None:
    """A share group with a member `a` (its partitions assigned), `calls(label)` made while
    it has the member and again once it is empty, then the group described."""
    a = ShareMember(d, "a")
    a.send(0)
    a.until_assigned()
    calls("with-member", a.epoch)
    a.send(-1)
    calls("empty", a.epoch)
    a.describe()


def test_consumer_offset_apis_on_a_share_group(converse) -> None:
    """OffsetCommit (a simple commit and a member's, old and new versions), OffsetFetch and
    OffsetDelete on a share group's id, with a member and once empty: Kafka refuses them
    (a share group is not a consumer group) and keeps no offsets for it."""
    def script(d: Dialog) -> None:
        admin = d.connect("admin")

        def calls(label: str, epoch: int) -> None:
            for v in (2, 9):
                admin.call(diff_requests.commit(d.group, {(TOPIC, 0): 5}, v=v))
            admin.call(diff_requests.commit(d.group, {(TOPIC, 1): 5}, generation=epoch,
                                            member_id="a"))
            for v in (1, 7, 9):
                admin.call(diff_requests.fetch(d.group, {TOPIC: [0, 1]}, v=v))
            admin.call(diff_requests.fetch(d.group, None, v=9))
            admin.call(diff_requests.offset_delete(d.group, {TOPIC: [0]}))
            d.record(label, "done")

        _share_group_then(d, calls)

    converse(script)


def test_classic_group_apis_on_a_share_group(converse) -> None:
    """JoinGroup (a new member, old and new versions, and with a static instance id),
    SyncGroup, Heartbeat and LeaveGroup with a share group's id, with a member and once
    empty."""
    def script(d: Dialog) -> None:
        classic = d.connect("classic")

        def calls(label: str, _epoch: int) -> None:
            for v in (0, 4, 9):
                classic.call(diff_requests.join(d.group, v=v), f"join-v{v}")
            classic.call(diff_requests.join(d.group, "m-1", instance="i-1"), "join-static")
            classic.call(diff_requests.sync(d.group, 1, "m-1"))
            classic.call(diff_requests.heartbeat(d.group, 1, "m-1"))
            classic.call(diff_requests.leave(d.group, [("m-1", None)]))
            d.record(label, "done")

        _share_group_then(d, calls)

    converse(script)


def test_a_consumer_group_heartbeat_with_a_share_groups_id(converse) -> None:
    """ConsumerGroupHeartbeat (KIP-848) joining with a share group's id, with a member and
    once empty: Kafka refuses it (the id is a share group's), and the share group goes on."""
    def script(d: Dialog) -> None:
        consumer = d.connect("consumer")

        def calls(label: str, _epoch: int) -> None:
            consumer.call(diff_requests.consumer_join(d.group, label, (TOPIC,)),
                          f"join-{label}")

        _share_group_then(d, calls)

    converse(script)


def test_share_apis_on_classic_and_consumer_groups(converse) -> None:
    """The share offsets admin APIs and ShareGroupDescribe naming a classic group (offsets
    committed, no members) and a consumer-protocol group with a member."""
    def script(d: Dialog) -> None:
        admin = d.connect("admin")
        classic, consumer = f"{d.group}-classic", f"{d.group}-consumer"
        admin.call(diff_requests.commit(classic, {(TOPIC, 0): 5}), record=False)
        admin.call(diff_requests.consumer_join(consumer, "c1", (TOPIC,)), record=False)
        for kind, group in (("classic", classic), ("consumer", consumer)):
            _offsets_call(d, admin, f"describe-{kind}", describe_offsets(group))
            _offsets_call(d, admin, f"describe-some-{kind}",
                          describe_offsets(group, [(TOPIC, [0])]))
            _offsets_call(d, admin, f"alter-{kind}", alter_offsets(group, [(TOPIC, [(0, 0)])]))
            _offsets_call(d, admin, f"delete-{kind}", delete_offsets(group, [TOPIC]))
        _offsets_call(d, admin, "delete-unknown", delete_offsets(f"{d.group}-none", [TOPIC]))
        ShareMember(d, "a").describe(classic, consumer)

    converse(script)


def test_consumer_group_describe_of_a_share_group(converse) -> None:
    """ConsumerGroupDescribe naming a share group, with a member and once empty."""
    def script(d: Dialog) -> None:
        admin = d.connect("admin")

        def calls(label: str, _epoch: int) -> None:
            (described,) = admin.call(build(request_type(69, 1), group_ids=(d.group,),
                                            include_authorized_operations=False),
                                      record=False).groups
            d.record(f"consumer-describe-{label}", (
                int(described.error_code), described.error_message, described.group_state,
                len(described.members)))

        _share_group_then(d, calls)

    converse(script)
