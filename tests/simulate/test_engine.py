"""Single scenarios whose outcome an operator knows by heart: the simulator must agree."""

from __future__ import annotations

from dataclasses import replace

from kgroups.member import ClientFlavour, Protocol
from kgroups.simulate import Action, Event, Scenario, Variant, simulate

MEMBERS = ("m0", "m1", "m2")
COOPERATIVE = Variant("cooperative", Protocol.COOPERATIVE, "cooperative-sticky")
EAGER = Variant("eager", Protocol.EAGER, "range")


def _scenario(*events: Event, duration_ms: int = 400_000) -> Scenario:
    return Scenario("s", duration_ms, {"t": 6}, MEMBERS, {m: "z0" for m in MEMBERS}, events,
                    measure_from_ms=60_000)


def test_a_crashed_members_partitions_wait_about_a_session_timeout() -> None:
    outcome = simulate(_scenario(Event(120_000, Action.CRASH, ("m1",))), COOPERATIVE)
    longest = max(outcome.ledger.longest_gap.values())
    # 45 s session, less up to one heartbeat interval (3 s) since the last heartbeat, plus
    # the time for the others to hear of the rebalance and sync.
    assert 42_000 <= longest <= 50_000
    assert outcome.ledger.revoked == 2  # its two partitions, and nobody else's


def test_a_shorter_session_timeout_shortens_the_gap_after_a_crash() -> None:
    scenario = _scenario(Event(120_000, Action.CRASH, ("m1",)))
    short = simulate(scenario, replace(COOPERATIVE, session_timeout_ms=10_000))
    assert max(short.ledger.longest_gap.values()) <= 15_000


def test_a_stall_longer_than_max_poll_interval_costs_the_member_its_partitions() -> None:
    stall = Event(120_000, Action.PAUSE, ("m1",), for_ms=90_000)
    short_poll = replace(COOPERATIVE, max_poll_interval_ms=60_000)
    outcome = simulate(_scenario(stall), short_poll)
    assert outcome.rebalances > 0 and outcome.ledger.revoked >= 2
    # Within max.poll.interval.ms the same stall costs nothing.
    assert simulate(_scenario(stall), COOPERATIVE).rebalances == 0


def test_eager_stops_the_world_while_a_crashed_member_holds_up_the_rebalance() -> None:
    """A new member arrives while a crashed one is still in the group: the join phase waits
    for the crashed member's session to expire, and eager members have revoked everything."""
    events = (Event(120_000, Action.CRASH, ("m1",)), Event(125_000, Action.JOIN, ("m3",)))
    scenario = replace(_scenario(*events), zones={m: "z0" for m in (*MEMBERS, "m3")})
    eager = simulate(scenario, EAGER).ledger
    cooperative = simulate(scenario, COOPERATIVE).ledger
    assert eager.stop_the_world_ms > 30_000
    assert cooperative.stop_the_world_ms == 0


def test_librdkafka_rejoins_without_waiting_for_a_slow_poll_loop() -> None:
    """Members that process each batch for 20 s: the Java client joins at its next poll,
    librdkafka's background thread at once, so the rebalance ends sooner."""
    slow = replace(_scenario(Event(120_000, Action.RESTART, ("m0",), down_ms=1_000)),
                   processing_ms=20_000)
    java = simulate(slow, EAGER).ledger.unowned_ms
    librdkafka = simulate(slow, replace(EAGER, client=ClientFlavour.LIBRDKAFKA)).ledger.unowned_ms
    assert librdkafka < java


def test_a_member_back_from_a_restart_gets_its_range_partitions_back() -> None:
    """Member ids are built from the client id (the member's name), and range hands out
    partitions in member id order: m1 leaves (its 2 and 3 go to m0 and m2) and comes back to
    the same place in the order, whatever random ids the coordinator draws."""
    restart = Event(120_000, Action.RESTART, ("m1",), down_ms=10_000)
    for seed in range(5):
        outcome = simulate(replace(_scenario(restart), seed=seed), EAGER)
        assert outcome.ledger.moved == 4, seed
