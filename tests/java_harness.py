"""The Java test peers built from tests/java by `make java-harness` (never committed):
Kafka's own assignors as an oracle, a classic-protocol Java KafkaConsumer that a test drives
line by line, and a Kafka Streams application. All run on Kafka's 4.3.1 jars, the version
kgroups is checked against.

- `run_kafka_assignors(scenarios)`: every scenario (the `kgroups assign` JSON shape plus a
  "strategy") through Kafka's RangeAssignor / RoundRobinAssignor / StickyAssignor /
  CooperativeStickyAssignor in one JVM; one answer per scenario, {"assignment": ...,
  "stable": bool} or {"error": ...} (see AssignorOracle.java for "stable").
- `JavaConsumer(settings, log_path)`: one Java consumer process; `subscribe`, `poll`, `commit`,
  `assignment`, `close`, and `kill()` (SIGKILL).
- `JavaShareConsumer(settings, log_path)`: one Java KafkaShareConsumer process (explicit
  acknowledgement); `subscribe`, `poll` (records with their delivery counts), `acknowledge`,
  `commit`, `close`, `kill()`.
- `JavaTransactionalProducer(settings, log_path)`: one Java transactional producer process;
  `init`, `begin`, `send`, `commit`, `abort`, `close`.
- `WordCountStreams(input_topic, output_topic, settings, log_path)`: Kafka Streams' word count
  (a groupBy through the repartition topic `<application.id>-words-repartition`, counts written
  to the output topic as String -> 8-byte big-endian Long) in its own JVM; `states` (every
  state it entered, in order), `errors` (stream threads that died), `tasks()` (the active and
  standby tasks it holds now), `close()`, `kill()`.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

JAVA_HARNESS_HOME = Path(os.environ.get(
    "JAVA_HARNESS_HOME", Path.home() / ".cache" / "kgroups" / "java-harness"))
ORACLE_TIMEOUT_S = 300
COMMAND_TIMEOUT_S = 60

# Kafka's class for each classic-protocol strategy name.
ASSIGNOR_CLASSES = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
    "sticky": "org.apache.kafka.clients.consumer.StickyAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}


def harness_command(main_class: str, *args: str, log_level: str = "warn") -> list[str]:
    jar = JAVA_HARNESS_HOME / "kgroups-java-harness.jar"
    if not jar.exists():
        pytest.fail(f"{jar} is missing: run `make java-harness` (make test does)")
    classpath = f"{jar}{os.pathsep}{JAVA_HARNESS_HOME / 'lib' / '*'}"
    return ["java", f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
            "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp", classpath, main_class, *args]


def run_kafka_assignors(scenarios: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One JVM for the whole batch (starting one costs more than a thousand assignments)."""
    command = harness_command("kgroups.harness.AssignorOracle", log_level="off")
    command.remove("-XX:TieredStopAtLevel=1")  # long run: let the JIT optimise fully
    lines = "".join(json.dumps(s) + "\n" for s in scenarios)
    done = subprocess.run(command, input=lines, capture_output=True, text=True, check=False,
                          timeout=ORACLE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(scenarios), done.stderr
    return answers


class _DriverProcess:
    """A harness main class in its own JVM, driven one stdin line per command, each answered
    by one JSON line; its log (slf4j at info) goes to `log_path`."""

    def __init__(self, main_class: str, settings: Mapping[str, object], log_path: Path) -> None:
        self.log_path = log_path
        args = [f"{key}={value}" for key, value in settings.items()]
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                harness_command(main_class, *args, log_level="info"),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            )

    def call(self, line: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise AssertionError(f"Java driver exited ({self.process.poll()}); log:\n"
                                 + self.log_path.read_text(errors="replace")[-4000:])
        return json.loads(answer)

    def close(self) -> None:
        """The driver's own close command, then the process ends."""
        if self.process.poll() is None:
            try:
                self.call("close")
            finally:
                self.process.wait(timeout=COMMAND_TIMEOUT_S)
        self._release()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=COMMAND_TIMEOUT_S)
        self._release()

    def _release(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()


class JavaConsumer:
    """A Java KafkaConsumer (group.protocol=classic) in its own JVM; `settings` are consumer
    properties. Its log (slf4j at info) goes to `log_path`."""

    def __init__(self, settings: Mapping[str, object], log_path: Path) -> None:
        self.driver = _DriverProcess("kgroups.harness.ConsumerDriver", settings, log_path)
        self.process = self.driver.process

    def subscribe(self, *topics: str) -> None:
        answer = self.driver.call("subscribe " + ",".join(topics))
        assert answer.get("ok"), answer

    def poll(self, timeout_ms: int = 100) -> dict[str, Any]:
        """{"records": [[topic, partition, offset, value]...], "events": [[kind, [[t, p]...]]...]},
        plus "error" if poll threw."""
        return self.driver.call(f"poll {timeout_ms}")

    def commit(self) -> dict[str, Any]:
        return self.driver.call("commit")

    def assignment(self) -> dict[str, Any]:
        return self.driver.call("assignment")

    def close(self) -> None:
        """Graceful close (a dynamic member leaves the group; a static one does not)."""
        self.driver.close()

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit; the coordinator must expire the session."""
        self.driver.kill()


class JavaShareConsumer:
    """A Java KafkaShareConsumer (tests/java ShareConsumerDriver) in its own JVM, in explicit
    acknowledgement mode: the test acknowledges each record of a poll itself before the next
    poll. `settings` are consumer properties (bootstrap.servers, group.id, ...)."""

    def __init__(self, settings: Mapping[str, object], log_path: Path) -> None:
        self.driver = _DriverProcess("kgroups.harness.ShareConsumerDriver", settings, log_path)

    def subscribe(self, *topics: str) -> None:
        answer = self.driver.call("subscribe " + ",".join(topics))
        assert answer.get("ok"), answer

    def poll(self, timeout_ms: int = 100) -> dict[str, Any]:
        """{"records": [[topic, partition, offset, value, delivery_count]...], "acknowledged":
        [[topic, partition, [offset...], error or None]...]} (what the consumer's
        acknowledgement callback saw since the last poll), plus "error" if poll threw."""
        return self.driver.call(f"poll {timeout_ms}")

    def acknowledge(self, acknowledgements: Sequence[tuple[str, int, int, str]]) -> dict[str, Any]:
        """(topic, partition, offset, ACCEPT|RELEASE|REJECT|RENEW) for records of the last
        poll; sent with the next commit or poll."""
        return self.driver.call("acknowledge " + json.dumps([list(a) for a in acknowledgements]))

    def commit(self) -> dict[str, Any]:
        """commitSync: {"results": [[topic, partition, error or None]...]}."""
        return self.driver.call("commit")

    def close(self) -> None:
        """Graceful close: pending acknowledgements sent, then the member leaves its group."""
        self.driver.close()

    def kill(self) -> None:
        """SIGKILL: its acquired records stay locked until their acquisition locks expire."""
        self.driver.kill()


class JavaTransactionalProducer:
    """A Java transactional KafkaProducer in its own JVM (TransactionalProducerDriver.java);
    `settings` are producer properties, transactional.id among them. Each method answers the
    driver's JSON: {"ok": true} / {"offset": n}, or {"error": "Class: message"}."""

    def __init__(self, settings: Mapping[str, object], log_path: Path) -> None:
        self.driver = _DriverProcess("kgroups.harness.TransactionalProducerDriver", settings,
                                     log_path)

    def init(self) -> dict[str, Any]:
        return self.driver.call("init")

    def begin(self) -> dict[str, Any]:
        return self.driver.call("begin")

    def send(self, topic: str, partition: int, value: str) -> dict[str, Any]:
        return self.driver.call(f"send {topic} {partition} {value}")

    def commit(self) -> dict[str, Any]:
        return self.driver.call("commit")

    def abort(self) -> dict[str, Any]:
        return self.driver.call("abort")

    def close(self) -> None:
        self.driver.close()


class WordCountStreams:
    """Kafka Streams (tests/java WordCountStreams) in its own JVM; `settings` are Streams
    properties (bootstrap.servers, application.id, state.dir, ...). Its log (slf4j at info) goes
    to `log_path`; what it says on stdout (state changes, dead stream threads) is collected by a
    thread, so a test reads `states` and `errors` while Streams runs."""

    def __init__(self, input_topic: str, output_topic: str, settings: Mapping[str, object],
                 log_path: Path) -> None:
        self.log_path = log_path
        self.states: list[str] = []
        self.errors: list[str] = []
        self._tasks: queue.Queue[str] = queue.Queue()
        args = [input_topic, output_topic, *(f"{key}={value}" for key, value in settings.items())]
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                harness_command("kgroups.harness.WordCountStreams", *args, log_level="info"),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "tasks":
                self._tasks.put(rest)
            else:
                (self.states if kind == "state" else self.errors).append(rest)

    def tasks(self) -> tuple[frozenset[str], frozenset[str]]:
        """(active, standby): the ids ("0_1": subtopology 0, partition 1) of the tasks this
        instance's stream threads hold now, as Streams itself reports them."""
        assert self.process.stdin is not None
        self.assert_running()
        self.process.stdin.write("tasks\n")
        self.process.stdin.flush()
        active, standby = self._tasks.get(timeout=COMMAND_TIMEOUT_S).split(" ")

        def ids(text: str) -> frozenset[str]:
            return frozenset() if text == "-" else frozenset(text.split(","))

        return ids(active), ids(standby)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def assert_running(self) -> None:
        """Fails at once, with the log's end, if the JVM has exited (e.g. a harness jar built
        before WordCountStreams existed: `make java-harness` rebuilds it)."""
        if self.process.poll() is not None:
            raise AssertionError(f"Kafka Streams exited ({self.process.returncode}); log:\n"
                                 + self.log_text()[-4000:])

    def kill(self) -> None:
        """SIGKILL mid-flight: no commit, no close, its open transaction left to time out."""
        self.process.kill()
        self.process.wait(timeout=COMMAND_TIMEOUT_S)
        self._reader.join(timeout=COMMAND_TIMEOUT_S)

    def close(self) -> int:
        """Streams' own close (commits, leaves the group), then the JVM's exit code."""
        assert self.process.stdin is not None
        if self.process.poll() is None:
            try:
                self.process.stdin.write("close\n")
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        try:
            code = self.process.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout=COMMAND_TIMEOUT_S)
        self._reader.join(timeout=COMMAND_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code
