"""--since/--until of `kgroups analyze`: which records count for state and which for history."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """--since/--until in epoch ms (None = open). State tables are computed as of `until`;
    history tables keep only rows inside the window."""

    since_ms: int | None = None
    until_ms: int | None = None

    def reached(self, ts: int) -> bool:
        """A record at `ts` happened by `until` (it counts for state)."""
        return self.until_ms is None or ts <= self.until_ms

    def contains(self, ts: int) -> bool:
        """A record at `ts` is inside the window (it counts for history)."""
        return self.reached(ts) and (self.since_ms is None or ts >= self.since_ms)

    def up_to_until(self, table: pa.Table, column: str) -> pa.Table:
        """The rows of `table` whose `column` (epoch ms) is at or before `until`."""
        if self.until_ms is None:
            return table
        return table.filter(pc.less_equal(table[column], self.until_ms))

    def inside(self, table: pa.Table, column: str) -> pa.Table:
        """The rows of `table` whose `column` (epoch ms) is inside the window."""
        table = self.up_to_until(table, column)
        if self.since_ms is None:
            return table
        return table.filter(pc.greater_equal(table[column], self.since_ms))
