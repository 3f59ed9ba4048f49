"""The simulator's predictions checked against real runs: six librdkafka consumers
(confluent-kafka, one process each) on a real `kgroups serve`, and once on Kafka 4.3.1, go
through a rolling restart (each member closed cleanly and started again 1 s later, one after
the other) and a crash (one member's process killed with SIGKILL: no callback, no commit, no
LeaveGroup, its heartbeats just stop), under eager (range), cooperative (cooperative-sticky),
static (cooperative-sticky with group.instance.id) and the consumer protocol. The simulator is
then run with `client: librdkafka` and the same settings on the schedule the real run went
through (each member joining when its process subscribed, each close, kill and restart when it
happened), and must predict the real rebalances and partitions moved exactly, and the real
unowned partition-seconds within 25%.

What the real run measured comes from the members' own callbacks (assign, revoke, lost, and
the kill), replayed into the simulator's `OwnershipLedger`, so both sides count with the same
definitions; the real rebalances come from the group's records in `__consumer_offsets`.

What cannot agree to the millisecond, and what the test does about it. A member hears of a
rebalance at its next heartbeat, so a change that lands just before a beat in one world and
just after it in the other costs a whole heartbeat interval more there. librdkafka sends a
classic heartbeat at the first wake-up of its main thread after the interval and counts the
next interval from there, so its beats drift later by a few milliseconds each (about 1% here,
more on a busy machine). So every change is made half an interval away from the members' beats
(`RealGroup.at_mid_beat`: the beats show, a member revokes when it hears), and the simulator is
given the heartbeat period the real members kept (`RealGroup.heartbeat_period`, e.g. 1,009 ms
for 1,000 configured). The session timeout (6.5 s) is not a whole number of intervals, so a
killed member's session runs out half an interval from the others' beats too. What is left
(JoinGroup and callback latencies, the members' 20 ms poll loop) stayed within 18% of the
unowned partition-seconds in the runs on a loaded two-core machine; 25% is the issue's bound.

What the simulator cannot know: when a member's main thread is starved of the CPU for a moment,
its beat goes out late and every later interval counts from there, so that member stays out of
step with the others for the rest of the run (under eager, everybody then waits for it at every
rebalance), while the simulated members stay in step. With the machine's load average at 15 on
two cores, two eager rolling restarts of nine measured 11.2 and 20.5 unowned partition-seconds
against 6.5 and 8.2 predicted, the second with members 383 ms out of step. Such a run did not
go through the schedule the simulator was given, so it is made again (`run_in_step`, up to
three runs) when the real classic members heard of one rebalance more than 150 ms apart
(consumer-protocol members hear at their own heartbeats, never in step); the test is
`alone` (make test runs it after the parallel part, with the machine to itself) to make that
rare, and its failure message says how far out of step the real members were.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.servers import ServerProcess
from tests.kafka_harness import KAFKA_TEST_SETTINGS, KafkaBroker
from tests.simulate.reality import RealGroup, measured, prediction, rebalances_in_log

from kgroups.member import ClientFlavour, Protocol
from kgroups.simulate import Variant

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.alone]

MEMBERS = tuple(f"m{i}" for i in range(6))
PARTITIONS = 12
SESSION_MS = 6_500
HEARTBEAT_MS = 1_000
DOWN_S = 1.0
QUIET_S = 1.0
# The broker settings both sides run with: no initial rebalance delay, the consumer
# protocol's session and heartbeat interval as short as the classic members'.
BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "group.min.session.timeout.ms": "500",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": str(SESSION_MS),
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS),
}
CLASSIC = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS}
# Members that heard of one rebalance this far apart were out of step (module doc): the run
# is made again, up to ATTEMPTS times. In step, they hear within a few tens of milliseconds.
OUT_OF_STEP_MS = 150
ATTEMPTS = 3


@dataclass(frozen=True)
class Setup:
    variant: Variant
    client_config: dict[str, Any]
    static: bool = False


_SIMULATED = Variant("", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                     initial_rebalance_delay_ms=0, client=ClientFlavour.LIBRDKAFKA)
SETUPS = {
    "eager": Setup(replace(_SIMULATED, name="eager", assignor="range"),
                   {**CLASSIC, "partition.assignment.strategy": "range"}),
    "cooperative": Setup(
        replace(_SIMULATED, name="cooperative", protocol=Protocol.COOPERATIVE,
                assignor="cooperative-sticky"),
        {**CLASSIC, "partition.assignment.strategy": "cooperative-sticky"}),
    "static": Setup(
        replace(_SIMULATED, name="static", protocol=Protocol.COOPERATIVE,
                assignor="cooperative-sticky", static=True),
        {**CLASSIC, "partition.assignment.strategy": "cooperative-sticky"}, static=True),
    "consumer": Setup(
        replace(_SIMULATED, name="consumer", protocol=Protocol.CONSUMER, assignor="uniform"),
        {"group.protocol": "consumer", "group.remote.assignor": "uniform"}),
}


@pytest.fixture(scope="module")
def kgroups_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("reality")
    server = ServerProcess(workdir / "data", workdir / "server.log",
                           tuple(f"{k}={v}" for k, v in BROKER_SETTINGS.items()))
    server.start()
    yield server.bootstrap
    server.close()


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)


@dataclass(frozen=True)
class Comparison:
    real_rebalances: int
    real_moved: int
    real_revoked: int
    real_unowned_s: float
    predicted_rebalances: int
    predicted_moved: int
    predicted_revoked: int
    predicted_unowned_s: float
    heartbeat_period_ms: int  # what the real members kept, given to the simulator
    out_of_step_ms: int  # the widest spread of the real members' beats at one moment

    def __str__(self) -> str:
        return (f"rebalances {self.real_rebalances}/{self.predicted_rebalances}, "
                f"moved {self.real_moved}/{self.predicted_moved}, "
                f"revoked {self.real_revoked}/{self.predicted_revoked}, "
                f"unowned p·s {self.real_unowned_s:.1f}/{self.predicted_unowned_s:.1f} "
                f"(real/predicted; heartbeats every {self.heartbeat_period_ms} ms, "
                f"out of step by up to {self.out_of_step_ms} ms)")


def run_and_predict(bootstrap: str, setup: Setup, scenario: str) -> Comparison:
    name = f"reality-{setup.variant.name}-{scenario}-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-t"
    _create_topic(bootstrap, topic)
    group = RealGroup(bootstrap, name, topic, PARTITIONS,
                      {**setup.client_config, "auto.offset.reset": "earliest"}, setup.static)
    try:
        # The first member alone, then the others together: a formation with one rebalance
        # after the first, which leaves every member's heartbeat in step.
        first, *others = group.spawn(MEMBERS)
        # Every restarted member's new process, warmed up beforehand: its start-up is not
        # part of the down time.
        successors = group.spawn(MEMBERS) if scenario == "rolling-restart" else []
        group.subscribe(first)
        group.wait_settled(0.0)
        for process in others:
            group.subscribe(process)
        joins = {c.member: c.at for c in group.callbacks if c.event == "started"}
        t0 = min(joins.values()) - 1.0
        group.formed = group.wait_settled(QUIET_S)
        measure_from = group.formed + QUIET_S / 2
        wall_offset = time.time() - time.monotonic()
        if scenario == "rolling-restart":
            for successor in successors:
                group.at_mid_beat(HEARTBEAT_MS / 1000)
                group.restart(successor, DOWN_S)
                group.wait_settled(QUIET_S)
        else:
            group.at_mid_beat(HEARTBEAT_MS / 1000)
            group.crash("m2")
            group.wait_settled(QUIET_S)
        end = time.monotonic()
    finally:
        group.close_all()
    ledger = measured(group.callbacks, topic, PARTITIONS, t0, measure_from, end)
    consumer_protocol = setup.variant.protocol is Protocol.CONSUMER
    real_rebalances = rebalances_in_log(bootstrap, name, measure_from + wall_offset,
                                        consumer_protocol)
    variant = setup.variant
    period_ms = round(group.heartbeat_period(HEARTBEAT_MS / 1000) * 1000)
    if not consumer_protocol:
        # The heartbeat interval the members actually kept (see RealGroup.heartbeat_period).
        variant = replace(variant, heartbeat_interval_ms=period_ms)
    outcome = prediction(group, variant, t0, measure_from, end, joins)
    return Comparison(real_rebalances, ledger.moved, ledger.revoked, ledger.unowned_ms / 1000,
                      outcome.rebalances, outcome.ledger.moved, outcome.ledger.revoked,
                      outcome.ledger.unowned_ms / 1000, period_ms,
                      round(max(m[-1] - m[0] for m in group.beat_moments(HEARTBEAT_MS / 1000))
                            * 1000))


def run_in_step(bootstrap: str, setup: Setup, scenario: str) -> Comparison:
    """`run_and_predict`, again (up to ATTEMPTS runs) when a real classic member fell out of
    step with the others by more than OUT_OF_STEP_MS: its main thread was starved, something
    the schedule given to the simulator does not hold (see the module doc). The last run is
    returned either way, so a group that never stays in step fails the test with its figures."""
    for attempt in range(1, ATTEMPTS + 1):
        comparison = run_and_predict(bootstrap, setup, scenario)
        # Consumer-protocol members are never in step: each hears at its own heartbeat.
        if comparison.out_of_step_ms <= OUT_OF_STEP_MS \
                or setup.variant.protocol is Protocol.CONSUMER:
            break
        print(f"run {attempt}: the real members fell out of step: {comparison}")
    return comparison


def assert_predicted(comparison: Comparison) -> None:
    assert comparison.predicted_rebalances == comparison.real_rebalances, comparison
    assert comparison.predicted_moved == comparison.real_moved, comparison
    assert abs(comparison.predicted_unowned_s - comparison.real_unowned_s) \
        <= 0.25 * comparison.real_unowned_s, comparison


@pytest.mark.parametrize("scenario", ["rolling-restart", "crash"])
@pytest.mark.parametrize("setup", list(SETUPS))
def test_the_simulator_predicts_a_real_librdkafka_group_on_kgroups(
        kgroups_bootstrap: str, setup: str, scenario: str) -> None:
    comparison = run_in_step(kgroups_bootstrap, SETUPS[setup], scenario)
    print(f"kgroups {setup} {scenario}: {comparison}")
    assert_predicted(comparison)


@pytest.mark.kafka
def test_the_simulator_predicts_a_real_librdkafka_group_on_kafka(
        kafka_broker: KafkaBroker) -> None:
    """The session's Kafka broker runs with the classic settings of BROKER_SETTINGS (no
    initial rebalance delay, one __consumer_offsets partition)."""
    assert all(KAFKA_TEST_SETTINGS[key] == BROKER_SETTINGS[key]
               for key in ("group.initial.rebalance.delay.ms", "offsets.topic.num.partitions"))
    comparison = run_in_step(kafka_broker.bootstrap, SETUPS["cooperative"],
                                 "rolling-restart")
    print(f"kafka cooperative rolling-restart: {comparison}")
    assert_predicted(comparison)
