"""One share partition's in-flight records: the sans-IO core of KIP-932's data path.

The share-partition start offset (SPSO) is the first offset not yet acknowledged or archived;
every offset from it up to the last one ever acquired (the end offset, SPEO) is in flight, in
one of four states: AVAILABLE (to be delivered, again if its delivery count says so), ACQUIRED
by one member until its lock's deadline, ACKNOWLEDGED or ARCHIVED. A member's acquisition
counts a delivery; a release (RELEASE, a lock timing out, the member's session closing) of a
record delivered `delivery_count_limit` times archives it instead of offering it again.
Acknowledged and archived records at the start move the SPSO past them.

Records are acquired in in-flight batches (the ranges ShareFetch answers): new records in
chunks that end on a log batch boundary once they hold `batch_size` records, as Kafka 4.3.1
cuts them. While every record of an in-flight batch moves together Kafka tracks it as a batch,
afterwards record by record; its acknowledgement errors say which (`_Batches.split`).

Time comes in as milliseconds from the caller; nothing here reads a clock or does I/O. Every
change the share coordinator must keep (acknowledgements, releases, lock timeouts) is visible
as `persisted()`, which the broker writes before it answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kgroups.errors import ErrorCode
from kgroups.share.acknowledgements import AckBatch, AckType
from kgroups.share.counts import ShareCounts
from kgroups.share.persisted import DeliveryState, PersistedBatch, PersistedShareState
from kgroups.share.settings import ShareSettings

DONE = frozenset({DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED})

NOT_IN_CACHE = "Batch record not found. The request batch offsets are not found in the cache."
FIRST_PAST_END = "Batch record not found. The first offset in request is past acquired records."
LAST_PAST_END = "Batch record not found. The last offset in request is past acquired records."
NOT_BATCH_OWNER = "Member is not the owner of batch record"
BATCH_NOT_ACQUIRED = "The batch cannot be acknowledged. The batch is not in the acquired state."
SUBSET_NOT_ACQUIRED = ("The batch cannot be acknowledged. The subset batch is not in the "
                       "acquired state.")
OFFSET_NOT_ACQUIRED = "The offset cannot be acknowledged. The offset is not acquired."
NOT_OFFSET_OWNER = "Member is not the owner of offset"


@dataclass(slots=True)
class InFlightRecord:
    state: DeliveryState
    delivery_count: int
    batch: int  # the first offset of the in-flight batch it belongs to
    member: str | None = None
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class LogBatch:
    """A batch the broker read from the partition's log: its offsets, and (read_committed)
    whether it belongs to an aborted transaction, whose records are archived unread."""

    base_offset: int
    last_offset: int
    aborted: bool = False


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckOutcome:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    # What Kafka writes for an acknowledgement: the records as acknowledged, under the start
    # offset they had (the start moves past them in memory; the next write carries it).
    state: PersistedShareState | None = None


@dataclass(slots=True)
class _Batches:
    """In-flight batches by first offset: where each ends, and which no longer move as one."""

    last: dict[int, int] = field(default_factory=dict)
    split: set[int] = field(default_factory=set)


class SharePartition:
    def __init__(self, state: PersistedShareState, settings: ShareSettings,
                 counts: ShareCounts | None = None) -> None:
        self.settings = settings
        self.counts = ShareCounts() if counts is None else counts
        self.state_epoch = state.state_epoch
        self.leader_epoch = state.leader_epoch
        self.start_offset = state.start_offset
        self.records: dict[int, InFlightRecord] = {}
        self._batches = _Batches()
        self._fetched_to = state.start_offset  # one past the last offset ever put in flight
        self._load(state.batches)

    # --- reading ----------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The SPEO: the last offset in flight (the start offset when none is)."""
        return self._fetched_to - 1 if self.records else self.start_offset

    def next_fetch_offset(self) -> int:
        """Where the next read of the log starts: the first available record in flight, else
        the first offset never acquired."""
        for offset, record in self.records.items():
            if record.state == DeliveryState.AVAILABLE:
                return offset
        return self._fetched_to

    def can_acquire(self) -> bool:
        """Whether a fetch may acquire anything: an available record in flight, or room under
        `max_record_locks` for new ones."""
        return (any(r.state == DeliveryState.AVAILABLE for r in self.records.values())
                or self._fetched_to - self.start_offset < self.settings.max_record_locks)

    def next_lock_deadline(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.records.values()
                     if r.state == DeliveryState.ACQUIRED]
        return min(deadlines, default=None)

    def persisted(self) -> PersistedShareState:
        """The state the share coordinator keeps: runs of records in one state with one count
        (an acquired record is kept as available, with the deliveries it has had)."""
        batches: list[PersistedBatch] = []
        done = 0
        for offset, record in self.records.items():
            state = (DeliveryState.AVAILABLE if record.state == DeliveryState.ACQUIRED
                     else record.state)
            done += state in DONE
            previous = batches[-1] if batches else None
            if (previous is not None and previous.last_offset == offset - 1
                    and previous.delivery_state == state
                    and previous.delivery_count == record.delivery_count):
                batches[-1] = PersistedBatch(previous.first_offset, offset, state,
                                             record.delivery_count)
            else:
                batches.append(PersistedBatch(offset, offset, state, record.delivery_count))
        return PersistedShareState(self.state_epoch, self.leader_epoch, self.start_offset,
                                   tuple(batches), done)

    # --- acquiring --------------------------------------------------------------------------

    def acquire(self, member: str, log_batches: Sequence[LogBatch], *, max_records: int,
                batch_size: int, now_ms: int, record_limit: bool = False) -> list[AcquiredRange]:
        """Acquire for `member` the available records among `log_batches` (read from
        `next_fetch_offset()`), at most `max_records` of them: whole log batches
        (batch-optimized, Kafka's default) or exactly (`record_limit`, ShareAcquireMode 1)."""
        deadline = now_ms + self.settings.record_lock_duration_ms
        acquired: list[int] = []
        chunk_start, chunk_size = -1, 0
        for log_batch in log_batches:
            if len(acquired) >= max_records:
                break
            self._archive_unread(log_batch.base_offset)
            if (log_batch.last_offset >= self._fetched_to
                    and self._fetched_to - self.start_offset >= self.settings.max_record_locks):
                break
            for offset in range(max(log_batch.base_offset, self.start_offset),
                                log_batch.last_offset + 1):
                if record_limit and len(acquired) >= max_records:
                    break
                record = self.records.get(offset)
                if record is None:  # past everything in flight: a new record
                    if chunk_start < 0 or (offset == log_batch.base_offset
                                           and chunk_size >= batch_size):
                        chunk_start, chunk_size = offset, 0
                    chunk_size += 1
                    record = InFlightRecord(DeliveryState.AVAILABLE, 0, chunk_start)
                    self.records[offset] = record
                    self._batches.last[chunk_start] = offset
                    self._fetched_to = offset + 1
                    if log_batch.aborted:
                        record.state = DeliveryState.ARCHIVED
                        continue
                if record.state != DeliveryState.AVAILABLE:
                    continue
                if record.delivery_count >= self.settings.delivery_count_limit:
                    # persisted while acquired for the last time (a restart since): never again
                    record.state = DeliveryState.ARCHIVED
                    continue
                record.state, record.member = DeliveryState.ACQUIRED, member
                record.delivery_count += 1
                self.counts.delivered += 1
                self.counts.redelivered += record.delivery_count > 1
                record.lock_deadline_ms = deadline
                acquired.append(offset)
        self._note_splits({self.records[offset].batch for offset in acquired})
        self._advance_start()
        return self._ranges(acquired)

    def _archive_unread(self, up_to: int) -> None:
        """Offsets below `up_to` the log skipped (compacted away, or a gap the read stepped
        over) hold no record: archived, so the start can pass them."""
        for offset in range(self._fetched_to, up_to):
            self.records[offset] = InFlightRecord(DeliveryState.ARCHIVED, 0, offset)
            self._batches.last[offset] = offset
        self._fetched_to = max(self._fetched_to, up_to)

    def _ranges(self, offsets: Iterable[int]) -> list[AcquiredRange]:
        ranges: list[AcquiredRange] = []
        last_batch = -1
        for offset in offsets:
            record = self.records[offset]
            previous = ranges[-1] if ranges else None
            if (previous is not None and previous.last_offset == offset - 1
                    and previous.delivery_count == record.delivery_count
                    and last_batch == record.batch):
                ranges[-1] = AcquiredRange(previous.first_offset, offset, record.delivery_count)
            else:
                ranges.append(AcquiredRange(offset, offset, record.delivery_count))
            last_batch = record.batch
        return ranges

    # --- acknowledging and releasing --------------------------------------------------------

    def acknowledge(self, member: str, batches: Sequence[AckBatch], now_ms: int) -> AckOutcome:
        """Apply `member`'s acknowledgements, all or none: the first record that is not the
        member's acquired one fails the whole request with INVALID_RECORD_STATE, a batch
        reaching past the end offset with INVALID_REQUEST. Offsets below the start were
        acknowledged or archived already and are passed over."""
        changes: dict[int, AckType] = {}
        for batch in batches:
            if batch.last_offset < self.start_offset:
                continue
            past_end = self._past_end(batch)
            if past_end is not None:  # Kafka's InvalidRequestException
                return AckOutcome(ErrorCode.INVALID_REQUEST, past_end)
            problem = NOT_IN_CACHE if not self.records else None
            if problem is None:
                for offset, kind in batch.offsets():
                    if offset < self.start_offset:
                        continue
                    if offset in changes and changes[offset] != AckType.RENEW:
                        problem = OFFSET_NOT_ACQUIRED  # acknowledged earlier in this request
                    else:
                        problem = self._record_problem(member, batch, offset)
                    if problem is not None:
                        break
                    changes[offset] = kind
            if problem is not None:
                return AckOutcome(ErrorCode.INVALID_RECORD_STATE, problem)
        for offset, kind in changes.items():
            self._apply(offset, kind, now_ms)
        self._note_splits({self.records[offset].batch for offset in changes},
                          subsets=[(b.first_offset, b.last_offset) for b in batches])
        written = self.persisted()
        self._advance_start()
        return AckOutcome(state=written)

    def _past_end(self, batch: AckBatch) -> str | None:
        if not self.records:
            return None
        if batch.first_offset >= self._fetched_to:
            return FIRST_PAST_END
        if batch.last_offset >= self._fetched_to:
            return LAST_PAST_END
        return None

    def _record_problem(self, member: str, batch: AckBatch, offset: int) -> str | None:
        record = self.records[offset]
        if record.batch not in self._batches.split:  # Kafka checks the batch as a whole
            if record.member != member:
                return NOT_BATCH_OWNER
            if record.state != DeliveryState.ACQUIRED:
                whole = (batch.first_offset <= record.batch
                         and batch.last_offset >= self._batches.last[record.batch])
                return BATCH_NOT_ACQUIRED if whole else SUBSET_NOT_ACQUIRED
            return None
        if record.state != DeliveryState.ACQUIRED:
            return OFFSET_NOT_ACQUIRED
        if record.member != member:
            return NOT_OFFSET_OWNER
        return None

    def _apply(self, offset: int, kind: AckType, now_ms: int) -> None:
        record = self.records[offset]
        self.counts.acknowledged[kind.name.lower()] += 1
        match kind:
            case AckType.ACCEPT:
                record.state, record.member = DeliveryState.ACKNOWLEDGED, None
            case AckType.REJECT | AckType.GAP:
                record.state, record.member = DeliveryState.ARCHIVED, None
            case AckType.RELEASE:
                self._release(record)
            case AckType.RENEW:
                record.lock_deadline_ms = now_ms + self.settings.record_lock_duration_ms

    def _release(self, record: InFlightRecord) -> None:
        """Back to available, or archived once delivered as often as the limit allows."""
        record.member = None
        at_limit = record.delivery_count >= self.settings.delivery_count_limit
        record.state = DeliveryState.ARCHIVED if at_limit else DeliveryState.AVAILABLE
        self.counts.archived_at_limit += at_limit

    def expire_locks(self, now_ms: int) -> bool:
        """Release every record whose acquisition lock's deadline has passed; whether any was."""
        return self._release_where(lambda r: r.lock_deadline_ms <= now_ms, timed_out=True)

    def release_member(self, member: str) -> bool:
        """Release what `member` holds (its share session closed, or its connection)."""
        return self._release_where(lambda r: r.member == member)

    def _release_where(self, chosen: Callable[[InFlightRecord], bool],
                       timed_out: bool = False) -> bool:
        released = [o for o, r in self.records.items()
                    if r.state == DeliveryState.ACQUIRED and chosen(r)]
        if timed_out:
            self.counts.lock_timeouts += len(released)
        for offset in released:
            self._release(self.records[offset])
        self._note_splits({self.records[offset].batch for offset in released})
        self._advance_start()
        return bool(released)

    def move_start_to(self, log_start_offset: int) -> bool:
        """The log's start passed the SPSO (retention, DeleteRecords): what lay below it is gone
        and the start moves up to it; whether it moved."""
        if log_start_offset <= self.start_offset:
            return False
        for offset in range(self.start_offset, min(log_start_offset, self._fetched_to)):
            del self.records[offset]
        self.start_offset = log_start_offset
        self._fetched_to = max(self._fetched_to, log_start_offset)
        self._advance_start()
        return True

    # --- bookkeeping ------------------------------------------------------------------------

    def _load(self, batches: Sequence[PersistedBatch]) -> None:
        """The in-flight records as persisted; offsets between persisted batches were never
        delivered and are available."""
        kept = [b for b in sorted(batches, key=lambda b: b.first_offset)
                if b.last_offset >= self.start_offset]
        for batch in kept:
            first = max(batch.first_offset, self.start_offset)
            if first > self._fetched_to:
                self._add_run(self._fetched_to, first - 1, DeliveryState.AVAILABLE, 0)
            state = (DeliveryState.AVAILABLE if batch.delivery_state == DeliveryState.ACQUIRED
                     else batch.delivery_state)
            self._add_run(first, batch.last_offset, state, batch.delivery_count)
        self._advance_start()

    def _add_run(self, first: int, last: int, state: DeliveryState, count: int) -> None:
        for offset in range(first, last + 1):
            self.records[offset] = InFlightRecord(state, count, first)
        self._batches.last[first] = last
        self._fetched_to = last + 1

    def _note_splits(self, touched: set[int],
                     subsets: Sequence[tuple[int, int]] = ()) -> None:
        """An in-flight batch whose records no longer share state, count and owner, or that an
        acknowledgement covered in part, is tracked record by record from then on."""
        for first in touched - self._batches.split:
            last = self._batches.last[first]
            if any(a > first or b < last for a, b in subsets if a <= last and b >= first):
                self._batches.split.add(first)
                continue
            records = [self.records[o] for o in range(max(first, self.start_offset), last + 1)]
            if len({(r.state, r.delivery_count, r.member) for r in records}) > 1:
                self._batches.split.add(first)

    def _advance_start(self) -> None:
        while self.start_offset < self._fetched_to:
            record = self.records[self.start_offset]
            if record.state not in DONE:
                return
            del self.records[self.start_offset]
            if self._batches.last.get(record.batch) == self.start_offset:  # its last record
                del self._batches.last[record.batch]
                self._batches.split.discard(record.batch)
            self.start_offset += 1
