"""Who held which partition when (`partition_owners`), from the assignments of a classic
group's generations and of a KIP-848 group's targets, analysed as one partition task runs."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from tests.pipeline.logdata import OffsetsLogBuilder, coordinator_partition
from tests.pipeline.test_consumer_history import G as CONSUMER_GROUP
from tests.pipeline.test_consumer_history import _result, _two_members_reconcile

from kgroups.pipeline.ownership import PARTITION_OWNERS
from kgroups.pipeline.partition import analyze_partition
from kgroups.pipeline.tables import clear_table
from kgroups.pipeline.window import TimeWindow

T = 1_700_000_000_000
OPEN = TimeWindow()
A, B = [("t", 0), ("t", 1)], [("t", 2)]


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _stretches(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["partition"], r["member_id"], r["from_generation"], _ms(r["from_ts"]) - T,
             None if r["until_ts"] is None else _ms(r["until_ts"]) - T) for r in rows]


def _classic(tmp_path: Path, window: TimeWindow = OPEN) -> list[dict[str, Any]]:
    log = OffsetsLogBuilder()
    log.generation("g", 1, {"m1": A + B}, T)
    # m2 joins: t-2 moves; s-1 is static member "s".
    log.generation("g", 2, {"m1": A, "s-1": B}, T + 1000, instance_ids={"s-1": "s"})
    # The static member restarts under a new member id: it keeps holding t-2.
    log.generation("g", 3, {"m1": A, "s-2": B}, T + 2000, instance_ids={"s-2": "s"})
    log.delete_group("g", T + 5000)
    segments = sorted(str(p) for p in log.write(tmp_path / "data"))
    out = str(tmp_path / "out")
    clear_table(out, "offset_commits")
    result = analyze_partition(coordinator_partition("g"), segments, window, None, out)
    assert result.partition_owners.schema == PARTITION_OWNERS
    return result.partition_owners.to_pylist()


def test_each_stretch_a_member_held_a_partition(tmp_path: Path) -> None:
    rows = _classic(tmp_path)
    assert _stretches(rows) == [
        (0, "m1", 1, 0, 5000), (1, "m1", 1, 0, 5000),
        (2, "m1", 1, 0, 1000), (2, "s-1", 2, 1000, 5000)]  # the deletion ends them all
    assert rows[3]["instance_id"] == "s" and rows[3]["client_id"] == "client-s-1"
    assert {r["group_type"] for r in rows} == {"classic"}


def test_the_window_starts_the_stretches_at_its_first_generation(tmp_path: Path) -> None:
    rows = _classic(tmp_path, TimeWindow(since_ms=T + 1500, until_ms=T + 3000))
    # Held when the window starts and still when it ends.
    assert _stretches(rows) == [(0, "m1", 3, 2000, None), (1, "m1", 3, 2000, None),
                                (2, "s-2", 3, 2000, None)]


def test_a_consumer_groups_targets_say_who_held_what(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    _two_members_reconcile(log)
    rows = _result(log, tmp_path).partition_owners.to_pylist()
    assert {r["group"] for r in rows} == {CONSUMER_GROUP}
    assert [(p, m, g, start, end) for p, m, g, start, end in _stretches(rows)] == [
        (0, "a", 1, 0, 10_000), (0, "b", 3, 10_000, None),
        (1, "a", 1, 0, 10_000), (1, "b", 3, 10_000, None),
        (2, "a", 1, 0, 1000), (2, "b", 2, 1000, None),
        (3, "a", 1, 0, 1000), (3, "b", 2, 1000, None)]
