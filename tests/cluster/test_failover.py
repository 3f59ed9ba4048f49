"""Coordinator failover with a real client group: the coordinator's broker is killed, stopped
gracefully, or paused past its lease, and the group goes on committing through another broker
with nothing it committed lost or moved back, and its static members keep their partitions."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import closing

import pytest
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64
from tests.cluster import committers
from tests.cluster.conftest import Cluster

from kgroups.coordinator.placement import partition_for
from kgroups.errors import ErrorCode
from kgroups.log.batch import iter_batches
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = [pytest.mark.postgresql, pytest.mark.slow]

OFFSETS = "__consumer_offsets"


def _other(cluster: Cluster, node: int) -> int:
    return next(other for other in sorted(cluster.brokers) if other != node)


def _failover(cluster: Cluster, topic: str, how: signal.Signals,
              clients: tuple[type[committers.Librdkafka | committers.KafkaPython], ...]
              = (committers.Librdkafka,) * 3) -> tuple[float, float, int]:
    """Run the group, send `how` to its coordinator's broker; (seconds until the first commit
    sent afterwards was acknowledged, the longest time without an acknowledged commit in the
    10 s after the signal, the node). Checks what must hold either way."""
    committers.create_topic(cluster, topic)
    group, stop = committers.start_group(cluster, topic, clients)
    name = group[0].group
    try:
        time.sleep(2)
        before = {member.instance: member.assignment for member in group}
        victim = cluster.wait_coordinator(name, 1)
        cluster.signal(victim, how)
        at = time.monotonic()
        recovery = committers.first_commit_after(group, at, timeout_s=40)
        survivor = _other(cluster, victim)
        cluster.wait_coordinator(name, survivor, other_than=victim)
        # Every member goes on committing (none was fenced or dropped for good).
        deadline = at + 40
        while not all(any(commit.sent > at + recovery for commit in member.commits)
                      for member in group):
            assert time.monotonic() < deadline, [member.failures for member in group]
            time.sleep(0.2)
        time.sleep(max(3.0, at + 10 - time.monotonic()))  # more commits, new coordinator
        gap = committers.longest_wait(group, at, 10)
    finally:
        stop.set()
        for member in group:
            member.join(30)
    # Nothing acknowledged is lost, nothing went back: OffsetFetch holds the last commit.
    acknowledged = committers.last_acknowledged(group)
    assert committers.committed(cluster, name, topic) == acknowledged
    # Static members kept their partitions through the failover.
    assert {member.instance: member.assignment for member in group} == before
    return recovery, gap, victim


def test_sigkill_of_the_coordinators_broker(cluster: Cluster) -> None:
    # librdkafka and kafka-python members in one group.
    recovery, gap, victim = _failover(cluster, "killed", signal.SIGKILL, (
        committers.Librdkafka, committers.Librdkafka, committers.KafkaPython))
    print(f"\nSIGKILL of node {victim}: first commit sent after it acknowledged "
          f"{recovery:.2f} s later; longest time without a commit {gap:.2f} s")
    # A lease (broker.session.timeout.ms, 9 s) plus one heartbeat interval (2 s), and the
    # client's retry backoff.
    assert recovery < 15, recovery
    assert gap < 15, gap


def test_sigterm_hands_the_group_over_without_a_client_timeout(cluster: Cluster) -> None:
    recovery, gap, victim = _failover(cluster, "stopped", signal.SIGTERM)
    print(f"\nSIGTERM of node {victim}: first commit sent after it acknowledged "
          f"{recovery:.2f} s later; longest time without a commit {gap:.2f} s")
    # Controlled shutdown: the leases are released and taken at once. Measured 0.06-2.6 s
    # (librdkafka's retries of FindCoordinator and reconnection backoffs on a loaded machine),
    # far below any client timeout (the members' session timeout is 30 s).
    assert gap < 5, gap
    process = cluster.brokers[victim].process
    assert process is not None and process.wait(30) == 0


def _commit(client: KafkaWireClient, group: str, offset: int) -> ErrorCode:
    """An admin commit (generation -1) of `offset` for partition 0 of topic `t`."""
    request = offset_commit.OffsetCommitRequest(
        group_id=GroupId(group), generation_id_or_member_epoch=i32(-1), member_id="",
        group_instance_id=None, topics=(offset_commit.OffsetCommitRequestTopic(
            name=TopicName("t"), partitions=(offset_commit.OffsetCommitRequestPartition(
                partition_index=i32(0), committed_offset=i64(offset),
                committed_metadata=""),)),))
    (topic,) = client.call(request).topics
    (partition,) = topic.partitions
    return ErrorCode(partition.error_code)


def test_a_paused_coordinator_is_fenced_when_it_resumes(cluster: Cluster) -> None:
    group = "fenced-group"
    partition = partition_for(group, 50)
    committers.create_topic(cluster, "t")
    paused = cluster.wait_coordinator(group, 1)
    target = cluster.brokers[paused]
    with KafkaWireClient(target.host, target.port, timeout=60) as stale:
        assert _commit(stale, group, 1) == ErrorCode.NONE
        cluster.signal(paused, signal.SIGSTOP)
        answer: list[ErrorCode] = []
        # Sent while the broker is paused: it reads it only after SIGCONT, holding the
        # group's state from before the takeover.
        sender = threading.Thread(target=lambda: answer.append(_commit(stale, group, 100)))
        sender.start()
        try:
            survivor = _other(cluster, paused)
            successor = cluster.wait_coordinator(group, survivor, other_than=paused,
                                                 timeout_s=40)
            new = cluster.brokers[successor]
            with KafkaWireClient(new.host, new.port, timeout=30) as fresh:
                deadline = time.monotonic() + 30
                while (error := _commit(fresh, group, 2)) != ErrorCode.NONE:
                    assert time.monotonic() < deadline, error
                    time.sleep(0.2)
            with closing(cluster.store()) as store:
                takeover = store.partition_state(OFFSETS, partition)
        finally:
            cluster.signal(paused, signal.SIGCONT)
        sender.join(60)
    assert answer == [ErrorCode.NOT_COORDINATOR]
    assert takeover.leader == successor
    # It gave the partition up (fenced on the write, or told so by its next step first).
    deadline = time.monotonic() + 15
    while f"leadership_lost topic={OFFSETS} partition={partition}" not in \
            cluster.brokers[paused].log_text():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    # Nothing was written at the paused broker's epoch after the takeover.
    with closing(cluster.store()) as store:
        data = store.read(OFFSETS, partition, takeover.next_offset - 1, 1 << 20)
    later = list(iter_batches(data))
    assert later and all(batch.partition_leader_epoch >= takeover.epoch for batch in later)
    assert committers.committed(cluster, group, "t")[0] == 2
    # The resumed broker stepped down and agrees again with the others on the coordinator.
    deadline = time.monotonic() + 15
    while cluster.coordinator(group, paused) != cluster.coordinator(group, survivor):
        assert time.monotonic() < deadline
        time.sleep(0.2)
