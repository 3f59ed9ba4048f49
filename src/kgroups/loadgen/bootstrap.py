"""What the load generator asks the bootstrap broker before any member starts: which API
versions to speak, where the group's coordinator is (FindCoordinator, retried while the
coordinator is still loading), and the topics' partition counts and ids (Metadata): a classic
leader assigns from the partition counts, a consumer-protocol member names topics by id.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from kgroups.broker.wire import build, request_type, sibling
from kgroups.errors import ErrorCode
from kgroups.loadgen.connection import BrokerConnection
from kgroups.loadgen.wire_messages import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    SYNC_GROUP,
    Versions,
)

API_VERSIONS, METADATA, FIND_COORDINATOR = 18, 3, 10
# (lowest, highest) version of each API this client fills in: JoinGroup from v4 (the member
# follows MEMBER_ID_REQUIRED), LeaveGroup from v3 (members in a batch), FindCoordinator from
# v4 (coordinator keys), Metadata from v10 (topic ids); OffsetCommit up to v9 (v10 names topics
# by id).
_SPOKEN = {JOIN_GROUP: (4, 9), SYNC_GROUP: (3, 5), HEARTBEAT: (3, 4), LEAVE_GROUP: (3, 5),
           OFFSET_COMMIT: (7, 9), CONSUMER_GROUP_HEARTBEAT: (0, 1),
           CONSUMER_GROUP_DESCRIBE: (0, 1), METADATA: (10, 12), FIND_COORDINATOR: (4, 6)}
_OPTIONAL = frozenset({CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE})
_NOT_READY = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR})


class BootstrapError(RuntimeError):
    """The broker cannot serve this load: an API it lacks, a topic it does not have, no
    coordinator in time."""


@dataclass(frozen=True, slots=True)
class GroupHome:
    coordinator_host: str
    coordinator_port: int
    versions: Versions
    partitions: dict[str, int]
    topic_ids: dict[str, uuid.UUID]


async def negotiate(connection: BrokerConnection) -> dict[int, int]:
    """The newest version of each API both sides speak; BootstrapError when there is none
    (the consumer protocol's APIs are left out when the broker lacks them)."""
    answer = await connection.call(build(request_type(API_VERSIONS, 0)))
    if int(answer.error_code) != ErrorCode.NONE:
        raise BootstrapError(f"ApiVersions: {ErrorCode(int(answer.error_code)).name}")
    advertised = {int(a.api_key): (int(a.min_version), int(a.max_version))
                  for a in answer.api_keys}
    chosen = {}
    for api_key, (lowest, highest) in _SPOKEN.items():
        their_lowest, their_highest = advertised.get(api_key, (0, -1))
        if max(lowest, their_lowest) <= min(highest, their_highest):
            chosen[api_key] = min(highest, their_highest)
        elif api_key not in _OPTIONAL:
            raise BootstrapError(f"{connection.address} speaks no version {lowest}-{highest} "
                                 f"of API {api_key}")
    return chosen


async def find_coordinator(connection: BrokerConnection, version: int, group_id: str,
                           timeout_s: float) -> tuple[str, int]:
    wire = request_type(FIND_COORDINATOR, version)
    deadline = time.monotonic() + timeout_s
    while True:
        (found,) = (await connection.call(build(wire, key_type=0,
                                                coordinator_keys=(group_id,)))).coordinators
        error = ErrorCode(int(found.error_code))
        if error is ErrorCode.NONE:
            return found.host, int(found.port)
        if error not in _NOT_READY or time.monotonic() > deadline:
            raise BootstrapError(f"FindCoordinator({group_id}): {error.name}")
        await asyncio.sleep(0.1)


async def describe_topics(connection: BrokerConnection, version: int,
                          topics: tuple[str, ...]) -> tuple[dict[str, int], dict[str, uuid.UUID]]:
    wire = request_type(METADATA, version)
    answer = await connection.call(build(
        wire, topics=tuple(build(sibling(wire, "MetadataRequestTopic"), name=t, topic_id=None)
                           for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    partitions: dict[str, int] = {}
    ids: dict[str, uuid.UUID] = {}
    for topic in answer.topics:
        error = ErrorCode(int(topic.error_code))
        if error is not ErrorCode.NONE:
            raise BootstrapError(f"topic {topic.name}: {error.name}")
        partitions[topic.name] = len(topic.partitions)
        ids[topic.name] = topic.topic_id
    return partitions, ids


async def locate_group(host: str, port: int, group_id: str, topics: tuple[str, ...],
                       client_id: str, timeout_s: float = 30.0) -> GroupHome:
    connection = await BrokerConnection.open(host, port, client_id)
    try:
        versions = await negotiate(connection)
        partitions, topic_ids = await describe_topics(connection, versions[METADATA], topics)
        coordinator = await find_coordinator(connection, versions[FIND_COORDINATOR], group_id,
                                             timeout_s)
    finally:
        await connection.close()
    return GroupHome(*coordinator, Versions(
        versions[JOIN_GROUP], versions[SYNC_GROUP], versions[HEARTBEAT], versions[LEAVE_GROUP],
        versions[OFFSET_COMMIT], versions.get(CONSUMER_GROUP_HEARTBEAT),
        versions.get(CONSUMER_GROUP_DESCRIBE)), partitions, topic_ids)


async def consumer_group_epochs(connection: BrokerConnection, version: int,
                                group_id: str) -> tuple[str, int, int]:
    """(state, group epoch, assignment epoch) of a consumer-protocol group, as its coordinator
    has it: only the coordinator knows that a new target assignment is due (a member joined,
    the next computation waits for group.consumer.assignment.interval.ms) while every member
    still holds the last one."""
    (group,) = (await connection.call(build(
        request_type(CONSUMER_GROUP_DESCRIBE, version), group_ids=(group_id,),
        include_authorized_operations=False))).groups
    return group.group_state, int(group.group_epoch), int(group.assignment_epoch)

