"""The last word per key in a compacted topic's log, for fast state rebuilds.

Rebuilding __consumer_offsets state only needs the final record of each key: every earlier
commit of the same partition is overwritten anyway. Walking the log once and keeping the latest
raw record per key lets a loader decode each key's value once instead of once per commit, which
is what makes replaying a long, repetitive log fast. Transactions are honoured as Kafka's loader
does: a transactional record counts only once its producer's COMMIT marker follows, and is
discarded at an ABORT marker.

Plain uncompressed batches (what a coordinator writes) are walked with `locate_values`, which
notes where each record's value lies instead of copying it, and only the survivors' values are
copied out at the end of the chunk; every other batch goes through `records_of`.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Any

from kgroups.log.batch import (
    COMPRESSION_MASK,
    CONTROL,
    TIMESTAMP_LOG_APPEND,
    TRANSACTIONAL,
    ValueSpan,
    check_batch,
    locate_values,
    records_of,
)
from kgroups.log.transactions import PendingTransactions, marker_commits

RawRecord = tuple[int, int, bytes, bytes | None]  # offset, timestamp, key, value
# Key -> its newest fast-path record in the current chunk, the value located, not yet copied.
_Located = dict[bytes | None, ValueSpan]

_GENERAL_PATH = CONTROL | TRANSACTIONAL | COMPRESSION_MASK | TIMESTAMP_LOG_APPEND
_key = itemgetter(2)
_offset = itemgetter(0)


class LatestPerKey:
    """Feed log bytes in offset order with `add`; `records()` gives each key's last record."""

    def __init__(self) -> None:
        self._latest: dict[bytes, RawRecord] = {}
        self._pending: PendingTransactions[RawRecord] = PendingTransactions()
        self._epochs: dict[int, int] = {}  # the producer epoch of each open transaction
        self.records_seen = 0  # data records walked, control records not counted

    def add(self, data: bytes) -> None:
        """Take every batch in `data` (whole batches, as a segment file or a fetch holds)."""
        if type(data) is not bytes:
            data = bytes(data)
        latest = self._latest
        # Keys whose newest record so far is a fast-path one in this chunk; such an entry is
        # always newer than the key's entry in `latest`.
        located: _Located = {}
        pos = 0
        size = len(data)
        try:
            while pos < size:
                header, end = check_batch(data, pos)
                attributes = header.attributes
                if not attributes & _GENERAL_PATH:
                    locate_values(data, pos, end, header, located)
                    self.records_seen += header.records_count
                    pos = end
                    continue
                rows = records_of(data, pos, end, header, False)
                if attributes & CONTROL:
                    self._end_transaction(header.producer_id, rows, located)
                    pos = end
                    continue
                self.records_seen += len(rows)
                if attributes & TRANSACTIONAL:
                    self._pending.hold(header.producer_id, rows)
                    self._epochs[header.producer_id] = header.producer_epoch
                else:
                    for row in rows:
                        key = row[2]
                        located.pop(key, None)
                        if key is not None:  # keyless records are not state
                            latest[key] = row
                pos = end
        finally:
            # Whatever was read before a failure stays: nothing whole is lost.
            for offset, timestamp, key, start, length in located.values():
                if key is not None:  # keyless records are not state
                    value = None if length < 0 else data[start : start + length]
                    latest[key] = (offset, timestamp, key, value)

    def _end_transaction(
        self, producer_id: int, rows: list[tuple[Any, ...]], located: _Located
    ) -> None:
        commits = next((c for row in rows if (c := marker_commits(row[2])) is not None), False)
        self._epochs.pop(producer_id, None)
        self._commit(self._pending.end(producer_id, commits), located)

    def _commit(self, rows: list[RawRecord], located: _Located) -> None:
        """Apply a committed transaction's records, except where a record written later in the
        log already replaced them (Kafka's loader also keeps the newer one)."""
        latest = self._latest
        for row in rows:
            key = row[2]
            if key is None:
                continue  # keyless records are not state
            newer = located.get(key) or latest.get(key)
            if newer is None or newer[0] < row[0]:
                located.pop(key, None)
                latest[key] = row

    def open_transactions(self) -> dict[tuple[int, int], list[RawRecord]]:
        """(producer id, producer epoch) -> the records of each transaction without its marker
        yet, less those a later record of the same key replaced (a COMMIT marker would not
        apply them): what the group coordinator holds pending after reading the log."""
        latest = self._latest
        opened: dict[tuple[int, int], list[RawRecord]] = {}
        for producer_id, rows in self._pending.open_items().items():
            kept = [row for row in rows if row[2] is not None
                    and ((newer := latest.get(row[2])) is None or newer[0] < row[0])]
            opened[(producer_id, self._epochs.get(producer_id, -1))] = kept
        return opened

    def records(self) -> list[RawRecord]:
        """Each key's last committed record, in offset order (tombstones included)."""
        return sorted(self._latest.values(), key=_offset)


def latest_per_key(chunks: Iterable[bytes]) -> list[RawRecord]:
    """Each key's last committed record across `chunks` (log bytes in offset order)."""
    table = LatestPerKey()
    for chunk in chunks:
        table.add(chunk)
    return table.records()

