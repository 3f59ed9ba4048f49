"""A run's outcomes as a person reads them (one table, variants side by side) and as a script
reads them (JSON)."""

from __future__ import annotations

from typing import Any

from kgroups.simulate.engine import Outcome
from kgroups.simulate.scenario import Scenario

COLUMNS = ("variant", "rebalances", "revoked", "moved", "unowned p·s", "stop-world s",
           "longest gap s", "commits refused")


def summary(outcome: Outcome) -> dict[str, Any]:
    ledger = outcome.ledger
    gaps = {f"{topic}-{partition}": round(ms / 1000, 3)
            for (topic, partition), ms in sorted(ledger.longest_gap.items())}
    return {
        "variant": outcome.variant.name,
        "protocol": outcome.variant.protocol.value,
        "assignor": outcome.variant.assignor,
        "static": outcome.variant.static,
        "rebalances": outcome.rebalances,
        "partitions_revoked": ledger.revoked,
        "partitions_moved": ledger.moved,
        "unowned_partition_seconds": round(ledger.unowned_ms / 1000, 3),
        "stop_the_world_seconds": round(ledger.stop_the_world_ms / 1000, 3),
        "longest_gap_seconds": max(gaps.values(), default=0.0),
        "longest_gap_per_partition": gaps,
        "commits": outcome.commits_sent,
        # The history's row: commit records in the log; refusals are never written there.
        "commits_refused": None if outcome.recorded else outcome.commits_refused,
        "commit_refusals": dict(sorted(outcome.refusal_errors.items())),
        "most_owners_at_once": ledger.max_owners,
        "failed_members": dict(sorted(outcome.member_failures.items())),
        "simulator_events": outcome.events_processed,
        "recorded": outcome.recorded,
    }


def as_json(scenario: Scenario, outcomes: list[Outcome],
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run for scripts; `extra` adds keys (`from_history`: where the schedule came from)."""
    return {
        "scenario": scenario.name,
        "duration_seconds": scenario.duration_ms / 1000,
        "measured_from_seconds": scenario.measure_from_ms / 1000,
        "members_at_start": len(scenario.members),
        "partitions": sum(scenario.topics.values()),
        "seed": scenario.seed,
        "variants": [summary(o) for o in outcomes],
        **(extra or {}),
    }


def table(scenario: Scenario, outcomes: list[Outcome]) -> str:
    rows = [COLUMNS]
    for outcome in outcomes:
        s = summary(outcome)
        rows.append((s["variant"], str(s["rebalances"]), str(s["partitions_revoked"]),
                     str(s["partitions_moved"]), f"{s['unowned_partition_seconds']:.1f}",
                     f"{s['stop_the_world_seconds']:.1f}", f"{s['longest_gap_seconds']:.1f}",
                     "-" if s["commits_refused"] is None else str(s["commits_refused"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [f"{scenario.name}: {len(scenario.members)} members, "
             f"{sum(scenario.topics.values())} partitions, {scenario.duration_ms / 1000:g} s "
             f"(measured from {scenario.measure_from_ms / 1000:g} s), seed {scenario.seed}"]
    for number, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:],
                                                                         strict=True)]
        lines.append("  ".join(cells))
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
