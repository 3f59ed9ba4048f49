"""Ready-made schedules for the questions operators ask most, sized by a few numbers.

Each template leaves the group a minute to form before anything happens and starts measuring
there, so the numbers are the cost of the operation, not of the group's first formation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kgroups.simulate.scenario import DEFAULT_VARIANTS, Action, Event, Scenario, Variant

WARMUP_MS = 60_000


@dataclass(frozen=True, slots=True)
class TemplateSize:
    members: int = 6
    partitions: int = 24
    down_s: float = 20  # how long a restarted or failed member stays away
    gap_s: float = 30  # between steps (restarts, flaps, scale steps)
    seed: int = 0


def _names(count: int, start: int = 0) -> tuple[str, ...]:
    return tuple(f"m{i}" for i in range(start, start + count))


def _scenario(name: str, size: TemplateSize, events: list[Event], end_ms: int,
              variants: tuple[Variant, ...], zones: int = 1, extra: int = 0) -> Scenario:
    everyone = _names(size.members + extra)
    return Scenario(name, end_ms, {"events": size.partitions}, _names(size.members),
                    {m: f"z{i % zones}" for i, m in enumerate(everyone)}, tuple(events),
                    variants, seed=size.seed, measure_from_ms=WARMUP_MS)


def rolling_restart(size: TemplateSize, variants: tuple[Variant, ...]) -> Scenario:
    """Every member restarted in turn (a clean shutdown, back after down_s), gap_s apart."""
    step = int(size.gap_s * 1000) + int(size.down_s * 1000)
    events = [Event(WARMUP_MS + i * step, Action.RESTART, (name,), down_ms=int(size.down_s * 1000))
              for i, name in enumerate(_names(size.members))]
    return _scenario("rolling-restart", size, events,
                     WARMUP_MS + size.members * step + 120_000, variants)


def scale_out_in(size: TemplateSize, variants: tuple[Variant, ...]) -> Scenario:
    """The group doubles, one member every gap_s, then shrinks back the same way."""
    gap = int(size.gap_s * 1000)
    added = _names(size.members, size.members)
    events = [Event(WARMUP_MS + i * gap, Action.JOIN, (name,)) for i, name in enumerate(added)]
    leave_from = WARMUP_MS + (size.members + 2) * gap
    events += [Event(leave_from + i * gap, Action.LEAVE, (name,))
               for i, name in enumerate(reversed(added))]
    return _scenario("scale-out-in", size, events, leave_from + size.members * gap + 120_000,
                     variants, extra=size.members)


def flapping_member(size: TemplateSize, variants: tuple[Variant, ...]) -> Scenario:
    """One member crashes and comes back after down_s, over and over, gap_s apart, ten times."""
    step = int(size.gap_s * 1000) + int(size.down_s * 1000)
    events = [Event(WARMUP_MS + i * step, Action.CRASH, ("m0",), down_ms=int(size.down_s * 1000))
              for i in range(10)]
    return _scenario("flapping-member", size, events, WARMUP_MS + 10 * step + 120_000,
                     variants)


def zone_outage(size: TemplateSize, variants: tuple[Variant, ...]) -> Scenario:
    """Members spread over three zones; one zone's members all crash at once and come back
    after down_s."""
    zone_members = tuple(n for i, n in enumerate(_names(size.members)) if i % 3 == 1)
    events = [Event(WARMUP_MS, Action.CRASH, zone_members, down_ms=int(size.down_s * 1000))]
    return _scenario("zone-outage", size, events, WARMUP_MS + int(size.down_s * 1000) + 180_000,
                     variants, zones=3)


TEMPLATES: dict[str, Callable[[TemplateSize, tuple[Variant, ...]], Scenario]] = {
    "rolling-restart": rolling_restart,
    "scale-out-in": scale_out_in,
    "flapping-member": flapping_member,
    "zone-outage": zone_outage,
}


def template(name: str, size: TemplateSize,
             variants: tuple[Variant, ...] = DEFAULT_VARIANTS) -> Scenario:
    return TEMPLATES[name](size, variants)
