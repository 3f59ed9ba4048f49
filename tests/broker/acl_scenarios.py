"""ACL scenarios shared by the kgroups-only ACL tests and the differential test against Kafka:
the bindings, and the requests a restricted user sends, reduced to their error codes, at every
version of each API the broker serves (an old version answers through other fields, and the
authorization of each has gone wrong on its own before).

`admin` is a super user (ANONYMOUS on the PLAINTEXT listener, as Kafka's controller and the
tests' admin connection); `alice` authenticates with PLAIN on SASL_PLAINTEXT."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.describe_acls.v3 import request as describe_acls
from tests.broker.broker_wire_helpers import (
    create_topic,
    metadata_request,
    nested_of,
    request_of,
)

from kgroups.broker.security.authorizer import Operation, PatternType, Permission, ResourceType
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch
from kgroups.tools.wire_client import KafkaWireClient

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SUPER_USERS = "User:ANONYMOUS;User:admin"
ALICE = "User:alice"
TOPICS = ("orders", "secret", "pre-x", "denied-t")
GROUPS = ("g-ok", "team-a", "g-denied", "g-none")


def binding(kind: ResourceType, name: str, operation: Operation, permission: Permission,
            principal: str = ALICE, pattern: PatternType = PatternType.LITERAL,
            host: str = "*") -> create_acls.AclCreation:
    return create_acls.AclCreation(
        resource_type=kind, resource_name=name, resource_pattern_type=pattern,
        principal=principal, host=host, operation=operation, permission_type=permission)


BINDINGS = (
    binding(ResourceType.TOPIC, "orders", Operation.READ, Permission.ALLOW),
    binding(ResourceType.TOPIC, "pre-", Operation.READ, Permission.ALLOW,
            pattern=PatternType.PREFIXED),
    binding(ResourceType.TOPIC, "denied-t", Operation.ALL, Permission.ALLOW),
    binding(ResourceType.TOPIC, "denied-t", Operation.READ, Permission.DENY),
    binding(ResourceType.GROUP, "g-ok", Operation.READ, Permission.ALLOW),
    binding(ResourceType.GROUP, "g-ok", Operation.DELETE, Permission.ALLOW),
    binding(ResourceType.TOPIC, "orders", Operation.DESCRIBE_CONFIGS, Permission.ALLOW),
    binding(ResourceType.GROUP, "team-", Operation.READ, Permission.ALLOW,
            pattern=PatternType.PREFIXED),
    binding(ResourceType.GROUP, "g-denied", Operation.ALL, Permission.ALLOW,
            principal="User:*"),
    binding(ResourceType.GROUP, "g-denied", Operation.READ, Permission.DENY),
    # Not for alice's host: applies to nobody in these tests.
    binding(ResourceType.GROUP, "g-none", Operation.READ, Permission.ALLOW, host="10.9.9.9"),
)


# A consumer group (Read for alice by the team- prefix) whose member holds `secret`, a topic
# alice may not Describe: set up by the super user before alice's requests; and a streams group
# whose topology names it.
MIXED_GROUP = "team-mixed"
MIXED_STREAMS_GROUP = "team-st-mixed"


def streams_heartbeat(client: KafkaWireClient, version: int, group: str,
                      sources: tuple[str, ...], changelog: str | None = None) -> Any:
    """A streams member joining `group` with a one-subtopology topology reading `sources`
    (and keeping a store whose changelog topic is `changelog`, an internal topic the broker
    creates when its principal may; named so that no regex subscription here matches it, as
    Kafka creates it in the background)."""
    def nested(class_name: str, /, **fields: Any) -> Any:
        return nested_of(88, version, class_name, **fields)

    changelogs = () if changelog is None else (nested(
        "TopicInfo", name=changelog, partitions=0, replication_factor=0, topic_configs=()),)
    subtopology = nested("Subtopology", subtopology_id="0", source_topics=sources,
                         source_topic_regex=(), state_changelog_topics=changelogs,
                         repartition_sink_topics=(), repartition_source_topics=(),
                         copartition_groups=())
    return client.call(request_of(
        88, version, group_id=group, member_id=f"m-{group}-v{version}", member_epoch=0,
        endpoint_information_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=30),
        topology=nested("Topology", epoch=0, subtopologies=(subtopology,)),
        active_tasks=(), standby_tasks=(), warmup_tasks=(), process_id=f"p-{group}",
        user_endpoint=None, client_tags=None, task_offsets=None, task_end_offsets=None,
        shutdown_application=False))


def share_state_loaded(admin: KafkaWireClient) -> None:
    """A share group's first heartbeat has Kafka create __share_group_state, whose partitions
    answer NOT_COORDINATOR while they load: made to happen, and waited out, before the probes
    (the share coordinator's APIs are probed as a loaded coordinator answers them)."""
    admin.call(request_of(76, 1, group_id="team-sh-setup", member_id="m-setup", member_epoch=0,
                          rack_id=None, subscribed_topic_names=("orders",)))
    for _ in range(300):
        topics = {t.name for t in admin.call(metadata_request(all_topics=True)).topics}
        if ("__share_group_state" in topics
                and _share_state(84)(admin, 0)[""] != [int(ErrorCode.NOT_COORDINATOR)]):
            return
        time.sleep(0.1)
    raise AssertionError("__share_group_state was never created and loaded")


def set_up(admin: KafkaWireClient) -> None:
    for topic in TOPICS:
        create_topic(admin, topic, partitions=2)
    member_id, epoch = uuid.uuid4().hex, 0
    for _ in range(100):
        beat = admin.call(request_of(
            68, 1, group_id=MIXED_GROUP, member_id=member_id, member_epoch=epoch,
            instance_id=None, rack_id=None, rebalance_timeout=datetime.timedelta(seconds=60),
            subscribed_topic_names=("orders", "secret"), subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=None if epoch else ()))
        epoch = int(beat.member_epoch)
        if beat.assignment is not None and beat.assignment.topic_partitions:
            break
        time.sleep(0.1)
    streams_heartbeat(admin, 0, MIXED_STREAMS_GROUP, ("orders", "secret"))
    share_state_loaded(admin)
    results = admin.call(create_acls.CreateAclsRequest(creations=BINDINGS)).results
    assert [int(r.error_code) for r in results] == [0] * len(BINDINGS)
    # Kafka applies ACLs through its metadata log: wait until they are all visible.
    for _ in range(100):
        described = admin.call(describe_acls.DescribeAclsRequest(
            resource_type_filter=ResourceType.ANY, resource_name_filter=None,
            pattern_type_filter=PatternType.ANY, principal_filter=None, host_filter=None,
            operation=Operation.ANY, permission_type=Permission.ANY))
        if sum(len(r.acls) for r in described.resources) >= len(BINDINGS):
            return
        time.sleep(0.1)


def codes(response: Any, *path: str) -> Any:
    """The error codes found along `path` (lists flattened)."""
    items = [response]
    for step in path:
        items = [child for item in items for child in (
            getattr(item, step) if isinstance(getattr(item, step), tuple)
            else (getattr(item, step),))]
    return [int(item.error_code) for item in items]


def regex_assignment(client: KafkaWireClient) -> list[str]:
    """The topics a lone member subscribed by regex is assigned, once the broker has resolved
    the regex (Kafka does so in the background after the first heartbeat): only those its
    principal may Describe. A fresh group per call, so each user's member is alone."""
    group, member_id = f"team-rx-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    epoch, assigned = 0, ()
    for _ in range(100):
        beat = client.call(request_of(
            68, 1, group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None,
            rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
            subscribed_topic_names=None, subscribed_topic_regex="[a-z].*", server_assignor=None,
            topic_partitions=None if epoch else ()))
        assert int(beat.error_code) == 0, beat
        epoch = int(beat.member_epoch)
        if beat.assignment is not None and beat.assignment.topic_partitions:
            assigned = beat.assignment.topic_partitions
            break
        time.sleep(0.1)
    names = {t.topic_id: t.name for t in client.call(metadata_request(all_topics=True)).topics}
    return sorted(names.get(t.topic_id, "?") for t in assigned)


# (api key, version, what was asked) -> the answer, reduced to what authorization decides.
Observations = dict[tuple[int, int, str], Any]
Probe = Callable[[KafkaWireClient, int], dict[str, Any]]
NO_WAIT = datetime.timedelta(0)
KEEP_DEFAULT_RETENTION = datetime.timedelta(milliseconds=-1)  # OffsetCommit v2-v4's -1


def _find_coordinator(client: KafkaWireClient, version: int) -> dict[str, Any]:
    if version < 4:
        return {group: int(client.call(request_of(10, version, key=group, key_type=0)).error_code)
                for group in GROUPS}
    found = client.call(request_of(10, version, key_type=0, coordinator_keys=GROUPS))
    return {"all groups": sorted((c.key, int(c.error_code)) for c in found.coordinators)}


def _join_group(client: KafkaWireClient, version: int) -> dict[str, Any]:
    """From v4 a first join is told MEMBER_ID_REQUIRED; before, it would join and wait for the
    rebalance, so it asks with a session timeout below the minimum (INVALID_SESSION_TIMEOUT),
    which Kafka checks after the group's authorization too."""
    session = datetime.timedelta(seconds=10) if version >= 4 else datetime.timedelta(
        milliseconds=1)
    return {group: int(client.call(request_of(
        11, version, group_id=group, session_timeout=session, rebalance_timeout=session,
        member_id="", group_instance_id=None, protocol_type="consumer", reason=None,
        protocols=(nested_of(11, version, "JoinGroupRequestProtocol", name="range",
                             metadata=b""),))).error_code) for group in GROUPS}


def _heartbeat(client: KafkaWireClient, version: int) -> dict[str, Any]:
    return {group: int(client.call(request_of(
        12, version, group_id=group, generation_id=1, member_id="nobody",
        group_instance_id=None)).error_code) for group in GROUPS}


def _sync_group(client: KafkaWireClient, version: int) -> dict[str, Any]:
    return {group: int(client.call(request_of(
        14, version, group_id=group, generation_id=1, member_id="nobody",
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=())).error_code) for group in GROUPS}


def _leave_group(client: KafkaWireClient, version: int) -> dict[str, Any]:
    seen = {}
    for group in GROUPS:
        members = () if version < 3 else (nested_of(
            13, version, "MemberIdentity", member_id="nobody", group_instance_id=None,
            reason=None),)
        left = client.call(request_of(13, version, group_id=group, member_id="nobody",
                                      members=members))
        seen[group] = (int(left.error_code), codes(left, "members") if version >= 3 else None)
    return seen


def _offset_commit(client: KafkaWireClient, version: int) -> dict[str, Any]:
    seen = {}
    for group in GROUPS:
        commit = client.call(request_of(
            8, version, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, retention_time=KEEP_DEFAULT_RETENTION, topics=tuple(
                nested_of(8, version, "OffsetCommitRequestTopic", name=topic, partitions=(
                    nested_of(8, version, "OffsetCommitRequestPartition", partition_index=0,
                              committed_offset=0, committed_leader_epoch=-1,
                              committed_metadata=""),)) for topic in TOPICS)))
        seen[group] = sorted((t.name, codes(t, "partitions")) for t in commit.topics)
    return seen


def _offset_fetch(client: KafkaWireClient, version: int) -> dict[str, Any]:
    """One group a request before v8 (asked topics, then all, which v1 cannot ask), all groups
    in one from v8; before v2 a group's error is only in its partitions."""
    def topics(cls: str) -> tuple[Any, ...]:
        return tuple(nested_of(9, version, cls, name=topic, partition_indexes=(0,))
                     for topic in TOPICS)

    def reduced(answer: Any) -> Any:
        return (int(getattr(answer, "error_code", -1)),
                sorted((t.name, codes(t, "partitions")) for t in answer.topics))

    seen = {}
    if version < 8:
        for group in GROUPS:
            for name, asked in (("", topics("OffsetFetchRequestTopic")), ("all", None)):
                if asked is None and version < 2:
                    continue
                seen[f"{group} {name}".strip()] = reduced(client.call(request_of(
                    9, version, group_id=group, require_stable=False, topics=asked)))
        return seen
    for name, asked in (("", topics("OffsetFetchRequestTopics")), ("all", None)):
        fetched = client.call(request_of(9, version, require_stable=False, groups=tuple(
            nested_of(9, version, "OffsetFetchRequestGroup", group_id=group, member_id=None,
                      member_epoch=-1, topics=asked) for group in GROUPS)))
        seen.update({f"{g.group_id} {name}".strip(): reduced(g) for g in fetched.groups})
    return seen


def _offset_delete(client: KafkaWireClient, version: int) -> dict[str, Any]:
    seen = {}
    for group in GROUPS:
        deleted = client.call(request_of(47, version, group_id=group, topics=tuple(
            nested_of(47, version, "OffsetDeleteRequestTopic", name=topic, partitions=(
                nested_of(47, version, "OffsetDeleteRequestPartition", partition_index=0),))
            for topic in TOPICS)))
        seen[group] = (int(deleted.error_code), sorted(
            (t.name, codes(t, "partitions")) for t in deleted.topics))
    return seen


def _list_groups(client: KafkaWireClient, version: int) -> dict[str, Any]:
    listed = client.call(request_of(16, version, states_filter=(), types_filter=()))
    return {"": (int(listed.error_code),
                 sorted(g.group_id for g in listed.groups if g.group_id in GROUPS))}


def _metadata(client: KafkaWireClient, version: int) -> dict[str, Any]:
    """Named topics (and, from v4 where auto-creation can be refused, a missing one), only
    denied ones, and all topics (an empty list in v0, null after); the operations bitfields
    where the version has them, asked for and not."""
    def ask(names: Sequence[str] | None, operations: bool = False) -> Any:
        if names is None and version == 0:
            names = ()
        return client.call(request_of(
            3, version, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=operations,
            include_topic_authorized_operations=operations, topics=None if names is None else tuple(
                nested_of(3, version, "MetadataRequestTopic", topic_id=None, name=name)
                for name in names)))

    def reduced(answer: Any) -> Any:
        return (getattr(answer, "cluster_authorized_operations", None), sorted(
            (t.name, int(t.error_code), getattr(t, "topic_authorized_operations", None))
            for t in answer.topics))

    named = (*TOPICS, "nonexistent-t") if version >= 4 else TOPICS
    seen = {"named": reduced(ask(named)), "only denied": reduced(ask(("secret",))),
            "all": sorted(t.name for t in ask(None).topics if t.name in TOPICS)}
    if version >= 8:
        seen["named, operations asked"] = reduced(ask(named, operations=True))
    return seen


def _list_offsets(client: KafkaWireClient, version: int) -> dict[str, Any]:
    offsets = client.call(request_of(2, version, replica_id=-1, isolation_level=0,
                                     timeout=NO_WAIT, topics=tuple(
        nested_of(2, version, "ListOffsetsTopic", name=topic, partitions=(
            nested_of(2, version, "ListOffsetsPartition", partition_index=0,
                      current_leader_epoch=-1, timestamp=-1, max_num_offsets=1),))
        for topic in TOPICS)))
    return {"": sorted((t.name, codes(t, "partitions")) for t in offsets.topics)}


def _offset_for_leader_epoch(client: KafkaWireClient, version: int) -> dict[str, Any]:
    """Describe on each topic, or ClusterAction on the cluster (a follower's right)."""
    answer = client.call(request_of(23, version, replica_id=-1, topics=tuple(
        nested_of(23, version, "OffsetForLeaderTopic", topic=topic, partitions=(
            nested_of(23, version, "OffsetForLeaderPartition", partition=0,
                      current_leader_epoch=-1, leader_epoch=0),))
        for topic in (*TOPICS, "nonexistent-t"))))
    return {"": sorted((t.topic, [(int(p.error_code), int(p.leader_epoch), int(p.end_offset))
                                  for p in t.partitions]) for t in answer.topics)}


def _fetch(client: KafkaWireClient, version: int) -> dict[str, Any]:
    fetched = client.call(request_of(
        1, version, cluster_id=None, replica_id=-1, max_wait=NO_WAIT, min_bytes=0,
        max_bytes=1024, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
        forgotten_topics_data=(), topics=tuple(nested_of(
            1, version, "FetchTopic", topic=topic, partitions=(nested_of(
                1, version, "FetchPartition", partition=0, current_leader_epoch=-1,
                fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1024),)) for topic in TOPICS)))
    return {"": sorted((t.topic, codes(t, "partitions")) for t in fetched.responses)}


def _create_topics(client: KafkaWireClient, version: int) -> dict[str, Any]:
    created = client.call(request_of(19, version, timeout=datetime.timedelta(seconds=5),
                                     validate_only=True, topics=(nested_of(
        19, version, "CreatableTopic", name="new-t", num_partitions=1, replication_factor=1,
        assignments=(), configs=()),)))
    return {"": codes(created, "topics")}


def _produce(client: KafkaWireClient, version: int) -> dict[str, Any]:
    seen = {}
    for topic in TOPICS:
        produced = client.call(request_of(
            0, version, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(nested_of(0, version, "TopicProduceData", name=topic, partition_data=(
                nested_of(0, version, "PartitionProduceData", index=0,
                          records=build_batch([(None, b"v", 1)])),)),)))
        seen[topic] = codes(produced, "responses", "partition_responses")
    return seen


def _consumer_heartbeat(client: KafkaWireClient, version: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for group, subscribed in (("team-cg", ("orders",)), ("team-cg2", ("orders", "secret")),
                              ("g-none", ("orders",))):
        beat = client.call(request_of(
            68, version, group_id=group, member_id=f"m-{group}-v{version}", member_epoch=0,
            instance_id=None, rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
            subscribed_topic_names=subscribed, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=()))
        seen[group] = (int(beat.error_code), beat.error_message)
    if version >= 1:
        seen["regex subscription"] = regex_assignment(client)
    return seen


def _consumer_group_describe(client: KafkaWireClient, version: int) -> dict[str, Any]:
    mixed = client.call(request_of(69, version, group_ids=(MIXED_GROUP,),
                                   include_authorized_operations=False)).groups[0]
    seen: dict[str, Any] = {"a group holding an undescribable topic": (
        int(mixed.error_code), mixed.error_message, len(mixed.members), mixed.group_state,
        int(mixed.group_epoch), int(mixed.assignment_epoch), mixed.assignor_name)}
    for asked in (True, False):
        described = client.call(request_of(69, version, group_ids=("team-cg", "g-none", "g-ok"),
                                           include_authorized_operations=asked))
        seen[f"operations asked={asked}"] = sorted(
            (g.group_id, int(g.error_code), int(g.authorized_operations))
            for g in described.groups)
    return seen


def _share_heartbeat(client: KafkaWireClient, version: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for group, subscribed in (("team-sh", ("orders",)), ("team-sh2", ("orders", "secret")),
                              ("g-none", ("orders",))):
        beat = client.call(request_of(
            76, version, group_id=group, member_id=f"m-{group}-v{version}", member_epoch=0,
            rack_id=None, subscribed_topic_names=subscribed))
        seen[group] = (int(beat.error_code), beat.error_message)
    return seen


ASSIGNMENT_DELAYED = 5  # StreamsGroupHeartbeatResponse's status code


def _streams_heartbeat(client: KafkaWireClient, version: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    # A store's changelog is new on each call (a fresh group, so each user's member is alone):
    # the first heartbeat finds it missing on both brokers, then it is created when the user
    # may (Kafka in the background); its name is left out of the status compared.
    fresh = uuid.uuid4().hex[:8]
    for group, sources, changelog in (
            ("team-st", ("orders",), None), ("team-st2", ("orders", "secret"), None),
            (f"team-st3-{fresh}", ("orders",), f"Changelog-{fresh}"),
            ("g-none", ("orders",), None)):
        beat = streams_heartbeat(client, version, group, sources, changelog)
        # ASSIGNMENT_DELAYED depends on when the user's heartbeat comes (the super user's
        # rejoin may fall inside or past the group's initial rebalance delay): left out.
        seen[group.replace(fresh, "*")] = (int(beat.error_code), beat.error_message, sorted(
            (int(s.status_code), (s.status_detail or "").replace(fresh, "*"))
            for s in beat.status or () if int(s.status_code) != ASSIGNMENT_DELAYED))
    return seen


def _group_describe(api_key: int, mixed_group: str | None) -> Probe:
    """Share/StreamsGroupDescribe: DESCRIBE per group, the operations bitfield asked or not,
    and (streams) a group whose topology names a topic alice may not Describe."""

    def probe(client: KafkaWireClient, version: int) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        if mixed_group is not None:
            mixed = client.call(request_of(api_key, version, group_ids=(mixed_group,),
                                           include_authorized_operations=False)).groups[0]
            seen["a group using an undescribable topic"] = (
                int(mixed.error_code), mixed.error_message, len(mixed.members),
                mixed.group_state, int(mixed.group_epoch), int(mixed.assignment_epoch))
        groups = ("team-sh", "team-st", "g-none", "g-ok")
        for asked in (True, False):
            described = client.call(request_of(api_key, version, group_ids=groups,
                                               include_authorized_operations=asked))
            seen[f"operations asked={asked}"] = sorted(
                (g.group_id, int(g.error_code), int(g.authorized_operations))
                for g in described.groups)
        return seen

    return probe


def _describe_groups(client: KafkaWireClient, version: int) -> dict[str, Any]:
    seen = {}
    for asked in (True, False) if version >= 3 else (False,):
        described = client.call(request_of(15, version, groups=(*GROUPS, "team-cg"),
                                           include_authorized_operations=asked))
        seen[f"operations asked={asked}"] = sorted(
            (g.group_id, int(g.error_code), getattr(g, "authorized_operations", None))
            for g in described.groups)
    return seen


def _describe_configs(client: KafkaWireClient, version: int) -> dict[str, Any]:
    configs = client.call(request_of(
        32, version, include_synonyms=False, include_documentation=False, resources=tuple(
            nested_of(32, version, "DescribeConfigsResource", resource_type=kind,
                      resource_name=name, configuration_keys=(
                          ("cleanup.policy",) if kind == 2 else ("num.partitions",)))
            for kind, name in ((2, "orders"), (2, "secret"), (4, "1")))))
    groups = client.call(request_of(
        32, version, include_synonyms=False, include_documentation=False, resources=tuple(
            nested_of(32, version, "DescribeConfigsResource", resource_type=32,
                      resource_name=group, configuration_keys=("consumer.session.timeout.ms",))
            for group in GROUPS)))
    return {"": sorted((r.resource_name, int(r.error_code)) for r in configs.results),
            "groups": sorted((r.resource_name, int(r.error_code),
                              [(c.name, c.value) for c in r.configs]) for r in groups.results)}


def _incremental_alter_configs(client: KafkaWireClient, version: int) -> dict[str, Any]:
    altered = client.call(request_of(44, version, validate_only=True, resources=tuple(nested_of(
        44, version, "AlterConfigsResource", resource_type=2, resource_name=topic,
        configs=(nested_of(44, version, "AlterableConfig", name="retention.ms",
                           config_operation=0, value="86400000"),)) for topic in TOPICS)))
    return {"": sorted((r.resource_name, int(r.error_code), r.error_message)
                       for r in altered.responses)}


def _delete_records(client: KafkaWireClient, version: int) -> dict[str, Any]:
    """Delete on each topic (alice has it on denied-t only), a missing topic too."""
    deleted = client.call(request_of(
        21, version, timeout=datetime.timedelta(seconds=5), topics=tuple(nested_of(
            21, version, "DeleteRecordsTopic", name=topic, partitions=(nested_of(
                21, version, "DeleteRecordsPartition", partition_index=0, offset=0),))
            for topic in (*TOPICS, "nonexistent-t"))))
    return {"": sorted((t.name, [(int(p.error_code), int(p.low_watermark)) for p in t.partitions])
                       for t in deleted.topics)}


def _alter_configs(client: KafkaWireClient, version: int) -> dict[str, Any]:
    altered = client.call(request_of(33, version, validate_only=True, resources=tuple(nested_of(
        33, version, "AlterConfigsResource", resource_type=2, resource_name=topic, configs=(
            nested_of(33, version, "AlterableConfig", name="retention.ms", value="86400000"),))
        for topic in TOPICS)))
    return {"": sorted((r.resource_name, int(r.error_code)) for r in altered.responses)}


def _describe_acls(client: KafkaWireClient, version: int) -> dict[str, Any]:
    acls = client.call(request_of(
        29, version, resource_type_filter=ResourceType.ANY, resource_name_filter=None,
        pattern_type_filter=PatternType.ANY, principal_filter=None, host_filter=None,
        operation=Operation.ANY, permission_type=Permission.ANY))
    return {"": int(acls.error_code)}


def _delete_groups(client: KafkaWireClient, version: int) -> dict[str, Any]:
    deleted = client.call(request_of(42, version, groups_names=GROUPS))
    return {"": sorted((r.group_id, int(r.error_code)) for r in deleted.results)}


def _describe_producers(client: KafkaWireClient, version: int) -> dict[str, Any]:
    described = client.call(request_of(61, version, topics=tuple(
        nested_of(61, version, "TopicRequest", name=topic, partition_indexes=(0,))
        for topic in (*TOPICS, "nonexistent-t"))))
    return {"": sorted((t.name, [(int(p.error_code), len(p.active_producers))
                                 for p in t.partitions]) for t in described.topics)}


def _write_txn_markers(client: KafkaWireClient, version: int) -> dict[str, Any]:
    """An ABORT for a producer that never wrote: written by whoever holds ClusterAction."""
    written = client.call(request_of(27, version, markers=(nested_of(
        27, version, "WritableTxnMarker", producer_id=424242, producer_epoch=0,
        transaction_result=False, coordinator_epoch=0, transaction_version=0,
        topics=tuple(nested_of(27, version, "WritableTxnMarkerTopic", name=topic,
                               partition_indexes=(0,)) for topic in TOPICS)),)))
    return {"": sorted((t.name, [int(p.error_code) for p in t.partitions])
                       for m in written.markers for t in m.topics)}


# A topic id neither broker has: the share coordinator answers UNKNOWN_TOPIC_OR_PARTITION to
# whoever may call it (ClusterAction) and CLUSTER_AUTHORIZATION_FAILED to the others.
NO_SUCH_TOPIC_ID = uuid.UUID("3c9e8f2a-7d41-4b6e-9a05-1f2e3d4c5b6a")
SHARE_STATE_PARTITION_FIELDS = {
    83: {"state_epoch": 0, "start_offset": 0}, 84: {"leader_epoch": 0},
    85: {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1,
         "state_batches": ()},
    86: {}, 87: {"leader_epoch": 0}}
SHARE_STATE_TOPIC_CLASSES = {83: "InitializeStateData", 84: "ReadStateData",
                             85: "WriteStateData", 86: "DeleteStateData",
                             87: "ReadStateSummaryData"}


def _share_state(api_key: int) -> Probe:
    """One of the share coordinator's APIs (83-87), which brokers call: ClusterAction."""

    def probe(client: KafkaWireClient, version: int) -> dict[str, Any]:
        answer = client.call(request_of(api_key, version, group_id="g-ok", topics=(nested_of(
            api_key, version, SHARE_STATE_TOPIC_CLASSES[api_key], topic_id=NO_SUCH_TOPIC_ID,
            partitions=(nested_of(api_key, version, "PartitionData", partition=0,
                                  **SHARE_STATE_PARTITION_FIELDS[api_key]),)),)))
        return {"": [int(p.error_code) for r in answer.results for p in r.partitions]}

    return probe


# In the order they are sent: commits before the fetches that read them, consumer groups
# formed before they are described, deletion last.
PROBES: dict[int, Probe] = {
    10: _find_coordinator, 11: _join_group, 12: _heartbeat, 14: _sync_group, 13: _leave_group,
    8: _offset_commit, 9: _offset_fetch, 47: _offset_delete, 16: _list_groups, 3: _metadata,
    2: _list_offsets, 23: _offset_for_leader_epoch, 1: _fetch, 19: _create_topics, 0: _produce,
    68: _consumer_heartbeat,
    69: _consumer_group_describe,
    15: _describe_groups, 32: _describe_configs,
    44: _incremental_alter_configs, 33: _alter_configs, 21: _delete_records,
    29: _describe_acls, 61: _describe_producers, 27: _write_txn_markers,
    **{api_key: _share_state(api_key) for api_key in SHARE_STATE_TOPIC_CLASSES},
    76: _share_heartbeat, 77: _group_describe(77, None),
    88: _streams_heartbeat, 89: _group_describe(89, MIXED_STREAMS_GROUP),
    42: _delete_groups,
}


def served_versions(client: KafkaWireClient,
                    limit: Mapping[int, Sequence[int]] | None = None) -> dict[int, list[int]]:
    """Every version of each probed API the broker advertises (within `limit` when given:
    the versions another broker serves too)."""
    versions = {}
    for api_key in PROBES:
        served = client.api_versions[api_key]
        versions[api_key] = [v for v in range(served.min_version, served.max_version + 1)
                             if limit is None or v in limit[api_key]]
    return versions


def observe(client: KafkaWireClient, versions: Mapping[int, Sequence[int]]) -> Observations:
    """The principal's view: each probed API's answers at each of the given versions."""
    seen: Observations = {}
    for api_key, probe in PROBES.items():
        for version in versions[api_key]:
            seen.update({(api_key, version, what): answer
                         for what, answer in probe(client, version).items()})
    return seen
