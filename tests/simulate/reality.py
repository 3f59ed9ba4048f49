"""Real librdkafka groups for tests/simulate/test_reality.py: six consumer processes
(tests/simulate/reality_member.py) on a real broker, a rolling restart or a crash done to them,
their callbacks read into the simulator's own `OwnershipLedger`, and the same schedule handed
to the simulator.

- `RealGroup(bootstrap, group, topic, partitions, client_config, static)` starts (`spawn`,
  then `subscribe`), restarts and kills member processes and keeps every callback with its
  monotonic time;
  `wait_settled()` waits until every partition is owned by exactly one live member, evenly, and
  no callback has come for a while.
- `measured(...)` replays the callbacks into an `OwnershipLedger` with the same definitions
  the simulator uses (a member's partitions are taken away by revoke, lost, or its death).
- `rebalances_in_log(...)` counts rebalances from the group's records in `__consumer_offsets`:
  classic, the generations after the measuring started (each rebalance ends in a new
  generation); consumer protocol, the new highest member epochs (what the simulator counts).
- `prediction(...)` runs the simulator on the schedule the real run went through.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kgroups.records.codec import decode_record
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
)
from kgroups.records.schema import GroupMetadataKey, GroupMetadataValue
from kgroups.simulate import Action, Event, Scenario, Variant, simulate
from kgroups.simulate.engine import Outcome
from kgroups.simulate.ledger import OwnershipLedger

MEMBER_SCRIPT = Path(__file__).with_name("reality_member.py")
# A gap between two moments the members heard something further than this (in intervals) from
# a whole number of heartbeat intervals has a moment in it that was not on the members' beat.
OFF_BEAT = 0.25


@dataclass(frozen=True, slots=True)
class Callback:
    member: str
    at: float  # time.monotonic()
    event: str  # started, assign, revoke, lost, closing, closed, killed
    partitions: tuple[int, ...] = ()


@dataclass
class RealMember:
    name: str
    process: subprocess.Popen[str]
    ready: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None


@dataclass
class RealGroup:
    bootstrap: str
    group: str
    topic: str
    partitions: int
    client_config: dict[str, Any]
    static: bool = False
    callbacks: list[Callback] = field(default_factory=list)
    live: dict[str, RealMember] = field(default_factory=dict)
    spares: list[RealMember] = field(default_factory=list)  # spawned, not subscribed
    # What was done to whom, for the simulator: (time, RESTART or CRASH, member).
    schedule: list[tuple[float, Action, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    formed: float = 0.0  # when the group's first assignment of every member was handed out

    def spawn(self, names: Sequence[str]) -> list[RealMember]:
        """Member processes, started together and warmed up (see reality_member.py), not yet
        subscribed."""
        members = []
        for name in names:
            config = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "client.id": name, **self.client_config}
            if self.static:
                config["group.instance.id"] = name
            spec = json.dumps({"name": name, "topic": self.topic, "config": config})
            process = subprocess.Popen([sys.executable, str(MEMBER_SCRIPT), spec],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            member = RealMember(name, process)
            member.reader = threading.Thread(target=self._read, args=(member,), daemon=True)
            member.reader.start()
            members.append(member)
        self.spares += members
        for member in members:
            assert member.ready.wait(30.0), f"{member.name} never warmed up"
        return members

    def subscribe(self, member: RealMember) -> None:
        self.spares.remove(member)
        self.live[member.name] = member
        _tell(member, "subscribe")
        assert member.started.wait(10.0), f"{member.name} never subscribed"

    def _read(self, member: RealMember) -> None:
        assert member.process.stdout is not None
        for line in member.process.stdout:
            data = json.loads(line)
            with self._lock:
                self.callbacks.append(Callback(member.name, data["t"], data["event"],
                                               tuple(data.get("partitions", ()))))
            if data["event"] == "ready":
                member.ready.set()
            elif data["event"] == "started":
                member.started.set()

    def restart(self, successor: RealMember, down_s: float) -> None:
        """A clean close (the consumer's close(): callbacks, commit, leave), and `successor`, a
        new process under the same name spawned beforehand (so that its start-up is not part of
        the down time), subscribing `down_s` later."""
        name = successor.name
        member = self.live.pop(name)
        _tell(member, "close")
        member.process.wait(timeout=30)
        assert member.reader is not None
        member.reader.join(timeout=5)
        closing = self._last(name, "closing")
        time.sleep(max(0.0, closing.at + down_s - time.monotonic()))
        self.subscribe(successor)
        self.schedule.append((closing.at, Action.RESTART, name))

    def crash(self, name: str) -> None:
        """SIGKILL: no callback, no commit, no LeaveGroup; the heartbeats just stop."""
        member = self.live.pop(name)
        member.process.kill()
        at = time.monotonic()
        member.process.wait(timeout=30)
        assert member.reader is not None
        member.reader.join(timeout=5)
        with self._lock:
            self.callbacks.append(Callback(name, at, "killed"))
        self.schedule.append((at, Action.CRASH, name))

    def _last(self, name: str, event: str) -> Callback:
        with self._lock:
            return next(c for c in reversed(self.callbacks)
                        if c.member == name and c.event == event)

    def beats(self) -> list[float]:
        """When members heard of rebalances, which is when they heartbeat: revocations by
        members that were not closing, and the moment the group first settled."""
        with self._lock:
            closings = [(c.member, c.at) for c in self.callbacks if c.event == "closing"]
            heard = [c.at for c in self.callbacks if c.event in ("revoke", "lost")
                     and c.at > self.formed
                     and not any(m == c.member and 0 <= c.at - at < 0.5 for m, at in closings)]
        return sorted([self.formed, *heard])

    def heartbeat_period(self, interval_s: float) -> float:
        """The heartbeat period the members kept. librdkafka sends a heartbeat at the first
        wake-up of its main thread after the interval (rdkafka_cgrp.c, rkcg_heartbeat_intvl),
        a wake-up that comes a little late on a busy machine, and counts the next interval from
        there: the beats drift later by some milliseconds each. Each gap between two moments is
        counted in configured intervals (the drift, a few percent, cannot make a gap of a few
        intervals round to the wrong count); a gap more than OFF_BEAT of an interval from a whole
        count has a moment heard off the beat in it, and is left out (counted, it made one
        Kafka run's period 817 ms for a configured 1,000, and the prediction wrong by half)."""
        means = [sum(moment) / len(moment) for moment in self.beat_moments(interval_s)]
        seconds = 0.0
        counted = 0
        for before, after in pairwise(means):
            intervals = (after - before) / interval_s
            count = round(intervals)
            if count and abs(intervals - count) <= OFF_BEAT:
                seconds += after - before
                counted += count
        return seconds / counted if counted else interval_s

    def beat_moments(self, interval_s: float) -> list[list[float]]:
        """The beats grouped by moment: the members of an in-step group hear a few ms apart.
        The widest moment says how far out of step they are (see test_reality.py)."""
        moments: list[list[float]] = []
        for beat in self.beats():
            if moments and beat - moments[-1][-1] < interval_s / 2:
                moments[-1].append(beat)
            else:
                moments.append([beat])
        return moments

    def at_mid_beat(self, interval_s: float) -> None:
        """Waits for the middle of the group's heartbeat interval. The members' heartbeats are
        in step (librdkafka beats at once when a rebalance ends overdue, and new members beat
        at their first SyncGroup answer), and a member hears of a rebalance at its next beat.
        An event half an interval from the beats means that the little the simulator's beats
        differ from librdkafka's cannot move the moment the others hear of it by a whole
        interval."""
        period = self.heartbeat_period(interval_s)
        last = self.beat_moments(interval_s)[-1]
        anchor = sum(last) / len(last)
        wait = (anchor - time.monotonic()) % period + period / 2
        time.sleep(wait % period)

    def wait_settled(self, quiet_s: float, timeout_s: float = 60.0) -> float:
        """Until every partition has one owner, a live member, the counts differ by at most
        one, and no callback has come for `quiet_s`; returns the time of the last callback."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                callbacks = list(self.callbacks)
            now = time.monotonic()
            owners = measured(callbacks, self.topic, self.partitions, 0.0, now, now).owners
            held = [who for who in owners.values() if len(who) == 1 and who[0] in self.live]
            sizes = [held.count([name]) for name in self.live]
            last = max(c.at for c in callbacks)
            if len(held) == self.partitions and max(sizes) - min(sizes) <= 1 \
                    and now - last >= quiet_s:
                return last
            time.sleep(0.05)
        raise AssertionError(f"the group never settled: {self.callbacks[-30:]}")

    def close_all(self) -> None:
        for member in [*self.live.values(), *self.spares]:
            member.process.kill()
            member.process.wait(timeout=30)
        self.live.clear()
        self.spares.clear()


def _tell(member: RealMember, command: str) -> None:
    assert member.process.stdin is not None
    member.process.stdin.write(command + "\n")
    member.process.stdin.flush()


def measured(callbacks: list[Callback], topic: str, partitions: int, t0: float,
             measure_from: float, end: float) -> OwnershipLedger:
    """The real run's callbacks, replayed into the simulator's ledger (times in ms from t0)."""
    ledger = OwnershipLedger(tuple((topic, p) for p in range(partitions)),
                             _ms(measure_from - t0))
    owners: dict[str, set[int]] = {}
    for callback in sorted(callbacks, key=lambda c: c.at):
        at = _ms(callback.at - t0)
        owned = owners.setdefault(callback.member, set())
        if callback.event == "assign":
            # Eager callbacks hand the whole assignment, incremental ones what is added.
            new = set(callback.partitions) - owned
            ledger.gain(callback.member, [(topic, p) for p in sorted(new)], at)
            owned |= new
        elif callback.event in ("revoke", "lost", "killed"):
            gone = owned if callback.event == "killed" else owned & set(callback.partitions)
            ledger.lose(callback.member, [(topic, p) for p in sorted(gone)], at)
            owned -= gone
    ledger.finish(_ms(end - t0))
    return ledger


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def rebalances_in_log(bootstrap: str, group: str, measure_from_wall: float,
                      consumer_protocol: bool) -> int:
    """Rebalances after `measure_from_wall` (time.time()), read from the group's records in
    `__consumer_offsets` (one partition on the test brokers)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}-reader",
                       "enable.auto.commit": False, "enable.partition.eof": True})
    reader.assign([TopicPartition("__consumer_offsets", 0, 0)])
    before, after = 0, []
    try:
        while True:
            message = reader.poll(10.0)
            assert message is not None, "__consumer_offsets could not be read to its end"
            if message.error() is not None:
                break
            raw_key = message.key()
            assert raw_key is not None  # every __consumer_offsets record has a key
            record = decode_record(raw_key, message.value())
            key, value = record.key, record.value
            number: int | None = None
            if isinstance(key, GroupMetadataKey) and key.group == group \
                    and isinstance(value, GroupMetadataValue):
                number = value.generation
            elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey) \
                    and key.group == group \
                    and isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
                number = value.member_epoch
            if number is None:
                continue
            if message.timestamp()[1] / 1000 < measure_from_wall:
                before = max(before, number)
            else:
                after.append(number)
    finally:
        reader.close()
    if consumer_protocol:
        highest, count = before, 0
        for epoch in after:
            if epoch > highest:
                highest, count = epoch, count + 1
        return count
    return max([before, *after]) - before


def prediction(group: RealGroup, variant: Variant, t0: float, measure_from: float,
               end: float, joins: dict[str, float]) -> Outcome:
    """The simulator on the schedule the real run went through: each member joins when its
    process subscribed, restarts and crashes when they happened, a restarted member is back
    when its new process subscribed."""
    events = [Event(_ms(at - t0), Action.JOIN, (name,)) for name, at in joins.items()]
    for at, action, name in group.schedule:
        if action is Action.RESTART:
            back = min(c.at for c in group.callbacks
                       if c.member == name and c.event == "started" and c.at > at)
            events.append(Event(_ms(at - t0), action, (name,), down_ms=_ms(back - at)))
        else:
            events.append(Event(_ms(at - t0), action, (name,)))
    names = sorted(joins)
    scenario = Scenario(
        f"reality-{variant.name}", _ms(end - t0), {group.topic: group.partitions}, (),
        {name: "z0" for name in names}, tuple(sorted(events, key=lambda e: e.at_ms)),
        (variant,), processing_ms=20, measure_from_ms=_ms(measure_from - t0),
        group_id=group.group)
    return simulate(scenario, variant)

