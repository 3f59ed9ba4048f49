"""Kafka Streams 4.3.1 as a user runs it, against `kgroups serve` and against Kafka 4.3.1.

A word count whose groupBy goes through a repartition topic: Streams creates its internal
topics, joins its group (classic protocol, Streams' own assignor), counts exactly, and, after each
commit, trims the repartition topic it has consumed with DeleteRecords. Before kgroups served
DeleteRecords the counts came out right but the repartition topic's log start never moved: it
grew forever (issue 29 item 10). A second instance shares the tasks, and the one left takes
them all over, restoring their counts from the compacted changelog. Under exactly_once_v2
(issue 25) two instances count exactly although one is SIGKILLed mid-transaction. Streams
groups (`group.protocol=streams`, KIP-1071), which Kafka 4.3.1 serves, are not served by
kgroups: such an application stops at once with Kafka's client error rather than hanging. The
Streams application is tests/java WordCountStreams."""

from __future__ import annotations

import collections
import itertools
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from group_interop_helpers import create_topic, describe, produce, wait_until
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from java_harness import WordCountStreams
from kgroups.tools.admin import GroupNotFoundError
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.interop

PARTITIONS = 2
WORDS = ("apple", "banana", "cherry", "date", "elder", "fig", "grape")
TIMEOUT_S = 40.0
# Under exactly_once_v2 a takeover also waits for the dead instance's transaction to time out
# and be aborted (the coordinators look every 10 s).
EOS_TIMEOUT_S = 60.0


def _lines(start: int, count: int) -> list[str]:
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


def _word_count(bootstrap: str, app_id: str, source: str, sink: str, tmp_path: Path,
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


def _topic_settings(bootstrap: str, topic: str) -> tuple[int, dict[str, str]]:
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
        lines = [line for _ in range(count) for line in _lines(next(self._more), 1)]
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


@pytest.mark.slow
def test_streams_counts_exactly_and_trims_its_repartition_topic(
    any_broker: Any, tmp_path: Path
) -> None:
    bootstrap = any_broker.bootstrap
    run = uuid.uuid4().hex[:8]
    app_id, source, sink = f"wordcount-{run}", f"lines-{run}", f"counts-{run}"
    repartition = f"{app_id}-words-repartition"
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 1)
    expected: collections.Counter[str] = collections.Counter()

    def feed(lines: list[str]) -> None:
        produce(bootstrap, source, [line.encode() for line in lines], PARTITIONS)
        expected.update(word for line in lines for word in line.split())

    feed(_lines(0, 200))
    streams = _word_count(bootstrap, app_id, source, sink, tmp_path)
    reader = OutputReader(bootstrap, sink)

    def read() -> None:
        streams.assert_running()
        reader.pump()

    try:
        wait_until(lambda: reader.counts == dict(expected), "the first counts",
                   pump=read, timeout_s=TIMEOUT_S)
        # Streams trims after a commit; keep it busy (a line at a time) until every
        # repartition partition it consumed has a log start past 0.
        more = itertools.count(200)

        def trimmed() -> bool:
            return all(reader.watermarks(repartition, p)[0] > 0 for p in range(PARTITIONS))

        def keep_feeding() -> None:
            feed(_lines(next(more), 1))
            read()
            time.sleep(0.2)

        wait_until(trimmed, f"a log start past 0 in every partition of {repartition}",
                   pump=keep_feeding, timeout_s=TIMEOUT_S)
        wait_until(lambda: reader.counts == dict(expected), "the counts of every line",
                   pump=read, timeout_s=TIMEOUT_S)
        starts_and_ends = [reader.watermarks(repartition, p) for p in range(PARTITIONS)]
        assert all(0 < start <= end for start, end in starts_and_ends), starts_and_ends
        # The internal topics as Streams asked for them: the repartition topic keeps records
        # until Streams deletes them, the store's changelog is compacted.
        partitions, settings = _topic_settings(bootstrap, repartition)
        assert (partitions, settings["retention.ms"], settings["cleanup.policy"]) == (
            PARTITIONS, "-1", "delete")
        partitions, settings = _topic_settings(bootstrap, f"{app_id}-counts-changelog")
        assert (partitions, settings["cleanup.policy"]) == (PARTITIONS, "compact")
        assert streams.errors == []
        # Joining takes one rebalance, or two when the repartition topic Streams creates
        # shows up in its metadata after the first (on Kafka as well); then RUNNING for good.
        assert streams.states[-1] == "RUNNING", streams.states
        assert streams.states.count("REBALANCING") <= 2, streams.states
    finally:
        reader.close()
        code = streams.close()
    assert code == 0, streams.log_text()[-4000:]
    assert streams.states[-2:] == ["PENDING_SHUTDOWN", "NOT_RUNNING"], streams.states
    assert " ERROR " not in streams.log_text(), streams.log_text()[-4000:]


@pytest.mark.slow
def test_the_streams_group_protocol_runs_on_kafka_and_stops_at_once_on_kgroups(
    any_broker: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    bootstrap = any_broker.bootstrap
    run = uuid.uuid4().hex[:8]
    app_id, source, sink = f"wordcount-kip1071-{run}", f"lines-{run}", f"counts-{run}"
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 1)
    lines = _lines(0, 50)
    produce(bootstrap, source, [line.encode() for line in lines], PARTITIONS)
    expected = collections.Counter(word for line in lines for word in line.split())
    streams = _word_count(bootstrap, app_id, source, sink, tmp_path,
                          **{"group.protocol": "streams"})
    reader = OutputReader(bootstrap, sink)
    try:
        if request.node.callspec.params["any_broker"] == "kafka":
            def read() -> None:
                streams.assert_running()
                reader.pump()

            wait_until(lambda: reader.counts == dict(expected), "the counts", pump=read,
                       timeout_s=TIMEOUT_S)
            assert streams.errors == []
            assert streams.states[-1] == "RUNNING", streams.states
        else:
            # kgroups advertises no StreamsGroupHeartbeat, so the client refuses at once.
            wait_until(lambda: streams.states[-1:] == ["ERROR"], "Streams in ERROR",
                       pump=lambda: time.sleep(0.1), timeout_s=TIMEOUT_S)
            assert streams.errors == [
                "StreamsException: org.apache.kafka.common.errors.UnsupportedVersionException: "
                "The cluster does not support the STREAMS group protocol or does not support the "
                "versions of the STREAMS group protocol used by this client (used versions: 0 to "
                "0)."], streams.errors
            assert reader.counts == {}
    finally:
        reader.close()
        streams.close()


@pytest.mark.slow
def test_a_second_instance_shares_the_tasks_and_takes_them_all_over_with_their_state(
    any_broker: Any, tmp_path: Path
) -> None:
    """Scaling out and back in (classic protocol, Streams' own assignor): the tasks split over
    two instances, then the one left restores the leaving one's counts from the compacted
    changelog. Exact counts throughout show nothing was lost or counted twice."""
    bootstrap = any_broker.bootstrap
    run = uuid.uuid4().hex[:8]
    app_id, source, sink = f"wordcount-scale-{run}", f"lines-{run}", f"counts-{run}"
    group = Instances(bootstrap, app_id, source, sink)
    # Streams' classic members send no LeaveGroup on close: the one left waits out the session.
    quick = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300}
    first = _word_count(bootstrap, app_id, source, sink, tmp_path, "first", **quick)
    second: WordCountStreams | None = None
    group.running.append(first)
    try:
        group.feed(100)
        wait_until(group.exact, "the counts of one instance", pump=group.read,
                   timeout_s=TIMEOUT_S)
        second = _word_count(bootstrap, app_id, source, sink, tmp_path, "second", **quick)
        group.running.append(second)
        # Two source and two repartition partitions, two each.
        wait_until(lambda: group.owned() == [2, 2], "the tasks split over two instances",
                   pump=group.busy, timeout_s=TIMEOUT_S)
        wait_until(group.exact, "the counts of two instances", pump=group.read,
                   timeout_s=TIMEOUT_S)
        assert first.close() == 0
        group.running.remove(first)
        wait_until(lambda: group.owned() == [2 * PARTITIONS],
                   "one instance owning every partition", pump=group.busy, timeout_s=TIMEOUT_S)
        group.feed(20)
        wait_until(group.exact, "the counts after the takeover", pump=group.read,
                   timeout_s=TIMEOUT_S)
        assert first.errors == second.errors == []
        assert second.states[-1] == "RUNNING", second.states
    finally:
        group.reader.close()
        for streams in (first, second):
            if streams is not None:
                streams.close()
    for streams in (first, second):
        assert streams is not None and " ERROR " not in streams.log_text(), streams.log_path


@pytest.mark.slow
def test_exactly_once_v2_counts_exactly_when_an_instance_is_killed_mid_transaction(
    any_broker: Any, tmp_path: Path
) -> None:
    """Issue 25: two instances under `exactly_once_v2` (one transactional producer per stream
    thread, offsets committed in its transactions with the group's metadata), one SIGKILLed
    after it has committed while lines keep arriving. The survivor takes its tasks over once
    the session expires, restoring committed state only; the dead one's open transaction is
    aborted when it times out. With no record cache every increment is written, so a
    read_committed reader must see each word counted 1, 2, ..., n: a repeat would be a
    duplicate increment (an aborted or twice-processed record made visible), a gap a lost one,
    and the last value the true count."""
    bootstrap = any_broker.bootstrap
    run = uuid.uuid4().hex[:8]
    app_id, source, sink = f"wordcount-eos-{run}", f"lines-{run}", f"counts-{run}"
    group = Instances(bootstrap, app_id, source, sink)
    settings = {"processing.guarantee": "exactly_once_v2", "statestore.cache.max.bytes": 0,
                "session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
                # The dead instance's open transaction blocks the last stable offset of its
                # partitions until the coordinator aborts it: keep that wait short.
                "producer.transaction.timeout.ms": 3000}
    victim = _word_count(bootstrap, app_id, source, sink, tmp_path, "victim", **settings)
    survivor = _word_count(bootstrap, app_id, source, sink, tmp_path, "survivor", **settings)
    group.running += [victim, survivor]
    try:
        group.feed(40)
        wait_until(lambda: group.owned() == [2, 2], "the tasks split over two instances",
                   pump=group.busy, timeout_s=EOS_TIMEOUT_S)
        # Every record goes through both subtopologies and each instance holds tasks of the
        # group: exact counts now mean the victim has committed transactions.
        wait_until(group.exact, "the counts of two instances", pump=group.read,
                   timeout_s=EOS_TIMEOUT_S)
        group.feed(30)  # in flight when the victim dies
        group.read()
        victim.kill()
        group.running.remove(victim)
        wait_until(lambda: group.owned() == [2 * PARTITIONS],
                   "the survivor owning every partition", pump=group.busy,
                   timeout_s=EOS_TIMEOUT_S)
        group.feed(20)
        wait_until(group.exact, "the counts after the takeover", pump=group.read,
                   timeout_s=EOS_TIMEOUT_S)
        wrong = {word: counts for word, counts in group.reader.history.items()
                 if counts != list(range(1, group.expected[word] + 1))}
        assert wrong == {}, wrong
        assert survivor.errors == []
        assert survivor.states[-1] == "RUNNING", survivor.states
    finally:
        group.reader.close()
        for streams in (victim, survivor):
            streams.close()
    assert " ERROR " not in survivor.log_text(), survivor.log_text()[-4000:]


def test_transaction_version_2_is_finalized_by_kafka_and_not_by_kgroups(
    any_broker: Any, request: pytest.FixtureRequest
) -> None:
    """Which exactly-once flow the test above drives: a Kafka 4 producer uses transaction
    version 2 (no AddPartitionsToTxn or AddOffsetsToTxn: the broker adds the partitions it
    writes, EndTxn v5 bumps the epoch) only when ApiVersions finalizes `transaction.version` 2.
    Kafka 4.3.1 does; kgroups finalizes nothing until its Produce and TxnOffsetCommit add
    partitions implicitly (with the feature advertised, Streams' commits fail with
    INVALID_TXN_STATE), so the same application uses explicit adds there (docs/transactions.md)."""
    host, port = any_broker.bootstrap.rsplit(":", 1)
    with KafkaWireClient(host, int(port), client_id="features", timeout=15) as client:
        response = client.call(ApiVersionsRequest(client_software_name="t",
                                                   client_software_version="1"))
    finalized = {str(f.name): (int(f.min_version_level), int(f.max_version_level))
                 for f in response.finalized_features}
    on_kafka = request.node.callspec.params["any_broker"] == "kafka"
    assert finalized.get("transaction.version") == ((2, 2) if on_kafka else None), finalized
