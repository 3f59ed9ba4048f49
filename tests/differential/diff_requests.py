"""Builders of the group API requests the differential conversations send, in any version.

Each takes the fields a client sets and a version; fields that version does not carry are
dropped (`wire.build`), as a client of that version would not send them. Also the consumer
protocol's subscription/assignment encodings, so metadata looks like a real consumer's.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kgroups.broker.wire import build, request_type, sibling

# (protocol name, metadata) pairs a JoinGroup advertises, in the member's order of preference.
Protocols = Sequence[tuple[str, bytes]]


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def subscription(*topics: str, user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0: topics and optional user data."""
    body = struct.pack(">h", 0) + struct.pack(">i", len(topics))
    body += b"".join(_string(topic) for topic in topics)
    if user_data is None:
        return body + struct.pack(">i", -1)
    return body + struct.pack(">i", len(user_data)) + user_data


def assignment(partitions: Mapping[str, Sequence[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: topic -> partitions, no user data."""
    body = struct.pack(">h", 0) + struct.pack(">i", len(partitions))
    for topic, numbers in partitions.items():
        body += _string(topic) + struct.pack(">i", len(numbers))
        body += b"".join(struct.pack(">i", n) for n in numbers)
    return body + struct.pack(">i", -1)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def join(group: str, member_id: str = "", *, v: int = 9, protocols: Protocols | None = None,
         topics: Sequence[str] = ("t",), protocol_type: str = "consumer",
         session_ms: int = 10_000, rebalance_ms: int = 10_000, instance: str | None = None,
         reason: str | None = None) -> Any:
    entity = request_type(11, v)
    protocol = sibling(entity, "JoinGroupRequestProtocol")
    chosen = protocols if protocols is not None else (("range", subscription(*topics)),)
    return build(entity, group_id=group, session_timeout=_ms(session_ms),
                 rebalance_timeout=_ms(rebalance_ms), member_id=member_id,
                 group_instance_id=instance, protocol_type=protocol_type, reason=reason,
                 protocols=tuple(build(protocol, name=name, metadata=meta)
                                 for name, meta in chosen))


def sync(group: str, generation: int, member_id: str,
         assignments: Mapping[str, bytes] | None = None, *, v: int = 5,
         instance: str | None = None, protocol_type: str | None = "consumer",
         protocol_name: str | None = "range") -> Any:
    entity = request_type(14, v)
    item = sibling(entity, "SyncGroupRequestAssignment")
    return build(entity, group_id=group, generation_id=generation, member_id=member_id,
                 group_instance_id=instance, protocol_type=protocol_type,
                 protocol_name=protocol_name,
                 assignments=tuple(build(item, member_id=m, assignment=a)
                                   for m, a in (assignments or {}).items()))


def heartbeat(group: str, generation: int, member_id: str, *, v: int = 4,
              instance: str | None = None) -> Any:
    return build(request_type(12, v), group_id=group, generation_id=generation,
                 member_id=member_id, group_instance_id=instance)


def leave(group: str, members: Iterable[tuple[str, str | None]], *, v: int = 5) -> Any:
    """v3+: a batch of (member id, instance id); v0-2: the one member id of the batch."""
    entity = request_type(13, v)
    members = list(members)
    if v < 3:
        ((member_id, _),) = members
        return build(entity, group_id=group, member_id=member_id)
    identity = sibling(entity, "MemberIdentity")
    return build(entity, group_id=group, members=tuple(
        build(identity, member_id=m, group_instance_id=i, reason=None) for m, i in members))


def commit(group: str, offsets: Mapping[tuple[str, int], int | tuple[int, str | None]], *,
           generation: int = -1, member_id: str = "", v: int = 9, instance: str | None = None,
           retention_ms: int = -1, leader_epoch: int = -1) -> Any:
    """`offsets`: (topic, partition) -> offset, or (offset, metadata)."""
    entity = request_type(8, v)
    topic_type = sibling(entity, "OffsetCommitRequestTopic")
    partition_type = sibling(entity, "OffsetCommitRequestPartition")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), value in offsets.items():
        offset, metadata = value if isinstance(value, tuple) else (value, "")
        by_topic.setdefault(topic, []).append(build(
            partition_type, partition_index=partition, committed_offset=offset,
            committed_leader_epoch=leader_epoch, committed_metadata=metadata))
    return build(entity, group_id=group, generation_id_or_member_epoch=generation,
                 member_id=member_id, group_instance_id=instance,
                 retention_time=_ms(retention_ms),
                 topics=tuple(build(topic_type, name=t, partitions=tuple(ps))
                              for t, ps in by_topic.items()))


def consumer_join(group: str, member_id: str, topics: Sequence[str]) -> Any:
    """ConsumerGroupHeartbeat v1 joining (epoch 0) with a member id the client chose, owning
    nothing yet: the consumer protocol's first heartbeat."""
    return build(request_type(68, 1), group_id=group, member_id=member_id, member_epoch=0,
                 instance_id=None, rack_id=None, rebalance_timeout=_ms(30_000),
                 subscribed_topic_names=tuple(topics), subscribed_topic_regex=None,
                 server_assignor=None, topic_partitions=())


def fetch(group: str, topics: Mapping[str, Sequence[int]] | None, *, v: int = 7,
          require_stable: bool = False) -> Any:
    """One group's committed offsets; `topics=None` asks for all of them (v2+)."""
    entity = request_type(9, v)
    if v >= 8:
        return fetch_groups({group: topics}, v=v, require_stable=require_stable)
    topic_type = sibling(entity, "OffsetFetchRequestTopic")
    return build(entity, group_id=group, require_stable=require_stable, topics=None
                 if topics is None else tuple(build(topic_type, name=t, partition_indexes=tuple(p))
                                              for t, p in topics.items()))


def fetch_groups(groups: Mapping[str, Mapping[str, Sequence[int]] | None], *, v: int = 9,
                 require_stable: bool = False) -> Any:
    entity = request_type(9, v)
    group_type = sibling(entity, "OffsetFetchRequestGroup")
    topic_type = sibling(entity, "OffsetFetchRequestTopics")
    return build(entity, require_stable=require_stable, groups=tuple(
        build(group_type, group_id=g, member_id=None, member_epoch=-1, topics=None
              if topics is None else tuple(build(topic_type, name=t, partition_indexes=tuple(p))
                                           for t, p in topics.items()))
        for g, topics in groups.items()))


def describe(*groups: str, v: int = 5) -> Any:
    return build(request_type(15, v), groups=groups, include_authorized_operations=False)


def list_groups(*, states: Sequence[str] = (), types: Sequence[str] = (), v: int = 5) -> Any:
    return build(request_type(16, v), states_filter=tuple(states), types_filter=tuple(types))


def delete_groups(*groups: str, v: int = 2) -> Any:
    return build(request_type(42, v), groups_names=groups)


def offset_delete(group: str, topics: Mapping[str, Sequence[int]]) -> Any:
    entity = request_type(47, 0)
    topic_type = sibling(entity, "OffsetDeleteRequestTopic")
    partition_type = sibling(entity, "OffsetDeleteRequestPartition")
    return build(entity, group_id=group, topics=tuple(
        build(topic_type, name=t, partitions=tuple(build(partition_type, partition_index=p)
                                                   for p in ps))
        for t, ps in topics.items()))


def find_coordinator(*keys: str, v: int = 4, key_type: int = 0) -> Any:
    if v >= 4:
        return build(request_type(10, v), key_type=key_type, coordinator_keys=keys)
    (key,) = keys
    return build(request_type(10, v), key=key, key_type=key_type)


def api_versions(v: int = 3) -> Any:
    return build(request_type(18, v), client_software_name="kgroups-differential",
                 client_software_version="1")
