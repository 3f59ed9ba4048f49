"""A group's real history turned into a schedule, its settings and its own row of costs.

The coordinator writes a classic group's membership once per generation (KIP-848 groups: per
target assignment); between two generations the members that appeared joined, and those that
disappeared left: cleanly (LeaveGroup) or by vanishing, which `rebalance_causes` tells from how
long each had been silent against its session timeout. A member's name is its
group.instance.id when it has one, else its client id: a name that comes back is the same
process restarted (a client id two live members share gets `#2`, `#3`...). Time 0 of the
schedule is a little before the first generation, so the members of that generation can form
the group as they did.

Each change is placed shortly before the generation that recorded it (`LEAD_MS`, less when
generations came closer together); a member that vanished crashes one session timeout before
it, so its session expires where the real one did. A generation that changed no member (a
cooperative group's second rebalance, a static member's replacement without a rebalance)
schedules nothing of its own: the protocol makes it again.

The real row is measured with the simulator's own ledger (`OwnershipLedger`), fed with what
the records show: at each generation every member holds what it was assigned; an eager
group's members give everything up and take their new assignment at that moment, the others
give up only what went elsewhere; a member that vanished held nothing from when it was last
seen (its last commit, at the earliest the previous generation). Its rebalances are the
generations inside the history, as the pipeline lists them, but for the generation 0 record
Kafka 4 writes when it creates a group: no rebalance formed that one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kgroups.member import ClientFlavour, Protocol, TopicPartition
from kgroups.pipeline.history import partition_owners
from kgroups.pipeline.rebalance_causes import REBALANCE_TIMEOUT, SESSION_TIMEOUT
from kgroups.simulate.engine import Outcome
from kgroups.simulate.history_read import GroupHistory, HistoryError
from kgroups.simulate.ledger import OwnershipLedger
from kgroups.simulate.scenario import Action, Event, Scenario, Variant
from kgroups.simulate.scenario_file import variant_from

LEAD_MS = 1_000  # a change happens this long before the generation that records it
START_SPREAD_MS = 100  # the first generation's members start within this
TAIL_MS = 15_000  # the schedule runs on past the last generation (plus a session timeout)
REAL_VARIANT = "real-settings"
HISTORY_ROW = "history"
# Classic protocol names the simulator's members speak; another (a custom assignor) runs as
# range and says so.
_EAGER_ASSIGNORS = ("range", "roundrobin", "sticky")
_COOPERATIVE = "cooperative-sticky"


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """A history as a scenario (its first variant: the real settings), its own row, and what
    the rebuilding had to assume."""

    source: str
    group: str
    group_type: str
    scenario: Scenario
    history: Outcome
    settings: Variant
    origin_ms: int  # epoch ms of the schedule's time 0
    notes: tuple[str, ...]
    generations: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class _Names:
    """Member id -> the name the schedule gives its process."""

    by_member: dict[str, str] = field(default_factory=dict)

    def name(self, member: dict[str, Any], taken: set[str]) -> str:
        known = self.by_member.get(member["member_id"])
        if known is not None:
            return known
        base = member["instance_id"] or member["client_id"] or member["member_id"]
        name = str(base)
        number = 2
        while not member["instance_id"] and name in taken:
            name = f"{base}#{number}"
            number += 1
        self.by_member[member["member_id"]] = name
        return name


def infer_settings(history: GroupHistory, initial_delay_ms: int) -> tuple[Variant, list[str]]:
    """The settings the records say the group ran with, as a variant, and what was assumed."""
    notes: list[str] = []
    # The last generation that chose a protocol: an empty group's record names none.
    last = next((row for row in reversed(history.generations) if row["protocol"]),
                history.generations[-1])
    members = [m for row in history.generations for m in row["members"] or ()]
    timeouts = [history.timeouts[m["member_id"]] for m in members
                if m["member_id"] in history.timeouts]
    settings: dict[str, Any] = {"name": REAL_VARIANT,
                                "initial_rebalance_delay_ms": initial_delay_ms}
    if history.group_type == "consumer":
        settings["protocol"] = "consumer"
        settings["assignor"] = last["protocol"] or "uniform"
        notes.append("session timeout: the broker's group.consumer.session.timeout.ms, in no "
                     "record: Kafka's default taken")
    else:
        if last["protocol_type"] not in ("consumer", None):
            raise HistoryError(f"group {history.group!r} is a {last['protocol_type']!r} group: "
                               "the simulator models consumer groups")
        protocol = str(last["protocol"] or "range")
        if protocol == _COOPERATIVE:
            settings.update(protocol="cooperative", assignor=_COOPERATIVE)
        else:
            settings.update(protocol="eager", assignor=protocol)
            if protocol not in _EAGER_ASSIGNORS:
                settings["assignor"] = "range"
                notes.append(f"assignor {protocol!r} is not one the simulator has: range taken")
    if timeouts:
        settings["session_timeout_ms"] = _most_common([t[0] for t in timeouts])
        settings["max_poll_interval_ms"] = _most_common([t[1] for t in timeouts])
    settings["static"] = any(m["instance_id"] for m in members)
    clients = {m["client_id"] for m in members}
    if clients == {"rdkafka"}:
        settings["client"] = ClientFlavour.LIBRDKAFKA.value
        notes.append("client: librdkafka (every client id is librdkafka's default)")
    if settings.get("session_timeout_ms", 45_000) <= 3_000:
        settings["heartbeat_interval_ms"] = max(1, settings["session_timeout_ms"] // 3)
    notes.append("heartbeat interval and group.initial.rebalance.delay.ms are in no record: "
                 f"the clients' default and {initial_delay_ms} ms taken")

    def fail(_key: str, message: str) -> Exception:
        return HistoryError(f"the recorded settings do not run: {message}")

    return variant_from(settings, fail), notes


def _most_common(values: list[int]) -> int:
    return max(sorted(set(values)), key=values.count)


def rebuild(history: GroupHistory, variants: tuple[Variant, ...],
            initial_delay_ms: int = 3_000) -> Rebuilt:
    real, notes = infer_settings(history, initial_delay_ms)
    if not history.topics:
        raise HistoryError(f"group {history.group!r} never subscribed to or was assigned a "
                           "topic: there is nothing to consume")
    rows = history.generations
    origin = rows[0]["ts"] - initial_delay_ms - LEAD_MS - START_SPREAD_MS
    partitions = tuple((t, p) for t in sorted(history.topics)
                       for p in range(history.topics[t]))
    session_max = max([real.session_timeout_ms] + [v.session_timeout_ms for v in variants])
    end = max(rows[-1]["ts"] - origin + session_max + TAIL_MS,
              (history.last_commit_ms or 0) - origin)
    replay = _Replay(history, real, OwnershipLedger(partitions, 0, keep_segments=True))
    for row in rows:
        replay.generation(row, row["ts"] - origin)
    replay.ledger.finish(end)
    everyone = tuple(sorted(set(replay.names.by_member.values())))
    scenario = Scenario(
        name=f"history of {history.group}", duration_ms=end,
        topics=dict(history.topics), members=tuple(sorted(replay.first)),
        zones=dict.fromkeys(everyone, "z0"),
        events=tuple(sorted(replay.events, key=lambda e: e.at_ms)),
        variants=(real, *variants), start_spread_ms=START_SPREAD_MS, group_id=history.group)
    recorded = Outcome(
        variant=replace(real, name=HISTORY_ROW), ledger=replay.ledger,
        rebalances=len(replay.generation_times), commits_sent=history.commits,
        commits_refused=0, refusal_errors={}, member_failures={}, duration_ms=end,
        events_processed=0, generations=replay.generation_times, recorded=True)
    return Rebuilt(history.source, history.group, history.group_type, scenario, recorded, real,
                   origin, tuple(notes), replay.shown)


@dataclass(slots=True)
class _Replay:
    """The generations taken in log order: the events between each and the next, and the
    ledger of who held what."""

    history: GroupHistory
    real: Variant
    ledger: OwnershipLedger
    names: _Names = field(default_factory=_Names)
    events: list[Event] = field(default_factory=list)
    first: set[str] = field(default_factory=set)  # the names present at the start
    live: dict[str, str] = field(default_factory=dict)  # member id -> name
    held: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)  # name -> owned
    generation_times: list[tuple[int, int]] = field(default_factory=list)
    shown: list[dict[str, Any]] = field(default_factory=list)
    previous_ts: int | None = None
    # (generation, member id) -> why the member joined or left there (rebalance_causes).
    causes: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.causes = {(c["to_generation"], c["member_id"]): c for c in self.history.causes
                       if c["member_id"] is not None}

    def generation(self, row: dict[str, Any], ts: int) -> None:
        members = {m["member_id"]: m for m in row["members"] or ()}
        repeated = bool(self.shown) and row["generation"] == self.shown[-1]["generation"]
        if not repeated and row["generation"] > 0:  # Kafka 4 records a new group as gen 0
            self.generation_times.append((ts, int(row["generation"])))
        previous = self.previous_ts
        at = ts - (LEAD_MS if previous is None else min(LEAD_MS, (ts - previous) // 2))
        vanished = [] if repeated else [m for m in self.live if m not in members
                                        and self._vanished(row["generation"], m)]
        # Joins and clean leaves beside a vanished member came before its session expired:
        # the generation waited for that.
        change_at = at
        for member_id in vanished:
            crash_at = self._crash(member_id, row["generation"], at, ts)
            change_at = max(crash_at + 1, min(change_at, at - self.real.heartbeat_interval_ms
                                              - LEAD_MS))
        for member_id in [m for m in self.live if m not in members]:
            name = self.live.pop(member_id)
            if member_id not in vanished:
                self.events.append(Event(change_at, Action.LEAVE, (name,)))
        taken = set(self.live.values())
        for member_id in [m for m in members if m not in self.live]:
            name = self.names.name(members[member_id], taken)
            taken.add(name)
            self.live[member_id] = name
            if previous is None:
                self.first.add(name)
            else:
                self.events.append(Event(change_at, Action.JOIN, (name,)))
        owners = {tp: self.live[owner] for tp, owner in _owners(row).items()}
        _assign(self.ledger, self.held, owners,
                self.real.protocol is Protocol.EAGER and not repeated, ts)
        self.shown.append({"generation": row["generation"], "at_s": ts / 1000,
                           "members": sorted(self.live.values())})
        self.previous_ts = ts

    def _vanished(self, generation: int, member_id: str) -> bool:
        cause = self._cause(generation, member_id)
        return cause is not None and cause["cause"] in (SESSION_TIMEOUT, REBALANCE_TIMEOUT)

    def _cause(self, generation: int, member_id: str) -> dict[str, Any] | None:
        return self.causes.get((generation, member_id))

    def _crash(self, member_id: str, generation: int, at: int, ts: int) -> int:
        """The member crashes about one session timeout before the generation; what it held
        is unowned from when it was last seen. Returns the crash time."""
        name = self.live[member_id]
        session = self.history.timeouts.get(member_id, (self.real.session_timeout_ms, 0))[0]
        # Its session expires a session timeout after its last heartbeat, which came up to a
        # heartbeat interval before the crash. Not before the previous generation had a
        # heartbeat interval to settle: a member that dies inside a rebalance is waited for
        # by that rebalance, and the two would be one.
        heartbeat = self.real.heartbeat_interval_ms
        crash_at = max((self.previous_ts or 0) + heartbeat, at - session + heartbeat // 2)
        self.events.append(Event(crash_at, Action.CRASH, (name,)))
        cause = self._cause(generation, member_id)
        silent = int(float(cause["silent_seconds"] or 0) * 1000) if cause else 0
        _give_up(self.ledger, self.held, name, max(self.previous_ts or 0, ts - silent))
        return crash_at


def history_json(rebuilt: Rebuilt) -> dict[str, Any]:
    """Where the schedule came from, for `--output json`: the settings read, the generations
    (seconds from time 0) and the events rebuilt from them."""
    real = rebuilt.settings
    return {
        "source": rebuilt.source, "group": rebuilt.group, "group_type": rebuilt.group_type,
        "time_zero": datetime.fromtimestamp(rebuilt.origin_ms / 1000, UTC).isoformat(),
        "settings": {"protocol": real.protocol.value, "assignor": real.assignor,
                     "static": real.static, "session_timeout_ms": real.session_timeout_ms,
                     "max_poll_interval_ms": real.max_poll_interval_ms,
                     "heartbeat_interval_ms": real.heartbeat_interval_ms,
                     "initial_rebalance_delay_ms": real.initial_rebalance_delay_ms,
                     "client": real.client.value},
        "assumed": list(rebuilt.notes),
        "generations": rebuilt.generations,
        "schedule": [{"at_s": e.at_ms / 1000, "action": e.action.value,
                      "members": list(e.members)} for e in rebuilt.scenario.events],
    }


def history_text(rebuilt: Rebuilt) -> str:
    """The lines under the table: what was read, the settings found, what was assumed."""
    real = rebuilt.settings
    counts: dict[str, int] = {}
    for event in rebuilt.scenario.events:
        counts[event.action.value] = counts.get(event.action.value, 0) + len(event.members)
    zero = datetime.fromtimestamp(rebuilt.origin_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    schedule = ", ".join(f"{n} {action}" for action, n in counts.items()) or "no change"
    return "\n".join([
        f"history: group {rebuilt.group} ({rebuilt.group_type}) in {rebuilt.source}: "
        f"{rebuilt.history.rebalances} generations; time 0 = {zero} UTC",
        f"schedule: {len(rebuilt.scenario.members)} members at the start, then {schedule}",
        f"{REAL_VARIANT}: protocol {real.protocol.value}, assignor {real.assignor}, static "
        f"{'yes' if real.static else 'no'}, session {real.session_timeout_ms} ms, max.poll "
        f"{real.max_poll_interval_ms} ms, client {real.client.value}",
        *(f"assumed: {note}" for note in rebuilt.notes),
    ])


def _owners(row: dict[str, Any]) -> dict[TopicPartition, str]:
    """(topic, partition) -> member id of a generation's assignment."""
    by_identity = partition_owners(
        [{**m, "instance_id": None} for m in row["members"] or ()])
    return {(topic, partition): owner for (topic, partition), owner in by_identity.items()}


def _give_up(ledger: OwnershipLedger, held: dict[str, frozenset[TopicPartition]], name: str,
             now: int) -> None:
    owned = held.pop(name, frozenset())
    if owned:
        ledger.lose(name, owned, now)


def _assign(ledger: OwnershipLedger, held: dict[str, frozenset[TopicPartition]],
            owners: dict[TopicPartition, str], revoke_all: bool, now: int) -> None:
    """Every member holds its generation's assignment from `now`: losses first (eager: all
    it held), then gains."""
    wanted: dict[str, set[TopicPartition]] = {}
    for partition, name in owners.items():
        if partition in ledger.owners:
            wanted.setdefault(name, set()).add(partition)
    for name in list(held):
        keep = frozenset() if revoke_all else held[name] & wanted.get(name, set())
        if held[name] - keep:
            ledger.lose(name, held[name] - keep, now)
        held[name] = keep
    for name, partitions in wanted.items():
        add = partitions - held.get(name, frozenset())
        if add:
            ledger.gain(name, add, now)
        held[name] = frozenset(partitions)
