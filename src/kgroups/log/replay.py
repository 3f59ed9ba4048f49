"""The last word per key in a compacted topic's log, for fast state rebuilds.

Rebuilding __consumer_offsets state only needs the final record of each key: every earlier
commit of the same partition is overwritten anyway. Walking the log once and keeping the latest
raw record per key lets a loader decode each key's value once instead of once per commit, which
is what makes replaying a long, repetitive log fast. Transactions are honoured as Kafka's loader
does: a transactional record counts only once its producer's COMMIT marker follows, and is
discarded at an ABORT marker.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from operator import itemgetter

from kgroups.log.batch import CONTROL, TRANSACTIONAL, check_batch, records_of

RawRecord = tuple[int, int, bytes, bytes | None]  # offset, timestamp, key, value

_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 = ABORT, 1 = COMMIT)
_COMMIT = 1
_key = itemgetter(2)


class LatestPerKey:
    """Feed log bytes in offset order with `add`; `records()` gives each key's last record."""

    def __init__(self) -> None:
        self._latest: dict[bytes, RawRecord] = {}
        self._pending: dict[int, dict[bytes, RawRecord]] = {}
        self.records_seen = 0  # data records walked, control records not counted

    def add(self, data: bytes) -> None:
        """Take every batch in `data` (whole batches, as a segment file or a fetch holds)."""
        latest = self._latest
        pos = 0
        size = len(data)
        while pos < size:
            header, end = check_batch(data, pos)
            attributes = header[5]
            rows = records_of(data, pos, end, header, False)
            if attributes & CONTROL:
                self._end_transaction(header[9], rows)
                pos = end
                continue
            self.records_seen += len(rows)
            # zip(map(...)) keeps the per-record loop in C; keyless records land under None
            # and are dropped below (a compacted topic cannot hold them).
            target = (
                self._pending.setdefault(header[9], {}) if attributes & TRANSACTIONAL else latest
            )
            target.update(zip(map(_key, rows), rows, strict=True))
            pos = end
        latest.pop(None, None)  # type: ignore[call-overload]
        for pending in self._pending.values():
            pending.pop(None, None)  # type: ignore[call-overload]

    def _end_transaction(self, producer_id: int, rows: list[tuple[object, ...]]) -> None:
        pending = self._pending.pop(producer_id, {})
        for row in rows:
            marker = row[2]
            if isinstance(marker, bytes) and len(marker) >= 4:
                if _CONTROL_KEY.unpack_from(marker)[1] == _COMMIT:
                    self._latest.update(pending)
                return

    def records(self) -> list[RawRecord]:
        """Each key's last committed record, in offset order (tombstones included)."""
        return sorted(self._latest.values())


def latest_per_key(chunks: Iterable[bytes]) -> list[RawRecord]:
    """Each key's last committed record across `chunks` (log bytes in offset order)."""
    table = LatestPerKey()
    for chunk in chunks:
        table.add(chunk)
    return table.records()
