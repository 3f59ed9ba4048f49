"""lag_seconds and rebalance_causes on a data dir a real broker wrote for real clients
(`kgroups.serve_in_background`, librdkafka consumers): the lag in seconds of a group behind
records produced with explicit timestamps, and the causes of the rebalances the test made -
a member joining, one leaving after its last commit, a static member that stopped
heartbeating."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tests.broker.group_interop_helpers import create_topic, stable_with, wait_until

import kgroups
from kgroups.pipeline.job import run_analysis

pytestmark = [pytest.mark.interop, pytest.mark.spark]

GROUP, TOPIC, CLOCK = "causes", "work", "clock"
SETTINGS = {"group.min.session.timeout.ms": "500"}
FIRST_TS = int(time.time() * 1000) - 3_600_000  # an hour ago, one record per second
COMMITTED = 4


class Member:
    """A consumer polled in its own thread (so it follows every rebalance) until closed; that
    thread also makes its commits (librdkafka serves a commit's result on the polled queue)."""

    def __init__(self, bootstrap: str, name: str, **settings: object) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": name,
            "enable.auto.commit": False, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 100, "partition.assignment.strategy": "range",
            **settings})
        self.consumer.subscribe([TOPIC])
        self._stop = threading.Event()
        self._commit = threading.Event()
        self._committed = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.05)
            if self._commit.is_set():
                self._commit.clear()
                owned = self.consumer.assignment()
                assert owned
                self.consumer.commit(
                    offsets=[TopicPartition(TOPIC, tp.partition, 1) for tp in owned],
                    asynchronous=False)
                self._committed.set()

    def commit_owned(self) -> None:
        """Commit offset 1 of every partition it owns: its last sign of life in the log."""
        self._commit.set()
        assert self._committed.wait(30), "commit not made in 30 s"

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()


def _settle(bootstrap: str, members: int) -> None:
    wait_until(stable_with(bootstrap, GROUP, members), f"{members} member(s) stable",
               pump=lambda: time.sleep(0.05))


def test_lag_seconds_and_rebalance_causes_of_a_served_log(spark, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kgroups.serve_in_background(SETTINGS, data_dir=data) as broker:
        create_topic(broker.bootstrap, TOPIC, 2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
        for n in range(10):
            producer.produce(CLOCK, b"tick", partition=0, timestamp=FIRST_TS + n * 1000)
        assert producer.flush(10) == 0
        # A group COMMITTED records into `clock`: its first unconsumed record is the 5th.
        standalone = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "behind"})
        standalone.commit(offsets=[TopicPartition(CLOCK, 0, COMMITTED)], asynchronous=False)
        standalone.close()
        committed_at = time.time() * 1000

        first = Member(broker.bootstrap, "first")
        _settle(broker.bootstrap, 1)
        leaving = Member(broker.bootstrap, "leaving")
        _settle(broker.bootstrap, 2)  # new_member_joined
        leaving.commit_owned()
        leaving.close()  # LeaveGroup right after its commit: member_left
        _settle(broker.bootstrap, 1)
        static = Member(broker.bootstrap, "static", **{"group.instance.id": "static-1",
                                                       "session.timeout.ms": 1000})
        _settle(broker.bootstrap, 2)  # new_member_joined
        static.commit_owned()
        static.close()  # a static member sends no LeaveGroup: session_timeout 1 s later
        _settle(broker.bootstrap, 1)
        first.close()
    stopped_at = time.time() * 1000

    out = tmp_path / "out"
    run_analysis(spark, [str(data)], str(out))

    [behind] = [r for r in pq.read_table(out / "lag").to_pylist() if r["group"] == "behind"]
    assert behind["lag"] == 10 - COMMITTED
    assert behind["lag_seconds_source"] == "record"
    first_unconsumed = FIRST_TS + COMMITTED * 1000
    assert (committed_at - first_unconsumed) / 1000 <= behind["lag_seconds"] \
        <= (stopped_at - first_unconsumed) / 1000

    causes = [(r["cause"], r["client_id"]) for r in pq.read_table(out / "rebalance_causes")
              .to_pylist() if r["group"] == GROUP and r["client_id"] != "first"]
    assert causes == [("new_member_joined", "leaving"), ("member_left", "leaving"),
                      ("new_member_joined", "static"), ("session_timeout", "static")]
