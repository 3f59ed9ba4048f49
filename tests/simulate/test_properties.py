"""What must hold for any schedule: no partition with two owners under the cooperative and
consumer protocols, eager never cheaper in partitions taken away than cooperative-sticky, a
static member back within its session timeout costs no rebalance, and a seed fixes the run."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.member import Protocol
from kgroups.simulate import Action, Event, Scenario, Variant, simulate
from kgroups.simulate.report import summary

MEMBERS = tuple(f"m{i}" for i in range(4))
COOPERATIVE = Variant("cooperative", Protocol.COOPERATIVE, "cooperative-sticky")
CONSUMER = Variant("consumer", Protocol.CONSUMER, "uniform", heartbeat_interval_ms=5_000)
EAGER_STICKY = Variant("eager-sticky", Protocol.EAGER, "sticky")


@st.composite
def schedules(draw: st.DrawFn) -> Scenario:
    """Up to six events among four members (and two that may join), a few seconds apart."""
    events = []
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(30, 240)) * 1000
        action = draw(st.sampled_from([Action.CRASH, Action.RESTART, Action.LEAVE,
                                       Action.PAUSE, Action.JOIN, Action.SLOW]))
        if action is Action.JOIN:
            events.append(Event(at, action, (draw(st.sampled_from(["m4", "m5"])),)))
            continue
        member = (draw(st.sampled_from(MEMBERS)),)
        down = draw(st.integers(1, 60)) * 1000
        match action:
            case Action.CRASH:
                events.append(Event(at, action, member, down_ms=draw(st.none() | st.just(down))))
            case Action.RESTART:
                events.append(Event(at, action, member, down_ms=down))
            case Action.PAUSE:
                events.append(Event(at, action, member, for_ms=draw(st.integers(1, 90)) * 1000))
            case Action.SLOW:
                events.append(Event(at, action, member, for_ms=down,
                                    processing_ms=draw(st.integers(200, 5_000))))
            case _:
                events.append(Event(at, action, member))
    return Scenario("random", 300_000, {"t": draw(st.integers(4, 12))}, MEMBERS,
                    {f"m{i}": "z0" for i in range(6)}, tuple(sorted(events, key=lambda e: e.at_ms)),
                    seed=draw(st.integers(0, 1000)), measure_from_ms=20_000,
                    network_delay_ms=draw(st.integers(1, 50)))


FEW = settings(max_examples=12, deadline=None)


@FEW
@given(schedules())
def test_cooperative_and_consumer_protocols_never_give_a_partition_two_owners(
        scenario: Scenario) -> None:
    for variant in (COOPERATIVE, replace(COOPERATIVE, static=True), CONSUMER,
                    replace(CONSUMER, static=True, name="consumer-static")):
        ledger = simulate(scenario, variant).ledger
        assert ledger.max_owners <= 1, (variant.name, ledger.first_double)


@FEW
@given(schedules())
def test_eager_never_moves_fewer_partitions_than_cooperative_sticky(
        scenario: Scenario) -> None:
    """Neither in partitions taken away from their consumer nor in partitions that end up with
    another member, whether eager runs the sticky assignor or range.

    `moved` counts owners by member name, so a member that comes back under its name breaks
    the comparison, as hypothesis found twice: after a crash while the dead incarnation still
    held a session (eager-sticky moved 2, cooperative-sticky 4: eager's sticky pass handed the
    dead incarnation's partitions back to the new one, cooperative's gave them to the others),
    and after a restart (seed 36, m0 down for a second: eager-range moved 0, cooperative-sticky
    1; range is a function of the members alone, so the group it returns to is laid out as
    before, while a sticky assignor hands the returning member whichever partitions balance
    needs). Partitions moved are compared on schedules without such a return."""
    cooperative = simulate(scenario, COOPERATIVE).ledger
    for eager_variant in (EAGER_STICKY, Variant("eager-range")):
        eager = simulate(scenario, eager_variant).ledger
        assert eager.revoked >= cooperative.revoked
        if not _back_under_its_name(scenario):
            assert eager.moved >= cooperative.moved


def _back_under_its_name(scenario: Scenario) -> bool:
    """A member restarts, or crashes and comes back, under its name."""
    crashed: set[str] = set()
    for event in scenario.events:
        if event.action is Action.RESTART:
            return True
        if event.action is Action.CRASH:
            if event.down_ms is not None:
                return True
            crashed.update(event.members)
        elif crashed.intersection(event.members):
            return True
    return False


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 40), st.sampled_from([COOPERATIVE, CONSUMER,
                                                                  EAGER_STICKY]))
def test_a_static_member_back_within_its_session_timeout_causes_no_rebalance(
        seed: int, down_s: int, variant: Variant) -> None:
    """Session timeout 45 s; the member is away `down_s` < 45 s after a clean shutdown."""
    scenario = Scenario("static", 300_000, {"t": 8}, MEMBERS, {m: "z0" for m in MEMBERS},
                        (Event(120_000, Action.RESTART, ("m1",), down_ms=down_s * 1000),),
                        seed=seed, measure_from_ms=60_000)
    static = replace(variant, static=True)
    assert simulate(scenario, static).rebalances == 0
    # The same restart without static membership does cost rebalances: the check can fail.
    assert simulate(scenario, variant).rebalances > 0


def test_a_static_member_away_longer_than_its_session_timeout_is_replaced() -> None:
    scenario = Scenario("static", 300_000, {"t": 8}, MEMBERS, {m: "z0" for m in MEMBERS},
                        (Event(120_000, Action.RESTART, ("m1",), down_ms=60_000),),
                        measure_from_ms=60_000)
    assert simulate(scenario, replace(COOPERATIVE, static=True)).rebalances > 0


@settings(max_examples=5, deadline=None)
@given(schedules())
def test_a_seed_fixes_the_run(scenario: Scenario) -> None:
    for variant in (EAGER_STICKY, COOPERATIVE, CONSUMER):
        assert summary(simulate(scenario, variant)) == summary(simulate(scenario, variant))
