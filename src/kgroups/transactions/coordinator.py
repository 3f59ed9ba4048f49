"""The transaction coordinator's decisions, as Kafka 4.3.1 makes them, without I/O.

Each request method returns a Decision: the record to append (if the state must move) and the
answer the client gets once it is durable. Nothing changes until `apply` is called with that
record (or `write_failed` releases the id); while a record is in flight the id answers
CONCURRENT_TRANSACTIONS, as Kafka's pending state does. Replaying __transaction_state through
`replay` builds the same state, so a restart is a replay.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kgroups.coordinator.placement import partition_for
from kgroups.errors import ErrorCode
from kgroups.records.transaction_log import (
    NO_PRODUCER_ID,
    decode_transaction_log_key,
    decode_transaction_log_value,
)
from kgroups.transactions.messages import Completion, Decision, MarkerWrite, TxnWrite
from kgroups.transactions.state import (
    COMPLETE_STATES,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    PREPARE_STATES,
    STATE_BY_NAME,
    Partition,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
    metadata_of,
)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_VERSION_2 = 2


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """Kafka's names: transaction.max.timeout.ms, transactional.id.expiration.ms,
    transaction.state.log.num.partitions, offsets.topic.num.partitions; `log_value_version` is
    the TransactionLogValue version written (1 from transaction.version 1 on)."""

    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    num_partitions: int = 50
    offsets_partitions: int = 50
    log_value_version: int = 1


@dataclass(frozen=True, slots=True)
class TxnDescription:
    transactional_id: str
    state: str
    timeout_ms: int
    start_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[Partition, ...]


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, allocate_producer_id: Callable[[], int]) -> None:
        self.config = config
        self._allocate = allocate_producer_id
        self._txns: dict[str, TxnMetadata] = {}
        self._pending: dict[str, TxnWrite] = {}

    def partition_of(self, transactional_id: str) -> int:
        """The __transaction_state partition holding the id: abs(String.hashCode) % count."""
        return partition_for(transactional_id, self.config.num_partitions)

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self._txns.get(transactional_id)

    # ---- applying records -------------------------------------------------------------------

    def apply(self, write: TxnWrite) -> None:
        """The record of `write` is durable: the state moves to it."""
        self._pending.pop(write.transactional_id, None)
        self._store(write.transactional_id, write.metadata)

    def write_failed(self, write: TxnWrite) -> None:
        """The record could not be written: the state stays where it was."""
        if self._pending.get(write.transactional_id) == write:
            del self._pending[write.transactional_id]

    def replay(self, key: bytes, value: bytes | None) -> None:
        """One __transaction_state record read back at load."""
        transactional_id = decode_transaction_log_key(key).transactional_id
        decoded = decode_transaction_log_value(value)
        self._store(transactional_id,
                    None if decoded is None else metadata_of(transactional_id, decoded))

    def unload(self, partition: int) -> None:
        """Forget the ids of a __transaction_state partition this broker no longer leads."""
        for transactional_id in [t for t in self._txns if self.partition_of(t) == partition]:
            del self._txns[transactional_id]
            self._pending.pop(transactional_id, None)

    def _store(self, transactional_id: str, metadata: TxnMetadata | None) -> None:
        if metadata is None or metadata.state is TxnState.DEAD:
            self._txns.pop(transactional_id, None)
        else:
            self._txns[transactional_id] = metadata

    def _propose(self, error: ErrorCode, metadata: TxnMetadata) -> Decision:
        write = TxnWrite(metadata.transactional_id, metadata)
        self._pending[metadata.transactional_id] = write
        return Decision(error, write, metadata.producer_id, metadata.producer_epoch)

    # ---- InitProducerId ---------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, now_ms: int,
                         expected_producer_id: int = NO_PRODUCER_ID,
                         expected_epoch: int = NO_PRODUCER_EPOCH) -> Decision:
        """A transactional producer starts (or restarts, KIP-360, with the id and epoch it
        last had)."""
        if not transactional_id:
            return Decision(ErrorCode.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return Decision(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        expected = (expected_producer_id, expected_epoch) \
            if expected_producer_id != NO_PRODUCER_ID else None
        txn = self._txns.get(transactional_id)
        if txn is None:
            txn = TxnMetadata(transactional_id, self._allocate(), NO_PRODUCER_EPOCH, timeout_ms,
                              TxnState.EMPTY, frozenset(), -1, now_ms)
            return self._propose(ErrorCode.NONE, txn.moved(producer_epoch=0))
        if transactional_id in self._pending:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and not _valid_expected_id(txn, *expected):
            return Decision(ErrorCode.PRODUCER_FENCED)
        if txn.state in PREPARE_STATES:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        if txn.state is TxnState.ONGOING:
            fenced = self._fence_and_abort(txn, now_ms)
            return self._propose(ErrorCode.CONCURRENT_TRANSACTIONS, fenced)
        if txn.state not in COMPLETE_STATES:
            return Decision(ErrorCode.UNKNOWN_SERVER_ERROR)
        return self._restart_producer(txn, timeout_ms, now_ms, expected)

    def _restart_producer(self, txn: TxnMetadata, timeout_ms: int, now_ms: int,
                          expected: tuple[int, int] | None) -> Decision:
        base = dict(state=TxnState.EMPTY, partitions=frozenset(), timeout_ms=timeout_ms,
                    start_timestamp_ms=-1, last_update_timestamp_ms=now_ms)
        if txn.epoch_exhausted and (expected is None or expected[1] == txn.producer_epoch):
            last = txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            rotated = txn.moved(
                producer_id=self._allocate(), producer_epoch=0,
                previous_producer_id=txn.producer_id, next_producer_id=NO_PRODUCER_ID,
                last_producer_epoch=last, **base)
            return self._propose(ErrorCode.NONE, rotated)
        if expected is None:
            epoch, last = txn.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == txn.producer_epoch:
            epoch, last = txn.producer_epoch + 1, txn.producer_epoch
        elif expected[1] == txn.last_producer_epoch:
            epoch, last = txn.producer_epoch, txn.last_producer_epoch
        else:
            return Decision(ErrorCode.PRODUCER_FENCED)
        return self._propose(ErrorCode.NONE, txn.moved(producer_epoch=epoch,
                                                       last_producer_epoch=last, **base))

    def _fence_and_abort(self, txn: TxnMetadata, now_ms: int) -> TxnMetadata:
        """An ongoing transaction whose producer is replaced (or timed out) is aborted under a
        bumped epoch, so that the old producer is fenced by its markers."""
        epoch = txn.producer_epoch + 1 if txn.producer_epoch < MAX_EPOCH else txn.producer_epoch
        return txn.moved(producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
                         state=TxnState.PREPARE_ABORT, last_update_timestamp_ms=now_ms)

    # ---- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[Partition], now_ms: int,
                       client_transaction_version: int = 0) -> Decision:
        """Partitions join the ongoing transaction (starting it if none is ongoing)."""
        txn, error = self._owned(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return Decision(error)
        if transactional_id in self._pending or txn.state in PREPARE_STATES:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        if txn.state not in COMPLETE_STATES and txn.state is not TxnState.ONGOING:
            return Decision(ErrorCode.UNKNOWN_SERVER_ERROR)
        added = frozenset(partitions)
        if txn.state is TxnState.ONGOING and added <= txn.partitions:
            return Decision(ErrorCode.NONE, None, txn.producer_id, txn.producer_epoch)
        start = now_ms if txn.state in COMPLETE_STATES else txn.start_timestamp_ms
        version = max(txn.client_transaction_version, client_transaction_version) \
            if txn.state is TxnState.ONGOING else client_transaction_version
        return self._propose(ErrorCode.NONE, txn.moved(
            state=TxnState.ONGOING, partitions=txn.partitions | added, start_timestamp_ms=start,
            last_update_timestamp_ms=now_ms, client_transaction_version=version))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[Partition]) -> dict[Partition, ErrorCode]:
        """AddPartitionsToTxn v4+ with verify_only: is each partition already in the ongoing
        transaction (KIP-890 part 1, asked by a partition leader before a transactional write);
        one that is not gets TRANSACTION_ABORTABLE, as Kafka 4.x answers."""
        wanted = list(partitions)
        txn, error = self._owned(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return dict.fromkeys(wanted, error)
        ongoing = txn.state is TxnState.ONGOING
        return {p: ErrorCode.NONE if ongoing and p in txn.partitions
                else ErrorCode.TRANSACTION_ABORTABLE for p in wanted}

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    group_id: str, now_ms: int) -> Decision:
        """The group's __consumer_offsets partition joins the transaction, so its TxnOffsetCommit
        offsets are committed or dropped by the markers."""
        return self.add_partitions(transactional_id, producer_id, producer_epoch,
                                   [self.offsets_partition_of(group_id)], now_ms)

    def offsets_partition_of(self, group_id: str) -> Partition:
        """The __consumer_offsets partition holding the group's offsets."""
        return OFFSETS_TOPIC, partition_for(group_id, self.config.offsets_partitions)

    def _owned(self, transactional_id: str, producer_id: int, producer_epoch: int
               ) -> tuple[TxnMetadata | None, ErrorCode]:
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        return txn, ErrorCode.NONE

    # ---- EndTxn -----------------------------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        commit: bool, now_ms: int, client_transaction_version: int = 0
                        ) -> Decision:
        """The first phase of a commit or an abort: the Prepare record. Transaction version 2
        (EndTxn v5+, KIP-890 part 2) bumps the epoch at each end, and a retry that comes with the
        epoch before the bump is recognised."""
        txn = self._txns.get(transactional_id)
        tv2 = client_transaction_version >= TRANSACTION_VERSION_2
        if txn is None:
            return Decision(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        retry_on_overflow = tv2 and txn.previous_producer_id == producer_id \
            and epoch_exhausted(producer_epoch) and txn.producer_epoch == 0
        retry_on_bump = tv2 and txn.producer_id == producer_id \
            and producer_epoch == txn.producer_epoch - 1
        if txn.producer_id != producer_id and not retry_on_overflow:
            return Decision(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        retry = retry_on_bump or retry_on_overflow
        if producer_epoch != txn.producer_epoch and not retry:
            return Decision(ErrorCode.PRODUCER_FENCED)
        if transactional_id in self._pending:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        match txn.state:
            case TxnState.ONGOING if not retry:
                return self._prepare(txn, commit, now_ms, client_transaction_version)
            case TxnState.ONGOING:
                return Decision(ErrorCode.PRODUCER_FENCED)
            case state if state in PREPARE_STATES:
                error = ErrorCode.CONCURRENT_TRANSACTIONS if state is prepared \
                    else ErrorCode.INVALID_TXN_STATE
                return Decision(error)
            case state if state is done and (retry or not tv2):
                return Decision(ErrorCode.NONE, None, txn.producer_id, txn.producer_epoch)
            case TxnState.EMPTY | TxnState.COMPLETE_COMMIT | TxnState.COMPLETE_ABORT \
                    if tv2 and not commit and not retry:
                return self._prepare(txn, commit, now_ms, client_transaction_version)
            case TxnState.EMPTY | TxnState.COMPLETE_COMMIT | TxnState.COMPLETE_ABORT:
                return Decision(ErrorCode.INVALID_TXN_STATE)
            case _:
                return Decision(ErrorCode.UNKNOWN_SERVER_ERROR)

    def _prepare(self, txn: TxnMetadata, commit: bool, now_ms: int,
                 client_transaction_version: int) -> Decision:
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        moved = txn.moved(state=state, last_update_timestamp_ms=now_ms,
                          client_transaction_version=client_transaction_version)
        if client_transaction_version >= TRANSACTION_VERSION_2:
            epoch = txn.producer_epoch + 1
            next_id = self._allocate() if epoch_exhausted(epoch) else NO_PRODUCER_ID
            moved = moved.moved(producer_epoch=epoch, next_producer_id=next_id,
                                last_producer_epoch=txn.producer_epoch)
        if txn.state is not TxnState.ONGOING:
            moved = moved.moved(start_timestamp_ms=now_ms)
        return self._propose(ErrorCode.NONE, moved)

    def completion(self, transactional_id: str, coordinator_epoch: int, now_ms: int
                   ) -> Completion | None:
        """The second phase of a transaction whose Prepare record is applied (also after a
        restart that found it there): its markers and the Complete record. None when the id is
        not prepared or its Complete record is already in flight."""
        txn = self._txns.get(transactional_id)
        if txn is None or txn.state not in PREPARE_STATES or transactional_id in self._pending:
            return None
        commits = txn.state is TxnState.PREPARE_COMMIT
        markers = tuple(MarkerWrite(topic, partition, txn.producer_id, txn.producer_epoch, commits,
                                    coordinator_epoch, txn.client_transaction_version)
                        for topic, partition in sorted(txn.partitions))
        done = txn.moved(state=TxnState.COMPLETE_COMMIT if commits else TxnState.COMPLETE_ABORT,
                         partitions=frozenset(), last_update_timestamp_ms=now_ms)
        if txn.next_producer_id != NO_PRODUCER_ID:
            done = done.moved(producer_id=txn.next_producer_id, producer_epoch=0,
                              previous_producer_id=txn.producer_id,
                              next_producer_id=NO_PRODUCER_ID,
                              last_producer_epoch=NO_PRODUCER_EPOCH)
        write = TxnWrite(transactional_id, done)
        self._pending[transactional_id] = write
        return Completion(markers, write)

    def prepared(self) -> list[str]:
        """Ids whose transaction waits for its markers (after a load: kill -9 between phases)."""
        return [t for t, txn in self._txns.items()
                if txn.state in PREPARE_STATES and t not in self._pending]

    # ---- timers -----------------------------------------------------------------------------

    def abort_timed_out(self, now_ms: int) -> list[TxnWrite]:
        """Ongoing transactions older than their timeout: a PrepareAbort under a bumped epoch
        each (transaction.abort.timed.out.transaction.cleanup.interval.ms runs this)."""
        writes = []
        for transactional_id, txn in list(self._txns.items()):
            if txn.state is TxnState.ONGOING and transactional_id not in self._pending \
                    and txn.start_timestamp_ms + txn.timeout_ms < now_ms:
                writes.append(self._propose(ErrorCode.NONE,
                                            self._fence_and_abort(txn, now_ms)).write)
        return [w for w in writes if w is not None]

    def expire_transactional_ids(self, now_ms: int) -> list[TxnWrite]:
        """Ids idle for transactional.id.expiration.ms with no transaction open: tombstones."""
        writes = []
        for transactional_id, txn in list(self._txns.items()):
            if txn.state in COMPLETE_STATES and transactional_id not in self._pending \
                    and txn.last_update_timestamp_ms + self.config.id_expiration_ms <= now_ms:
                write = TxnWrite(transactional_id, None)
                self._pending[transactional_id] = write
                writes.append(write)
        return writes

    # ---- DescribeTransactions / ListTransactions --------------------------------------------

    def describe(self, transactional_id: str) -> TxnDescription | None:
        txn = self._txns.get(transactional_id)
        if txn is None:
            return None
        return TxnDescription(transactional_id, txn.state.display_name, txn.timeout_ms,
                              txn.start_timestamp_ms, txn.producer_id, txn.producer_epoch,
                              tuple(sorted(txn.partitions)))

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          now_ms: int = 0, duration_ms: int = -1,
                          id_pattern: str | None = None
                          ) -> tuple[list[TxnMetadata], list[str]]:
        """The ids matching every filter given, and the state filters Kafka does not know."""
        names = list(states)
        unknown = [n for n in names if n not in STATE_BY_NAME]
        wanted_states = {STATE_BY_NAME[n] for n in names if n in STATE_BY_NAME}
        wanted_ids = set(producer_ids)
        pattern = re.compile(id_pattern) if id_pattern else None
        if names and not wanted_states:
            return [], unknown
        found = []
        for transactional_id, txn in self._txns.items():
            if wanted_states and txn.state not in wanted_states:
                continue
            if wanted_ids and txn.producer_id not in wanted_ids:
                continue
            if duration_ms >= 0 and (txn.state is not TxnState.ONGOING
                                     or now_ms - txn.start_timestamp_ms < duration_ms):
                continue
            if pattern is not None and not pattern.fullmatch(transactional_id):
                continue
            found.append(txn)
        return found, unknown


def _valid_expected_id(txn: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """KIP-360: a producer restarting with the id and epoch it had is accepted when the id is its
    own, when no epoch was ever given, or when it retries a rotation it never heard back from."""
    return (txn.producer_epoch == NO_PRODUCER_EPOCH or producer_id == txn.producer_id
            or (producer_id == txn.previous_producer_id and epoch_exhausted(epoch)))
