"""KIP-1071 StreamsGroupHeartbeat and StreamsGroupDescribe conversations, side by side with Kafka
4.3.1: request checks and topology refusals, the topology's statuses (missing source topics,
copartitioning, internal topics the broker creates), group and member epochs, revoke-before-
assign between two members, fencing, leaving, endpoints, describe, the admin APIs and offsets
with streams member epochs. Both brokers run without the initial rebalance delay and the
assignment interval (each step of a rebalance is a heartbeat); the records Kafka writes are read
back by kgroups byte for byte and replayed into the group Kafka describes."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from diff_dialog import Connection, Dialog
from diff_setup import create_topics, offsets_log_records
from tests.broker.servers import ServerProcess
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker, kgroups_overrides

from kgroups.broker.wire import build, request_type, sibling
from kgroups.coordinator.persistence import PartitionImage, rebuild_groups
from kgroups.records.codec import decode_record, encode_record
from kgroups.records.streams_group import STREAMS_GROUP_KEYS

pytestmark = pytest.mark.kafka

STEPWISE = {**KAFKA_TEST_SETTINGS, "group.streams.initial.rebalance.delay.ms": "0",
            "group.streams.assignment.interval.ms": "0",
            "group.streams.num.standby.replicas": "1"}
TOPIC = "diff-t"  # 3 partitions
OTHER = "diff-u"  # 2 partitions
HB = request_type(88, 0)


@pytest.fixture(scope="module")
def stepwise_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-streams"), {
        **STEPWISE, "group.streams.assignor.offload.enable": "false"})
    broker.start()
    create_topics(broker.bootstrap)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def stepwise_kgroups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("kgroups-streams")
    server = ServerProcess(workdir / "data", workdir / "server.log", kgroups_overrides(STEPWISE))
    server.start()
    create_topics(server.bootstrap)
    yield server
    server.close()


@pytest.fixture
def ports(stepwise_kafka: KafkaBroker, stepwise_kgroups: ServerProcess) -> dict[str, int]:
    return {"kafka": stepwise_kafka.port, "kgroups": stepwise_kgroups.port}


def _info(name: str, partitions: int = 0) -> Any:
    return build(sibling(HB, "TopicInfo"), name=name, partitions=partitions,
                 replication_factor=0, topic_configs=())


def subtopology(sub_id: str, sources: tuple[str, ...] = (), *, regex: tuple[str, ...] = (),
                changelogs: tuple[Any, ...] = (), sinks: tuple[str, ...] = (),
                repartition: tuple[Any, ...] = (),
                copartition: tuple[tuple[int, ...], ...] = ()) -> Any:
    return build(sibling(HB, "Subtopology"), subtopology_id=sub_id, source_topics=sources,
                 source_topic_regex=regex, state_changelog_topics=changelogs,
                 repartition_sink_topics=sinks, repartition_source_topics=repartition,
                 copartition_groups=tuple(
                     build(sibling(HB, "CopartitionGroup"), source_topics=group,
                           source_topic_regex=(), repartition_source_topics=())
                     for group in copartition))


def topology(*subtopologies: Any, epoch: int = 0) -> Any:
    return build(sibling(HB, "Topology"), epoch=epoch, subtopologies=subtopologies)


SIMPLE = topology(subtopology("0", (TOPIC,)))


def _tasks(listed: Any) -> Any:
    return None if listed is None else tuple(
        build(sibling(HB, "TaskIds"), subtopology_id=s, partitions=tuple(p)) for s, p in listed)


class Member:
    """One streams member on its own connection; reports the tasks it was last told it owns."""

    def __init__(self, d: Dialog, name: str, process: str | None = None) -> None:
        self.d = d
        self.name = name
        self.conn: Connection = d.connect(name)
        self.epoch = 0
        self.process = process or f"process-{name}"
        self.active: list[tuple[str, list[int]]] = []
        self.endpoint_epoch = 0

    def send(self, epoch: int | None = None, *, topology: Any = None, tasks: Any = "owned",
             member: str | None = None, rebalance_ms: int = 30_000,
             endpoint: tuple[str, int] | None = None, **fields: Any) -> Any:
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        if tasks == "owned":
            tasks = ([], [], []) if joining else (self.active, [], [])
        active, standby, warmup = tasks if tasks is not None else (None, None, None)
        request = build(
            HB, group_id=fields.pop("group", self.d.group), member_id=member or self.name,
            member_epoch=epoch, endpoint_information_epoch=self.endpoint_epoch,
            instance_id=fields.pop("instance", None), rack_id=fields.pop("rack", None),
            rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),
            topology=(SIMPLE if joining else None) if topology is None else topology,
            active_tasks=_tasks(active), standby_tasks=_tasks(standby),
            warmup_tasks=_tasks(warmup), process_id=self.process,
            user_endpoint=None if endpoint is None else build(
                sibling(HB, "Endpoint"), host=endpoint[0], port=endpoint[1]),
            client_tags=None, task_offsets=fields.pop("task_offsets", None),
            task_end_offsets=None, shutdown_application=False)
        assert not fields, fields
        response = self.conn.call(request, record=False)
        self.d.record(f"hb[{self.name}]", _heartbeat(response))
        if int(response.error_code) == 0 and epoch >= 0:
            self.epoch = int(response.member_epoch)
            self.endpoint_epoch = int(response.endpoint_information_epoch)
            if response.active_tasks is not None:
                self.active = [(t.subtopology_id, list(t.partitions))
                               for t in response.active_tasks]
        return response

    def describe(self, group: str | None = None) -> None:
        cls = request_type(89, 0)
        response = self.conn.call(build(cls, group_ids=(group or self.d.group, "no-such-group"),
                                        include_authorized_operations=False), record=False)
        groups = []
        for g in response.groups:
            topology = g.topology
            groups.append({
                "error": int(g.error_code), "message": g.error_message, "state": g.group_state,
                "epoch": int(g.group_epoch), "assignment_epoch": int(g.assignment_epoch),
                "topology": None if topology is None else {
                    "epoch": int(topology.epoch),
                    "subtopologies": None if topology.subtopologies is None else [
                        {"id": s.subtopology_id, "sources": list(s.source_topics),
                         "sinks": list(s.repartition_sink_topics),
                         "changelogs": [(t.name, int(t.partitions))
                                        for t in s.state_changelog_topics],
                         "repartition": [(t.name, int(t.partitions))
                                         for t in s.repartition_source_topics]}
                        for s in topology.subtopologies]},
                "members": sorted(({
                    "member_id": m.member_id, "epoch": int(m.member_epoch),
                    "client_id": m.client_id, "host": m.client_host,
                    "topology_epoch": int(m.topology_epoch), "process": m.process_id,
                    "endpoint": None if m.user_endpoint is None
                    else [m.user_endpoint.host, int(m.user_endpoint.port)],
                    "assignment": _assignment(m.assignment),
                    "target": _assignment(m.target_assignment), "classic": m.is_classic}
                    for m in g.members), key=lambda m: str(m["member_id"]))})
        self.d.record(f"describe[{self.name}]", groups)


def _task_list(listed: Any) -> Any:
    return None if listed is None else [(t.subtopology_id, list(t.partitions)) for t in listed]


def _assignment(a: Any) -> Any:
    return {"active": _task_list(a.active_tasks), "standby": _task_list(a.standby_tasks),
            "warmup": _task_list(a.warmup_tasks)}


def _heartbeat(r: Any) -> dict[str, Any]:
    endpoints = None
    if r.partitions_by_user_endpoint is not None:
        # Kafka lists endpoints in a hash map's order; compared as a set.
        endpoints = sorted(
            [[e.user_endpoint.host, int(e.user_endpoint.port)],
             [(p.topic, list(p.partitions)) for p in e.active_partitions],
             [(p.topic, list(p.partitions)) for p in e.standby_partitions]]
            for e in r.partitions_by_user_endpoint)
    return {
        "error": int(r.error_code), "message": r.error_message, "member_id": r.member_id,
        "epoch": int(r.member_epoch),
        "interval": r.heartbeat_interval // datetime.timedelta(milliseconds=1),
        "status": None if r.status is None else [(int(s.status_code), s.status_detail)
                                                 for s in r.status],
        "active": _task_list(r.active_tasks), "standby": _task_list(r.standby_tasks),
        "warmup": _task_list(r.warmup_tasks),
        "endpoint_epoch": int(r.endpoint_information_epoch), "endpoints": endpoints}


def test_request_checks_and_topology_refusals(converse, ports) -> None:
    def script(d: Dialog) -> None:
        a = Member(d, "a")
        a.send(0, topology=topology(subtopology("0", ("__consumer_offsets", TOPIC))))
        a.send(0, topology=topology(subtopology("0", ("bad topic", "x*y"))))
        a.send(0, topology=topology(subtopology("0", (TOPIC,), changelogs=(_info("cl", 3),))))
        a.send(0, member="")
        a.send(0, group="")
        a.send(0, rebalance_ms=-1)
        a.send(0, tasks=([("0", [0])], [], []))
        a.send(0, tasks=None)
        a.send(0, instance="i")
        a.send(0, tasks=([], [], [("0", [0])]))
        a.send(0, topology=topology(subtopology("0", regex=("diff-.*",))))
        a.send(0, task_offsets=())
        a.send(0, rack="")
        a.send(-3, tasks=None)
        a.send(1, tasks=([], None, []))
        a.send(5, topology=SIMPLE)
        a.send(5, tasks=None)  # no such group
        a.send(-1, tasks=None)
        a.send(0, topology=topology(subtopology("0", (TOPIC,)), epoch=-1))

    converse(script, ports=ports)


def test_two_members_revoke_before_assign_fencing_and_leaving(converse, ports,
                                                              stepwise_kafka: KafkaBroker) -> None:
    groups: list[str] = []

    def script(d: Dialog) -> None:
        groups.append(d.group)
        a, b = Member(d, "a"), Member(d, "b")
        a.send(0, endpoint=("host-a", 1))
        b.send(0, endpoint=("host-b", 2))
        a.send()  # told to give tasks up
        b.send()  # nothing released yet
        a.send()  # revoked: at the new epoch
        b.send()  # now gets them
        a.describe()
        a.send(a.epoch + 5)  # fenced
        a.send(a.epoch - 1)  # fenced
        a.send(member="stranger")
        other = Member(d, "c")
        other.send(0, topology=topology(subtopology("0", (OTHER,))))  # another topology
        a.send(0)  # rejoining with epoch 0 keeps its tasks
        b.send(-1, tasks=None)
        a.send()
        a.describe()

    transcripts = converse(script, ports=ports)
    # kgroups reads the records Kafka wrote for the group, re-encodes them byte for byte, and
    # replays them into the group Kafka described last.
    written = [(key, value) for key, value in offsets_log_records(stepwise_kafka.data_dir)
               if isinstance(key_of := decode_record(key, value).key, STREAMS_GROUP_KEYS)
               and key_of.group == groups[0]]
    assert {decode_record(k, v).key.version for k, v in written} == {17, 19, 20, 21, 22, 23}
    assert all(encode_record(decode_record(k, v)) == (k, v) for k, v in written)
    image = PartitionImage()
    image.apply(decode_record(k, v) for k, v in written)
    streams = rebuild_groups(image, 0)[groups[0]].streams
    described = transcripts["kafka"][-1][1][0]
    assert streams is not None
    assert (streams.group_epoch, streams.assignment_epoch) == (
        described["epoch"], described["assignment_epoch"])
    assert {m: s.member_epoch for m, s in streams.members.items()} == {
        m["member_id"]: m["epoch"] for m in described["members"]}


def test_topology_statuses_and_internal_topics(converse, ports) -> None:
    def script(d: Dialog) -> None:
        a = Member(d, "a")
        a.send(0, topology=topology(subtopology("0", ("nope-2", "nope-1", TOPIC))))
        a.describe()  # NotReady, its topology without subtopologies
        b = Member(d, "b")
        b.send(0, group=f"{d.group}-cp", topology=topology(
            subtopology("0", (TOPIC, OTHER), copartition=((0, 1),))))
        existing = f"{d.group}-cl3"
        d.connect("admin").call(build(request_type(19, 7), topics=(build(
            sibling(request_type(19, 7), "CreatableTopic"), name=existing, num_partitions=2,
            replication_factor=1, assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=False), record=False)
        time.sleep(1)  # until Kafka's coordinator sees the topic in its metadata image
        c = Member(d, "c")
        c.send(0, group=f"{d.group}-wrong", topology=topology(
            subtopology("0", (TOPIC,), changelogs=(_info(existing),))))
        rep, store = f"{d.group}-rep", f"{d.group}-store-changelog"
        e = Member(d, "e")
        first = e.send(0, group=f"{d.group}-int", topology=topology(
            subtopology("0", (TOPIC,), sinks=(rep,), changelogs=(_info(store),)),
            subtopology("1", repartition=(_info(rep),))))
        # The broker creates the internal topics after that answer; heartbeat until the group
        # sees them (recording only the answer that does).
        for _ in range(40):
            response = e.conn.call(_plain_heartbeat(d, e, f"{d.group}-int"), record=False)
            if int(response.error_code) == 0 and not response.status:
                d.record("internal topics ready", _heartbeat(response))
                e.describe(f"{d.group}-int")
                break
            time.sleep(0.25)
        else:
            raise AssertionError(f"{d.broker}: the internal topics never became visible")
        assert first.status

    converse(script, ports=ports)


def _plain_heartbeat(d: Dialog, member: Member, group: str) -> Any:
    return build(HB, group_id=group, member_id=member.name, member_epoch=member.epoch,
                 endpoint_information_epoch=0, instance_id=None, rack_id=None,
                 rebalance_timeout=datetime.timedelta(milliseconds=-1), topology=None,
                 active_tasks=_tasks(member.active), standby_tasks=(), warmup_tasks=(),
                 process_id=None, user_endpoint=None, client_tags=None, task_offsets=None,
                 task_end_offsets=None, shutdown_application=False)


def test_admin_apis_and_offsets_with_member_epochs(converse, ports) -> None:
    def script(d: Dialog) -> None:
        a = Member(d, "a")
        a.send(0)
        admin = d.connect("admin")
        listed = admin.call(build(request_type(16, 5), states_filter=(), types_filter=()),
                            record=False)
        d.record("listed", [(g.protocol_type, g.group_state, g.group_type)
                            for g in listed.groups if g.group_id == d.group])
        admin.call(build(request_type(15, 5), groups=(d.group,),
                         include_authorized_operations=False))
        admin.call(build(request_type(11, 9), group_id=d.group,
                         session_timeout=datetime.timedelta(seconds=10),
                         rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
                         group_instance_id=None, protocol_type="consumer",
                         protocols=(build(sibling(request_type(11, 9), "JoinGroupRequestProtocol"),
                                          name="range", metadata=b""),), reason=None))

        def commit(epoch: int, member: str = "a", version: int = 9) -> None:
            cls = request_type(8, version)
            admin.call(build(cls, group_id=d.group, generation_id_or_member_epoch=epoch,
                             member_id=member, group_instance_id=None, topics=(build(
                                 sibling(cls, "OffsetCommitRequestTopic"), name=TOPIC,
                                 partitions=(build(sibling(cls, "OffsetCommitRequestPartition"),
                                                   partition_index=0, committed_offset=5,
                                                   committed_leader_epoch=-1,
                                                   committed_metadata=""),)),)),
                       label=f"commit {epoch} {member} v{version}")

        for epoch, member, version in ((a.epoch, "a", 9), (a.epoch + 1, "a", 9),
                                       (a.epoch - 1, "a", 9), (a.epoch, "zz", 9),
                                       (-1, "", 9), (a.epoch, "a", 8)):
            commit(epoch, member, version)
        fetch = request_type(9, 9)
        for member, epoch in (("a", a.epoch), ("a", a.epoch - 1), ("zz", a.epoch), (None, -1)):
            admin.call(build(fetch, groups=(build(
                sibling(fetch, "OffsetFetchRequestGroup"), group_id=d.group, member_id=member,
                member_epoch=epoch, topics=None),), require_stable=False),
                label=f"fetch {member} {epoch}")
        delete = request_type(42, 2)
        admin.call(build(delete, groups_names=(d.group,)), label="delete while live")
        a.send(-1, tasks=None)
        admin.call(build(delete, groups_names=(d.group,)), label="delete empty")
        a.send(1, tasks=None)

    converse(script, ports=ports)


def test_initial_rebalance_delay_and_assignment_interval_as_kafka_43(converse) -> None:
    """Both brokers with their defaults (group.streams.initial.rebalance.delay.ms 3 s,
    group.streams.assignment.interval.ms 1 s): a new group's members wait at epoch 1 with the
    ASSIGNMENT_DELAYED status until the delay's end computes the first target; a member joining
    within the interval after a computation is told so too."""
    def script(d: Dialog) -> None:
        a = Member(d, "a")
        a.send(0)
        a.send()
        time.sleep(3.5)
        a.send()  # the delay's end computed the target
        a.describe()
        b = Member(d, "b")
        b.send(0)  # within the interval of that computation? answered as Kafka answers
        time.sleep(1.2)
        b.send()
        a.send()
        a.describe()

    converse(script)


def test_stateful_tasks_get_standbys_on_another_process(converse, ports) -> None:
    """group.streams.num.standby.replicas 1: a stateful subtopology's tasks get a standby on a
    process that does not run them, released only once that process gave the task up."""
    def script(d: Dialog) -> None:
        changelog = f"{d.group}-store-changelog"
        stateful = topology(subtopology("0", (TOPIC,), changelogs=(_info(changelog),)),
                            subtopology("1", (OTHER,)))
        a, b = Member(d, "a"), Member(d, "b")
        first = a.send(0, topology=stateful)
        for _ in range(40):  # until the broker created the changelog topic
            if not first.status:
                break
            time.sleep(0.25)
            first = a.conn.call(_plain_heartbeat(d, a, d.group), record=False)
        a.epoch, a.active = int(first.member_epoch), [
            (t.subtopology_id, list(t.partitions)) for t in first.active_tasks or ()]
        d.record("ready", _heartbeat(first))
        b.send(0, topology=stateful)
        for _ in range(3):
            a.send()
            b.send()
        a.describe()

    transcripts = converse(script, ports=ports)
    described = transcripts["kafka"][-1][1][0]
    standbys = [m["assignment"]["standby"] for m in described["members"]]
    assert any(standbys), described  # the conversation did reach standby tasks


def test_a_member_that_does_not_revoke_in_time_is_fenced(converse, ports) -> None:
    def script(d: Dialog) -> None:
        a, b = Member(d, "a"), Member(d, "b")
        a.send(0, rebalance_ms=1000)
        everything = list(a.active)
        b.send(0)
        # told to give tasks up: it keeps reporting them
        a.send(tasks=(everything, [], []), rebalance_ms=1000)
        time.sleep(2.0)
        a.send(tasks=(everything, [], []), rebalance_ms=1000)  # fenced by then
        b.send()
        b.send()
        b.describe()

    transcripts = converse(script, ports=ports)
    assert transcripts["kafka"][3][1]["error"] == 25  # UNKNOWN_MEMBER_ID: it was removed


def test_offline_migration_between_classic_and_streams(converse, ports) -> None:
    """A Streams application moving from `group.protocol=classic` to `streams` and back while
    stopped: an empty classic group with offsets becomes a streams group, an empty streams group
    becomes classic again; the offsets stay."""
    def script(d: Dialog) -> None:
        conn = d.connect("classic")
        join = request_type(11, 9)

        def classic_join(member_id: str) -> Any:
            return conn.call(build(
                join, group_id=d.group, session_timeout=datetime.timedelta(seconds=10),
                rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id,
                group_instance_id=None, protocol_type="consumer",
                protocols=(build(sibling(join, "JoinGroupRequestProtocol"), name="range",
                                 metadata=b""),), reason=None), label="join")

        member_id = classic_join("").member_id
        joined = classic_join(member_id)
        sync = request_type(14, 5)
        conn.call(build(sync, group_id=d.group, generation_id=joined.generation_id,
                        member_id=member_id, group_instance_id=None, protocol_type="consumer",
                        protocol_name="range", assignments=(build(
                            sibling(sync, "SyncGroupRequestAssignment"), member_id=member_id,
                            assignment=b""),)), label="sync")
        commit = request_type(8, 9)
        conn.call(build(commit, group_id=d.group,
                        generation_id_or_member_epoch=joined.generation_id,
                        member_id=member_id, group_instance_id=None, topics=(build(
                            sibling(commit, "OffsetCommitRequestTopic"), name=TOPIC,
                            partitions=(build(sibling(commit, "OffsetCommitRequestPartition"),
                                              partition_index=0, committed_offset=7,
                                              committed_leader_epoch=-1,
                                              committed_metadata=""),)),)), label="commit")
        leave = request_type(13, 5)
        conn.call(build(leave, group_id=d.group, members=(build(
            sibling(leave, "MemberIdentity"), member_id=member_id, group_instance_id=None,
            reason=None),)), label="leave")
        a = Member(d, "a")
        a.send(0)
        a.describe()
        a.send(-1, tasks=None)
        member_id = classic_join("").member_id
        classic_join(member_id)
        fetch = request_type(9, 9)
        conn.call(build(fetch, groups=(build(
            sibling(fetch, "OffsetFetchRequestGroup"), group_id=d.group, member_id=None,
            member_epoch=-1, topics=None),), require_stable=False), label="offsets")

    converse(script, ports=ports)


def test_a_share_heartbeat_with_a_streams_groups_id(converse, ports) -> None:
    """ShareGroupHeartbeat joining with a live streams group's id: refused as not a share group,
    and the streams member goes on as before."""
    def script(d: Dialog) -> None:
        member = Member(d, "m")
        member.send(0)
        share = d.connect("share")
        share.call(build(request_type(76, 1), group_id=d.group, member_id="s1", member_epoch=0,
                         rack_id=None, subscribed_topic_names=(TOPIC,)), "share-join")
        member.send()

    converse(script, ports=ports)


def test_a_streams_heartbeat_with_a_share_groups_id(converse, ports) -> None:
    """StreamsGroupHeartbeat joining with a live share group's id, then once it is empty:
    refused as not a streams group, and the share member goes on as before; and
    StreamsGroupDescribe of the share group."""
    def script(d: Dialog) -> None:
        share = d.connect("share")

        def share_heartbeat(epoch: int, label: str) -> Any:
            response = share.call(build(
                request_type(76, 1), group_id=d.group, member_id="s1", member_epoch=epoch,
                rack_id=None, subscribed_topic_names=(TOPIC,) if epoch == 0 else None),
                record=False)
            d.record(label, (int(response.error_code), response.error_message,
                             int(response.member_epoch)))
            return response

        epoch = int(share_heartbeat(0, "share-join").member_epoch)
        m = Member(d, "m")
        m.send(0)
        m.describe()  # StreamsGroupDescribe of the share group
        share_heartbeat(epoch, "share-heartbeat")
        share_heartbeat(-1, "share-leave")
        Member(d, "n").send(0)
        m.describe()

    converse(script, ports=ports)
