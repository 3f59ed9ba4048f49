"""Running out of file descriptors cuts off no one (issue 29 item 4).

`kgroups serve` runs under a low `ulimit -n` (set in the child before exec). Creating partitions
until creation failed used to make the broker process fail half-way through a CreateTopics and
then fail to import the next request's schema inside the network process's channel, which
closed the channel: the network process exited and could not be started again (EMFILE) until
the broker was restarted. Partitions it could not open stayed offline until then too.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import itertools
import os
import resource
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_wire_helpers import connect, create_topic, metadata_request, raw_socket
from config_wire_helpers import describe
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.list_groups.v4.request import ListGroupsRequest
from tests.broker.servers import ServerProcess

from kgroups.broker.descriptors import reserve
from kgroups.broker.topics import TopicCatalog
from kgroups.errors import ErrorCode
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager
from kgroups.tools import admin
from kgroups.tools.wire_client import KafkaWireClient, WireError

LIMIT = 256
TOPIC_RESOURCE = 2
OVERRIDES = ("offsets.topic.num.partitions=4",)


@contextlib.contextmanager
def open_file_limit(limit: int, hard: int | None = None) -> Iterator[None]:
    """Processes started meanwhile run under `ulimit -n limit` (soft, and hard unless given)."""
    real = subprocess.Popen
    limits = (limit, hard or limit)

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        kwargs["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits)
        return real(*args, **kwargs)  # type: ignore[call-overload, no-any-return]

    subprocess.Popen = popen  # type: ignore[misc]
    try:
        yield
    finally:
        subprocess.Popen = real  # type: ignore[misc]


@pytest.fixture
def limited_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A broker under LIMIT descriptors with a network process: its tests check both."""
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log",
                           (*OVERRIDES, "num.network.threads=1"))
    with open_file_limit(LIMIT):
        server.start()
    try:
        yield server
    finally:
        server.close()


def commit(client: KafkaWireClient, group: str, offset: int) -> None:
    admin.execute_reset(client, group, [admin.OffsetReset("events", 0, None, offset)])


def served(client: KafkaWireClient, group: str, offset: int) -> None:
    """What a healthy client does: Metadata, and its group's OffsetCommit, read back."""
    topics = {t.name for t in client.call(metadata_request(all_topics=True)).topics}
    assert "events" in topics
    commit(client, group, offset)
    assert admin.committed_offsets(client, group)[("events", 0)] == offset


def held(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def grow(client: KafkaWireClient, topic: str, count: int) -> tuple[int, str | None]:
    answer = client.call(create_partitions.CreatePartitionsRequest(
        topics=(create_partitions.CreatePartitionsTopic(name=topic, count=count,
                                                        assignments=None),),
        timeout=datetime.timedelta(seconds=5), validate_only=False))
    (result,) = answer.results
    return int(result.error_code), result.error_message


@pytest.mark.slow
def test_a_create_that_would_exhaust_descriptors_is_refused_and_everyone_stays_served(
    limited_server: ServerProcess,
) -> None:
    assert limited_server.process is not None
    pid = limited_server.process.pid
    with connect(limited_server.port) as client, connect(limited_server.port) as healthy:
        create_topic(client, "events")
        served(healthy, "healthy", 1)
        before = held(pid)
        result = create_topic(client, "huge", partitions=LIMIT)
        assert result.error_code == ErrorCode.POLICY_VIOLATION  # type: ignore[attr-defined]
        assert "file descriptor" in result.error_message  # type: ignore[attr-defined]
        assert held(pid) == before  # nothing was opened, nothing is left behind
        assert not (limited_server.data_dir / "huge-0").exists()
        served(healthy, "healthy", 2)
        # What fits is created, up to the reserve; then growing is refused the same way.
        assert create_topic(client, "fits", partitions=50).error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        error, message = grow(client, "fits", 50 + LIMIT)
        assert error == ErrorCode.POLICY_VIOLATION and "file descriptor" in (message or "")
        assert grow(client, "fits", 60)[0] == ErrorCode.NONE
        served(healthy, "healthy", 3)
        # Up to two short of the limit less the reserve (slack for a descriptor the broker
        # holds for a moment); three more partitions are one too many.
        room = LIMIT - reserve(LIMIT) - held(pid) - 2
        assert create_topic(client, "rest", partitions=room).error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        assert create_topic(client, "more", partitions=3).error_code == (  # type: ignore[attr-defined]
            ErrorCode.POLICY_VIOLATION)
        filled = 0  # the last descriptors short of the reserve, one partition at a time
        while create_topic(client, f"one-{filled}").error_code == ErrorCode.NONE:  # type: ignore[attr-defined]
            filled += 1
            assert filled <= 3
        # Metadata does not auto-create a topic either: LEADER_NOT_AVAILABLE, retriable.
        (auto,) = client.call(metadata_request("auto")).topics
        assert auto.error_code == ErrorCode.LEADER_NOT_AVAILABLE and not auto.partitions
        assert not (limited_server.data_dir / "auto-0").exists()
        served(healthy, "healthy", 5)
    with connect(limited_server.port) as newcomer:  # new connections are served too
        served(newcomer, "newcomer", 6)
    assert limited_server.network_processes(), "the network process is gone"
    assert "network_process_exited" not in limited_server.log_text()


def lowest_free(pid: int) -> int:
    """The lowest descriptor number `pid` does not hold: as its soft limit, every number below
    it is taken and the next open fails with EMFILE (the limit bounds numbers, not a count)."""
    taken = {int(entry) for entry in os.listdir(f"/proc/{pid}/fd")}
    return next(n for n in itertools.count() if n not in taken)


def exhaust(pid: int) -> None:
    """Drop `pid`'s soft limit to its lowest free descriptor, again until no descriptor it
    closes meanwhile (a connection just closed) leaves a hole below the limit."""
    for _ in range(20):
        free = lowest_free(pid)
        set_soft_limit(pid, free)
        time.sleep(0.2)
        if lowest_free(pid) == free:
            return
    raise AssertionError(f"{pid} keeps closing descriptors")


def set_soft_limit(pid: int, soft: int) -> None:
    _soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


def until(check: Callable[[], None], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except (WireError, OSError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("network_threads", [1, 0], ids=["network-process", "single-process"])
def test_exhausted_descriptors_then_freed_serve_again_without_a_restart(
    tmp_path: Path, network_threads: int,
) -> None:
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log",
                           (*OVERRIDES, f"num.network.threads={network_threads}"))
    with open_file_limit(LIMIT):
        server.start()
    try:
        assert server.process is not None
        pid = server.process.pid
        with connect(server.port) as healthy, connect(server.port) as other, \
                connect(server.port) as third:
            create_topic(healthy, "events")
            served(healthy, "healthy", 1)
            # The broker process runs out: its soft limit drops to what it holds.
            exhaust(pid)
            result = create_topic(other, "during", partitions=2)
            assert result.error_code == ErrorCode.POLICY_VIOLATION  # type: ignore[attr-defined]
            # A request whose schema was never loaded needs a descriptor to decode it, or to
            # build its answer: that connection is closed, the others are not.
            with pytest.raises(WireError):
                describe(other, TOPIC_RESOURCE, "events")
            exhaust(pid)  # closing `other` may have freed its socket's descriptor
            with pytest.raises(WireError):
                third.call(ListGroupsRequest(states_filter=()))
            commit(healthy, "healthy", 2)  # needs no new descriptor: served throughout
            set_soft_limit(pid, LIMIT)
            until(lambda: served(healthy, "healthy", 3))
            assert create_topic(healthy, "during", partitions=2).error_code == ErrorCode.NONE  # type: ignore[attr-defined]
            # What failed for want of a descriptor is not remembered as failing.
            groups = {g.group_id
                      for g in healthy.call(ListGroupsRequest(states_filter=())).groups}
            assert {"healthy"} <= groups
            assert "retention.ms" in describe(healthy, TOPIC_RESOURCE, "events")
        with connect(server.port) as newcomer:
            served(newcomer, "newcomer", 4)
        assert server.process.poll() is None
        log = server.log_text()
        assert "network_process_exited" not in log and "is offline" not in log
        assert log.count("reason=handler_failed") == 2 and "Unhandled" not in log
    finally:
        server.close()


@pytest.mark.slow
def test_a_network_process_out_of_descriptors_neither_spins_nor_stops_accepting(
    limited_server: ServerProcess,
) -> None:
    assert limited_server.process is not None
    (network,) = limited_server.network_processes()
    with connect(limited_server.port) as client:
        create_topic(client, "events")
    exhaust(network.pid)
    spent = sum(network.cpu_times()[:2])
    with raw_socket(limited_server.port, timeout=5) as refused:
        # libuv frees the spare descriptor it keeps to accept the connection and close it.
        assert refused.recv(1) == b""
    time.sleep(1)
    assert sum(network.cpu_times()[:2]) - spent < 0.5
    set_soft_limit(network.pid, LIMIT)
    with connect(limited_server.port) as newcomer:
        until(lambda: served(newcomer, "newcomer", 4))
    assert [p.pid for p in limited_server.network_processes()] == [network.pid]
    assert "network_process_exited" not in limited_server.log_text()


def test_a_creation_that_fails_half_way_leaves_no_partition_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Descriptors gone between the check and the creation: the partitions made so far are
    deleted again, or a restart would find them on disk and count a topic nobody created."""
    catalog = TopicCatalog(LogManager(tmp_path, LogConfig()))
    assert catalog.create("events", 1) is ErrorCode.NONE
    real_open = os.open
    failed: set[str] = set()

    def exhausted(path: Any, *args: Any, **kwargs: Any) -> int:
        """The third partition's open fails (its directory's fsync), once: closing the
        others frees descriptors for the clean-up."""
        if str(path).endswith(("orders-2", "events-2")) and str(path) not in failed:
            failed.add(str(path))
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", exhausted)
    with pytest.raises(OSError, match="Too many open files"):
        catalog.create("orders", 4, {"retention.ms": "1000"})
    with pytest.raises(OSError, match="Too many open files"):
        catalog.add_partitions("events", 4)
    assert catalog.partition_count("orders") is None and catalog.overrides("orders") == {}
    assert catalog.partition_count("events") == 1
    assert sorted(p.name for p in tmp_path.glob("*-*")) == ["events-0"]
    monkeypatch.setattr(os, "open", real_open)
    assert catalog.create("orders", 4) is ErrorCode.NONE
    assert TopicCatalog(LogManager(tmp_path, LogConfig())).partition_counts() == {
        "events": 1, "orders": 4}


@pytest.mark.slow
def test_serve_raises_its_soft_limit_to_the_hard_one_as_the_jvm_does(tmp_path: Path) -> None:
    """Kafka 4.3.1 started under `ulimit -n 1024:4096` runs with 4096 (bench/RESULTS.md)."""
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log", OVERRIDES)
    with open_file_limit(LIMIT, hard=2 * LIMIT):
        server.start()
    try:
        assert server.process is not None
        assert resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE) == (
            2 * LIMIT, 2 * LIMIT)
    finally:
        server.close()
