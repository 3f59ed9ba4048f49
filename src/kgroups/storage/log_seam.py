"""The seam between the broker's request handlers and a partition's log: what Produce, Fetch,
ListOffsets and DeleteRecords use of a log, met by the file log (kgroups.log.PartitionLog) and
by the PostgreSQL one (postgres_log.PostgresPartitionLog). The broker's handlers type their
log as this Protocol once they are wired to it.

Left out on purpose: what only the file log has (segments for retention, compaction and
ListOffsets v0's segment times); the PostgreSQL log does retention in the database instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from kgroups.log.batch import BatchHeader
from kgroups.log.config import LogConfig
from kgroups.log.transaction_state import PartitionTransactions


class PartitionLogSeam(Protocol):
    config: LogConfig

    @property
    def log_start_offset(self) -> int:
        """The first offset a consumer may read."""

    @property
    def log_end_offset(self) -> int:
        """The offset the next record gets (the high watermark: the store is the replica)."""

    @property
    def flush_due(self) -> bool:
        """Whether an append may be acknowledged only after `flush` (flush.messages)."""

    @property
    def closed(self) -> bool:
        """The topic was deleted or the broker stopped serving the partition."""

    @property
    def transactions(self) -> PartitionTransactions:
        """Open transactions, the last stable offset and the aborted ones, fed by
        append_batch."""

    def append_batch(self, batch: bytes) -> tuple[int, int]:
        """One RecordBatch v2 at the next offsets; (base offset, last offset)."""

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> bytes:
        """Whole batches from the one holding `offset`; OffsetOutOfRangeError outside
        [log start, log end]."""

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose record timestamp is >= `timestamp` (ListOffsets by time)."""

    def batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches holding `from_offset` and after, in offset order (the
        idempotent producers' state is rebuilt from them)."""

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with the largest timestamp; None if
        empty (ListOffsets MAX_TIMESTAMP)."""

    def leader_epoch_starts(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of each leader epoch the log holds, in offset order, ending
        with the one it is led at now (OffsetForLeaderEpoch, log.leader_epochs)."""

    def advance_log_start(self, offset: int) -> bool:
        """DeleteRecords: move the log start up; whether it moved."""

    def flush(self) -> None:
        """Make what was appended durable."""
