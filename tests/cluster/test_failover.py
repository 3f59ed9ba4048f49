"""Coordinator failover with real client groups: the coordinator's broker is killed, stopped
gracefully, or paused past its lease, and the groups go on committing through another broker
with nothing they committed lost or moved back, and their static members keep their partitions;
producers writing with acks=all through the kill lose no acknowledged record."""

from __future__ import annotations

import itertools
import re
import signal
import threading
import time
from collections.abc import Callable
from contextlib import closing
from functools import partial
from pathlib import Path

import pytest
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64
from tests.cluster import committers, producers
from tests.cluster.conftest import Cluster

from kgroups.coordinator.placement import partition_for
from kgroups.errors import ErrorCode
from kgroups.log.batch import iter_batches
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.alone]

OFFSETS = "__consumer_offsets"
# librdkafka's debug lines shown of a member that stopped committing: its last seconds' worth,
# without the assignment dumps it writes after every commit and every poll.
CLIENT_LINES = 150
_ROUTINE = re.compile(r"\|(DUMP\w*|ASSIGNDONE)\||op GET_ASSIGNMENT")
# librdkafka's coordinator livelock (confluentinc/librdkafka#3645, open in 2.16): an OffsetCommit
# in flight when the coordinator's connection fails is retried on a connection librdkafka itself
# closes at once ("Closing connection due to nodename change"), which fails the commit with a
# transport failure and marks the coordinator dead again, round after round, so the synchronous
# commit never returns. Seen once on a quiet machine after a SIGKILL, the member's debug lines
# showing the round every ~0.5 s for 30 s while the other members committed through the new
# coordinator. Ten rounds are about five seconds of that loop.
_LIVELOCK = "Closing connection due to nodename change"
LIVELOCK_ROUNDS = 10


def _other(cluster: Cluster, node: int) -> int:
    return next(other for other in sorted(cluster.brokers) if other != node)


def _wait_all_commit_after(cluster: Cluster, group: list[committers.Member], moment: float,
                           deadline: float, client_log: Callable[[], str] = str) -> None:
    """Until every member has had a commit sent after `moment` acknowledged (none was fenced
    or dropped for good). A member that has not says what it last did and what its client
    reported, and what its client logged last (librdkafka's debug lines, from `client_log`),
    beside the brokers' log lines about the group: seen on the loaded CI machine (a librdkafka
    member fenced after a failover; another whose synchronous commit did not return), not
    reproduced elsewhere. Stalled members all caught in librdkafka's livelock (_LIVELOCK) while
    another member committed make the test xfail instead."""
    while not all(any(commit.sent > moment for commit in member.commits) for member in group):
        if time.monotonic() >= deadline:
            logged = client_log().splitlines()
            stalled = [member for member in group
                       if not any(commit.sent > moment for commit in member.commits)]
            client_lines = {member.instance: [line for line in logged
                                              if f"|{member.instance}#" in line]
                            for member in stalled}
            story = "\n".join([
                *(_member_story(member, moment) for member in group),
                *(f"broker {node}: {line}" for node, broker in sorted(cluster.brokers.items())
                  for line in broker.log_text().splitlines() if group[0].group in line),
                *(line for member in stalled for line in [
                    line for line in client_lines[member.instance]
                    if not _ROUTINE.search(line)][-CLIENT_LINES:])])
            livelocked = [member for member in stalled
                          if isinstance(member.client, committers.Librdkafka)
                          and sum(_LIVELOCK in line for line in client_lines[member.instance])
                          >= LIVELOCK_ROUNDS]
            if livelocked == stalled and len(stalled) < len(group):
                # The coordinator served the others; the stalled ones are caught in their
                # client's own loop (see _LIVELOCK), which no broker answer ends.
                print(story)
                pytest.xfail("librdkafka's coordinator livelock (librdkafka#3645) held "
                             + ", ".join(member.instance for member in livelocked))
            raise AssertionError(story)
        time.sleep(0.2)


def _member_story(member: committers.Member, moment: float) -> str:
    last = (f"the last sent {member.commits[-1].sent - moment:+.2f} s from the moment"
            if member.commits else "none")
    return (f"{member.instance}: {len(member.commits)} commits ({last}), {member.failures} "
            f"failed, assignment {member.assignment}, client error {member.client_error!r}")


def _failover(cluster: Cluster, topic: str, how: signal.Signals,
              clients: tuple[committers.ClientFactory, ...] = (committers.Librdkafka,) * 3,
              client_log: Callable[[], str] = str) -> tuple[float, float, int]:
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
        _wait_all_commit_after(cluster, group, at + recovery, at + 40, client_log)
        time.sleep(max(3.0, at + 10 - time.monotonic()))  # more commits, new coordinator
        gap = committers.longest_wait(group, at, 10)
    finally:
        stop.set()
        for member in group:
            member.join(30)
        client_log()  # read (and so left out of a failure's report): all that said is above
    # Nothing acknowledged is lost, nothing went back: OffsetFetch holds the last commit.
    acknowledged = committers.last_acknowledged(group)
    assert committers.committed(cluster, name, topic) == acknowledged
    # Static members kept their partitions through the failover.
    assert {member.instance: member.assignment for member in group} == before
    return recovery, gap, victim


def test_sigkill_of_the_coordinators_broker(cluster: Cluster,
                                           capfd: pytest.CaptureFixture[str]) -> None:
    # librdkafka and kafka-python members in one group; librdkafka's group and protocol
    # debug lines are kept (in the captured standard error) to say why a member stalled.
    debugged = partial(committers.Librdkafka, debug="cgrp,protocol,broker")
    recovery, gap, victim = _failover(cluster, "killed", signal.SIGKILL, (
        debugged, debugged, committers.KafkaPython), lambda: capfd.readouterr().err)
    print(f"\nSIGKILL of node {victim}: first commit sent after it acknowledged "
          f"{recovery:.2f} s later; longest time without a commit {gap:.2f} s")
    # A lease (broker.session.timeout.ms, 9 s) plus one heartbeat interval (2 s), and the
    # client's retry backoff.
    assert recovery < 15, recovery
    assert gap < 15, gap


def _group_led_by(cluster: Cluster, node: int, prefix: str) -> str:
    """A group name whose coordinator is `node` (the one broker about to be killed)."""
    for index in range(500):
        name = f"{prefix}-{index}"
        if cluster.wait_coordinator(name, 1) == node:
            return name
    raise AssertionError(f"node {node} coordinates none of 500 group names")


def test_sigkill_with_every_client_kind_and_producers_writing(
        cluster: Cluster, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """One SIGKILL of the broker coordinating two groups: a classic group of librdkafka,
    kafka-python and Java static members, and a consumer-protocol (KIP-848) group of librdkafka
    and Java static members, all committing synchronously while a librdkafka and a kafka-python
    producer write to the topic they read with acks=all. The librdkafka members' group and
    protocol debug lines are kept, as in the test above."""
    topic = "orders"
    committers.create_topic(cluster, topic)
    stop_writing = threading.Event()
    writers = [producers.Writer(cluster.bootstrap, topic, kind, stop_writing)
               for kind in ("librdkafka", "kafka-python")]
    for writer in writers:
        writer.start()
    java = partial(committers.Java, logs=tmp_path)
    debugged = partial(committers.Librdkafka, debug="cgrp,protocol,broker")
    classic, stop_classic = committers.start_group(cluster, topic, (
        debugged, committers.KafkaPython, java), name="orders-classic")
    victim = cluster.wait_coordinator("orders-classic", 1)
    consumer_protocol = partial(debugged, protocol="consumer")
    modern, stop_modern = committers.start_group(cluster, topic, (
        consumer_protocol, consumer_protocol, partial(java, protocol="consumer")),
        name=_group_led_by(cluster, victim, "orders-kip848"))
    groups = {"classic": classic, "consumer": modern}
    try:
        time.sleep(2)
        settled = time.monotonic()
        before = {(name, member.instance): member.assignment
                  for name, group in groups.items() for member in group}
        assert cluster.wait_coordinator(modern[0].group, 1) == victim
        cluster.signal(victim, signal.SIGKILL)
        at = time.monotonic()
        recovery = {name: committers.first_commit_after(group, at, timeout_s=40)
                    for name, group in groups.items()}
        for name, group in groups.items():
            _wait_all_commit_after(cluster, group, at + recovery[name], at + 60,
                                   lambda: capfd.readouterr().err)
            cluster.wait_coordinator(group[0].group, _other(cluster, victim), other_than=victim)
        per_member = {(name, member.instance, type(member.client).__name__):
                      committers.first_commit_after([member], at, timeout_s=60)
                      for name, group in groups.items() for member in group}
        time.sleep(max(3.0, at + 10 - time.monotonic()))
        # Every member reads every partition of its own again, those whose leader was killed
        # included (a stall is what its application would notice first).
        deadline = time.monotonic() + 20
        while (stalled := [(name, member.instance, type(member.client).__name__, p)
                           for name, group in groups.items() for member in group
                           for p in member.assignment
                           if member.client.read_at.get(p, 0.0) < at + recovery[name]]) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_classic.set()
        stop_modern.set()
        stop_writing.set()
        for member in [*classic, *modern]:
            member.join(60)
        for writer in writers:
            writer.join(120)
        capfd.readouterr()  # the clients' debug lines: reported above if a member stalled
    print(f"\nSIGKILL of node {victim}, coordinator of both groups:")
    for name, seconds in recovery.items():
        print(f"  {name} group: first commit sent after the kill acknowledged {seconds:.2f} s "
              "later")
    for (name, instance, kind), seconds in per_member.items():
        print(f"    {name} {instance} ({kind}): {seconds:.2f} s")
    written = producers.acknowledged(writers)
    after_kill = [ack for writer in writers for ack in writer.acks if ack.at > at]
    print(f"  producers: {len(written)} records acknowledged, {len(after_kill)} after the kill, "
          f"{sum(writer.failed for writer in writers)} refused")
    for name, seconds in recovery.items():
        assert seconds < 30, (name, seconds)
    # Nothing acknowledged is lost, nothing went back: OffsetFetch holds each partition's
    # highest commit sent once the groups had settled (before, a partition may have moved
    # between members while the group formed, and a Java member starts from where it reset).
    for group in groups.values():
        assert committers.committed(cluster, group[0].group, topic) == \
            committers.last_acknowledged(group, since=settled)
        for member in group:
            for earlier, later in itertools.pairwise(member.commits):
                assert all(later.offsets[p] >= offset for p, offset in earlier.offsets.items()
                           if p in later.offsets), member.instance
    # Static members kept their partitions through the failover, in both protocols.
    assert {(name, member.instance): member.assignment
            for name, group in groups.items() for member in group} == before
    # Every record the producers were told was written is there, with its value.
    assert all(writer.acks for writer in writers)
    assert after_kill
    assert producers.missing(cluster.bootstrap, topic, written) == []
    # kafka-python and the Java client validate their positions with OffsetForLeaderEpoch
    # when a partition's leader epoch moves, and fetch it no more until it is answered.
    assert stalled == []


def test_sigterm_hands_the_group_over_without_a_client_timeout(cluster: Cluster) -> None:
    recovery, gap, victim = _failover(cluster, "stopped", signal.SIGTERM)
    print(f"\nSIGTERM of node {victim}: first commit sent after it acknowledged "
          f"{recovery:.2f} s later; longest time without a commit {gap:.2f} s")
    # Controlled shutdown: the leases are released and taken at once. Measured 0.06-2.6 s
    # (librdkafka's retries of FindCoordinator and reconnection backoffs on a loaded machine),
    # far below any client timeout (the members' session timeout is 30 s). A gap near 11 s
    # is a lease's expiry: the stopping node did not hand its leases over; the nodes' logs
    # say whether it reached its leave and how it went.
    assert gap < 5, f"{gap:.2f} s\n" + "\n".join(
        f"--- node {node}'s log, last lines:\n{broker.log_text()[-4000:]}"
        for node, broker in cluster.brokers.items())
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
