"""Transactions resolved by markers: the rule the coordinator's replay and the pipeline share."""

from __future__ import annotations

import struct

from kgroups.log.transactions import TransactionMarker, committed_items, marker_commits


def test_marker_keys() -> None:
    assert marker_commits(struct.pack(">hh", 0, 1)) is True
    assert marker_commits(struct.pack(">hh", 0, 0)) is False
    assert marker_commits(b"\x00") is None
    assert marker_commits(None) is None


def test_each_record_follows_the_next_marker_of_its_own_producer() -> None:
    written = [(10, 7, "a1"), (11, 8, "b1"), (13, 7, "a2"), (15, 8, "b2"), (17, 9, "c1")]
    markers = [TransactionMarker(14, 8, False),  # aborts b1, not b2 (written after it)
               TransactionMarker(12, 7, True),   # commits a1, not a2 (written after it)
               TransactionMarker(16, 7, True),   # commits a2
               TransactionMarker(18, 8, True)]   # commits b2; c1's producer has no marker yet
    assert sorted(committed_items(written, markers)) == ["a1", "a2", "b2"]
