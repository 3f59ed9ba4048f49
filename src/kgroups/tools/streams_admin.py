"""Streams groups (KIP-1071) over the Kafka wire, the data behind `kgroups groups` for them.

A streams group's members are Kafka Streams instances that get tasks, not partitions: a task is
a subtopology of the application's topology and one partition of its input topics ("0_1"). Only
StreamsGroupDescribe tells who holds which task (DescribeGroups says such a group is Dead, and
ConsumerGroupDescribe that it is no consumer group), so this asks it, as kafka-streams-groups
does, and returns plain data for `groups_cli` to print.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.wire import build, request_type
from kgroups.errors import ErrorCode
from kgroups.tools import admin
from kgroups.tools.wire_client import KafkaWireClient

# Subtopology id -> the partitions of its input topics, sorted by subtopology then partition.
TaskIds = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class StreamsTasks:
    """The tasks of one member, by kind: active tasks process records, standby tasks keep a
    copy of the state, warm-up tasks restore state before the assignor moves a task over."""

    active: TaskIds = ()
    standby: TaskIds = ()
    warmup: TaskIds = ()

    def ids(self, kind: str) -> tuple[str, ...]:
        """The task ids of one kind as Kafka Streams names them ("0_1")."""
        return tuple(f"{subtopology}_{partition}"
                     for subtopology, partitions in getattr(self, kind)
                     for partition in partitions)


@dataclass(frozen=True, slots=True)
class StreamsMember:
    member_id: str
    member_epoch: int
    instance_id: str | None
    process_id: str
    client_id: str
    client_host: str
    topology_epoch: int
    is_classic: bool
    assignment: StreamsTasks
    target: StreamsTasks


@dataclass(frozen=True, slots=True)
class StreamsSubtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...]
    changelog_topics: tuple[str, ...]
    repartition_source_topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StreamsGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    topology_epoch: int | None  # None before a member has initialized the topology
    subtopologies: tuple[StreamsSubtopology, ...]
    members: tuple[StreamsMember, ...]
    coordinator: tuple[str, int, int]  # host, port, node id
    # Committed offset and log end of every input partition of the members' active tasks.
    partitions: tuple[admin.PartitionLag, ...] = ()

    @property
    def reconciling(self) -> tuple[StreamsMember, ...]:
        """Members not yet at the target assignment: behind its epoch, or holding other tasks
        than their target (still revoking, or waiting for a task another member holds)."""
        return tuple(m for m in self.members
                     if m.member_epoch != self.assignment_epoch or m.assignment != m.target)

    def input_partitions(self) -> list[tuple[str, int]]:
        """The partitions the members' active tasks read: each task's partition of its
        subtopology's source and repartition source topics."""
        topics = {s.subtopology_id: (*s.source_topics, *s.repartition_source_topics)
                  for s in self.subtopologies}
        return sorted({(topic, partition) for m in self.members
                       for subtopology, partitions in m.assignment.active
                       for topic in topics.get(subtopology, ())
                       for partition in partitions})


def _tasks(assignment: Any) -> StreamsTasks:
    def ids(tasks: Any) -> TaskIds:
        return tuple(sorted((t.subtopology_id, tuple(sorted(int(p) for p in t.partitions)))
                            for t in tasks))

    return StreamsTasks(ids(assignment.active_tasks), ids(assignment.standby_tasks),
                        ids(assignment.warmup_tasks))


def describe_streams_group(client: KafkaWireClient,
                           group_id: str) -> StreamsGroupDescription | None:
    """The group as StreamsGroupDescribe (sent to its coordinator) describes it, with its
    committed offsets; None when the broker serves no StreamsGroupDescribe or the group is no
    streams group."""
    if not client.supports(ApiKey.STREAMS_GROUP_DESCRIBE, 0):
        return None
    response = client.call(build(request_type(ApiKey.STREAMS_GROUP_DESCRIBE, 0),
                                 group_ids=(group_id,), include_authorized_operations=False))
    (group,) = response.groups
    if int(group.error_code) == ErrorCode.GROUP_ID_NOT_FOUND or group.group_state == "Dead":
        return None
    admin.check(group.error_code, f"StreamsGroupDescribe({group_id})", group.error_message)
    topology = group.topology
    subtopologies = () if topology is None or topology.subtopologies is None else tuple(
        StreamsSubtopology(
            s.subtopology_id, tuple(s.source_topics), tuple(s.repartition_sink_topics),
            tuple(t.name for t in s.state_changelog_topics),
            tuple(t.name for t in s.repartition_source_topics))
        for s in topology.subtopologies)
    members = tuple(
        StreamsMember(
            member_id=m.member_id, member_epoch=int(m.member_epoch), instance_id=m.instance_id,
            process_id=m.process_id, client_id=m.client_id, client_host=m.client_host,
            topology_epoch=int(m.topology_epoch), is_classic=bool(m.is_classic),
            assignment=_tasks(m.assignment), target=_tasks(m.target_assignment))
        for m in group.members)
    described = StreamsGroupDescription(
        group_id, group.group_state, int(group.group_epoch), int(group.assignment_epoch),
        None if topology is None else int(topology.epoch), subtopologies, members,
        (client.host, client.port, admin.node_id(client)))
    held = described.input_partitions()
    if not held:
        return described
    committed = admin.committed_offsets(client, group_id)
    log_ends = admin.list_offsets(client, held, admin.LATEST_TIMESTAMP)
    return replace(described, partitions=tuple(
        admin.PartitionLag(topic, partition, committed.get((topic, partition)),
                           log_ends.get((topic, partition)), None)
        for topic, partition in held))


__all__ = ["StreamsGroupDescription", "StreamsMember", "StreamsSubtopology", "StreamsTasks",
           "TaskIds", "describe_streams_group"]
