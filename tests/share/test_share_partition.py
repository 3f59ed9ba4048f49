"""The share partition core on its own: acquisition in Kafka's in-flight batches, the start
offset moving past acknowledged and archived records, releases and lock timeouts with the
delivery count limit, acknowledgement errors (all or nothing), and the state it persists."""

from __future__ import annotations

import pytest

from kgroups.errors import ErrorCode
from kgroups.share.acknowledgements import AckBatch, AckType, is_valid_request
from kgroups.share.partition import (
    FIRST_PAST_END,
    LAST_PAST_END,
    NOT_BATCH_OWNER,
    NOT_IN_CACHE,
    NOT_OFFSET_OWNER,
    OFFSET_NOT_ACQUIRED,
    AcquiredRange,
    LogBatch,
    SharePartition,
)
from kgroups.share.persisted import DeliveryState, PersistedBatch, PersistedShareState
from kgroups.share.settings import ShareSettings, StartFrom, start_from

SETTINGS = ShareSettings(record_lock_duration_ms=1000, delivery_count_limit=3,
                         max_record_locks=100)


def partition(start: int = 0, batches: tuple[PersistedBatch, ...] = (),
              settings: ShareSettings = SETTINGS) -> SharePartition:
    return SharePartition(PersistedShareState(1, 0, start, batches), settings)


def acquire(p: SharePartition, member: str, log: list[tuple[int, int]], now: int = 0,
            **limits: int) -> list[tuple[int, int, int]]:
    ranges = p.acquire(member, [LogBatch(a, b) for a, b in log],
                       max_records=limits.get("max_records", 500),
                       batch_size=limits.get("batch_size", 500), now_ms=now,
                       record_limit=bool(limits.get("record_limit", 0)))
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in ranges]


def ack(p: SharePartition, member: str, first: int, last: int, *types: AckType,
        now: int = 0) -> tuple[ErrorCode, str | None]:
    outcome = p.acknowledge(member, [AckBatch(first, last, tuple(types))], now)
    return outcome.error, outcome.message


def test_new_records_are_acquired_in_batches_cut_at_log_batch_boundaries() -> None:
    p = partition(5)
    assert acquire(p, "m", [(5, 7), (8, 9), (10, 10), (11, 14)], batch_size=2) == [
        (5, 7, 1), (8, 9, 1), (10, 14, 1)]
    assert p.end_offset == 14
    assert p.next_fetch_offset() == 15


def test_max_records_is_exceeded_to_finish_a_log_batch_unless_the_limit_is_strict() -> None:
    loose, strict = partition(), partition()
    assert acquire(loose, "m", [(0, 2), (3, 4)], max_records=2) == [(0, 2, 1)]
    assert acquire(strict, "m", [(0, 2), (3, 4)], max_records=2, record_limit=1) == [(0, 1, 1)]
    assert strict.next_fetch_offset() == 2  # offset 2 was never put in flight: read next


def test_acknowledged_and_archived_records_move_the_start_offset() -> None:
    p = partition()
    acquire(p, "m", [(0, 4)])
    assert ack(p, "m", 1, 1, AckType.ACCEPT) == (ErrorCode.NONE, None)
    assert p.start_offset == 0  # offset 0 still acquired
    assert ack(p, "m", 0, 0, AckType.REJECT) == (ErrorCode.NONE, None)
    assert p.start_offset == 2
    assert ack(p, "m", 2, 4, AckType.ACCEPT, AckType.GAP, AckType.RELEASE) == (
        ErrorCode.NONE, None)
    assert p.start_offset == 4
    assert acquire(p, "m", [(4, 4)]) == [(4, 4, 2)]


def test_a_release_at_the_delivery_count_limit_archives() -> None:
    p = partition()
    for delivery in (1, 2, 3):
        assert acquire(p, "m", [(0, 1)], now=delivery * 10) == [(0, 1, delivery)]
        assert p.expire_locks(delivery * 10 + 999) is False  # the lock holds until its deadline
        assert p.expire_locks(delivery * 10 + 1000) is True
    assert p.start_offset == 2
    assert acquire(p, "m", [(0, 1)]) == []


def test_renew_extends_the_lock() -> None:
    p = partition()
    acquire(p, "m", [(0, 0)], now=0)
    assert ack(p, "m", 0, 0, AckType.RENEW, now=800) == (ErrorCode.NONE, None)
    assert p.expire_locks(1500) is False
    assert p.next_lock_deadline() == 1800


def test_acknowledgement_errors_as_kafka_words_them() -> None:
    p = partition(10)
    assert ack(p, "m", 10, 10, AckType.ACCEPT)[1] == NOT_IN_CACHE
    acquire(p, "m", [(10, 14)])
    assert ack(p, "m", 20, 21, AckType.ACCEPT) == (ErrorCode.INVALID_REQUEST, FIRST_PAST_END)
    assert ack(p, "m", 12, 21, AckType.ACCEPT) == (ErrorCode.INVALID_REQUEST, LAST_PAST_END)
    assert ack(p, "x", 11, 11, AckType.ACCEPT) == (ErrorCode.INVALID_RECORD_STATE,
                                                    NOT_BATCH_OWNER)
    assert ack(p, "m", 0, 5, AckType.ACCEPT) == (ErrorCode.NONE, None)  # below the start
    p.release_member("m")
    assert ack(p, "m", 10, 14, AckType.ACCEPT)[1] == NOT_BATCH_OWNER
    acquire(p, "m", [(10, 14)])
    assert ack(p, "m", 10, 10, AckType.RELEASE) == (ErrorCode.NONE, None)
    assert ack(p, "m", 10, 10, AckType.ACCEPT)[1] == OFFSET_NOT_ACQUIRED  # now per offset
    assert acquire(p, "y", [(10, 14)]) == [(10, 10, 3)]
    assert ack(p, "m", 10, 10, AckType.ACCEPT)[1] == NOT_OFFSET_OWNER


def test_a_whole_batch_released_by_its_lock_is_no_members_to_acknowledge() -> None:
    p = partition()
    acquire(p, "m", [(0, 3)])
    p.expire_locks(10_000)
    assert ack(p, "m", 0, 3, AckType.ACCEPT) == (ErrorCode.INVALID_RECORD_STATE,
                                                  NOT_BATCH_OWNER)
    assert ack(p, "m", 1, 2, AckType.ACCEPT)[1] == NOT_BATCH_OWNER


def test_a_failed_acknowledgement_changes_nothing() -> None:
    p = partition()
    acquire(p, "m", [(0, 3)])
    before = p.persisted()
    assert ack(p, "m", 0, 1, AckType.ACCEPT)[0] == ErrorCode.NONE
    outcome = p.acknowledge("m", [AckBatch(2, 2, (1,)), AckBatch(2, 3, (1,))], 0)
    assert outcome.error == ErrorCode.INVALID_RECORD_STATE
    assert [r.state for r in p.records.values()] == [DeliveryState.ACQUIRED] * 2
    assert before.start_offset == 0 and p.start_offset == 2


def test_persisted_state_keeps_acquired_records_as_available_with_their_count() -> None:
    p = partition()
    acquire(p, "m", [(0, 5)])
    ack(p, "m", 0, 0, AckType.ACCEPT)
    ack(p, "m", 2, 2, AckType.REJECT)
    ack(p, "m", 3, 3, AckType.RELEASE)
    state = p.persisted()
    assert state.start_offset == 1
    assert state.batches == (
        PersistedBatch(1, 1, DeliveryState.AVAILABLE, 1),
        PersistedBatch(2, 2, DeliveryState.ARCHIVED, 1),
        PersistedBatch(3, 5, DeliveryState.AVAILABLE, 1))
    assert state.delivery_complete_count == 1


def test_loading_persisted_state_offers_available_records_and_the_gaps_between() -> None:
    p = partition(3, (PersistedBatch(3, 4, DeliveryState.AVAILABLE, 2),
                      PersistedBatch(5, 5, DeliveryState.ACKNOWLEDGED, 1),
                      PersistedBatch(8, 9, DeliveryState.ARCHIVED, 1)))
    assert p.next_fetch_offset() == 3
    assert acquire(p, "m", [(0, 9), (10, 11)]) == [(3, 4, 3), (6, 7, 1), (10, 11, 1)]


def test_the_log_start_moving_past_the_share_start() -> None:
    p = partition()
    acquire(p, "m", [(0, 4)])
    assert p.move_start_to(3) is True
    assert p.start_offset == 3 and list(p.records) == [3, 4]
    assert p.move_start_to(2) is False


def test_in_flight_records_are_capped_by_max_record_locks() -> None:
    p = partition(settings=ShareSettings(max_record_locks=4))
    assert acquire(p, "m", [(0, 2), (3, 5), (6, 8)]) == [(0, 5, 1)]
    assert p.can_acquire() is False
    ack(p, "m", 0, 2, AckType.ACCEPT)
    assert p.can_acquire() is True


def test_aborted_batches_are_archived_unread() -> None:
    p = partition()
    ranges = p.acquire("m", [LogBatch(0, 1), LogBatch(2, 3, aborted=True), LogBatch(4, 4)],
                       max_records=10, batch_size=10, now_ms=0)
    assert ranges == [AcquiredRange(0, 1, 1), AcquiredRange(4, 4, 1)]
    ack(p, "m", 0, 1, AckType.ACCEPT)
    assert p.start_offset == 4


@pytest.mark.parametrize(("batches", "renew", "valid"), [
    ([AckBatch(0, 2, (1,))], False, True),
    ([AckBatch(0, 2, (1, 2, 3))], False, True),
    ([AckBatch(0, 2, (1, 2))], False, False),
    ([AckBatch(2, 1, (1,))], False, False),
    ([AckBatch(0, 0, (5,))], True, False),
    ([AckBatch(0, 0, (4,))], False, False),
    ([AckBatch(0, 0, (4,))], True, True),
])
def test_request_shape_checks(batches: list[AckBatch], renew: bool, valid: bool) -> None:
    assert is_valid_request(batches, renew) is valid


def test_auto_offset_reset_values() -> None:
    assert start_from("earliest") == StartFrom(earliest=True)
    assert start_from("latest") == StartFrom()
    assert start_from("by_duration:PT1H30M") == StartFrom(duration_ms=5_400_000)
    assert start_from("by_duration:P1DT0.5S") == StartFrom(duration_ms=86_400_500)
