"""Running one of Kafka's command-line tools against both session brokers and comparing what it
printed, after normalising what legitimately differs (addresses, node ids, member ids, column
padding). Tools run side by side in two threads: each is a JVM start of a second or two."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kafka_harness import (
    LOG4J2_CONFIG,
    class_archive_options,
    java_command,
    kafka_classpath,
    run_kafka_tool,
)

GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"

# A tool is a short-lived client: C1 compilation and the serial collector halve its start time.
TOOL_JVM = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

# Settings Kafka reports on every topic that kgroups has no counterpart for: the harness's
# single-node flush setting, KRaft's cluster-wide min.insync.replicas, and Kafka's
# compression.type=producer on __consumer_offsets (kgroups stores batches as produced too).
KAFKA_ONLY_CONFIGS = ("flush.messages", "min.insync.replicas", "compression.type")

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NODE_ID = re.compile(r"\((\d+)\)")
_REPLICA_FIELDS = re.compile(r"\b(Leader|Replicas|Isr): \d+")
_TOPIC_ID = re.compile(r"\bTopicId: \S+")


@dataclass(frozen=True)
class Side:
    """One broker with the names a test uses on it (the same names on both brokers)."""

    name: str
    broker: Any

    @property
    def bootstrap(self) -> str:
        return str(self.broker.bootstrap)


def run_tool(side: Side, main_class: str, args: Sequence[str], *,
             input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_kafka_tool(main_class, ["--bootstrap-server", side.bootstrap, *args],
                          input_text=input_text, jvm_options=TOOL_JVM)


def on_both(sides: Sequence[Side], main_class: str, args: Sequence[str] | Callable[[Side], Any],
            *, input_text: str | None = None) -> dict[str, subprocess.CompletedProcess[str]]:
    """The same tool run against every side at once; `args` may depend on the side."""
    def one(side: Side) -> subprocess.CompletedProcess[str]:
        chosen = args(side) if callable(args) else args
        return run_tool(side, main_class, chosen, input_text=input_text)

    with ThreadPoolExecutor(len(sides)) as pool:
        return dict(zip([s.name for s in sides], pool.map(one, sides), strict=True))


def normalise(text: str, side: Side) -> list[list[str]]:
    """Lines as token lists (column padding follows the widest value, which differs with the
    address), with the broker's address, node ids, topic ids, generated member ids and the
    settings only
    Kafka has replaced or dropped."""
    text = text.replace(side.bootstrap, "BROKER")
    text = _NODE_ID.sub("(ID)", text)
    text = _REPLICA_FIELDS.sub(lambda m: f"{m.group(1)}: ID", text)
    text = _UUID.sub("UUID", text)
    text = _TOPIC_ID.sub("TopicId: ID", text)
    lines = []
    for line in text.splitlines():
        tokens = line.split()
        if "Configs:" in tokens[:-1]:
            at = tokens.index("Configs:") + 1
            kept = [entry for entry in tokens[at].split(",")
                    if entry.split("=", 1)[0] not in KAFKA_ONLY_CONFIGS]
            tokens[at : at + 1] = [",".join(kept)] if kept else []
        if tokens:
            lines.append(tokens)
    return lines


def stdout_of(results: dict[str, subprocess.CompletedProcess[str]],
              sides: Sequence[Side]) -> dict[str, list[list[str]]]:
    """Each side's normalised stdout, after checking both exited the same way."""
    codes = {name: result.returncode for name, result in results.items()}
    assert len(set(codes.values())) == 1, (codes, {n: r.stderr[-3000:] for n, r in
                                                   results.items()})
    return {side.name: normalise(results[side.name].stdout, side) for side in sides}


def assert_same_output(results: dict[str, subprocess.CompletedProcess[str]],
                       sides: Sequence[Side]) -> list[list[str]]:
    """Kafka's and kgroups' normalised stdout are equal; returns Kafka's."""
    outputs = stdout_of(results, sides)
    assert outputs["kgroups"] == outputs["kafka"], (
        "\n--- kafka\n" + results["kafka"].stdout + "\n--- kgroups\n" + results["kgroups"].stdout
        + "\n--- kgroups stderr\n" + results["kgroups"].stderr[-3000:])
    return outputs["kafka"]


def start_console_consumer(side: Side, topic: str, group: str,
                           extra: Sequence[str] = ()) -> subprocess.Popen[str]:
    """A console consumer that stays in its group until terminated (SIGTERM closes it, which
    leaves the group): for describing a group with a live member."""
    command = [java_command(), *TOOL_JVM, *class_archive_options(CONSOLE_CONSUMER, TOOL_JVM),
               f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
               "-Dkgroups.kafka.log.level=WARN", "-cp", kafka_classpath(), CONSOLE_CONSUMER,
               "--bootstrap-server", side.bootstrap, "--topic", topic, "--group", group,
               *extra]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
