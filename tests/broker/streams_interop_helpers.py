"""The Kafka Streams word count of the Streams interop tests (tests/java WordCountStreams),
shared by the classic-protocol tests (test_interop_streams) and the streams-group ones
(test_interop_streams_groups): lines fed a few at a time, a read_committed reader of the counts,
and the instances of one application sharing its group."""

from __future__ import annotations

import collections
import itertools
import struct
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from group_interop_helpers import create_topic, describe, produce

from java_harness import WordCountStreams
from kgroups.tools.admin import GroupNotFoundError

PARTITIONS = 2
WORDS = ("apple", "banana", "cherry", "date", "elder", "fig", "grape")
TIMEOUT_S = 40.0
# Under exactly_once_v2 a takeover also waits for the dead instance's transaction to time out
# and be aborted (the coordinators look every 10 s).
EOS_TIMEOUT_S = 60.0


def word_lines(start: int, count: int) -> list[str]:
    """Lines of three words each, cycling through WORDS at different strides."""
    return [" ".join(WORDS[(n * stride) % len(WORDS)] for stride in (1, 2, 3))
            for n in range(start, start + count)]


class OutputReader:
    """Reads the output topic from the beginning, committed records only (read_committed): the
    latest count each word was given, and every count it was given, in log order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.counts: dict[str, int] = {}
        self.history: collections.defaultdict[str, list[int]] = collections.defaultdict(list)
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
                                   "enable.auto.commit": False,
                                   "isolation.level": "read_committed"})
        self._consumer.assign([TopicPartition(topic, 0, 0)])

    def pump(self) -> None:
        for message in self._consumer.consume(500, timeout=0.2):
            assert message.error() is None, message.error()
            (count,) = struct.unpack(">q", message.value())
            word = message.key().decode()
            self.counts[word] = count
            self.history[word].append(count)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start, end): ListOffsets earliest and latest."""
        low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                         timeout=10)
        return int(low), int(high)

    def close(self) -> None:
        self._consumer.close()


def word_count(bootstrap: str, app_id: str, source: str, sink: str, tmp_path: Path,
                name: str = "streams", **settings: object) -> WordCountStreams:
    """The word count with quick commits (100 ms) and a repartition purge after each one; `name`
    tells instances apart (each its own state directory and log)."""
    return WordCountStreams(source, sink, {
        "bootstrap.servers": bootstrap,
        "application.id": app_id,
        "state.dir": tmp_path / f"{name}-state",
        "processing.guarantee": "at_least_once",
        "num.stream.threads": 1,
        "commit.interval.ms": 100,
        "repartition.purge.interval.ms": 100,
        "consumer.auto.offset.reset": "earliest",
        **settings,
    }, tmp_path / f"{name}.log")


def topic_settings(bootstrap: str, topic: str) -> tuple[int, dict[str, str]]:
    """(partitions, settings) as an admin client describes the topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    return partitions, {name: entry.value for name, entry in entries.items()}


class Instances:
    """Instances of one word count sharing its group, fed a line at a time: `expected` is the
    true count of every word fed; `running` the instances `read` checks are still alive."""

    def __init__(self, bootstrap: str, app_id: str, source: str, sink: str) -> None:
        self.bootstrap, self.app_id, self.source = bootstrap, app_id, source
        create_topic(bootstrap, source, PARTITIONS)
        create_topic(bootstrap, sink, 1)
        self.expected: collections.Counter[str] = collections.Counter()
        self.running: list[WordCountStreams] = []
        self.reader = OutputReader(bootstrap, sink)
        self._more = itertools.count()

    def feed(self, count: int) -> None:
        lines = [line for _ in range(count) for line in word_lines(next(self._more), 1)]
        produce(self.bootstrap, self.source, [line.encode() for line in lines], PARTITIONS)
        self.expected.update(word for line in lines for word in line.split())

    def read(self) -> None:
        for streams in self.running:
            streams.assert_running()
        self.reader.pump()

    def busy(self) -> None:
        self.feed(1)
        self.read()
        time.sleep(0.2)

    def exact(self) -> bool:
        return self.reader.counts == dict(self.expected)

    def owned(self) -> list[int]:
        """How many partitions each member of the group owns, as the coordinator says."""
        try:
            members = describe(self.bootstrap, self.app_id).members
        except GroupNotFoundError:  # before the first JoinGroup
            return []
        return sorted(len(m.partitions) for m in members)
