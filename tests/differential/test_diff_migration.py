"""Online migration between the classic and the consumer protocol, side by side with Kafka 4.3.1:
a live classic group converts when a consumer-protocol member joins, its classic member is told
to rejoin and reconciles through JoinGroup/SyncGroup/Heartbeat (generations are member epochs,
assignments the server assignor's), commits with its generation, and the group turns classic
again when the consumer-protocol member leaves; plus the errors classic requests get inside a
consumer group. Member ids a broker generates for classic members of a consumer group are bare
UUIDs, so transcripts name members by order of appearance."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from diff_dialog import Connection, Dialog
from diff_requests import commit, describe, heartbeat, join, leave, sync
from diff_setup import ON_BOTH_ENGINES, create_topics
from tests.broker.broker_wire_helpers import metadata_request
from tests.broker.servers import ServerProcess
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker, kgroups_overrides

from kgroups.broker.wire import build, request_type, sibling
from kgroups.coordinator.persistence import PartitionImage, rebuild_groups
from kgroups.log.batch import iter_batches
from kgroups.records.classic_member import ClassicMemberMetadata, decode_classic_member_metadata
from kgroups.records.codec import decode_record, encode_record
from kgroups.records.consumer_group import ConsumerGroupMemberMetadataValue
from kgroups.records.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from kgroups.records.schema import (
    ConsumerAssignment,
    ConsumerSubscription,
    OffsetCommitKey,
    TopicPartitions,
)

pytestmark = pytest.mark.kafka

TOPIC = "diff-t"  # 3 partitions (tests/differential/diff_setup.py)
# As in test_diff_consumer_protocol.py: Kafka computing target assignments in the heartbeat
# that moves the group epoch, as kgroups does (docs/compatibility.md).
SYNCHRONOUS_ASSIGNMENT = {
    **KAFKA_TEST_SETTINGS,
    "group.consumer.assignment.interval.ms": "0",
    "group.consumer.assignor.offload.enable": "false",
}


@pytest.fixture(scope="module")
def migration_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-migration"), SYNCHRONOUS_ASSIGNMENT)
    broker.start()
    create_topics(broker.bootstrap)
    yield broker
    broker.stop()


@pytest.fixture
def ports(migration_kafka: KafkaBroker, kgroups_on: ServerProcess) -> dict[str, int]:
    return {"kafka": migration_kafka.port, "kgroups": kgroups_on.port}


@pytest.fixture(scope="module")
def disabled_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Both brokers with group.consumer.migration.policy=disabled."""
    settings = {**SYNCHRONOUS_ASSIGNMENT, "group.consumer.migration.policy": "disabled"}
    workdir = tmp_path_factory.mktemp("migration-disabled")
    kafka = KafkaBroker(workdir / "kafka", settings)
    kafka.start()
    kgroups = ServerProcess(workdir / "kgroups", workdir / "kgroups.log",
                            kgroups_overrides(settings))
    kgroups.start()
    try:
        for broker in (kafka, kgroups):
            create_topics(broker.bootstrap)
        yield {"kafka": kafka.port, "kgroups": kgroups.port}
    finally:
        kgroups.close()
        kafka.stop()


def _offsets_records(broker: KafkaBroker) -> list[tuple[bytes, bytes | None]]:
    records = []
    for segment in sorted((broker.data_dir / "__consumer_offsets-0").glob("*.log")):
        for batch in iter_batches(segment.read_bytes()):
            records += [(bytes(r.key), None if r.value is None else bytes(r.value))
                        for r in batch.records if r.key is not None and not batch.is_control]
    return records


def subscription(owned: tuple[int, ...] = ()) -> bytes:
    """A v1 subscription, as cooperative consumers send it (the partitions they still own)."""
    return encode_subscription(ConsumerSubscription(
        (TOPIC,), None, (TopicPartitions(TOPIC, owned),) if owned else (), -1, None, 1))


def assignment(*partitions: int) -> bytes:
    return encode_assignment(ConsumerAssignment((TopicPartitions(TOPIC, partitions),), None, 1))


class Names:
    """Member ids by order of first appearance (m0, m1, ...), the same on both brokers."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {"": ""}

    def __call__(self, member_id: str) -> str:
        return self.names.setdefault(member_id, f"m{len(self.names) - 1}")


class Classic:
    """A classic member on its own connection, speaking cooperative-sticky then range."""

    def __init__(self, d: Dialog, names: Names, client_id: str = "c") -> None:
        self.d = d
        self.names = names
        self.conn = d.connect(client_id)
        self.member_id = ""
        self.generation = -1
        self.owned: tuple[int, ...] = ()

    def join(self, protocols: tuple[str, ...] = ("cooperative-sticky", "range"),
             instance: str | None = None) -> Any:
        response = self.conn.call(join(self.d.group, self.member_id, protocols=tuple(
            (name, subscription(self.owned)) for name in protocols), session_ms=30_000,
            rebalance_ms=30_000, instance=instance), record=False)
        if response.member_id:
            self.member_id = response.member_id
        if int(response.error_code) == 0:
            self.generation = int(response.generation_id)
        self.d.record("join", {
            "error": int(response.error_code), "member": self.names(response.member_id),
            "generation": int(response.generation_id), "type": response.protocol_type,
            "protocol": response.protocol_name, "leader": self.names(response.leader),
            "skip": response.skip_assignment,
            "members": sorted((self.names(m.member_id), bytes(m.metadata).hex())
                              for m in response.members)})
        return response

    def sync(self, assignments: dict[str, bytes] | None = None,
             protocol: str = "cooperative-sticky", generation: int | None = None,
             instance: str | None = None) -> Any:
        response = self.conn.call(sync(
            self.d.group, self.generation if generation is None else generation, self.member_id,
            assignments, protocol_name=protocol, instance=instance), record=False)
        partitions = None
        if int(response.error_code) == 0:
            decoded = decode_assignment(bytes(response.assignment))
            partitions = tuple(p for t in decoded.assigned_partitions for p in t.partitions)
            self.owned = partitions
        self.d.record("sync", {"error": int(response.error_code),
                               "protocol": response.protocol_name,
                               "assignment": bytes(response.assignment).hex(),
                               "partitions": partitions})
        return response

    def heartbeat(self, generation: int | None = None) -> None:
        response = self.conn.call(heartbeat(self.d.group, self.generation if generation is None
                                            else generation, self.member_id), record=False)
        self.d.record("heartbeat", int(response.error_code))

    def commit(self, generation: int, offset: int, v: int = 8) -> None:
        response = self.conn.call(commit(self.d.group, {(TOPIC, 0): offset},
                                         generation=generation, member_id=self.member_id, v=v),
                                  record=False)
        self.d.record("commit", [int(p.error_code) for t in response.topics
                                 for p in t.partitions])


class Consumer:
    """A consumer-protocol member (client-generated member id, as v1 clients do)."""

    def __init__(self, d: Dialog, name: str) -> None:
        self.d = d
        self.name = name
        self.member_id = f"{name}-{d.group}"[:36]
        self.conn = d.connect(name)
        response = self.conn.call(metadata_request(TOPIC, auto_create=False), record=False)
        self.by_id = {t.topic_id: t.name for t in response.topics}
        self.ids = {v: k for k, v in self.by_id.items()}
        self.epoch = 0
        self.owned: list[tuple[str, list[int]]] = []

    def send(self, epoch: int | None = None, *, with_assignment: bool = True,
             instance: str | None = None) -> Any:
        epoch = self.epoch if epoch is None else epoch
        cls = request_type(68, 1)
        joining = epoch == 0
        owned = [] if joining else self.owned
        request = build(
            cls, group_id=self.d.group, member_id=self.member_id, member_epoch=epoch,
            instance_id=instance, rack_id=None,
            rebalance_timeout=datetime.timedelta(milliseconds=30_000 if joining else -1),
            subscribed_topic_names=(TOPIC,) if joining else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=tuple(
                build(sibling(cls, "TopicPartitions"), topic_id=self.ids[name],
                      partitions=tuple(ps)) for name, ps in owned))
        response = self.conn.call(request, record=False)
        assigned = None
        if response.assignment is not None:
            assigned = sorted((self.by_id[t.topic_id], sorted(t.partitions))
                              for t in response.assignment.topic_partitions)
        self.d.record(f"hb[{self.name}]", {
            "error": int(response.error_code), "message": response.error_message,
            "epoch": int(response.member_epoch),
            "assignment": assigned if with_assignment else assigned is not None})
        if int(response.error_code) == 0 and epoch >= 0:
            self.epoch = int(response.member_epoch)
            if assigned is not None:
                self.owned = assigned
        return response

    def describe(self, names: Names) -> None:
        response = self.conn.call(build(request_type(69, 1), group_ids=(self.d.group,),
                                        include_authorized_operations=False), record=False)
        (group,) = response.groups
        self.d.record("describe", {
            "error": int(group.error_code), "state": group.group_state,
            "epoch": int(group.group_epoch), "assignment_epoch": int(group.assignment_epoch),
            "members": sorted((names(m.member_id), int(m.member_epoch), int(m.member_type),
                               sorted(p for t in m.assignment.topic_partitions
                                      for p in t.partitions),
                               sorted(p for t in m.target_assignment.topic_partitions
                                      for p in t.partitions))
                              for m in group.members)})


def describe_classic(d: Dialog, conn: Connection, names: Names) -> None:
    (group,) = conn.call(describe(d.group), record=False).groups
    d.record("describe-groups", {
        "error": int(group.error_code), "state": group.group_state,
        "protocol": group.protocol_data,
        "members": sorted((names(m.member_id), bytes(m.member_assignment).hex())
                          for m in group.members)})


def stable_classic_group(d: Dialog, names: Names) -> Classic:
    """One classic member owning all 3 partitions, generation 1."""
    c = Classic(d, names)
    c.join()  # MEMBER_ID_REQUIRED
    c.join()
    c.sync({c.member_id: assignment(0, 1, 2)})
    return c


@ON_BOTH_ENGINES
def test_upgrade_rejoin_commit_and_downgrade(converse, ports,
                                            migration_kafka: KafkaBroker) -> None:
    groups: list[str] = []

    def script(d: Dialog) -> None:
        groups.append(d.group)
        names = Names()
        c = stable_classic_group(d, names)
        a = Consumer(d, "a")
        a.send(0)  # the group converts; the classic generation is the epoch it starts from
        a.describe(names)
        c.heartbeat()  # told to rejoin
        c.join()  # reconciles: must give partitions up first
        c.sync()
        c.heartbeat()
        c.join()  # reported them revoked: at the new epoch
        c.sync()
        c.heartbeat()
        a.send()  # the free partitions
        a.describe(names)
        c.commit(c.generation, 5)
        c.commit(c.generation + 1, 6)
        c.commit(c.generation, 7, v=9)
        a.send(-1)  # the last consumer-protocol member leaves: classic again
        describe_classic(d, c.conn, names)
        c.heartbeat()
        c.join()
        c.sync({c.member_id: assignment(0, 1, 2)}, protocol="cooperative-sticky")
        describe_classic(d, c.conn, names)

    converse(script, ports=ports)
    # The group records Kafka wrote for both conversions: kgroups decodes them, re-encodes them
    # byte for byte, reads the classic member's metadata, and replays them into the classic
    # group (offset commits aside: Kafka writes v4, which kgroups reads but writes as v3).
    written = [(k, v) for k, v in _offsets_records(migration_kafka)
               if getattr(decode_record(k, v).key, "group", None) == groups[0]
               and not isinstance(decode_record(k, v).key, OffsetCommitKey)]
    decoded = [decode_record(k, v) for k, v in written]
    assert all(encode_record(record) == raw for record, raw in zip(decoded, written, strict=True))
    classic = [decode_classic_member_metadata(r.value.classic_member_metadata)
               for r in decoded if isinstance(r.value, ConsumerGroupMemberMetadataValue)
               and r.value.classic_member_metadata is not None]
    assert classic[0] == ClassicMemberMetadata(  # as converted: its last JoinGroup's
        30_000, (("cooperative-sticky", subscription()), ("range", subscription())))
    image = PartitionImage()
    image.apply(decoded)
    rebuilt = rebuild_groups(image, 0)[groups[0]]
    assert rebuilt.consumer is None and len(rebuilt.members) == 1


@ON_BOTH_ENGINES
def test_classic_requests_inside_a_consumer_group(converse, ports) -> None:
    def script(d: Dialog) -> None:
        names = Names()
        c = stable_classic_group(d, names)
        a = Consumer(d, "a")
        a.send(0)
        c.heartbeat(generation=c.generation + 3)
        c.sync(generation=c.generation + 3)
        c.sync(protocol="range")
        c.sync()
        other = Classic(d, names, "x")
        other.join(protocols=("roundrobin",))  # not a protocol the classic member has
        other.join(protocols=("range",))  # MEMBER_ID_REQUIRED, then a new member
        other.join(protocols=("range",))
        other.heartbeat()
        stranger = Classic(d, names, "y")
        stranger.member_id = a.member_id  # a consumer-protocol member's id
        stranger.generation = a.epoch
        stranger.heartbeat()
        response = c.conn.call(leave(d.group, [(a.member_id, None), ("nobody", None),
                                               (other.member_id, None)]), record=False)
        d.record("leave", sorted((names(m.member_id), int(m.error_code))
                                 for m in response.members))
        a.send()
        a.describe(names)
        # A consumer-protocol member joining a classic group of another protocol type.
        d.group = f"{d.group}-connect"
        w = Classic(d, names, "w")
        first = w.conn.call(join(d.group, "", protocols=(("v1", b"x"),),
                                 protocol_type="connect", session_ms=30_000), record=False)
        w.conn.call(join(d.group, first.member_id, protocols=(("v1", b"x"),),
                         protocol_type="connect", session_ms=30_000), record=False)
        b = Consumer(d, "b")
        b.member_id = str(uuid.UUID(int=7))
        b.send(0)
        b.send(3)

    converse(script, ports=ports)


def test_upgrade_with_user_data_in_assignments_or_no_assignment_yet(converse, ports) -> None:
    """librdkafka's cooperative-sticky (unlike Java's) puts user data in each assignment: Kafka
    refuses to carry that over. A member without an assignment yet (the group completing a
    rebalance) converts owning nothing (which partitions each member then gets is a tie the
    two brokers' assignors may break differently, so only that it gets some is compared)."""
    def script(d: Dialog) -> None:
        names = Names()
        c = Classic(d, names)
        c.join()
        c.join()
        c.sync({c.member_id: encode_assignment(ConsumerAssignment(
            (TopicPartitions(TOPIC, (0, 1, 2)),), b"\x00\x00\x00\x02", 1))})
        Consumer(d, "a").send(0)
        c.heartbeat()
        d.group = f"{d.group}-b"
        c2 = Classic(d, names, "c2")
        c2.join()
        c2.join()
        Consumer(d, "b").send(0, with_assignment=False)  # c2 has not synced yet
        c2.sync(protocol="range")
        c2.heartbeat()

    converse(script, ports=ports)


@ON_BOTH_ENGINES
def test_a_classic_static_member_replaces_the_last_consumer_one(converse, ports) -> None:
    def script(d: Dialog) -> None:
        names = Names()
        c = stable_classic_group(d, names)
        a = Consumer(d, "a")
        a.send(0, instance="ia")
        c.heartbeat()
        c.join()
        c.sync()
        a.send(instance="ia")
        static = Classic(d, names, "s")
        static.join(instance="ia")  # takes the place of "a": the group turns classic
        static.sync(instance="ia")
        describe_classic(d, c.conn, names)
        c.heartbeat()
        a.send(instance="ia")

    converse(script, ports=ports)


def test_commits_with_an_older_generation(converse, ports) -> None:
    """KIP-1251 for a classic member: an older generation is taken for partitions it held
    since then, and refused (ILLEGAL_GENERATION) for one it did not."""
    def script(d: Dialog) -> None:
        names = Names()
        c = stable_classic_group(d, names)
        Consumer(d, "a").send(0)
        c.join()
        c.sync()
        c.join()
        c.sync()
        c.commit(c.generation - 1, 5)
        response = c.conn.call(commit(d.group, {(TOPIC, 0): 6, (TOPIC, 2): 6},
                                      generation=c.generation - 1, member_id=c.member_id, v=8),
                               record=False)
        d.record("commit", sorted((p.partition_index, int(p.error_code))
                                  for t in response.topics for p in t.partitions))

    converse(script, ports=ports)


def test_migration_policy_disabled(converse, disabled_ports) -> None:
    """Neither way: a consumer-protocol member cannot join a live classic group
    (GROUP_ID_NOT_FOUND, "online upgrade is disabled"), nor a classic member a live consumer
    group (INCONSISTENT_GROUP_PROTOCOL); empty groups still change type."""
    def script(d: Dialog) -> None:
        names = Names()
        c = stable_classic_group(d, names)
        Consumer(d, "a").send(0)
        c.heartbeat()
        d.group = f"{d.group}-consumer"
        b = Consumer(d, "b")
        b.send(0)
        x = Classic(d, names, "x")
        x.join()
        x.sync()
        b.send(-1)
        x.join()  # the group is empty now: it becomes a classic group
        x.join()

    converse(script, ports=disabled_ports)


def test_a_consumer_member_takes_a_classic_static_members_instance_id(converse, ports) -> None:
    """No UNRELEASED_INSTANCE_ID: the classic static member is replaced at once, its
    partitions and epoch going to the consumer-protocol member."""
    def script(d: Dialog) -> None:
        names = Names()
        c = Classic(d, names)
        c.join(instance="ia")
        c.sync({c.member_id: assignment(0, 1, 2)}, instance="ia")
        Consumer(d, "a").send(0, instance="ia")
        c.heartbeat()
        describe_classic(d, c.conn, names)

    converse(script, ports=ports)
