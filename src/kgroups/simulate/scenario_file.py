"""Scenario files (YAML or JSON; JSON is read as the YAML it also is) into a `Scenario`.

Every mistake is reported as one `ScenarioError` naming the line it is on, so the command can
print one line and exit. The schema (docs/simulate.md):

    name: rolling-restart            # optional
    duration_s: 900
    seed: 7                          # optional, 0
    topics: {orders: 24}             # topic -> partitions; every member subscribes to all
    members: 6                       # m0..m5 present at the start
    zones: 3                         # optional: member i is in zone z(i mod zones)
    measure_from_s: 60               # optional, 0: metrics count from here
    network_delay_ms: 1              # optional, one way, per request and per answer
    write_delay_ms: 0                # optional: how long a __consumer_offsets write takes
    processing_ms: 100               # optional: one turn of each member's poll loop
    events:                          # optional
      - {at_s: 120, action: restart, members: [m0], down_s: 10}
      - {at_s: 300, action: crash, zone: z1, down_s: 60}    # down_s optional for crash
      - {at_s: 400, action: join, count: 2}                # new members m6, m7
      - {at_s: 500, action: leave, members: [m6]}
      - {at_s: 600, action: pause, members: [m3], for_s: 400}
      - {at_s: 600, action: slow, members: [m4], processing_ms: 2000, for_s: 60}
      - {at_s: 600, action: network, members: [m5], delay_ms: 500, for_s: 30}
    variants:                        # optional: the default four otherwise
      - {name: eager, protocol: eager, assignor: range}
      - {protocol: cooperative, assignor: cooperative-sticky, static: true,
         session_timeout_ms: 30000, max_poll_interval_ms: 300000,
         heartbeat_interval_ms: 3000, initial_rebalance_delay_ms: 3000,
         commit_interval_ms: 5000, client: java}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from kgroups.assignors import registered_names
from kgroups.coordinator.config import CONSUMER_ASSIGNORS
from kgroups.member import ClientFlavour, Protocol
from kgroups.simulate.scenario import DEFAULT_VARIANTS, Action, Event, Scenario, Variant


class ScenarioError(ValueError):
    """A scenario that cannot run; the message names the line."""


class _Map(dict[str, Any]):
    """A mapping that remembers the line of itself and of each key."""

    line: int = 0
    lines: dict[str, int]


class _Loader(yaml.SafeLoader):
    pass


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    result = _Map()
    result.line = node.start_mark.line + 1
    result.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        result[str(key)] = loader.construct_object(value_node, deep=True)
        result.lines[str(key)] = key_node.start_mark.line + 1
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)

_SCENARIO_KEYS = frozenset({
    "name", "duration_s", "seed", "topics", "members", "zones", "measure_from_s",
    "network_delay_ms", "write_delay_ms", "processing_ms", "events", "variants"})
_EVENT_KEYS = frozenset({"at_s", "action", "members", "zone", "count", "down_s", "for_s",
                         "processing_ms", "delay_ms"})
_VARIANT_KEYS = frozenset(f.name for f in fields(Variant))


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError(f"{path}: cannot read: {error.strerror}") from None
    return parse_scenario(text, str(path))


def parse_scenario(text: str, source: str = "scenario") -> Scenario:
    try:
        document = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise ScenarioError(f"{source} line {line}: not valid YAML or JSON: "
                            f"{error.problem or error.context}") from None
    if not isinstance(document, _Map):
        raise ScenarioError(f"{source} line 1: a scenario is a mapping (name: value lines)")
    return _Reader(source).scenario(document)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, line: int, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source} line {line}: {message}")

    def _check_keys(self, node: _Map, allowed: frozenset[str], what: str) -> None:
        for key in node:
            if key not in allowed:
                raise self.fail(node.lines[key], f"unknown {what} key {key!r} (known: "
                                f"{', '.join(sorted(allowed))})")

    def number(self, node: _Map, key: str, default: float | None = None, *,
               minimum: float = 0) -> float:
        if key not in node:
            if default is None:
                raise self.fail(node.line, f"missing {key!r}")
            return default
        value = node[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
            raise self.fail(node.lines[key], f"{key} must be a number >= {minimum}, "
                            f"got {value!r}")
        return value

    def scenario(self, node: _Map) -> Scenario:
        self._check_keys(node, _SCENARIO_KEYS, "scenario")
        duration_ms = int(self.number(node, "duration_s", minimum=1) * 1000)
        topics = node.get("topics")
        if not isinstance(topics, _Map) or not topics:
            raise self.fail(node.lines.get("topics", node.line),
                            "topics must map each topic name to its partition count")
        for topic, count in topics.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise self.fail(topics.lines[topic], f"topic {topic!r} needs a partition count "
                                f">= 1, got {count!r}")
        count = int(self.number(node, "members", minimum=0))
        zones = int(self.number(node, "zones", 1, minimum=1))
        names = [f"m{i}" for i in range(count)]
        events_node = node.get("events", [])
        if not isinstance(events_node, list):
            raise self.fail(node.lines["events"], "events must be a list")
        zone_of = {name: f"z{i % zones}" for i, name in enumerate(names)}
        events = []
        for item in sorted(events_node, key=lambda e: e.get("at_s", 0)
                           if isinstance(e, _Map) else 0):
            events.append(self.event(item, zone_of, zones, node.lines.get("events", 1)))
        variants_node = node.get("variants")
        variants: tuple[Variant, ...] = DEFAULT_VARIANTS
        if variants_node is not None:
            if not isinstance(variants_node, list) or not variants_node:
                raise self.fail(node.lines["variants"], "variants must be a non-empty list")
            variants = tuple(self.variant(item, node.lines["variants"]) for item in variants_node)
        seen: set[str] = set()
        for variant in variants:
            if variant.name in seen:
                raise self.fail(node.lines.get("variants", node.line),
                                f"two variants are named {variant.name!r}")
            seen.add(variant.name)
        return Scenario(
            str(node.get("name", "scenario")), duration_ms, {str(t): int(n) for t, n in
                                                             topics.items()},
            tuple(names), zone_of, tuple(events), variants,
            seed=int(self.number(node, "seed", 0)),
            network_delay_ms=int(self.number(node, "network_delay_ms", 1)),
            write_delay_ms=int(self.number(node, "write_delay_ms", 0)),
            processing_ms=int(self.number(node, "processing_ms", 100, minimum=1)),
            measure_from_ms=int(self.number(node, "measure_from_s", 0) * 1000))

    def event(self, node: object, zone_of: dict[str, str], zones: int, line: int) -> Event:
        if not isinstance(node, _Map):
            raise self.fail(line, "each event is a mapping with at_s and action")
        self._check_keys(node, _EVENT_KEYS, "event")
        at_ms = int(self.number(node, "at_s") * 1000)
        raw = node.get("action")
        try:
            action = Action(raw)
        except ValueError:
            raise self.fail(node.lines.get("action", node.line), f"unknown action {raw!r} "
                            f"(known: {', '.join(a.value for a in Action)})") from None
        if action is Action.JOIN:
            added = int(self.number(node, "count", 1, minimum=1))
            start = len(zone_of)
            members = tuple(f"m{i}" for i in range(start, start + added))
            for i, name in enumerate(members, start):
                zone_of[name] = f"z{i % zones}"
        else:
            members = self.selected(node, zone_of)
        down = node.get("down_s")
        needs_for = action in (Action.PAUSE, Action.SLOW, Action.NETWORK)
        return Event(
            at_ms, action, members,
            down_ms=int(self.number(node, "down_s") * 1000) if down is not None
            else (0 if action is Action.RESTART else None),
            for_ms=int(self.number(node, "for_s", None if needs_for else 0) * 1000),
            processing_ms=int(self.number(
                node, "processing_ms", None if action is Action.SLOW else 0, minimum=1
                if action is Action.SLOW else 0)),
            delay_ms=int(self.number(node, "delay_ms",
                                     None if action is Action.NETWORK else 0)))

    def selected(self, node: _Map, zone_of: dict[str, str]) -> tuple[str, ...]:
        if "zone" in node:
            zone = str(node["zone"])
            chosen = tuple(name for name, z in zone_of.items() if z == zone)
            if not chosen:
                raise self.fail(node.lines["zone"], f"no member is in zone {zone!r}")
            return chosen
        members = node.get("members")
        if not isinstance(members, list) or not members:
            raise self.fail(node.line, "the event needs members: [names] or zone: name")
        for name in members:
            if str(name) not in zone_of:
                raise self.fail(node.lines["members"], f"no member named {name!r} (members "
                                "are m0, m1, ... in order of arrival)")
        return tuple(str(name) for name in members)

    def variant(self, node: object, line: int) -> Variant:
        if not isinstance(node, _Map):
            raise self.fail(line, "each variant is a mapping of settings")
        self._check_keys(node, _VARIANT_KEYS, "variant")
        return variant_from(node, lambda key, message: self.fail(
            node.lines.get(key, node.line), message))


def variant_from(settings: Mapping[str, Any],
                 fail: Callable[[str, str], Exception]) -> Variant:
    """A `Variant` from name/value settings (a file's mapping, or `--variant k=v,...`)."""
    values: dict[str, Any] = {}
    protocol_raw = settings.get("protocol", "eager")
    try:
        protocol = Protocol(str(protocol_raw))
    except ValueError:
        raise fail("protocol", f"protocol must be one of eager, cooperative, consumer, got "
                   f"{protocol_raw!r}") from None
    values["protocol"] = protocol
    default_assignor = {Protocol.EAGER: "range", Protocol.COOPERATIVE: "cooperative-sticky",
                        Protocol.CONSUMER: "uniform"}[protocol]
    assignor = str(settings.get("assignor", default_assignor))
    known = sorted(CONSUMER_ASSIGNORS) if protocol is Protocol.CONSUMER \
        else [n for n in registered_names() if n != "uniform"]
    if assignor not in known:
        raise fail("assignor", f"assignor {assignor!r} does not work with the {protocol.value} "
                   f"protocol (use one of {', '.join(known)})")
    if protocol is Protocol.COOPERATIVE and assignor != "cooperative-sticky":
        raise fail("assignor", "the cooperative protocol needs the cooperative-sticky assignor")
    values["assignor"] = assignor
    client_raw = settings.get("client", "java")
    try:
        values["client"] = ClientFlavour(str(client_raw))
    except ValueError:
        raise fail("client", f"client must be java or librdkafka, got {client_raw!r}") from None
    static = settings.get("static", False)
    if isinstance(static, str):
        static = static.lower() in ("true", "yes", "1")
    values["static"] = bool(static)
    if protocol is Protocol.CONSUMER:
        values["heartbeat_interval_ms"] = 5_000
    for key in ("session_timeout_ms", "max_poll_interval_ms", "heartbeat_interval_ms",
                "initial_rebalance_delay_ms", "commit_interval_ms"):
        if key in settings:
            try:
                number = int(settings[key])
            except (TypeError, ValueError):
                raise fail(key, f"{key} must be a whole number of ms, "
                           f"got {settings[key]!r}") from None
            if number < 0:
                raise fail(key, f"{key} must be >= 0, got {number}")
            values[key] = number
    if values.get("heartbeat_interval_ms", 3_000) >= values.get("session_timeout_ms", 45_000):
        raise fail("heartbeat_interval_ms", "heartbeat_interval_ms must be below "
                   "session_timeout_ms")
    name = settings.get("name") or "-".join(
        [protocol.value, assignor] + (["static"] if values["static"] else []))
    return Variant(str(name), **values)
