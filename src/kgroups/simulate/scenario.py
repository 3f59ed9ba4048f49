"""A simulation's input: the group, the schedule of what happens to its members, and the
variants (client and coordinator settings) to run the same schedule under.

Times are milliseconds here; scenario files and templates speak seconds (`*_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kgroups.member import ClientFlavour, Protocol


class Action(Enum):
    JOIN = "join"  # new members arrive
    LEAVE = "leave"  # clean shutdown, for good
    CRASH = "crash"  # the process dies without a word (optionally restarts after down_ms)
    RESTART = "restart"  # clean shutdown, back after down_ms
    PAUSE = "pause"  # the poll loop stops for for_ms
    SLOW = "slow"  # each poll loop takes processing_ms, for for_ms
    NETWORK = "network"  # every request and answer takes delay_ms longer, for for_ms


@dataclass(frozen=True, slots=True)
class Event:
    at_ms: int
    action: Action
    members: tuple[str, ...]
    down_ms: int | None = None  # restart, crash: back after this long (crash: None = never)
    for_ms: int = 0
    processing_ms: int = 0
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class Variant:
    """One way to run the group: the settings an operator would compare."""

    name: str
    protocol: Protocol = Protocol.EAGER
    assignor: str = "range"
    static: bool = False
    session_timeout_ms: int = 45_000
    max_poll_interval_ms: int = 300_000
    heartbeat_interval_ms: int = 3_000
    initial_rebalance_delay_ms: int = 3_000
    commit_interval_ms: int = 5_000
    client: ClientFlavour = ClientFlavour.JAVA


DEFAULT_VARIANTS = (
    Variant("eager-range"),
    Variant("cooperative-sticky", Protocol.COOPERATIVE, "cooperative-sticky"),
    Variant("cooperative-static", Protocol.COOPERATIVE, "cooperative-sticky", static=True),
    Variant("consumer-uniform", Protocol.CONSUMER, "uniform", heartbeat_interval_ms=5_000),
)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    duration_ms: int
    topics: dict[str, int]
    members: tuple[str, ...]  # those present at the start
    zones: dict[str, str]  # member name -> zone, every member that ever appears
    events: tuple[Event, ...] = ()
    variants: tuple[Variant, ...] = DEFAULT_VARIANTS
    seed: int = 0
    network_delay_ms: int = 1
    write_delay_ms: int = 0
    processing_ms: int = 100
    # The members present at the start start at random moments within this window.
    start_spread_ms: int = 2_000
    # Metrics count from here: the group's first formation is rarely the question.
    measure_from_ms: int = 0
    group_id: str = "simulated"
