"""ACL scenarios shared by the kgroups-only ACL tests and the differential test against Kafka:
the bindings, and the requests a restricted user sends, reduced to their error codes.

`admin` is a super user (ANONYMOUS on the PLAINTEXT listener, as Kafka's controller and the
tests' admin connection); `alice` authenticates with PLAIN on SASL_PLAINTEXT."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.describe_acls.v3 import request as describe_acls
from tests.broker.broker_wire_helpers import (
    create_topic,
    metadata_request,
    nested_of,
    produce_request,
    request_of,
)

from kgroups.broker.authorizer import Operation, PatternType, Permission, ResourceType
from kgroups.broker.wire_client import KafkaWireClient
from kgroups.log.batch import build_batch

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
# alice may not Describe: set up by the super user before alice's requests.
MIXED_GROUP = "team-mixed"


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


def observe(client: KafkaWireClient) -> dict[str, Any]:
    """alice's view: each API's error codes for the scenario's groups and topics."""
    seen: dict[str, Any] = {}
    for group in GROUPS:
        found = client.call(request_of(10, 4, key_type=0, coordinator_keys=(group,)))
        seen[f"find_coordinator {group}"] = codes(found, "coordinators")
        joined = client.call(request_of(
            11, 5, group_id=group, session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=(
                nested_of(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),)))
        seen[f"join {group}"] = int(joined.error_code)
        beat = client.call(request_of(12, 4, group_id=group, generation_id=1,
                                      member_id="nobody", group_instance_id=None))
        seen[f"heartbeat {group}"] = int(beat.error_code)
        commit = client.call(request_of(8, 8, group_id=group, generation_id_or_member_epoch=-1,
                                        member_id="", group_instance_id=None, topics=tuple(
            nested_of(8, 8, "OffsetCommitRequestTopic", name=topic, partitions=(
                nested_of(8, 8, "OffsetCommitRequestPartition", partition_index=0,
                          committed_offset=0, committed_leader_epoch=-1,
                          committed_metadata=""),)) for topic in TOPICS)))
        seen[f"commit {group}"] = sorted((t.name, codes(t, "partitions")) for t in commit.topics)
        fetched = client.call(request_of(9, 7, group_id=group, require_stable=False, topics=tuple(
            nested_of(9, 7, "OffsetFetchRequestTopic", name=topic, partition_indexes=(0,))
            for topic in TOPICS)))
        seen[f"offset_fetch {group}"] = (int(fetched.error_code), sorted(
            (t.name, codes(t, "partitions")) for t in fetched.topics))
        all_fetched = client.call(request_of(9, 7, group_id=group, require_stable=False,
                                             topics=None))
        seen[f"offset_fetch_all {group}"] = (int(all_fetched.error_code), sorted(
            t.name for t in all_fetched.topics))
        deleted = client.call(request_of(47, 0, group_id=group, topics=tuple(
            nested_of(47, 0, "OffsetDeleteRequestTopic", name=topic, partitions=(
                nested_of(47, 0, "OffsetDeleteRequestPartition", partition_index=0),))
            for topic in TOPICS)))
        seen[f"offset_delete {group}"] = (int(deleted.error_code), sorted(
            (t.name, codes(t, "partitions")) for t in deleted.topics))
    described = client.call(request_of(15, 5, groups=GROUPS, include_authorized_operations=False))
    seen["describe_groups"] = sorted((g.group_id, int(g.error_code)) for g in described.groups)
    listed = client.call(request_of(16, 4, states_filter=()))
    seen["list_groups"] = sorted(g.group_id for g in listed.groups if g.group_id in GROUPS)
    metadata = client.call(metadata_request(*TOPICS, "nonexistent-t", auto_create=False))
    seen["metadata"] = sorted((t.name, int(t.error_code)) for t in metadata.topics)
    everything = client.call(metadata_request(all_topics=True))
    seen["metadata_all"] = sorted(t.name for t in everything.topics if t.name in TOPICS)
    offsets = client.call(request_of(2, 7, replica_id=-1, isolation_level=0, topics=tuple(
        nested_of(2, 7, "ListOffsetsTopic", name=topic, partitions=(
            nested_of(2, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1,
                      timestamp=-1),)) for topic in TOPICS)))
    seen["list_offsets"] = sorted((t.name, codes(t, "partitions")) for t in offsets.topics)
    fetch_topics = tuple(nested_of(1, 12, "FetchTopic", topic=topic, partitions=(nested_of(
        1, 12, "FetchPartition", partition=0, current_leader_epoch=-1, fetch_offset=0,
        last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1024),))
        for topic in TOPICS)
    fetched = client.call(request_of(
        1, 12, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
        max_bytes=1024, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
        forgotten_topics_data=(), topics=fetch_topics))
    seen["fetch"] = sorted((t.topic, codes(t, "partitions")) for t in fetched.responses)
    for version in (0, 1, 2):  # Delete on each topic (alice has it on denied-t only)
        deleted_records = client.call(request_of(
            21, version, timeout=datetime.timedelta(seconds=5), topics=tuple(nested_of(
                21, version, "DeleteRecordsTopic", name=topic, partitions=(nested_of(
                    21, version, "DeleteRecordsPartition", partition_index=0, offset=0),))
                for topic in (*TOPICS, "nonexistent-t"))))
        seen[f"delete_records v{version}"] = sorted(
            (t.name, [(int(p.error_code), int(p.low_watermark)) for p in t.partitions])
            for t in deleted_records.topics)
    created = client.call(request_of(19, 7, timeout=datetime.timedelta(seconds=5),
                                     validate_only=True, topics=(nested_of(
        19, 7, "CreatableTopic", name="new-t", num_partitions=1, replication_factor=1,
        assignments=(), configs=()),)))
    seen["create_topics"] = codes(created, "topics")
    for topic in TOPICS:
        produced = client.call(produce_request(topic, 0, build_batch([(None, b"v", 1)])))
        seen[f"produce {topic}"] = codes(produced, "responses", "partition_responses")
    for group, subscribed in (("team-cg", ("orders",)), ("team-cg2", ("orders", "secret")),
                              ("g-none", ("orders",))):
        beat = client.call(request_of(
            68, 0, group_id=group, member_id="m-" + group, member_epoch=0, instance_id=None,
            rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
            subscribed_topic_names=subscribed, server_assignor=None, topic_partitions=()))
        seen[f"consumer_heartbeat {group}"] = int(beat.error_code)
    seen["regex subscription"] = regex_assignment(client)
    mixed = client.call(request_of(69, 0, group_ids=(MIXED_GROUP,),
                                   include_authorized_operations=False)).groups[0]
    seen["consumer_group_describe of a group holding an undescribable topic"] = (
        int(mixed.error_code), mixed.error_message, len(mixed.members), mixed.group_state,
        int(mixed.group_epoch), int(mixed.assignment_epoch), mixed.assignor_name)
    cg_described = client.call(request_of(69, 0, group_ids=("team-cg", "g-none"),
                                          include_authorized_operations=False))
    seen["consumer_group_describe"] = sorted((g.group_id, int(g.error_code))
                                             for g in cg_described.groups)
    configs = client.call(request_of(32, 4, include_synonyms=False, include_documentation=False,
                                     resources=tuple(nested_of(
        32, 4, "DescribeConfigsResource", resource_type=kind, resource_name=name,
        configuration_keys=("cleanup.policy",) if kind == 2 else ("num.partitions",))
        for kind, name in ((2, "orders"), (2, "secret"), (4, "1")))))
    seen["describe_configs"] = sorted((r.resource_name, int(r.error_code))
                                      for r in configs.results)
    altered = client.call(request_of(44, 1, validate_only=True, resources=tuple(nested_of(
        44, 1, "AlterConfigsResource", resource_type=2, resource_name=topic, configs=(nested_of(
            44, 1, "AlterableConfig", name="retention.ms", config_operation=0,
            value="86400000"),)) for topic in TOPICS)))
    seen["incremental_alter_configs"] = sorted((r.resource_name, int(r.error_code))
                                               for r in altered.responses)
    legacy = client.call(request_of(33, 2, validate_only=True, resources=tuple(nested_of(
        33, 2, "AlterConfigsResource", resource_type=2, resource_name=topic, configs=(nested_of(
            33, 2, "AlterableConfig", name="retention.ms", value="86400000"),))
        for topic in TOPICS)))
    seen["alter_configs"] = sorted((r.resource_name, int(r.error_code))
                                   for r in legacy.responses)
    group_configs = client.call(request_of(32, 4, include_synonyms=False,
                                           include_documentation=False, resources=tuple(
        nested_of(32, 4, "DescribeConfigsResource", resource_type=32, resource_name=group,
                  configuration_keys=("consumer.session.timeout.ms",))
        for group in GROUPS)))
    seen["describe_configs of groups"] = sorted(
        (r.resource_name, int(r.error_code), [(c.name, c.value) for c in r.configs])
        for r in group_configs.results)
    acls = client.call(describe_acls.DescribeAclsRequest(
        resource_type_filter=ResourceType.ANY, resource_name_filter=None,
        pattern_type_filter=PatternType.ANY, principal_filter=None, host_filter=None,
        operation=Operation.ANY, permission_type=Permission.ANY))
    seen["describe_acls"] = int(acls.error_code)
    seen.update(authorized_operations(client))
    deleted_groups = client.call(request_of(42, 2, groups_names=GROUPS))
    seen["delete_groups"] = sorted((r.group_id, int(r.error_code))
                                   for r in deleted_groups.results)
    return seen


def authorized_operations(client: KafkaWireClient) -> dict[str, Any]:
    """The bitfields of allowed operations the principal is told when it asks for them, on the
    scenario's groups, topics and the cluster (and Integer.MIN_VALUE when it does not ask)."""
    seen: dict[str, Any] = {}
    for asked in (True, False):
        described = client.call(request_of(15, 5, groups=(*GROUPS, "team-cg"),
                                           include_authorized_operations=asked))
        seen[f"describe_groups operations asked={asked}"] = sorted(
            (g.group_id, int(g.error_code), int(g.authorized_operations))
            for g in described.groups)
        cg = client.call(request_of(69, 0, group_ids=("team-cg", "g-none", "g-ok"),
                                    include_authorized_operations=asked))
        seen[f"consumer_group_describe operations asked={asked}"] = sorted(
            (g.group_id, int(g.error_code), int(g.authorized_operations)) for g in cg.groups)
        metadata = client.call(request_of(
            3, 10, allow_auto_topic_creation=False, include_cluster_authorized_operations=asked,
            include_topic_authorized_operations=asked, topics=tuple(
                nested_of(3, 10, "MetadataRequestTopic", topic_id=None, name=name)
                for name in (*TOPICS, "nonexistent-t"))))
        seen[f"metadata operations asked={asked}"] = (
            int(metadata.cluster_authorized_operations), sorted(
                (t.name, int(t.error_code), int(t.topic_authorized_operations))
                for t in metadata.topics))
    newest = client.call(request_of(3, 12, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=True, topics=tuple(
        nested_of(3, 12, "MetadataRequestTopic", topic_id=None, name=name)
        for name in TOPICS)))
    seen["metadata v12 topic operations"] = sorted(
        (t.name, int(t.topic_authorized_operations)) for t in newest.topics)
    return seen
