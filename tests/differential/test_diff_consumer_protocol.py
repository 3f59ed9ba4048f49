"""KIP-848 ConsumerGroupHeartbeat conversations, side by side with Kafka 4.3.1: request
errors, a group of two reconciling with revoke-before-assign, fencing, unknown members,
ConsumerGroupDescribe, leaving and static members. Topic ids differ between the brokers, so
each transcript names topics by their name (looked up through Metadata on that broker); member
ids are client-generated (v1), so both brokers see the same ones."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import diff_requests
import pytest
from diff_dialog import Connection, Dialog
from diff_setup import ON_BOTH_ENGINES
from diff_setup import create_topics as _create_topics
from tests.broker.broker_wire_helpers import create_topic, metadata_request
from tests.broker.servers import ServerProcess
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker

from kgroups.broker.wire import build, request_type, sibling
from kgroups.coordinator.persistence import PartitionImage, rebuild_groups
from kgroups.log.batch import iter_batches
from kgroups.records.codec import decode_record, encode_record
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.kafka

# Kafka 4.3 (and kgroups) compute a group's target at most once per
# group.consumer.assignment.interval.ms (1 s by default); the conversations that follow each
# step of a reconciliation run against a Kafka and a kgroups (`synchronous_kgroups`) that
# compute it in the heartbeat that moves the group epoch, as Kafka 4.0-4.2 did.
SYNCHRONOUS_ASSIGNMENT = {
    **KAFKA_TEST_SETTINGS,
    "group.consumer.assignment.interval.ms": "0",
    "group.consumer.assignor.offload.enable": "false",
}


@pytest.fixture(scope="module")
def synchronous_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-sync"), SYNCHRONOUS_ASSIGNMENT)
    broker.start()
    _create_topics(broker.bootstrap)
    yield broker
    broker.stop()


@pytest.fixture
def ports(synchronous_kafka: KafkaBroker, kgroups_on: ServerProcess) -> dict[str, int]:
    return {"kafka": synchronous_kafka.port, "kgroups": kgroups_on.port}

TOPIC = "diff-t"  # 3 partitions (tests/differential/conftest.py)
CONSUMER_GROUP_KEYS = (ConsumerGroupMetadataKey, ConsumerGroupMemberMetadataKey,
                       ConsumerGroupTargetAssignmentMetadataKey,
                       ConsumerGroupTargetAssignmentMemberKey,
                       ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupRegularExpressionKey)


def _ids(conn: Connection) -> dict[uuid.UUID, str]:
    response = conn.call(metadata_request("diff-t", "diff-u", auto_create=False), record=False)
    return {t.topic_id: t.name for t in response.topics}


def heartbeat(group: str, member: str, epoch: int, *, owned: Any = (), topics: Any = None,
              rebalance_ms: int = -1, instance: str | None = None,
              assignor: str | None = None, ids: dict[str, uuid.UUID] | None = None,
              regex: str | None = None) -> Any:
    cls = request_type(68, 1)
    partitions = None if owned is None else tuple(
        build(sibling(cls, "TopicPartitions"), topic_id=(ids or {})[name], partitions=tuple(ps))
        for name, ps in owned)
    return build(cls, group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
                 rack_id=None, rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),
                 subscribed_topic_names=None if topics is None else tuple(topics),
                 subscribed_topic_regex=regex, server_assignor=assignor,
                 topic_partitions=partitions)


class Member:
    """One consumer-protocol member on its own connection; records what it is told with topic
    ids replaced by names, and reports what it was last told it owns."""

    def __init__(self, d: Dialog, name: str) -> None:
        self.d = d
        self.name = name
        self.member_id = f"{name}-{d.group}"[:36]
        self.conn = d.connect(name)
        self.by_id = _ids(self.conn)
        self.ids = {v: k for k, v in self.by_id.items()}
        self.epoch = 0
        self.owned: list[tuple[str, list[int]]] = []

    def send(self, epoch: int | None = None, **fields: Any) -> Any:
        epoch = self.epoch if epoch is None else epoch
        if epoch == 0:
            fields.setdefault("topics", [TOPIC])
            fields.setdefault("rebalance_ms", 30_000)
            fields.setdefault("owned", [])
        fields.setdefault("owned", self.owned)
        response = self.conn.call(heartbeat(self.d.group, fields.pop("member", self.member_id),
                                            epoch, ids=self.ids, **fields), record=False)
        assignment = None
        if response.assignment is not None:
            assignment = sorted((self.by_id[t.topic_id], sorted(t.partitions))
                                for t in response.assignment.topic_partitions)
        self.d.record(f"hb[{self.name}]", {
            "error": int(response.error_code), "message": response.error_message,
            "member_id": response.member_id, "epoch": int(response.member_epoch),
            "interval": response.heartbeat_interval // datetime.timedelta(milliseconds=1),
            "assignment": assignment})
        if int(response.error_code) == 0 and epoch >= 0:
            self.epoch = int(response.member_epoch)
            if assignment is not None:
                self.owned = assignment
        return response

    def describe(self) -> None:
        cls = request_type(69, 1)
        response = self.conn.call(build(cls, group_ids=(self.d.group,),
                                        include_authorized_operations=False), record=False)
        groups = []
        for g in response.groups:
            def named(a: Any) -> list[Any]:
                return sorted((self.by_id.get(t.topic_id), t.topic_name, sorted(t.partitions))
                              for t in a.topic_partitions)
            groups.append({
                "error": int(g.error_code), "state": g.group_state, "epoch": int(g.group_epoch),
                "assignment_epoch": int(g.assignment_epoch), "assignor": g.assignor_name,
                "members": sorted(({
                    "member_id": m.member_id, "instance": m.instance_id,
                    "epoch": int(m.member_epoch), "client_id": m.client_id,
                    "host": m.client_host, "topics": sorted(m.subscribed_topic_names),
                    "assignment": named(m.assignment), "target": named(m.target_assignment),
                    "type": int(m.member_type)} for m in g.members),
                    key=lambda m: m["member_id"])})
        self.d.record(f"describe[{self.name}]", groups)


@ON_BOTH_ENGINES
def test_request_errors(converse, ports) -> None:
    def script(d: Dialog) -> None:
        a = Member(d, "a")
        a.send(0, member="")  # v1: the client must name itself
        a.conn.call(heartbeat("", "", 0, topics=["diff-t"], rebalance_ms=1000))  # checked first
        a.send(0, topics=None)  # neither names nor a regex
        a.send(0, rebalance_ms=-1)
        a.send(0, topics=[])
        a.send(0, assignor="nope")
        a.send(-3)
        a.send(4)  # no such group
        a.send(0)
        a.send(1, member="stranger")

    converse(script, ports=ports)


@ON_BOTH_ENGINES
def test_two_members_reconcile_revoke_before_assign_then_one_leaves(
    converse, ports, synchronous_kafka: KafkaBroker,
) -> None:
    groups: list[str] = []

    def script(d: Dialog) -> None:
        groups.append(d.group)
        a, b = Member(d, "a"), Member(d, "b")
        a.send(0)
        b.send(0)
        a.send()  # told to give partitions up
        b.send()  # nothing free yet
        a.send()  # revoked: at the new epoch
        b.send()  # now gets them
        a.describe()
        a.send(a.epoch + 5)  # fenced
        a.send()
        b.send(-1)
        a.send()
        a.describe()

    transcripts = converse(script, ports=ports)
    # kgroups reads the records Kafka wrote for the group, re-encodes them byte for byte, and
    # replays them into the group Kafka described last.
    written = [(key, value) for key, value in _offsets_records(synchronous_kafka)
               if isinstance(key_of := decode_record(key, value).key, CONSUMER_GROUP_KEYS)
               and key_of.group == groups[0]]
    assert {decode_record(k, v).key.version for k, v in written} == {3, 5, 6, 7, 8}
    assert all(encode_record(decode_record(k, v)) == (k, v) for k, v in written)
    image = PartitionImage()
    image.apply(decode_record(k, v) for k, v in written)
    consumer = rebuild_groups(image, 0)[groups[0]].consumer
    (described,) = transcripts["kafka"][-1][1]
    assert consumer is not None
    assert (consumer.group_epoch, consumer.assignment_epoch) == (
        described["epoch"], described["assignment_epoch"])
    assert {m: c.member_epoch for m, c in consumer.members.items()} == {
        m["member_id"]: m["epoch"] for m in described["members"]}


def _offsets_records(broker: KafkaBroker) -> list[tuple[bytes, bytes | None]]:
    records = []
    for segment in sorted((broker.data_dir / "__consumer_offsets-0").glob("*.log")):
        for batch in iter_batches(segment.read_bytes()):
            records += [(bytes(r.key), None if r.value is None else bytes(r.value))
                        for r in batch.records if r.key is not None and not batch.is_control]
    return records


@ON_BOTH_ENGINES
def test_static_member_leaves_for_a_while_and_comes_back(converse, ports) -> None:
    def script(d: Dialog) -> None:
        a, b = Member(d, "a"), Member(d, "b")
        a.send(0, instance="ia")
        b.send(0)
        for _ in range(2):
            a.send(instance="ia")
            b.send()
        other = Member(d, "c")
        other.send(0, instance="ia")  # the instance id is still held
        a.send(-2, instance="ia")
        back = Member(d, "a2")
        back.send(0, instance="ia")
        back.describe()

    converse(script, ports=ports)


def test_api_versions_of_the_consumer_group_apis(converse) -> None:
    def script(d: Dialog) -> None:
        answer = d.connect("a").call(build(request_type(18, 3), client_software_name="t",
                                           client_software_version="1"), record=False)
        for k in answer.api_keys:
            if int(k.api_key) in (68, 69):
                d.record(f"api {int(k.api_key)}", [int(k.min_version), int(k.max_version)])

    converse(script)


@ON_BOTH_ENGINES
def test_target_assignment_batching_as_kafka_43(converse) -> None:
    """Both brokers with their defaults: group.consumer.assignment.interval.ms of 1 s (KIP-1263).
    A second and third member joining right after the first are answered at the first's
    epoch with nothing and the group is Assigning, also a second later (no timer computes the
    target); the first heartbeat after the interval computes it (the first member is told what
    to give up), and the others then reconcile towards it. Kafka also offloads the computation
    to a background thread (group.consumer.assignor.offload.enable), which kgroups does not:
    its heartbeat answers are the same here."""
    def script(d: Dialog) -> None:
        a, b, c = Member(d, "a"), Member(d, "b"), Member(d, "c")
        a.send(0)
        b.send(0)
        c.send(0)
        a.describe()
        time.sleep(1.2)
        a.describe()
        a.send()
        a.describe()
        for _ in range(2):
            for member in (b, c, a):
                member.send()
        a.describe()

    converse(script)


# -- regex subscriptions and topic changes -------------------------------------------------------


class RegexMember(Member):
    """A member that knows every topic's id (regexes reach topics the script creates, and
    `__consumer_offsets`); ids once seen are kept, so a deleted topic's partitions can still
    be reported as owned until they are revoked."""

    def send(self, epoch: int | None = None, **fields: Any) -> Any:
        response = self.conn.call(metadata_request(all_topics=True, auto_create=False),
                                  record=False)
        self.by_id.update({t.topic_id: t.name for t in response.topics})
        self.ids.update({t.name: t.topic_id for t in response.topics})
        return super().send(epoch, **fields)

    def await_epoch_bump(self, timeout_s: float = 20.0) -> None:
        """Wait (unrecorded) until the group epoch is ahead of the target's: Kafka resolves a
        regex on a background executor, a moment after the heartbeat that asked for it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            (group,) = self.conn.call(build(request_type(69, 1), group_ids=(self.d.group,),
                                            include_authorized_operations=False),
                                      record=False).groups
            if int(group.group_epoch) > int(group.assignment_epoch):
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.d.broker}: the group epoch never moved")


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_several_members_get_the_partitions_kafka_gives(converse, ports, assignor: str) -> None:
    """Five members join a 12-partition topic one at a time, then one leaves: every target
    Kafka's assignor hands out (its member map's hash order decides who gets which run of
    partitions), kgroups hands out too. Uniform gets one topic (with several, its order
    follows the topic ids, which differ between the brokers); range gets a second one.
    These member ids all share one bucket of Kafka's member HashMap, so the order is the
    group's TimelineHashMap order, whose table grows on a put that replaces a member too."""
    def script(d: Dialog) -> None:
        topic = f"diff-wide-{d.group[-6:]}"
        topics = [topic] if assignor == "uniform" else [topic, TOPIC]
        with _admin(d) as admin:
            create_topic(admin, topic, 12)
            _await_partitions(admin, topic, 12)
        joined: list[Member] = []
        for name in "abcde":
            member = Member(d, name)
            member.by_id.update(_ids_of(member.conn, topic))
            member.ids = {v: k for k, v in member.by_id.items()}
            member.send(0, topics=topics, assignor=assignor)
            joined.append(member)
            for _ in range(2):  # revoke, then assign
                for other in joined:
                    other.send()
        joined[2].send(-1)
        for _ in range(2):
            for other in joined[:2] + joined[3:]:
                other.send()
        joined[0].describe()

    converse(script, ports=ports)


def _ids_of(conn: Connection, topic: str) -> dict[uuid.UUID, str]:
    response = conn.call(metadata_request(topic, auto_create=False), record=False)
    return {t.topic_id: t.name for t in response.topics}


def _admin(d: Dialog) -> KafkaWireClient:
    return KafkaWireClient("127.0.0.1", d.port, client_id="admin", timeout=15)


def _await_partitions(admin: KafkaWireClient, topic: str, count: int | None) -> None:
    """Until Metadata shows the topic with `count` partitions, all led (None: gone), and a
    moment more for the broker's group coordinator to see the same topics."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        (found,) = admin.call(metadata_request(topic, auto_create=False)).topics
        if count is None and int(found.error_code) != 0:
            break
        if count is not None and int(found.error_code) == 0 and len(found.partitions) == count:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"{topic} never had {count} partitions")
    time.sleep(0.5)


@ON_BOTH_ENGINES
def test_regex_subscriptions_errors_resolution_and_sharing(converse, ports) -> None:
    def script(d: Dialog) -> None:
        a, b = RegexMember(d, "a"), RegexMember(d, "b")
        for regex in ("(", "[a-", "a**", "a{1001}", r"x\Z", "(?=x)", r"\1", "a{2,1}", ")",
                      r"a\C", "*", "(?P<>a)", "a\\"):
            a.send(0, topics=None, regex=regex)
        # One topic: Kafka's uniform assignor orders several by their (random) topic ids.
        a.send(0, topics=None, regex="diff-[t]")  # answered before the regex is resolved
        a.await_epoch_bump()
        a.send()  # now assigned what the regex resolved to
        b.send(0, topics=None, regex="diff-[t]")  # already resolved: the epoch moves now
        for _ in range(3):
            a.send()
            b.send()
        a.describe()
        a.send(-1)
        for _ in range(2):
            b.send()
        b.describe()

    converse(script, ports=ports)


def test_regex_with_names_and_internal_topics(converse, ports) -> None:
    def script(d: Dialog) -> None:
        a = RegexMember(d, "a")
        a.send(0, topics=["diff-u"], regex="__consumer.*|diff-t")
        a.await_epoch_bump()
        a.send()
        a.describe()
        a.send(topics=[], regex="")  # both dropped
        a.send()
        a.describe()

    converse(script, ports=ports)


@ON_BOTH_ENGINES
def test_created_grown_and_deleted_topics_move_the_group(
    converse, ports, synchronous_kafka: KafkaBroker,
) -> None:
    groups: list[str] = []

    def script(d: Dialog) -> None:
        groups.append(d.group)
        topic = f"diff-rx-{d.group[-6:]}-1"
        a = RegexMember(d, "a")
        a.send(0, topics=None, regex=topic.removesuffix("-1") + "-.*")  # nothing matches yet
        joined = time.monotonic()
        with _admin(d) as admin:
            create_topic(admin, topic, 2)
            _await_partitions(admin, topic, 2)
            # Kafka resolves a group's regexes at most once per 10 s.
            time.sleep(max(0.0, joined + 10.5 - time.monotonic()))
            a.send()  # asks for the regexes to be resolved again
            a.await_epoch_bump()
            a.send()  # the new topic is assigned
            admin.call(build(request_type(37, 3), topics=(build(
                sibling(request_type(37, 3), "CreatePartitionsTopic"), name=topic, count=3,
                assignments=None),), timeout=datetime.timedelta(seconds=5),
                validate_only=False))
            _await_partitions(admin, topic, 3)
            a.send()  # grown: the epoch moves and the new partition is assigned
            admin.call(build(request_type(20, 6), topics=(build(
                sibling(request_type(20, 6), "DeleteTopicState"), name=topic,
                topic_id=None),), timeout=datetime.timedelta(seconds=5)))
            _await_partitions(admin, topic, None)
            a.send()  # deleted: its partitions are revoked
            a.send()
            a.describe()

    transcripts = converse(script, ports=ports)
    # Kafka's regex records (type 16) decode, re-encode byte for byte, and replay.
    written = [(key, value) for key, value in _offsets_records(synchronous_kafka)
               if isinstance(key_of := decode_record(key, value).key, CONSUMER_GROUP_KEYS)
               and key_of.group == groups[0]]
    regex_records = [(k, v) for k, v in written if decode_record(k, v).key.version == 16]
    assert regex_records
    assert all(encode_record(decode_record(k, v)) == (k, v) for k, v in written)
    image = PartitionImage()
    image.apply(decode_record(k, v) for k, v in written)
    consumer = rebuild_groups(image, 0)[groups[0]].consumer
    (described,) = transcripts["kafka"][-1][1]
    assert consumer is not None
    assert consumer.group_epoch == described["epoch"]
    assert set(consumer.resolved_regexes) == {f"diff-rx-{groups[0][-6:]}-.*"}


# -- offsets with member epochs ------------------------------------------------------------------


def offset_fetch_v9(group: str, member: str | None, epoch: int) -> Any:
    cls = request_type(9, 9)
    return build(cls, require_stable=False, groups=(build(
        sibling(cls, "OffsetFetchRequestGroup"), group_id=group, member_id=member,
        member_epoch=epoch, topics=(build(sibling(cls, "OffsetFetchRequestTopics"), name=TOPIC,
                                          partition_indexes=(0, 1, 2)),)),))


@ON_BOTH_ENGINES
def test_offset_commit_and_fetch_check_member_epochs(converse, ports) -> None:
    """OffsetCommit v9 / OffsetFetch v9 of a consumer group: the member epoch, KIP-1251's older
    epoch for partitions held since then, unknown members, admin requests, old versions."""
    def script(d: Dialog) -> None:
        a, b = Member(d, "a"), Member(d, "b")
        conn = a.conn

        def commit(member: str, epoch: int, partitions: Any, v: int = 9) -> None:
            conn.call(diff_requests.commit(d.group, {(TOPIC, p): 5 for p in partitions},
                                           generation=epoch, member_id=member, v=v))

        def fetch(member: str | None, epoch: int) -> None:
            conn.call(offset_fetch_v9(d.group, member, epoch))

        a.send(0)
        member = a.member_id
        commit(member, 2, [0, 1])
        for epoch in (3, 1):
            commit(member, epoch, [0])
        commit("stranger", 2, [0])
        commit("", -1, [0])  # an admin client, while the group has members
        commit(member, 2, [0], v=8)
        for who, epoch in ((member, 2), (member, 1), (member, 3), (member, -1),
                           ("stranger", 2), (None, -1), ("", -1)):
            fetch(who, epoch)
        b.send(0)
        a.send()  # told to give a partition up
        a.send()  # gave it up: at epoch 3
        kept = [p for _, parts in a.owned for p in parts]
        commit(member, 2, kept)  # held since epoch 2
        commit(member, 2, [0, 1, 2])  # one was given up
        commit(member, 3, [0, 1, 2])
        a.send(-1)
        b.send(-1)
        commit("", -1, [1])  # an empty group takes it
        commit(member, 3, [0])
        fetch(member, 3)
        fetch(None, -1)

    converse(script, ports=ports)


def test_switching_to_a_regex_not_resolved_yet_revokes_at_once(converse, ports) -> None:
    """Within Kafka's 10 s between resolutions a new regex waits, the epoch does not move, and
    the partitions of topics the member no longer subscribes to are taken back at once. The
    switch dropped the old regex's resolution, the only one the 10 s count from, so the next
    heartbeat starts a resolution (in the background on Kafka: the script waits for it, as a
    loaded machine can take longer than a heartbeat's round trip)."""
    def script(d: Dialog) -> None:
        a = RegexMember(d, "a")
        a.send(0, topics=None, regex="diff-t")
        a.await_epoch_bump()
        a.send()
        a.send(regex="diff-u")  # diff-t's partitions to be revoked, at the same epoch
        a.send()  # revoked; diff-u resolved after it
        a.await_epoch_bump()
        a.send()
        a.describe()

    converse(script, ports=ports)


def test_known_differences_of_regexes_and_offset_fetch(converse, ports) -> None:
    """Known differences (docs/compatibility.md): a regex naming one capture group twice, which
    RE2 takes and RE2/J refuses; an OffsetFetch with a member epoch but no member id, which
    Kafka 4.3.1 fails with UNKNOWN_SERVER_ERROR (a NullPointerException) and kgroups answers
    UNKNOWN_MEMBER_ID."""
    def script(d: Dialog) -> None:
        a = Member(d, "a")
        a.send(0)
        (fetched,) = a.conn.call(offset_fetch_v9(d.group, None, 2), record=False).groups
        d.record("fetch", fetched.error_code.name)
        refused = a.conn.call(heartbeat(d.group, "b", 0, topics=None, rebalance_ms=30_000,
                                        regex="(?P<n>x)|(?P<n>y)"), record=False)
        d.record("regex", (int(refused.error_code), refused.error_message))

    regex = "(?P<n>x)|(?P<n>y)"
    converse(script, ports=ports, known={
        "1 fetch": ("unknown_server_error", "unknown_member_id"),
        "2 regex[0]": (128, 0),
        "2 regex[1]": (f"SubscribedTopicRegex `{regex}` is not a valid regular expression: "
                       "duplicate capture group name.", None)})
