"""The ledger's arithmetic on hand-made ownership changes."""

from __future__ import annotations

from kgroups.simulate import OwnershipLedger

P0, P1 = ("t", 0), ("t", 1)


def test_gaps_moves_and_stop_the_world_are_counted_from_the_measure_start() -> None:
    ledger = OwnershipLedger((P0, P1), measure_from=1_000)
    ledger.gain("a", [P0, P1], 500)  # before the measure start: the first gap is not counted
    ledger.lose("a", [P0, P1], 2_000)  # eager-style: everything revoked
    ledger.gain("a", [P0], 2_500)
    ledger.gain("b", [P1], 4_000)
    ledger.finish(10_000)
    assert ledger.unowned_ms == 500 + 2_000
    assert ledger.longest_gap == {P0: 500, P1: 2_000}
    assert ledger.stop_the_world_ms == 500  # 2.0 s to 2.5 s: nothing consumed
    assert ledger.revoked == 2 and ledger.moved == 1  # P1 went from a to b
    assert ledger.max_owners == 1


def test_a_second_owner_is_noticed() -> None:
    ledger = OwnershipLedger((P0,), measure_from=0)
    ledger.gain("a", [P0], 0)
    ledger.gain("b", [P0], 10)
    assert ledger.max_owners == 2 and ledger.first_double == (10, P0, ("a", "b"))
