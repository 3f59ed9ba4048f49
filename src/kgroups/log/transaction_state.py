"""A partition's transactions as its log says them: each producer's open transaction (from its
first transactional batch to its marker), the last stable offset, and the aborted ones.

Every batch appended to a log (either engine) passes `observe`, so produce, markers and the
coordinators' own transactional writes keep it alike. The last stable offset (LSO) is the
first offset of the oldest open transaction, else the high watermark: read_committed consumers
read below it only. Aborted transactions are kept, in marker order, for Fetch's
aborted_transactions list; each engine also stores them (the file log in `.txnindex` files,
kgroups.log.txn_index; PostgreSQL in a table).

After a restart the open transactions are rebuilt by `rebuild` from the headers of the log's
last REBUILD_TAIL_OFFSETS offsets (the same bound as the idempotent producers' table): a
transaction open for longer than that tail when the broker stopped is not seen as open (its
records count as committed for the LSO until its marker comes). Kafka bounds this by producer
snapshots instead; transaction.max.timeout.ms bounds how long a transaction stays open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from kgroups.log.batch import CONTROL, TRANSACTIONAL, BatchHeader
from kgroups.log.transactions import marker_of
from kgroups.log.txn_index import AbortedTransaction

NO_PRODUCER_ID = -1
REBUILD_TAIL_OFFSETS = 50_000
_INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class ProducerActivity:
    """What DescribeProducers tells of one producer in one partition."""

    epoch: int
    last_sequence: int = -1
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    txn_start_offset: int = -1  # the first offset of its open transaction, -1 when none


class PartitionTransactions:
    """The tracker; fed in log order, each batch once."""

    def __init__(self, aborted: Iterable[AbortedTransaction] = ()) -> None:
        self.producers: dict[int, ProducerActivity] = {}
        self.aborted: list[AbortedTransaction] = list(aborted)

    def observe(self, header: BatchHeader, base_offset: int,
                read_batch: Callable[[], bytes]) -> AbortedTransaction | None:
        """Take one appended batch (`header` as written, `base_offset` where it landed;
        `read_batch` gives its bytes, read only for a marker). Returns the aborted
        transaction an ABORT marker ended, now listed, for the caller to store."""
        aborted = self._apply(header, base_offset, read_batch)
        if aborted is not None:
            self.aborted.append(aborted)
        return aborted

    def _apply(self, header: BatchHeader, base_offset: int,
               read_batch: Callable[[], bytes]) -> AbortedTransaction | None:
        """The batch's effect on its producer; the transaction an ABORT marker ended."""
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerActivity(
                header.producer_epoch,
                txn_start_offset=entry.txn_start_offset if entry is not None else -1)
        entry.last_timestamp = header.max_timestamp
        if header.attributes & CONTROL:
            marker = marker_of(read_batch())
            if marker is None:
                return None
            commits, coordinator_epoch = marker
            entry.coordinator_epoch = coordinator_epoch
            first, entry.txn_start_offset = entry.txn_start_offset, -1
            if commits or first < 0:  # a marker with no transaction open: nothing to list
                return None
            return AbortedTransaction(producer_id, first, base_offset,
                                      self.last_stable_offset(base_offset + 1))
        if header.base_sequence >= 0:
            entry.last_sequence = (header.base_sequence + header.last_offset_delta) % (
                _INT32_MAX + 1)
        if header.attributes & TRANSACTIONAL and entry.txn_start_offset < 0:
            entry.txn_start_offset = base_offset
        return None

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the oldest open transaction, else `high_watermark`."""
        return min((p.txn_start_offset for p in self.producers.values()
                    if p.txn_start_offset >= 0), default=high_watermark)

    def aborted_between(self, fetch_offset: int, upper_bound: int) -> list[AbortedTransaction]:
        """The aborted transactions a read of [fetch_offset, upper_bound) overlaps (Kafka's
        rule: the marker at or after the fetch offset, the first offset below the bound)."""
        return [a for a in self.aborted
                if a.last_offset >= fetch_offset and a.first_offset < upper_bound]

    def forget_below(self, offset: int) -> None:
        """Retention or DeleteRecords dropped the log below `offset`: the aborted transactions
        whose marker went with it are no longer listed."""
        self.aborted = [a for a in self.aborted if a.last_offset >= offset]

    def rebuild(self, headers: Iterable[BatchHeader], read_batch: Callable[[int], bytes],
                store_abort: Callable[[AbortedTransaction], None]) -> None:
        """Replay the headers of the log's tail (see the module's docstring): open
        transactions come back; an ABORT marker past the last stored aborted transaction (its
        entry lost in a crash before it was written) is stored again through `store_abort`."""
        stored_through = self.aborted[-1].last_offset if self.aborted else -1
        for header in headers:
            base = header.base_offset
            aborted = self._apply(header, base, partial(read_batch, base))
            if aborted is not None and aborted.last_offset > stored_through:
                self.aborted.append(aborted)
                store_abort(aborted)
