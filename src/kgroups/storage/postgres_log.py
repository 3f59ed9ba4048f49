"""A partition's log in PostgreSQL, for the broker that holds its lease: what the broker's
Produce, Fetch, ListOffsets and DeleteRecords use of a log (log_seam.PartitionLogSeam).

Every append is the store's fenced append, so once the lease is lost every write raises
FencedError and writes nothing; the broker then answers NOT_LEADER_OR_FOLLOWER and drops this
object. An append is durable when it returns (PostgreSQL committed it, and PostgreSQL's own
replication is the partition's), so the high watermark is the log end and `flush` has nothing
left to do. The offsets are kept here and moved by this object's own writes: only the lease
holder writes the partition, so they cannot change under it.

Except by a write whose outcome this object does not know: when the connection broke during a
commit, the store raised StorageUnavailableError but the batch may be stored. Such an append
is never reported as written; the next call re-reads the offsets first, and when the batch did
commit and came from an idempotent producer, its retry (same producer id, epoch and
sequences) is answered with the offsets it was stored at instead of being written again, as a
retry is after a lost acknowledgement. A plain producer's retry is written twice, as on Kafka
when an acknowledgement is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from kgroups.log.batch import BatchHeader, check_batch, decode_batch, iter_batches, read_header
from kgroups.log.compaction import CompactionResult, clean_batch, latest_offsets
from kgroups.log.config import LogConfig
from kgroups.log.leader_epochs import epoch_starts
from kgroups.log.partition_log import OffsetOutOfRangeError
from kgroups.log.transaction_state import REBUILD_TAIL_OFFSETS, PartitionTransactions
from kgroups.log.txn_index import AbortedTransaction
from kgroups.storage.database import StorageUnavailableError
from kgroups.storage.postgresql import FencedError, Lease, PostgresStore

logger = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
# (producer id, producer epoch, base sequence, last offset delta): what makes a retry a retry.
_Identity = tuple[int, int, int, int]
# In-doubt batches found stored, kept for their retries: one per connection lost in a commit.
_REMEMBERED_IN_DOUBT = 8


def _identity(header: BatchHeader) -> _Identity:
    return (header.producer_id, header.producer_epoch, header.base_sequence,
            header.last_offset_delta)


class PostgresPartitionLog:
    def __init__(self, store: PostgresStore, lease: Lease, config: LogConfig) -> None:
        self._store = store
        self.lease = lease
        self.config = config
        self.closed = False
        state = store.partition_state(lease.topic, lease.partition)
        self._start = state.log_start_offset
        self._end = state.next_offset
        # A write failed with StorageUnavailableError: the offsets may have moved.
        self._stale = False
        # The idempotent batch whose append failed so, while not known whether it is stored.
        self._in_doubt: _Identity | None = None
        # Such batches found stored: identity -> (base offset, last offset).
        self._stored_in_doubt: dict[_Identity, tuple[int, int]] = {}
        # The log end at the last compaction: nothing to do until records arrive past it.
        self._compacted_to = -1
        # Open transactions, the LSO and the aborted ones, loaded at first use.
        self._transactions: PartitionTransactions | None = None

    @property
    def transactions(self) -> PartitionTransactions:
        """The partition's transactions; at first use, the aborted ones from their table, the
        open ones from the log's tail (kgroups.log.transaction_state says the bound)."""
        if self._transactions is None:
            tracker = PartitionTransactions(
                self._store.aborted_transactions(self.lease.topic, self.lease.partition))
            tracker.rebuild(
                self.batch_headers(max(self._start, self._end - REBUILD_TAIL_OFFSETS)),
                lambda offset: self.read(offset, 1), self._store_abort)
            self._transactions = tracker
        return self._transactions

    def _store_abort(self, aborted: AbortedTransaction) -> None:
        """Keep the aborted transaction in its table. The marker is committed already, so a
        failure is logged and the append stands: the entry is listed from memory, and whoever
        loads the partition's transactions next writes it again from the marker."""
        try:
            self._store.add_aborted_transaction(self.lease, aborted)
        except (StorageUnavailableError, FencedError) as exc:
            logger.error("could not store producer %d's aborted transaction (offsets %d-%d) "
                         "of %s-%d (%s)", aborted.producer_id, aborted.first_offset,
                         aborted.last_offset, self.lease.topic, self.lease.partition, exc)

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def flush_due(self) -> bool:
        """Never: every append is committed before it returns."""
        return False

    def flush(self) -> None:
        """Nothing is ever pending: PostgreSQL committed every append already."""

    def append_batch(self, batch: bytes) -> tuple[int, int]:
        """FencedError (nothing written) once the lease is lost; StorageUnavailableError when
        the store is unreachable (the batch may be stored: see the module's docstring)."""
        self._settle()
        header = read_header(batch)
        if header.producer_id != NO_PRODUCER_ID:
            stored = self._stored_in_doubt.pop(_identity(header), None)
            if stored is not None:
                return stored
        transactions = self.transactions  # loaded before this batch is in the log
        try:
            base, last = self._store.append(self.lease, batch)
        except StorageUnavailableError:
            self._stale = True
            if header.producer_id != NO_PRODUCER_ID:
                self._in_doubt = _identity(header)
            raise
        self._end = last + 1
        aborted = transactions.observe(header, base, lambda: batch)
        if aborted is not None:
            self._store_abort(aborted)
        return base, last

    def _settle(self) -> None:
        """After a write that may or may not have committed: the offsets as stored, and the
        in-doubt batch, if it is the one now at the old log end, kept for its retry."""
        if not self._stale:
            return
        state = self._store.partition_state(self.lease.topic, self.lease.partition)
        if self._in_doubt is not None and state.next_offset > self._end:
            first = self._store.read(self.lease.topic, self.lease.partition, self._end, 1)
            header = read_header(first) if first else None
            if header is not None and _identity(header) == self._in_doubt:
                if len(self._stored_in_doubt) >= _REMEMBERED_IN_DOUBT:
                    del self._stored_in_doubt[next(iter(self._stored_in_doubt))]
                self._stored_in_doubt[self._in_doubt] = (
                    header.base_offset, header.base_offset + header.last_offset_delta)
        self._start, self._end = state.log_start_offset, state.next_offset
        self._stale, self._in_doubt = False, None
        self._transactions = None  # rebuilt from what the store holds, at next use

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> bytes:
        self._settle()
        if offset < self._start or offset > self._end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._start}, {self._end}]")
        if offset == self._end:
            return b""
        data = self._store.read(self.lease.topic, self.lease.partition, offset, max_bytes)
        if not min_one and data and check_batch(data, 0)[1] > max_bytes:
            return b""
        return data

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        for data in self._store.batches_from(self.lease.topic, self.lease.partition,
                                             self._start):
            for batch in iter_batches(data):
                if batch.max_timestamp < timestamp:
                    continue
                for record in batch.records:
                    if record.timestamp >= timestamp and record.offset >= self._start:
                        return record.offset
        return None

    def batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches holding `from_offset` and after, in offset order (the
        producer state's rebuild reads the producer fields of the log's tail)."""
        for data in self._store.batches_from(self.lease.topic, self.lease.partition,
                                             max(from_offset, self._start)):
            yield read_header(data)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with the largest timestamp (ListOffsets
        MAX_TIMESTAMP); None for an empty log. Decodes only the batch that holds it."""
        largest, holder = -1, None
        for data in self._store.batches_from(self.lease.topic, self.lease.partition,
                                             self._start):
            header = read_header(data)
            if header.max_timestamp > largest:
                largest, holder = header.max_timestamp, data
        if holder is None:
            return None
        batch, _ = decode_batch(holder)
        return largest, next((r.offset for r in batch.records if r.timestamp == largest),
                             batch.base_offset)

    def leader_epoch_starts(self) -> list[tuple[int, int]]:
        """From the epochs the store stamped on the batches, ending with this lease's; none
        starts below the log start (a batch straddling it begins its epoch there)."""
        self._settle()
        firsts = self._store.epoch_first_offsets(self.lease.topic, self.lease.partition)
        return epoch_starts(((epoch, max(first, self._start)) for epoch, first in firsts),
                            self.lease.epoch, self._end)

    def advance_log_start(self, offset: int) -> bool:
        self._settle()
        if offset > self._end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is beyond the log end offset {self._end}")
        if offset <= self._start:
            return False
        try:
            self._store.set_log_start_offset(self.lease, offset)
        except StorageUnavailableError:
            self._stale = True
            raise
        self._start = offset
        if self._transactions is not None:
            self._transactions.forget_below(offset)
        return True

    # ------------------------------------------------------------- cleaning (the leader's)

    def apply_retention(self, now_ms: int) -> int:
        """retention.ms and retention.bytes, as Kafka applies them to segments, with each
        batch a segment: from the oldest, the batches whose newest record is older than
        retention.ms, or whose removal still leaves retention.bytes, go (the log start moves
        past them, in one fenced transaction); the first one that stays ends the pass. How
        many went."""
        config = self.config
        if not config.deletes or (config.retention_ms < 0 and config.retention_bytes < 0):
            return 0
        self._settle()
        topic, partition = self.lease.topic, self.lease.partition
        size = self._store.partition_bytes(topic, partition) if config.retention_bytes >= 0 else 0
        start, deleted = self._start, 0
        for data in self._store.batches_from(topic, partition, self._start):
            header = read_header(data)
            expired = (config.retention_ms >= 0
                       and now_ms - header.max_timestamp > config.retention_ms)
            oversized = config.retention_bytes >= 0 and size - len(data) >= config.retention_bytes
            if not (expired or oversized):
                break
            size -= len(data)
            start, deleted = header.base_offset + header.last_offset_delta + 1, deleted + 1
        if start > self._start:
            self.advance_log_start(start)
        return deleted

    def compact(self, now_ms: int) -> CompactionResult:
        """cleanup.policy=compact: each key's latest record is kept, as the file log's cleaner
        keeps it (log.compaction), in every batch but the newest (the active segment's
        counterpart: the idempotent producers' state is rebuilt from the log's last
        batches); changed batches are rewritten at their offsets in one fenced
        transaction. Only run when records arrived since the last pass."""
        self._settle()
        if self._end == self._compacted_to:
            return CompactionResult(0, 0, 0)
        topic, partition = self.lease.topic, self.lease.partition
        latest = latest_offsets(self._store.batches_from(topic, partition, self._start))
        horizon = now_ms + self.config.delete_retention_ms
        cleaned: dict[int, bytes | None] = {}
        kept = removed = 0
        pending: bytes | None = None
        for data in self._store.batches_from(topic, partition, self._start):
            if pending is not None:
                result, batch_kept, batch_removed = clean_batch(pending, latest, now_ms,
                                                                horizon)
                kept, removed = kept + batch_kept, removed + batch_removed
                if result != pending:
                    cleaned[read_header(pending).base_offset] = result
            pending = data
        if cleaned:
            try:
                self._store.replace_batches(self.lease, cleaned)
            except StorageUnavailableError:
                self._stale = True
                raise
        self._compacted_to = self._end
        return CompactionResult(kept, removed, len(cleaned))

    def close(self) -> None:
        self.closed = True
