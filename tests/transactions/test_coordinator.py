"""The sans-IO transaction coordinator: each request's answer and record, as Kafka 4.3.1 gives
them, with time passed in and every state reached only by applying its record."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

import pytest

from kgroups.coordinator.placement import partition_for
from kgroups.errors import ErrorCode
from kgroups.transactions.coordinator import TransactionCoordinator, TxnConfig
from kgroups.transactions.messages import Decision, MarkerWrite, TxnWrite
from kgroups.transactions.state import MAX_EPOCH, TxnState

TX = "tx-1"
T0 = 1_000_000


class Harness:
    """A coordinator plus the __transaction_state it wrote: every write is applied (or failed)
    and kept, so that a replay of `log` can be compared with memory."""

    def __init__(self, **config: int) -> None:
        ids: Iterator[int] = count(1000)
        self.coordinator = TransactionCoordinator(TxnConfig(**config), lambda: next(ids))
        self.log: list[tuple[bytes, bytes | None]] = []

    def commit(self, decision: Decision) -> Decision:
        if decision.write is not None:
            self.write(decision.write)
        return decision

    def write(self, write: TxnWrite) -> None:
        self.log.append((write.key(), write.value(self.coordinator.config.log_value_version)))
        self.coordinator.apply(write)

    def finish(self, transactional_id: str = TX, now: int = T0) -> tuple[MarkerWrite, ...]:
        completion = self.coordinator.completion(transactional_id, 5, now)
        assert completion is not None
        self.write(completion.write)
        return completion.markers

    def state(self, transactional_id: str = TX) -> TxnState:
        txn = self.coordinator.get(transactional_id)
        assert txn is not None
        return txn.state

    def start(self, timeout: int = 60_000) -> tuple[int, int]:
        decision = self.commit(self.coordinator.init_producer_id(TX, timeout, T0))
        assert decision.error is ErrorCode.NONE
        return decision.producer_id, decision.producer_epoch

    def at_epoch(self, epoch: int) -> int:
        """A producer started and its epoch moved to `epoch` (as if it had ended that many
        transactions); its producer id."""
        pid, _ = self.start()
        txn = self.coordinator.get(TX)
        assert txn is not None
        self.write(TxnWrite(TX, txn.moved(producer_epoch=epoch)))
        return pid

    def replayed(self) -> TransactionCoordinator:
        fresh = TransactionCoordinator(self.coordinator.config, lambda: -5)
        for key, value in self.log:
            fresh.replay(key, value)
        return fresh


def _same(a: TransactionCoordinator, b: TransactionCoordinator, *ids: str) -> None:
    """Replay equals memory, but for last_producer_epoch, which Kafka keeps in memory only."""
    for transactional_id in ids:
        left, right = a.get(transactional_id), b.get(transactional_id)
        if left is None or right is None:
            assert left is right
        else:
            assert left.moved(last_producer_epoch=-1) == right.moved(last_producer_epoch=-1)


def test_a_new_transactional_id_gets_a_fresh_id_and_epoch_0() -> None:
    h = Harness()
    assert h.start() == (1000, 0)
    assert h.state() is TxnState.EMPTY
    again = h.commit(h.coordinator.init_producer_id(TX, 60_000, T0 + 1))
    assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, 1000, 1)


def test_nothing_moves_before_the_record_is_applied_and_a_failed_write_changes_nothing() -> None:
    h = Harness()
    h.start()
    decision = h.coordinator.init_producer_id(TX, 60_000, T0)
    assert decision.write is not None
    assert h.coordinator.get(TX).producer_epoch == 0  # type: ignore[union-attr]
    assert h.coordinator.init_producer_id(TX, 60_000, T0).error is ErrorCode.CONCURRENT_TRANSACTIONS
    h.coordinator.write_failed(decision.write)
    assert h.coordinator.get(TX).producer_epoch == 0  # type: ignore[union-attr]
    assert h.commit(h.coordinator.init_producer_id(TX, 60_000, T0)).producer_epoch == 1


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_a_timeout_out_of_range_is_refused(timeout: int) -> None:
    decision = Harness().coordinator.init_producer_id(TX, timeout, T0)
    assert (decision.error, decision.write) == (ErrorCode.INVALID_TRANSACTION_TIMEOUT, None)


def test_an_empty_transactional_id_is_an_invalid_request() -> None:
    assert Harness().coordinator.init_producer_id("", 1000, T0).error is ErrorCode.INVALID_REQUEST


def _ongoing(h: Harness) -> tuple[int, int]:
    pid, epoch = h.start()
    added = h.commit(h.coordinator.add_partitions(TX, pid, epoch, [("t", 0), ("t", 1)], T0 + 10))
    assert added.error is ErrorCode.NONE
    assert h.state() is TxnState.ONGOING
    return pid, epoch


def test_commit_prepares_then_markers_then_completes() -> None:
    h = Harness()
    pid, epoch = _ongoing(h)
    end = h.commit(h.coordinator.end_transaction(TX, pid, epoch, True, T0 + 20))
    assert (end.error, h.state()) == (ErrorCode.NONE, TxnState.PREPARE_COMMIT)
    assert h.coordinator.prepared() == [TX]
    assert h.coordinator.add_partitions(TX, pid, epoch, [("t", 2)], T0).error \
        is ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.coordinator.end_transaction(TX, pid, epoch, True, T0).error \
        is ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.coordinator.end_transaction(TX, pid, epoch, False, T0).error \
        is ErrorCode.INVALID_TXN_STATE
    markers = h.finish()
    assert markers == (MarkerWrite("t", 0, pid, epoch, True, 5),
                       MarkerWrite("t", 1, pid, epoch, True, 5))
    txn = h.coordinator.get(TX)
    assert txn is not None and txn.state is TxnState.COMPLETE_COMMIT and not txn.partitions
    retry = h.coordinator.end_transaction(TX, pid, epoch, True, T0)
    assert (retry.error, retry.write) == (ErrorCode.NONE, None)
    assert h.coordinator.end_transaction(TX, pid, epoch, False, T0).error \
        is ErrorCode.INVALID_TXN_STATE
    _same(h.coordinator, h.replayed(), TX)


def test_abort_writes_abort_markers() -> None:
    h = Harness()
    pid, epoch = _ongoing(h)
    h.commit(h.coordinator.end_transaction(TX, pid, epoch, False, T0 + 20))
    assert h.state() is TxnState.PREPARE_ABORT
    assert {m.commits for m in h.finish()} == {False}
    assert h.state() is TxnState.COMPLETE_ABORT


def test_ending_without_a_transaction_is_an_invalid_state_before_transaction_version_2() -> None:
    h = Harness()
    pid, epoch = h.start()
    assert h.coordinator.end_transaction(TX, pid, epoch, True, T0).error \
        is ErrorCode.INVALID_TXN_STATE
    assert h.coordinator.end_transaction(TX, pid, epoch, False, T0).error \
        is ErrorCode.INVALID_TXN_STATE


def test_wrong_producer_id_and_old_epoch() -> None:
    h = Harness()
    pid, epoch = _ongoing(h)
    c = h.coordinator
    assert c.add_partitions(TX, pid + 1, epoch, [("t", 0)], T0).error \
        is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert c.add_partitions("other", pid, epoch, [("t", 0)], T0).error \
        is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert c.add_partitions(TX, pid, epoch + 1, [("t", 0)], T0).error is ErrorCode.PRODUCER_FENCED
    assert c.end_transaction(TX, pid + 1, epoch, True, T0).error \
        is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert c.end_transaction(TX, pid, epoch + 1, True, T0).error is ErrorCode.PRODUCER_FENCED


def test_adding_partitions_already_in_the_transaction_writes_nothing() -> None:
    h = Harness()
    pid, epoch = _ongoing(h)
    again = h.coordinator.add_partitions(TX, pid, epoch, [("t", 1)], T0 + 50)
    assert (again.error, again.write) == (ErrorCode.NONE, None)
    more = h.commit(h.coordinator.add_partitions(TX, pid, epoch, [("u", 0)], T0 + 50))
    txn = h.coordinator.get(TX)
    assert more.error is ErrorCode.NONE and txn is not None
    assert txn.partitions == {("t", 0), ("t", 1), ("u", 0)}
    assert txn.start_timestamp_ms == T0 + 10


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = Harness(offsets_partitions=50)
    pid, epoch = h.start()
    h.commit(h.coordinator.add_offsets(TX, pid, epoch, "my-group", T0))
    txn = h.coordinator.get(TX)
    assert txn is not None
    assert txn.partitions == {("__consumer_offsets", partition_for("my-group", 50))}


def test_verify_only_reports_partitions_in_the_ongoing_transaction() -> None:
    h = Harness()
    pid, epoch = _ongoing(h)
    assert h.coordinator.verify_partitions(TX, pid, epoch, [("t", 0), ("t", 9)]) == {
        ("t", 0): ErrorCode.NONE, ("t", 9): ErrorCode.TRANSACTION_ABORTABLE}
    assert h.coordinator.verify_partitions(TX, pid, epoch - 1, [("t", 0)]) == {
        ("t", 0): ErrorCode.PRODUCER_FENCED}
    assert h.state() is TxnState.ONGOING


def test_a_new_producer_fences_an_ongoing_transaction_by_aborting_it() -> None:
    h = Harness()
    pid, epoch = _ongoing(h)
    fence = h.commit(h.coordinator.init_producer_id(TX, 60_000, T0 + 30))
    assert fence.error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.state() is TxnState.PREPARE_ABORT
    assert h.coordinator.init_producer_id(TX, 60_000, T0).error is ErrorCode.CONCURRENT_TRANSACTIONS
    markers = h.finish()
    assert {(m.producer_epoch, m.commits) for m in markers} == {(epoch + 1, False)}
    retried = h.commit(h.coordinator.init_producer_id(TX, 60_000, T0 + 40))
    assert (retried.error, retried.producer_id, retried.producer_epoch) == (
        ErrorCode.NONE, pid, epoch + 2)
    assert h.coordinator.end_transaction(TX, pid, epoch, False, T0).error \
        is ErrorCode.PRODUCER_FENCED


def test_kip_360_retry_with_the_expected_id_and_epoch() -> None:
    h = Harness()
    pid, _ = h.start()
    bumped = h.commit(h.coordinator.init_producer_id(TX, 60_000, T0, pid, 0))
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, 1)
    retry = h.commit(h.coordinator.init_producer_id(TX, 60_000, T0, pid, 0))
    assert (retry.error, retry.producer_epoch) == (ErrorCode.NONE, 1)
    assert h.coordinator.init_producer_id(TX, 60_000, T0, pid + 7, 0).error \
        is ErrorCode.PRODUCER_FENCED
    h.commit(h.coordinator.init_producer_id(TX, 60_000, T0))  # another producer: epoch 2
    assert h.coordinator.init_producer_id(TX, 60_000, T0, pid, 0).error is ErrorCode.PRODUCER_FENCED


def test_an_exhausted_epoch_rotates_to_a_new_producer_id() -> None:
    h = Harness()
    pid = h.at_epoch(MAX_EPOCH - 1)
    rotated = h.commit(h.coordinator.init_producer_id(TX, 60_000, T0))
    assert (rotated.producer_id, rotated.producer_epoch) == (1001, 0)
    assert h.coordinator.get(TX).previous_producer_id == pid  # type: ignore[union-attr]
    _same(h.coordinator, h.replayed(), TX)


def test_transaction_version_2_bumps_the_epoch_at_each_end_and_accepts_a_retry() -> None:
    h = Harness()
    pid, epoch = h.start()
    h.commit(h.coordinator.add_partitions(TX, pid, epoch, [("t", 0)], T0, 2))
    end = h.commit(h.coordinator.end_transaction(TX, pid, epoch, True, T0, 2))
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.NONE, pid, epoch + 1)
    assert h.finish()[0].producer_epoch == epoch + 1
    retry = h.coordinator.end_transaction(TX, pid, epoch, True, T0, 2)
    assert (retry.error, retry.producer_epoch) == (ErrorCode.NONE, epoch + 1)
    txn = h.coordinator.get(TX)
    assert txn is not None and txn.client_transaction_version == 2
    empty_abort = h.commit(h.coordinator.end_transaction(TX, pid, epoch + 1, False, T0, 2))
    assert (empty_abort.error, empty_abort.producer_epoch) == (ErrorCode.NONE, epoch + 2)
    assert h.finish() == ()
    assert h.state() is TxnState.COMPLETE_ABORT
    _same(h.coordinator, h.replayed(), TX)


def test_transaction_version_2_rotates_the_producer_id_when_the_bump_exhausts_the_epoch() -> None:
    h = Harness()
    pid = h.at_epoch(MAX_EPOCH - 2)
    h.commit(h.coordinator.add_partitions(TX, pid, MAX_EPOCH - 2, [("t", 0)], T0, 2))
    h.commit(h.coordinator.end_transaction(TX, pid, MAX_EPOCH - 2, True, T0, 2))
    assert h.coordinator.get(TX).next_producer_id == 1001  # type: ignore[union-attr]
    _same(h.coordinator, h.replayed(), TX)
    assert h.finish()[0].producer_id == pid
    done = h.coordinator.get(TX)
    assert done is not None and (done.producer_id, done.producer_epoch) == (1001, 0)
    assert done.previous_producer_id == pid


def test_an_expired_transaction_is_aborted_and_its_producer_fenced() -> None:
    h = Harness()
    pid, epoch = _ongoing(h)
    assert h.coordinator.abort_timed_out(T0 + 10 + 60_000) == []
    writes = h.coordinator.abort_timed_out(T0 + 10 + 60_001)
    assert len(writes) == 1
    h.write(writes[0])
    assert h.state() is TxnState.PREPARE_ABORT
    assert {m.producer_epoch for m in h.finish()} == {epoch + 1}
    assert h.coordinator.end_transaction(TX, pid, epoch, True, T0).error \
        is ErrorCode.PRODUCER_FENCED


def test_an_idle_transactional_id_expires_with_a_tombstone() -> None:
    h = Harness(id_expiration_ms=1000)
    _ongoing(h)
    assert h.coordinator.expire_transactional_ids(T0 + 1_000_000) == []
    h.commit(h.coordinator.end_transaction(TX, 1000, 0, True, T0 + 20))
    h.finish(now=T0 + 30)
    assert h.coordinator.expire_transactional_ids(T0 + 1029) == []
    writes = h.coordinator.expire_transactional_ids(T0 + 1030)
    assert [w.metadata for w in writes] == [None]
    assert h.coordinator.expire_transactional_ids(T0 + 5000) == []
    h.write(writes[0])
    assert h.coordinator.get(TX) is None
    assert h.log[-1][1] is None
    assert h.replayed().get(TX) is None


def test_a_restart_finds_a_prepared_transaction_and_completes_it() -> None:
    h = Harness()
    pid, epoch = _ongoing(h)
    h.commit(h.coordinator.end_transaction(TX, pid, epoch, True, T0 + 20))
    replayed = h.replayed()
    _same(h.coordinator, replayed, TX)
    assert replayed.prepared() == [TX]
    completion = replayed.completion(TX, 6, T0 + 99)
    assert completion is not None
    assert [(m.topic, m.partition, m.commits, m.coordinator_epoch) for m in completion.markers] == [
        ("t", 0, True, 6), ("t", 1, True, 6)]
    assert replayed.completion(TX, 6, T0) is None


def test_describe_and_list_with_filters() -> None:
    h = Harness()
    pid, _ = _ongoing(h)
    other = h.commit(h.coordinator.init_producer_id("tx-2", 1000, T0))
    described = h.coordinator.describe(TX)
    assert described is not None
    assert (described.state, described.producer_id, described.partitions,
            described.start_timestamp_ms) == ("Ongoing", pid, (("t", 0), ("t", 1)), T0 + 10)
    assert h.coordinator.describe("nobody") is None
    found, unknown = h.coordinator.list_transactions()
    assert {t.transactional_id for t in found} == {TX, "tx-2"} and unknown == []
    found, unknown = h.coordinator.list_transactions(states=["Empty", "Bogus"])
    assert [t.transactional_id for t in found] == ["tx-2"] and unknown == ["Bogus"]
    found, _ = h.coordinator.list_transactions(producer_ids=[other.producer_id])
    assert [t.transactional_id for t in found] == ["tx-2"]
    found, _ = h.coordinator.list_transactions(now_ms=T0 + 110, duration_ms=100)
    assert [t.transactional_id for t in found] == [TX]
    found, _ = h.coordinator.list_transactions(now_ms=T0 + 109, duration_ms=100)
    assert found == []
    found, _ = h.coordinator.list_transactions(id_pattern="tx-[0-9]+")
    assert {t.transactional_id for t in found} == {TX, "tx-2"}
    found, _ = h.coordinator.list_transactions(id_pattern="tx-2")
    assert [t.transactional_id for t in found] == ["tx-2"]


def test_partition_of_a_transactional_id_is_kafkas() -> None:
    coordinator = Harness(num_partitions=50).coordinator
    assert coordinator.partition_of(TX) == partition_for(TX, 50)
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE: Utils.abs makes it 0.
    assert coordinator.partition_of("polygenelubricants") == 0


def test_unload_forgets_the_partitions_ids() -> None:
    h = Harness(num_partitions=3)
    h.start()
    h.coordinator.unload(h.coordinator.partition_of(TX))
    assert h.coordinator.get(TX) is None
