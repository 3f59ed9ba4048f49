"""A full disk under producers and committers: nothing acknowledged is lost, offsets never go back.

As root the data directory is a 20 MiB tmpfs the test mounts (and unmounts), with a ballast
file on it; producers and committers run against `kgroups serve` until appends fail with
KAFKA_STORAGE_ERROR and commits with NOT_COORDINATOR, then the ballast is deleted. Without
root, `full_disk_serve.py` makes writes into the data directory fail the same way (a short
write, then ENOSPC) while a flag file exists. Either way, once space is back, the partitions
take writes again by themselves, and every acknowledged record and commit reads back the same,
before and after a restart (kill -9).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from broker_wire_helpers import connect, create_topic, fetch_request, produce_request
from tests.broker.servers import ServerProcess

from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch, iter_records_raw
from kgroups.tools import admin
from kgroups.tools.wire_client import KafkaWireClient

TOPIC = "events"
GROUP = "committer"
PARTITIONS = (0, 1)
OVERRIDES = ("offsets.topic.num.partitions=4", "log.segment.bytes=1048576",
             "offsets.topic.segment.bytes=65536", "log.cleaner.backoff.ms=500")
DISK_MB = 20
BALLAST_MB = 5
FILL_TIMEOUT_S = 120


class Disk:
    """Where the data directory lives, and how it runs full and gets space back."""

    data_dir: Path

    def filling(self, round_: int) -> None:
        """Called every round of the workload (a real disk fills by itself)."""

    def free(self) -> None:
        raise NotImplementedError

    def server(self, log_path: Path) -> ServerProcess:
        return ServerProcess(self.data_dir, log_path, OVERRIDES)


class Tmpfs(Disk):
    def __init__(self, mount_point: Path) -> None:
        self.mount_point = mount_point
        self.data_dir = mount_point / "data"
        self.ballast = mount_point / "ballast"
        self.ballast.write_bytes(b"\0" * (BALLAST_MB << 20))

    def free(self) -> None:
        self.ballast.unlink()


class InjectedFullDisk(Disk):
    """Full while the flag exists: set once the workload has run a while."""

    def __init__(self, root: Path) -> None:
        self.data_dir = root / "data"
        self.flag = root / "disk-full"

    def filling(self, round_: int) -> None:
        if round_ == 300:
            self.flag.touch()

    def free(self) -> None:
        self.flag.unlink()

    def server(self, log_path: Path) -> ServerProcess:
        return FullDiskServer(self.data_dir, log_path, OVERRIDES, flag=self.flag)


@dataclass
class FullDiskServer(ServerProcess):
    flag: Path = field(default=Path())

    def start(self) -> None:
        command = [sys.executable, str(Path(__file__).with_name("full_disk_serve.py")),
                   str(self.flag), "serve", "--host", self.host, "--port", str(self.port),
                   "--data-dir", str(self.data_dir)]
        for override in self.overrides:
            command += ["--override", override]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log)
        self.port = self._wait_listening()


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    if not _can_mount():
        yield InjectedFullDisk(tmp_path)
        return
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs",
                              str(mount_point)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:  # root without CAP_SYS_ADMIN (a container): inject instead
        yield InjectedFullDisk(tmp_path)
        return
    try:
        yield Tmpfs(mount_point)
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)
        if os.path.ismount(mount_point):
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


@pytest.fixture
def server_for(tmp_path: Path) -> Iterator[Callable[[Disk], ServerProcess]]:
    """Started servers are stopped before the disk fixture unmounts (teardown runs in reverse)."""
    started: list[ServerProcess] = []

    def start(disk: Disk) -> ServerProcess:
        server = disk.server(tmp_path / "server.log")
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.close()


@dataclass
class Acknowledged:
    records: dict[int, dict[int, bytes]] = field(
        default_factory=lambda: {partition: {} for partition in PARTITIONS})
    commits: dict[int, int] = field(default_factory=dict)  # partition -> last acknowledged offset
    produce_errors: dict[int, int] = field(default_factory=dict)
    commit_errors: dict[str, int] = field(default_factory=dict)


def produce(client: KafkaWireClient, partition: int, value: bytes) -> tuple[int, int]:
    (answer,) = client.call(produce_request(
        TOPIC, partition, build_batch([(b"key", value, int(time.time() * 1000))]))
    ).responses[0].partition_responses
    return int(answer.error_code), int(answer.base_offset)


def commit(client: KafkaWireClient, partition: int, offset: int) -> str | None:
    try:
        admin.execute_reset(client, GROUP, [admin.OffsetReset(TOPIC, partition, None, offset)])
    except admin.AdminError as exc:
        return str(exc).rsplit(": ", 1)[-1]
    return None


def wait_for_coordinator(client: KafkaWireClient) -> None:
    """Until __consumer_offsets is loaded, so that every commit error counted is the disk's."""
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.committed_offsets(client, GROUP)
            return
        except admin.AdminError as exc:
            assert "COORDINATOR_LOAD_IN_PROGRESS" in str(exc) and time.monotonic() < deadline
            time.sleep(0.05)


def run_until_full(client: KafkaWireClient, disk: Disk, acked: Acknowledged) -> None:
    """Produce (2-24 KiB values, so writes end at every kind of boundary) and commit until both
    have failed repeatedly."""
    rng = random.Random(11)
    deadline = time.monotonic() + FILL_TIMEOUT_S
    round_ = 0
    while sum(acked.produce_errors.values()) < 40 or sum(acked.commit_errors.values()) < 10:
        assert time.monotonic() < deadline, f"the disk never filled: {acked.produce_errors}"
        disk.filling(round_)
        partition = PARTITIONS[round_ % len(PARTITIONS)]
        value = b"%d:%d:" % (partition, round_) + rng.randbytes(rng.randint(2048, 24576))
        error, base = produce(client, partition, value)
        if error == ErrorCode.NONE:
            acked.records[partition][base] = value
        else:
            acked.produce_errors[error] = acked.produce_errors.get(error, 0) + 1
        if round_ % 3 == 0 and acked.records[partition]:
            offset = max(acked.records[partition]) + 1
            failed = commit(client, partition, offset)
            if failed is None:
                acked.commits[partition] = offset
            else:
                acked.commit_errors[failed] = acked.commit_errors.get(failed, 0) + 1
        round_ += 1


def read_all(client: KafkaWireClient, partition: int) -> dict[int, bytes | None]:
    found: dict[int, bytes | None] = {}
    offset = 0
    while True:
        (read,) = client.call(fetch_request(TOPIC, partition, offset)).responses[0].partitions
        assert read.error_code == ErrorCode.NONE, ErrorCode(int(read.error_code)).name
        if not read.records:
            return found
        for record in iter_records_raw(bytes(read.records)):
            found[record[0]] = record[3]
            offset = record[0] + 1


def check_everything_acknowledged(client: KafkaWireClient, acked: Acknowledged,
                                  seen_commits: dict[int, int]) -> None:
    for partition in PARTITIONS:
        stored = read_all(client, partition)
        lost = {o for o, value in acked.records[partition].items() if stored.get(o) != value}
        assert not lost, f"partition {partition}: acknowledged offsets {sorted(lost)[:10]} lost"
    committed = admin.committed_offsets(client, GROUP)
    for partition, offset in acked.commits.items():
        now = committed[(TOPIC, partition)]
        assert now == offset, f"partition {partition}: committed {now}, acknowledged {offset}"
        assert now >= seen_commits.get(partition, -1), "a committed offset went backwards"
        seen_commits[partition] = now


@pytest.mark.slow
def test_a_full_disk_loses_nothing_acknowledged(
    disk: Disk, server_for: Callable[[Disk], ServerProcess]
) -> None:
    server = server_for(disk)
    acked = Acknowledged()
    seen_commits: dict[int, int] = {}
    with connect(server.port) as client:
        create_topic(client, TOPIC, partitions=len(PARTITIONS))
        wait_for_coordinator(client)
        run_until_full(client, disk, acked)
        assert set(acked.produce_errors) == {ErrorCode.KAFKA_STORAGE_ERROR}
        assert set(acked.commit_errors) == {"NOT_COORDINATOR"}  # Kafka's answer for commits
        assert all(acked.records.values()) and acked.commits
        check_everything_acknowledged(client, acked, seen_commits)  # readable while full
        disk.free()
        for partition in PARTITIONS:  # back by themselves, no restart
            value = b"after the disk was freed %d" % partition
            error, base = produce(client, partition, value)
            assert error == ErrorCode.NONE
            acked.records[partition][base] = value
            offset = max(acked.records[partition]) + 1
            assert commit(client, partition, offset) is None
            acked.commits[partition] = offset
        check_everything_acknowledged(client, acked, seen_commits)
    server.kill()
    server.start()
    with connect(server.port) as client:
        check_everything_acknowledged(client, acked, seen_commits)
    assert "truncated torn tail" not in server.log_text()
    assert "KAFKA_STORAGE_ERROR until an append succeeds" in server.log_text()
    assert "succeed again" in server.log_text()


def test_a_failed_fsync_is_never_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fsync before every acknowledgement (log.flush.interval.messages=1), produce and
    commit while fsync fails: neither is acknowledged, and the partitions stay refused (their
    last writes are in doubt) until the broker restarts."""
    from test_damaged_logs import running_broker, wait_loaded

    data_dir = tmp_path / "data"
    every_ack = "log.flush.interval.messages=1"
    with running_broker(data_dir, every_ack) as broker, connect(broker.port) as client:
        wait_loaded(broker)
        create_topic(client, TOPIC, partitions=1)
        assert produce(client, 0, b"durable")[0] == ErrorCode.NONE
        assert commit(client, 0, 1) is None

        def failing_fsync(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing_fsync)
        assert produce(client, 0, b"in doubt") == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
        assert commit(client, 0, 2) == "NOT_COORDINATOR"
        monkeypatch.undo()
        assert produce(client, 0, b"refused")[0] == ErrorCode.KAFKA_STORAGE_ERROR
        assert commit(client, 0, 3) == "NOT_COORDINATOR"
        assert admin.committed_offsets(client, GROUP)[(TOPIC, 0)] == 1
    with running_broker(data_dir, every_ack) as broker, connect(broker.port) as client:
        wait_loaded(broker)
        stored = read_all(client, 0)
        assert stored[0] == b"durable" and b"refused" not in stored.values()
        assert admin.committed_offsets(client, GROUP)[(TOPIC, 0)] in (1, 2)  # 2: in doubt
        assert produce(client, 0, b"after restart")[0] == ErrorCode.NONE
        assert commit(client, 0, 4) is None
