"""What `kgroups analyze` tells of transactions: the transactional offset commits of each group
(TxnOffsetCommit records in __consumer_offsets, resolved by their markers) and the transactions
the coordinators recorded in __transaction_state.

A transactional commit is committed, aborted or pending by kgroups.log.transactions' rule: its
producer's next marker in the same partition decides, and with no marker yet it is pending (a
coordinator holds it back from OffsetFetch; require_stable readers wait for it). Each
transaction is counted once per group, by its marker.

__transaction_state is small (one key per transactional id, compacted), so it is read on the
driver. Each record carries the transaction's start time; the records of one transactional id
sharing a start time are one transaction, whose last record says how far it got and whose
Ongoing and Prepare records name its partitions (the Complete record names none). Compaction
keeps only each id's last record in the cleaned segments, so older transactions thin out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from kgroups.log.transactions import PendingTransactions, TransactionMarker
from kgroups.pipeline.decode import internal_topic_records
from kgroups.pipeline.discovery import SegmentFile
from kgroups.pipeline.tables import TIMESTAMP
from kgroups.pipeline.window import TimeWindow
from kgroups.records.transaction_log import (
    TRANSACTION_STATUS_NAMES,
    decode_transaction_log_key,
    decode_transaction_log_value,
)

TRANSACTION_STATE_TOPIC = "__transaction_state"
OUTCOMES = ("committed", "aborted", "pending")

TRANSACTIONAL_COMMITS = pa.schema([
    ("group", pa.string()),
    ("outcome", pa.string()),  # committed, aborted, pending
    ("transactions", pa.int64()),  # the transactions (by their marker; pending: by producer)
    ("offsets", pa.int64()),  # the offset commit records they hold
    ("first_ts", TIMESTAMP),
    ("last_ts", TIMESTAMP),
])

TRANSACTIONS = pa.schema([
    ("transactional_id", pa.string()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int32()),
    ("state", pa.string()),  # the last state the transaction reached (Kafka's names)
    ("partitions", pa.list_(pa.string())),  # topic-partition
    ("start_ts", TIMESTAMP),
    ("last_update_ts", TIMESTAMP),
    ("duration_ms", pa.int64()),  # start to last update
    ("timeout_ms", pa.int32()),
])


def transactional_commits(commits: pa.Table, markers: list[TransactionMarker],
                          window: TimeWindow) -> pa.Table:
    """TRANSACTIONAL_COMMITS of one __consumer_offsets partition's commit rows (decode's
    COMMIT_ROW_SCHEMA, log order) and its markers; the commits written inside `window` are
    counted (resolved by every marker, inside it or not)."""
    chosen = commits.filter(commits["transactional"]).select(
        ["log_offset", "producer_id", "group", "record_ts"]).to_pylist()
    if not chosen:
        return TRANSACTIONAL_COMMITS.empty_table()
    events: list[tuple[int, int, dict[str, Any] | None, TransactionMarker | None]] = [
        (row["log_offset"], row["producer_id"], row, None) for row in chosen]
    events += [(m.log_offset, m.producer_id, None, m) for m in markers]
    events.sort(key=lambda event: event[0])
    pending: PendingTransactions[dict[str, Any]] = PendingTransactions()
    # (group, outcome) -> [transactions, offsets, first ts, last ts]
    counts: dict[tuple[str, str], list[Any]] = {}
    seen: set[tuple[str, str, tuple[str, int]]] = set()

    def count(row: dict[str, Any], outcome: str, transaction: tuple[str, int]) -> None:
        if not window.contains(row["record_ts"]):
            return
        entry = counts.setdefault((row["group"], outcome), [0, 0, row["record_ts"],
                                                            row["record_ts"]])
        if (row["group"], outcome, transaction) not in seen:
            seen.add((row["group"], outcome, transaction))
            entry[0] += 1
        entry[1] += 1
        entry[2] = min(entry[2], row["record_ts"])
        entry[3] = max(entry[3], row["record_ts"])

    ended: set[int] = set()
    for _offset, producer_id, row, marker in events:
        if marker is None:
            pending.hold(producer_id, [row] if row is not None else [])
            continue
        # `end` with commits=True hands back what the transaction wrote, whichever way it ended.
        for held in pending.end(producer_id, True):
            ended.add(held["log_offset"])
            count(held, "committed" if marker.commits else "aborted",
                  ("marker", marker.log_offset))
    for row in chosen:
        if row["log_offset"] not in ended:
            count(row, "pending", ("open", row["producer_id"]))
    return _counts_table(counts)


def _counts_table(counts: dict[tuple[str, str], list[Any]]) -> pa.Table:
    rows = [{"group": group, "outcome": outcome, "transactions": entry[0], "offsets": entry[1],
             "first_ts": entry[2], "last_ts": entry[3]}
            for (group, outcome), entry in sorted(counts.items())]
    return pa.Table.from_pylist(rows, schema=TRANSACTIONAL_COMMITS)


def read_transaction_state(segments: Iterable[SegmentFile]) -> pa.Table:
    """TRANSACTIONS from the __transaction_state segments found beside the offsets topic (in
    any order: each partition's are read in offset order); a damaged segment is logged and
    left out."""
    # (transactional id, start ts) -> the transaction's row; partitions gathered on the way.
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for key, record in internal_topic_records(segments, TRANSACTION_STATE_TOPIC):
        value = decode_transaction_log_value(record.value)
        if value is None or value.start_timestamp_ms < 0:
            continue  # a tombstone (expired id), or no transaction begun (Empty)
        transactional_id = decode_transaction_log_key(key).transactional_id
        row = found.setdefault((transactional_id, value.start_timestamp_ms), {
            "transactional_id": transactional_id, "partitions": set(),
            "start_ts": value.start_timestamp_ms})
        row["partitions"] |= {f"{topic}-{index}" for topic, indexes in
                              value.partitions or () for index in indexes}
        row.update(producer_id=value.producer_id, producer_epoch=value.producer_epoch,
                   state=TRANSACTION_STATUS_NAMES.get(value.transaction_status,
                                             str(value.transaction_status)),
                   last_update_ts=value.last_update_timestamp_ms,
                   duration_ms=value.last_update_timestamp_ms - value.start_timestamp_ms,
                   timeout_ms=value.transaction_timeout_ms)
    rows = [{**row, "partitions": sorted(row["partitions"])}
            for _, row in sorted(found.items())]
    return pa.Table.from_pylist(rows, schema=TRANSACTIONS)
