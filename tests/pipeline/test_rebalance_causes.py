"""The rebalance_causes table, inferred from one __consumer_offsets partition (analysed as a
Spark task would, outside Spark): every cause the log can show, from a group's generations
and its commits."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from tests.pipeline.logdata import OffsetsLogBuilder
from tests.pipeline.test_partition import OPEN, T, analyze

from kgroups.pipeline.rebalance_report import cause_counts, causes_section
from kgroups.pipeline.window import TimeWindow

SECOND = 1000
T0, T1, U0 = ("t", 0), ("t", 1), ("u", 0)


def causes_of(log: OffsetsLogBuilder, tmp_path: Path,
              window: TimeWindow = OPEN) -> list[tuple]:
    result, _ = analyze(log, "g", tmp_path, window)
    return [(r["to_generation"], r["cause"], r["member_id"], r["silent_seconds"])
            for r in result.rebalance_causes.to_pylist()]


def test_each_cause_from_generations_and_commits(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    log.generation("g", 1, {"a": [T0, T1]}, T)
    log.generation("g", 2, {"a": [T0], "b": [T1]}, T + 10 * SECOND)
    log.commit("g", {T0: 5, T1: 5}, T + 11 * SECOND)
    log.commit("g", {T1: 7}, T + 20 * SECOND)  # b's last sign of life
    log.generation("g", 3, {"a": [T0, T1]}, T + 25 * SECOND)
    log.commit("g", {T0: 9, T1: 9}, T + 30 * SECOND)  # a's last sign of life
    # a silent for 90 s, over its 45 s session timeout; c new.
    log.generation("g", 4, {"c": [T0, T1]}, T + 120 * SECOND)
    log.generation("g", 5, {"c": [T0], "s-1": [T1]}, T + 130 * SECOND,
                   instance_ids={"s-1": "s"})
    log.generation("g", 6, {"c": [T0], "s-2": [T1]}, T + 140 * SECOND,
                   instance_ids={"s-2": "s"})
    log.generation("g", 7, {"c": [T0], "s-2": [T1]}, T + 150 * SECOND,
                   instance_ids={"s-2": "s"})
    log.generation("g", 8, {"c": [T0, U0], "s-2": [T1]}, T + 160 * SECOND,
                   instance_ids={"s-2": "s"})
    assert causes_of(log, tmp_path) == [
        (2, "new_member_joined", "b", None),
        (3, "member_left", "b", 5.0),
        (4, "new_member_joined", "c", None),
        (4, "session_timeout", "a", 90.0),
        (5, "new_member_joined", "s-1", None),
        (6, "static_member_replaced", "s-2", None),
        (7, "metadata_change", None, None),
        (8, "member_metadata_changed", None, None),
    ]


def test_a_deleted_group_starts_afresh_and_the_window_bounds_the_rows(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    log.generation("g", 1, {"a": [T0]}, T)
    log.commit("g", {T0: 1}, T + 5 * SECOND)
    log.generation("g", 2, {}, T + 10 * SECOND)  # a left: the group is empty
    log.delete_group("g", T + 20 * SECOND)
    log.generation("g", 1, {"b": [T0]}, T + 30 * SECOND)  # a new group, no rebalance
    log.generation("g", 2, {"b": [T0], "c": [T0]}, T + 40 * SECOND)
    log.commit("g", {T0: 2}, T + 45 * SECOND)
    assert causes_of(log, tmp_path) == [
        (2, "member_left", "a", 5.0),
        (2, "new_member_joined", "c", None),
    ]
    assert causes_of(log, tmp_path / "w", TimeWindow(since_ms=T + 35 * SECOND)) == [
        (2, "new_member_joined", "c", None),
    ]


def test_report_puts_the_groups_that_rebalance_most_first_with_their_causes() -> None:
    def at(second: int) -> pd.Timestamp:
        return pd.Timestamp(T + second * SECOND, unit="ms", tz="UTC")

    causes = pd.DataFrame(
        [("calm", 2, at(5), "new_member_joined"),
         ("busy", 2, at(10), "new_member_joined"),
         ("busy", 3, at(70), "session_timeout"),
         ("busy", 4, at(130), "session_timeout"),
         ("busy", 4, at(130), "new_member_joined")],
        columns=["group", "to_generation", "ts", "cause"])
    counts = cause_counts(causes)
    assert counts[["group", "rebalances", "session_timeout", "new_member_joined"]] \
        .to_dict("records") == [
        {"group": "busy", "rebalances": 3, "session_timeout": 2, "new_member_joined": 2},
        {"group": "calm", "rebalances": 1, "session_timeout": 0, "new_member_joined": 1},
    ]
    page = causes_section(causes, lambda frame: frame.to_html())
    assert page.count("<img") == 1
    assert page.index("busy") < page.index("calm")
