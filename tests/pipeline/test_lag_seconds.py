"""lag_seconds: the age of the first unconsumed record read back from the topic log (its own
timestamp, not its batch's), and the commit-rate estimate when that record is gone."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from tests.pipeline.logdata import segment_name

from kgroups.log.batch import build_batch
from kgroups.pipeline import tables
from kgroups.pipeline.decode import decode_topic_segment
from kgroups.pipeline.discovery import find_inputs
from kgroups.pipeline.lag_seconds import add_lag_seconds

T = 1_700_000_000_000
NOW = T + 600_000


def write_segment(data: Path, topic: str, base: int, stamps: list[list[int]]) -> None:
    """Batches of records with the given timestamps, from offset `base` on."""
    directory = data / f"{topic}-0"
    directory.mkdir(parents=True, exist_ok=True)
    parts, offset = [], base
    for batch in stamps:
        parts.append(build_batch([(None, b"v", ts) for ts in batch], base_offset=offset))
        offset += len(batch)
    (directory / segment_name(base)).write_bytes(b"".join(parts))


def lag_rows(rows: list[tuple[str, int, int]]) -> pa.Table:
    """(topic, committed, log end) per partition 0 of group g, as tables.lag_table makes it."""
    return pa.Table.from_pylist(
        [{"group": "g", "topic": topic, "partition": 0, "committed_offset": committed,
          "log_end_offset": end, "lag": end - committed, "status": "OK", "group_status": "OK"}
         for topic, committed, end in rows], schema=tables.LAG)


def test_age_of_the_record_at_the_committed_offset_else_the_commit_rate(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "__consumer_offsets-0").mkdir(parents=True)
    (data / "__consumer_offsets-0" / segment_name(0)).write_bytes(b"")
    # orders: two segments; the first unconsumed record (offset 6) is mid-batch in the second.
    write_segment(data, "orders", 0, [[T, T + 1000], [T + 2000, T + 3000]])
    write_segment(data, "orders", 4, [[T + 60_000, T + 61_000, T + 62_000, T + 63_000]])
    # clicks: retention removed offsets below 100; the group is at 50.
    write_segment(data, "clicks", 100, [[T + 100_000] * 10])
    inputs = find_inputs([str(data)])
    batches = pa.concat_tables(decode_topic_segment(s.uri, s.topic, s.partition)
                               for s in inputs.topic_segments)
    lag = lag_rows([("orders", 6, 8), ("orders", 8, 8), ("clicks", 50, 110)])
    # clicks: 40 offsets consumed in 20 s, 2 per second: 60 behind is 30 s.
    windows = pa.Table.from_pylist(
        [{"group": "g", "topic": "clicks", "partition": 0, "offset": o, "ts_ms": ts, "lag": 0}
         for o, ts in ((10, T), (30, T + 10_000), (50, T + 20_000))],
        schema=tables.LAG_WINDOWS)

    result = add_lag_seconds(lag, windows, batches, inputs.topic_segments, NOW).to_pylist()

    assert [(r["topic"], r["lag_seconds"], r["lag_seconds_source"]) for r in result] == [
        ("orders", (NOW - (T + 62_000)) / 1000, "record"),
        ("orders", 0.0, None),
        ("clicks", 30.0, "commit_rate"),
    ]
