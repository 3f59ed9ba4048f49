"""Apache Kafka in the test loop: a real single-node Kafka broker beside `kgroups serve`.

kgroups claims to behave as Kafka does; this module lets a test ask Kafka itself. `make kafka`
copies the pinned Apache Kafka jars (tests/kafka-dist/pom.xml) into `$KAFKA_HOME/lib`, by default
`~/.cache/kgroups/kafka-4.3.1`, outside git.

API
- `KafkaBroker(workdir, settings=..., jvm_options=...)`: one combined KRaft controller+broker
  JVM. `start()` formats its storage in `workdir/data` (first start only), binds free
  127.0.0.1 ports for the client listener and the controller, and returns once the broker
  answers ApiVersions and its group coordinator answers FindCoordinator (so
  `__consumer_offsets` exists). `stop()` (SIGTERM, graceful), `kill()` (SIGKILL), `close()`;
  `start()` again keeps ports and data. `bootstrap`, `host`, `port`, `log_path` (log4j2 output),
  `log_text()`, `data_dir` (the KRaft log dir), `start_seconds` (last start's wall time:
  about 5 s on an idle machine, formatting included; 10-13 s with both cores busy). Its JVM
  runs C1-only (`QUICK_JVM`) with a 512 MiB heap; pass `jvm_options` to change that.
- `KafkaBroker(..., extra_listeners=("SASL_PLAINTEXT",))`: more client listeners, each named
  after its security protocol, on free ports (`listener_ports[name]`); their sasl.*, ssl.*,
  authorizer and listener.name.* settings go in `settings` (tests/broker/test_security_*).
- `KAFKA_TEST_SETTINGS`: the group settings both brokers of the shared fixtures run with
  (initial rebalance delay 0, one `__consumer_offsets` partition, session timeouts 500 ms to
  30 min); pass your own `settings` to start one configured differently.
- `run_kafka_tool(main_class, args, ...)`: runs one of Kafka's command-line tools on the same
  classpath (e.g. `org.apache.kafka.tools.consumer.group.ConsumerGroupCommand`,
  `org.apache.kafka.tools.TopicCommand`, `org.apache.kafka.tools.GetOffsetShell`,
  `org.apache.kafka.tools.DumpLogSegments`, `org.apache.kafka.tools.consumer.ConsoleConsumer`,
  `org.apache.kafka.tools.ConsoleProducer`) and returns the CompletedProcess (text mode).
- `kafka_classpath()`, `java_command()`: for helpers that start their own JVMs against the jars;
  `class_archive_options(main_class, jvm_options)`: the class-sharing options for a tool started
  that way once `run_kafka_tool` has run it (see `_class_archive`).
- Fixtures (exposed by tests/conftest.py): `kafka_broker` (session-scoped KafkaBroker),
  `kgroups_broker` (session-scoped `kgroups serve`, a tests/broker ServerProcess, with the same
  settings), and `any_broker`, parametrized over both (`kafka` / `kgroups`, the Kafka case
  carrying the `kafka` marker). Both expose `.bootstrap`, `.host`, `.port`, `.log_text()`.
  The session brokers are shared: give every test its own group ids and topic names.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from tests.broker.servers import ServerProcess

from kgroups.tools.wire_client import KafkaWireClient, WireError

KAFKA_VERSION = "4.3.1"
KAFKA_HOME = Path(os.environ.get(
    "KAFKA_HOME", Path.home() / ".cache" / "kgroups" / f"kafka-{KAFKA_VERSION}"))
LOG4J2_CONFIG = Path(__file__).parent / "kafka-dist" / "log4j2.properties"
STARTUP_TIMEOUT_S = 90.0

KAFKA_TEST_SETTINGS: Mapping[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "group.max.session.timeout.ms": "1800000",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "1",
}

# A test's JVMs live seconds: C1 alone starts Kafka and its tools about twice as fast under load
# (format 5.8 s -> 1.9 s with both cores busy); a benchmark passes its own options. No
# hsperfdata file: when a new JVM's pid matches a stale file's, the JVM prints a warning into
# the tool's output that the tests compare.
QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData")

# Settings only Kafka needs to run as a single node; kgroups has no replication to configure.
_SINGLE_NODE: Mapping[str, str] = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "log.flush.interval.messages": "9223372036854775807",
}


def kafka_classpath() -> str:
    """`$KAFKA_HOME/lib/*`, after checking `make kafka` has put the jars there."""
    lib = KAFKA_HOME / "lib"
    if not any(lib.glob(f"kafka_2.13-{KAFKA_VERSION}.jar")):
        raise RuntimeError(f"Apache Kafka {KAFKA_VERSION} is not in {lib}: run `make kafka`")
    return f"{lib}/*"


def java_command() -> str:
    """The `java` on PATH (Kafka 4.x runs on Java 17 and later)."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no `java` on PATH: run `make system-deps`")
    return java


def _log_options(log_path: Path | None) -> list[str]:
    """Log4j2 output to `log_path` at INFO, or with no file to stderr at WARN (a tool's
    stdout is its answer; its stderr should hold only what went wrong)."""
    options = [f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"]
    if log_path is not None:
        return [*options, f"-Dkgroups.kafka.log={log_path}"]
    return [*options, "-Dkgroups.kafka.log.level=WARN"]


def run_kafka_tool(main_class: str, args: Sequence[str], *, log_path: Path | None = None,
                   input_text: str | None = None, timeout: float = 120.0,
                   jvm_options: Sequence[str] = ("-Xmx256m", *QUICK_JVM),
                   ) -> subprocess.CompletedProcess[str]:
    """Run a Kafka CLI tool to completion; its log4j2 output goes to `log_path` (default:
    its stderr). The caller checks `returncode`: tools exit non-zero on user errors too."""
    with _class_archive(main_class, jvm_options) as sharing:
        command = [java_command(), *jvm_options, *sharing, *_log_options(log_path),
                   "-cp", kafka_classpath(), main_class, *args]
        return subprocess.run(command, input=input_text, capture_output=True, text=True,
                              timeout=timeout, check=False)


# Class data sharing for the tools: the first run of a tool (per main class and JVM options)
# writes the classes it loaded into an archive at exit, later runs map that archive instead of
# loading and verifying the same few thousand classes from the jars again. That halves a tool's
# start (ConsumerGroupCommand --list 2.4 s -> 1.2 s with both cores busy), and the suite runs
# Kafka's tools hundreds of times. The archives live in this process's temporary directory
# (removed at exit), so none outlives the jars or the JDK it was made from. A JVM that cannot use
# an archive loads the classes from the jars as before; `-Xlog:cds*=off` keeps its warning
# out of the tool's stdout, which the tests compare.
_CDS_QUIET = "-Xlog:cds*=off"
_ARCHIVES_LOCK = threading.Lock()
_ARCHIVES_BEING_MADE: set[Path] = set()
_ARCHIVE_DIRECTORY: list[Path] = []


def _archive_path(main_class: str, jvm_options: Sequence[str]) -> Path:
    with _ARCHIVES_LOCK:
        if not _ARCHIVE_DIRECTORY:
            directory = Path(tempfile.mkdtemp(prefix="kgroups-class-archives-"))
            atexit.register(shutil.rmtree, directory, ignore_errors=True)
            _ARCHIVE_DIRECTORY.append(directory)
    key = hashlib.sha256("\0".join([main_class, *jvm_options]).encode()).hexdigest()[:16]
    return _ARCHIVE_DIRECTORY[0] / f"{key}.jsa"


def class_archive_options(main_class: str, jvm_options: Sequence[str]) -> list[str]:
    """The options that map `main_class`'s archive when an earlier `run_kafka_tool` made one
    (for a tool started with Popen), else none."""
    archive = _archive_path(main_class, jvm_options)
    return [_CDS_QUIET, f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []


@contextmanager
def _class_archive(main_class: str, jvm_options: Sequence[str]) -> Iterator[list[str]]:
    """Options mapping the tool's archive; if there is none yet, options making it (one run at
    a time makes it, written aside and renamed when the JVM is done, so no run maps a partial
    file); while another run is making it, none."""
    archive = _archive_path(main_class, jvm_options)
    with _ARCHIVES_LOCK:
        ready = archive.exists()
        make = not ready and archive not in _ARCHIVES_BEING_MADE
        if make:
            _ARCHIVES_BEING_MADE.add(archive)
    if not make:
        yield class_archive_options(main_class, jvm_options) if ready else []
        return
    partial = archive.with_name(f"{archive.stem}.partial.jsa")
    try:
        yield [_CDS_QUIET, f"-XX:ArchiveClassesAtExit={partial}"]
        if partial.exists():
            partial.replace(archive)
    finally:
        with _ARCHIVES_LOCK:
            _ARCHIVES_BEING_MADE.discard(archive)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
_COORDINATOR_NOT_READY = frozenset({14, 15, 16})
_PROBE_GROUP = "kafka-harness-probe"


def _coordinator_answers(host: str, port: int) -> bool:
    """Whether the probe group's coordinator (per FindCoordinator, asked at host:port) is
    known and answers DescribeGroups for the group itself."""
    with KafkaWireClient(host, port, client_id="kafka-harness", timeout=10) as client:
        (found,) = client.call(FindCoordinatorRequest(
            key_type=0, coordinator_keys=(_PROBE_GROUP,))).coordinators
    if int(found.error_code) != 0:
        return False
    with KafkaWireClient(found.host, int(found.port), client_id="kafka-harness",
                         timeout=10) as coordinator:
        described = coordinator.call(DescribeGroupsRequest(
            groups=(_PROBE_GROUP,), include_authorized_operations=False))
    return all(int(g.error_code) not in _COORDINATOR_NOT_READY for g in described.groups)


def wait_for_group_coordinator(host: str, port: int, process: subprocess.Popen[bytes],
                               timeout_s: float, log_tail: Callable[[], str]) -> None:
    """FindCoordinator until `__consumer_offsets` has a leader, then DescribeGroups at that
    coordinator until it answers for the group: until then group requests get
    COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR, which no
    test means to see. (ListGroups is no probe: before the coordinator has taken the
    partition on, it has nothing to list and answers without an error.)"""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Kafka exited with {process.returncode}; log:\n{log_tail()}")
        try:
            if _coordinator_answers(host, port):
                return
        except WireError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"Kafka did not become ready in {timeout_s}s; log:\n{log_tail()}")


@dataclass
class KafkaBroker:
    """One KRaft controller+broker JVM with its data under `workdir` (see the module doc)."""

    workdir: Path
    settings: Mapping[str, str] = field(default_factory=lambda: dict(KAFKA_TEST_SETTINGS))
    jvm_options: Sequence[str] = ("-Xmx512m", "-Xms512m", *QUICK_JVM)
    host: str = "127.0.0.1"
    port: int = 0
    controller_port: int = 0
    # More client listeners, each named after its security protocol (SSL, SASL_PLAINTEXT,
    # SASL_SSL); their settings (sasl.*, ssl.*, listener.name.*) go in `settings`.
    extra_listeners: Sequence[str] = ()
    listener_ports: dict[str, int] = field(default_factory=dict)
    start_seconds: float = 0.0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kafka.log"

    @property
    def properties_path(self) -> Path:
        return self.workdir / "server.properties"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _write_properties(self) -> None:
        extra = "".join(f",{name}://{self.host}:{self.listener_ports[name]}"
                        for name in self.extra_listeners)
        protocols = "".join(f",{name}:{name}" for name in self.extra_listeners)
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
                         f"CONTROLLER://{self.host}:{self.controller_port}{extra}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}{extra}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map":
                f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}",
            "controller.quorum.bootstrap.servers": f"{self.host}:{self.controller_port}",
            "log.dirs": str(self.data_dir),
            **_SINGLE_NODE,
            **self.settings,
        }
        self.properties_path.write_text(
            "".join(f"{key}={value}\n" for key, value in properties.items()))

    def _format_storage(self) -> None:
        """`kafka-storage.sh format --standalone`: this node is the whole controller quorum."""
        result = run_kafka_tool("kafka.tools.StorageTool", [
            "format", f"--cluster-id={_cluster_id()}", "--config", str(self.properties_path),
            "--standalone"], log_path=self.log_path)
        if result.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{result.stdout}{result.stderr}")

    def start(self) -> None:
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port, self.controller_port = _free_port(), _free_port()
            self.listener_ports = {name: _free_port() for name in self.extra_listeners}
        self._write_properties()
        if not (self.data_dir / "meta.properties").exists():
            self._format_storage()
        console = (self.workdir / "console.out").open("ab")
        self.process = subprocess.Popen(
            [java_command(), *self.jvm_options, *_log_options(self.log_path),
             "-cp", kafka_classpath(), "kafka.Kafka", str(self.properties_path)],
            stdout=console, stderr=subprocess.STDOUT)
        console.close()
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        self.start_seconds = time.monotonic() - began

    def _wait_ready(self) -> None:
        assert self.process is not None
        wait_for_group_coordinator(self.host, self.port, self.process, STARTUP_TIMEOUT_S,
                                   lambda: self.log_text()[-5000:])

    def stop(self) -> int:
        """SIGTERM: Kafka's controlled shutdown, which flushes and closes its logs cleanly."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def _cluster_id() -> str:
    """A fresh Kafka cluster id: 16 random bytes, URL-safe base64 without padding (it may
    start with '-', so it is passed as --cluster-id=ID, which argparse cannot take for an
    option)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def kgroups_overrides(settings: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(f"{key}={value}" for key, value in settings.items())


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kgroups_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("kgroups")
    server = ServerProcess(workdir / "data", workdir / "server.log",
                           kgroups_overrides(KAFKA_TEST_SETTINGS))
    server.start()
    yield server
    server.stop()
    server.close()


@pytest.fixture(params=[pytest.param("kafka", marks=pytest.mark.kafka), "kgroups"])
def any_broker(request: pytest.FixtureRequest) -> Any:
    """Either session broker; the test id says which (`[kafka]` / `[kgroups]`)."""
    return request.getfixturevalue(f"{request.param}_broker")

