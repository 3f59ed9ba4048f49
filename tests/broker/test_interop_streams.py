"""Kafka Streams 4.3.1 as a user runs it, against `kgroups serve` and against Kafka 4.3.1.

A word count whose groupBy goes through a repartition topic: Streams creates its internal
topics, joins its group (classic protocol, Streams' own assignor), counts exactly, and, after each
commit, trims the repartition topic it has consumed with DeleteRecords. Before kgroups served
DeleteRecords the counts came out right but the repartition topic's log start never moved: it
grew forever (issue 29 item 10). A second instance shares the tasks, and the one left takes
them all over, restoring their counts from the compacted changelog. Under exactly_once_v2
(issue 25) two instances count exactly although one is SIGKILLed mid-transaction. The same
application with `group.protocol=streams` (KIP-1071 streams groups, the broker assigning the
tasks) is tests/broker/test_interop_streams_groups.py. The Streams application is tests/java
WordCountStreams."""

from __future__ import annotations

import collections
import itertools
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from group_interop_helpers import create_topic, produce, wait_until
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from streams_interop_helpers import (
    EOS_TIMEOUT_S,
    PARTITIONS,
    TIMEOUT_S,
    Instances,
    OutputReader,
    topic_settings,
    word_count,
    word_lines,
)

from java_harness import WordCountStreams
from kgroups.tools.wire_client import KafkaWireClient

pytestmark = pytest.mark.interop


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

    feed(word_lines(0, 200))
    streams = word_count(bootstrap, app_id, source, sink, tmp_path)
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
            feed(word_lines(next(more), 1))
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
        partitions, settings = topic_settings(bootstrap, repartition)
        assert (partitions, settings["retention.ms"], settings["cleanup.policy"]) == (
            PARTITIONS, "-1", "delete")
        partitions, settings = topic_settings(bootstrap, f"{app_id}-counts-changelog")
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
    first = word_count(bootstrap, app_id, source, sink, tmp_path, "first", **quick)
    second: WordCountStreams | None = None
    group.running.append(first)
    try:
        group.feed(100)
        wait_until(group.exact, "the counts of one instance", pump=group.read,
                   timeout_s=TIMEOUT_S)
        second = word_count(bootstrap, app_id, source, sink, tmp_path, "second", **quick)
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
    victim = word_count(bootstrap, app_id, source, sink, tmp_path, "victim", **settings)
    survivor = word_count(bootstrap, app_id, source, sink, tmp_path, "survivor", **settings)
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
