"""Transactions in a log, resolved by their markers as Kafka's readers resolve them.

A transactional record counts only once its producer's next control record in the same
partition is a COMMIT marker; at an ABORT marker it is dropped, and without any marker yet it
stays pending. The coordinator's replay (kgroups.log.replay) and the pipeline's partition task
(kgroups.pipeline.partition) both follow this rule through `PendingTransactions`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Generic, TypeVar

from kgroups.log.batch import build_batch, decode_batch

# A control record's key: version (int16), type (int16: 0 ABORT, 1 COMMIT); a marker's value:
# version (int16), the coordinator epoch of the transaction coordinator that wrote it (int32).
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
_ABORT, _COMMIT = 0, 1

Item = TypeVar("Item")


def marker_commits(key: bytes | None) -> bool | None:
    """True for a COMMIT marker's key, False for ABORT (or any other type), None when the key
    is too short to be a marker's."""
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    return _CONTROL_KEY.unpack_from(key)[1] == _COMMIT


def control_batch(producer_id: int, producer_epoch: int, commits: bool,
                  coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """A transaction's end in one partition as the control batch Kafka writes: transactional
    and control attributes set, the producer's id and epoch, no sequence, one marker record."""
    key = _CONTROL_KEY.pack(0, _COMMIT if commits else _ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value, timestamp_ms)], producer_id=producer_id,
                       producer_epoch=producer_epoch, transactional=True, control=True)


def marker_of(batch: bytes) -> tuple[bool, int] | None:
    """(commits, coordinator epoch) of a control batch's transaction marker; None for another
    control record (Kafka's leader-change and snapshot records) or an emptied batch."""
    decoded, _ = decode_batch(batch)
    if not decoded.records:
        return None
    record = decoded.records[0]
    if record.key is None or len(record.key) < _CONTROL_KEY.size or \
            _CONTROL_KEY.unpack_from(record.key)[1] not in (_ABORT, _COMMIT):
        return None
    value = record.value or b""
    epoch = _MARKER_VALUE.unpack_from(value)[1] if len(value) >= _MARKER_VALUE.size else -1
    return _CONTROL_KEY.unpack_from(record.key)[1] == _COMMIT, epoch


@dataclass(frozen=True, slots=True)
class TransactionMarker:
    """A control record: the end of `producer_id`'s transaction in this partition."""

    log_offset: int
    producer_id: int
    commits: bool


class PendingTransactions(Generic[Item]):
    """What each producer's open transaction has written so far, fed in log order; `end`
    releases it when the producer's marker comes."""

    def __init__(self) -> None:
        self._open: dict[int, list[Item]] = {}

    def hold(self, producer_id: int, items: list[Item]) -> None:
        self._open.setdefault(producer_id, []).extend(items)

    def open_items(self) -> dict[int, list[Item]]:
        """What each producer whose marker has not come yet has written (a log read back with
        transactions still open: the group coordinator keeps them pending)."""
        return {producer_id: list(items) for producer_id, items in self._open.items()}

    def end(self, producer_id: int, commits: bool) -> list[Item]:
        """The producer's transaction is over: its items if it committed, else nothing."""
        items = self._open.pop(producer_id, [])
        return items if commits else []


def committed_items(transactional: list[tuple[int, int, Item]],
                    markers: list[TransactionMarker]) -> list[Item]:
    """Of (log offset, producer id, item) written inside transactions, the items whose
    transaction committed, given every marker of the partition (in any order)."""
    events: list[tuple[int, int, Item | None, TransactionMarker | None]] = [
        (offset, producer_id, item, None) for offset, producer_id, item in transactional]
    events += [(m.log_offset, m.producer_id, None, m) for m in markers]
    events.sort(key=lambda event: event[0])
    pending: PendingTransactions[Item] = PendingTransactions()
    committed: list[Item] = []
    for _offset, producer_id, item, marker in events:
        if marker is None:
            pending.hold(producer_id, [item])  # type: ignore[list-item]
        else:
            committed += pending.end(producer_id, marker.commits)
    return committed
