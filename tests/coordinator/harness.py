"""A test driver for the coordinator: an explicit clock, a fake log and request helpers.

Writes are appended to an in-memory log and confirmed at once unless `auto_complete` is off, so
tests read like a client session; `replayed()` rebuilds a fresh coordinator from that log.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kgroups.coordinator import (
    Effects,
    GroupCoordinator,
    GroupCoordinatorConfig,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchRequest,
    Response,
    SyncGroupRequest,
    Write,
    partition_for,
)
from kgroups.records.codec import decode_record, encode_record
from kgroups.records.consumer_protocol import encode_subscription
from kgroups.records.schema import ConsumerSubscription, OffsetsRecord


def counting_uuids() -> Callable[[], uuid.UUID]:
    """The id source a test coordinator draws member ids from: 1, 2, 3... (`nth_uuid`)."""
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def nth_uuid(n: int) -> str:
    """The `n`th id `counting_uuids` hands out, as a classic member id carries it."""
    return str(uuid.UUID(int=n))


def synchronous_config(**settings: object) -> GroupCoordinatorConfig:
    """Settings under which a consumer group's target is computed in the very heartbeat that
    moves its epoch (group.consumer.assignment.interval.ms=0: Kafka before 4.3, and the
    Kafka the differential suite compares with), for tests that follow one step at a time."""
    return GroupCoordinatorConfig(group_consumer_assignment_interval_ms=0,
                                  **settings)  # type: ignore[arg-type]


def subscription(*topics: str) -> bytes:
    return encode_subscription(ConsumerSubscription(topics=tuple(topics)))


def tallies_agree(coordinator: GroupCoordinator) -> None:
    """Every classic group's tallies (members awaiting a JoinGroup answer, protocols every
    member speaks) agree with its members: a tally off by one would leave a join phase waiting
    for a member that already rejoined, or turn away a member whose protocol everyone speaks."""
    for group in coordinator._groups.values():
        members = list(group.members.values())
        assert group.awaiting_join_count == sum(m.awaiting_join for m in members), group
        if not members or group.protocol_type is None:
            continue
        offered = {name for m in members for name, _ in m.protocols} | {"unspoken"}
        for name in offered:
            everyone = all(name in dict(m.protocols) for m in members)
            assert group.supports_protocols(group.protocol_type, (name,)) == everyone, group


@dataclass
class Harness:
    config: GroupCoordinatorConfig = field(default_factory=GroupCoordinatorConfig)
    now: int = 1_000_000
    auto_complete: bool = True
    log: dict[int, list[OffsetsRecord]] = field(default_factory=dict)
    replies: dict[object, Response] = field(default_factory=dict)
    pending: list[Write] = field(default_factory=list)
    events: list = field(default_factory=list)
    removals: list = field(default_factory=list)
    rebalances: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.coordinator = GroupCoordinator(self.config, new_uuid=counting_uuids())
        self._request_ids = itertools.count(1)
        for partition in range(self.config.offsets_topic_num_partitions):
            self.absorb(self.coordinator.load_partition(partition, [], self.now))

    # -- plumbing -----------------------------------------------------------------------------

    def absorb(self, fx: Effects) -> Effects:
        tallies_agree(self.coordinator)
        for reply in fx.replies:
            assert reply.request_id not in self.replies, f"two replies for {reply.request_id}"
            self.replies[reply.request_id] = reply.response
        self.events.extend(fx.events)
        self.removals.extend(fx.removals)
        self.rebalances.extend(fx.rebalances)
        self.pending.extend(fx.writes)
        if self.auto_complete:
            self.complete_writes()
        return fx

    def complete_writes(self, error=None, count=None) -> None:
        """The pending writes complete, in order (only the first `count`, if given)."""
        while self.pending and (count is None or count > 0):
            if count is not None:
                count -= 1
            write = self.pending.pop(0)
            if error is None:
                self.log.setdefault(write.offsets_partition, []).extend(write.records)
            self.absorb(self.coordinator.write_completed(write.write_id, error, self.now))

    def lost_with(self, write: Write) -> list[Write]:
        """`write` failed: it and the writes of its partition still in flight after it, taken
        out of `pending` (the shell's contract: a log never holds a later write without the
        earlier one, so they fail with it; the coordinator has reverted them already)."""
        lost = [write] + [w for w in self.pending if w.offsets_partition == write.offsets_partition]
        self.pending = [w for w in self.pending if w not in lost]
        return lost

    def rid(self) -> int:
        return next(self._request_ids)

    def advance(self, ms: int) -> None:
        """Move the clock, firing timers at each deadline on the way (as a shell would)."""
        target = self.now + ms
        while (deadline := self.coordinator.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self.absorb(self.coordinator.advance_time(self.now))
        self.now = target
        self.absorb(self.coordinator.advance_time(self.now))

    def reply(self, request_id: object) -> Response | None:
        return self.replies.get(request_id)

    def replayed(self) -> GroupCoordinator:
        """A new coordinator loaded from the log's bytes (every record through the codec)."""
        fresh = GroupCoordinator(self.config, new_uuid=counting_uuids())
        for partition in range(self.config.offsets_topic_num_partitions):
            records = [
                decode_record(*encode_record(record)) for record in self.log.get(partition, [])
            ]
            fresh.load_partition(partition, records, self.now)
        return fresh

    # -- requests -----------------------------------------------------------------------------

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] | None = None,
        session: int = 10_000,
        rebalance: int = 30_000,
        version: int = 9,
        protocol_type: str = "consumer",
        client_id: str = "client",
    ) -> int:
        request_id = self.rid()
        if protocols is None:
            protocols = (("range", subscription("t")),)
        self.absorb(
            self.coordinator.join_group(
                JoinGroupRequest(
                    request_id,
                    group,
                    member_id,
                    protocol_type,
                    protocols,
                    session,
                    rebalance,
                    group_instance_id=instance,
                    client_id=client_id,
                    client_host="/127.0.0.1",
                    version=version,
                ),
                self.now,
            )
        )
        return request_id

    def join_dynamic(self, group: str, **kwargs) -> tuple[int, str]:
        """Two-step v4+ join: get an id (MEMBER_ID_REQUIRED), then join with it."""
        first = self.join(group, **kwargs)
        response = self.reply(first)
        assert isinstance(response, JoinGroupResponse), response
        assert response.error.name == "MEMBER_ID_REQUIRED", response
        return self.join(group, response.member_id, **kwargs), response.member_id

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        request_id = self.rid()
        self.absorb(
            self.coordinator.sync_group(
                SyncGroupRequest(
                    request_id,
                    group,
                    generation,
                    member_id,
                    tuple((assignments or {}).items()),
                    group_instance_id=instance,
                    protocol_type=protocol_type,
                    protocol_name=protocol_name,
                ),
                self.now,
            )
        )
        return request_id

    def heartbeat(self, group: str, member_id: str, generation: int, instance=None) -> int:
        request_id = self.rid()
        self.absorb(
            self.coordinator.heartbeat(
                HeartbeatRequest(request_id, group, generation, member_id, instance), self.now
            )
        )
        return request_id

    def leave(self, group: str, *members: MemberIdentity, version: int = 3) -> int:
        request_id = self.rid()
        self.absorb(
            self.coordinator.leave_group(
                LeaveGroupRequest(request_id, group, tuple(members), version), self.now
            )
        )
        return request_id

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        *,
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        metadata: str = "",
        retention: int = -1,
        version: int = 9,
        commit_timestamp: int = -1,
    ) -> int:
        request_id = self.rid()
        by_topic: dict[str, list[OffsetCommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                OffsetCommitPartition(partition, offset, metadata, 5, commit_timestamp)
            )
        topics = tuple(OffsetCommitTopic(t, tuple(p)) for t, p in by_topic.items())
        self.absorb(
            self.coordinator.offset_commit(
                OffsetCommitRequest(
                    request_id,
                    group,
                    topics,
                    generation,
                    member_id,
                    instance,
                    retention,
                    version,
                ),
                self.now,
            )
        )
        return request_id

    def fetch(self, group: str, topics=None) -> dict[tuple[str, int], int]:
        return self.fetched(self.send_fetch(group, topics))

    def send_fetch(self, group: str, topics=None) -> int:
        """An OffsetFetch sent; its request id (`fetched` reads its answer)."""
        request_id = self.rid()
        self.absorb(
            self.coordinator.offset_fetch(
                OffsetFetchRequest(request_id, (OffsetFetchGroup(group, topics),)), self.now
            )
        )
        return request_id

    def fetched(self, request_id: int) -> dict[tuple[str, int], int]:
        (fetched,) = self.reply(request_id).groups
        return {(t.name, p.partition): p.offset for t in fetched.topics for p in t.partitions}

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.config.offsets_topic_num_partitions)
