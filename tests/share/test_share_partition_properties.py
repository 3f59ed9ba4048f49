"""Property tests of the share partition core: whatever members do (fetch, acknowledge with
any types and ranges, let locks time out, leave), no acknowledged record is delivered again,
delivery counts never go down nor past the limit, every acquired record has an owner and a
lock deadline, the start offset only moves up, and the persisted state loads back to the same
offers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.share.acknowledgements import AckBatch, AckType
from kgroups.share.partition import LogBatch, SharePartition
from kgroups.share.persisted import DeliveryState, PersistedShareState
from kgroups.share.settings import ShareSettings

LOG = [LogBatch(base, base + size - 1) for base, size in
       ((0, 3), (3, 1), (4, 4), (8, 2), (10, 5), (15, 1), (16, 3))]
END = LOG[-1].last_offset + 1
SETTINGS = ShareSettings(record_lock_duration_ms=100, delivery_count_limit=3,
                         max_record_locks=12)
MEMBERS = ("a", "b", "c")

fetches = st.tuples(st.just("fetch"), st.sampled_from(MEMBERS), st.integers(1, 8),
                    st.integers(1, 4), st.booleans())
acks = st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.integers(0, END),
                 st.integers(0, 4), st.lists(st.sampled_from(list(AckType)), min_size=1,
                                             max_size=5))
waits = st.tuples(st.just("wait"), st.integers(1, 150))
leaves = st.tuples(st.just("leave"), st.sampled_from(MEMBERS))
operations = st.lists(st.one_of(fetches, acks, waits, leaves), max_size=60)


def _read_from(offset: int) -> list[LogBatch]:
    return [b for b in LOG if b.last_offset >= offset]


@settings(max_examples=300, deadline=None)
@given(operations)
def test_share_partition_invariants(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    p = SharePartition(PersistedShareState(0, 0, 0), SETTINGS)
    now = 1
    acknowledged: set[int] = set()
    counts: dict[int, int] = {}
    start = 0
    for op in ops:
        match op:
            case ("fetch", member, max_records, batch_size, strict):
                ranges = p.acquire(member, _read_from(p.next_fetch_offset()),
                                   max_records=max_records, batch_size=batch_size,
                                   now_ms=now, record_limit=strict)
                offsets = [o for r in ranges for o in range(r.first_offset, r.last_offset + 1)]
                assert not acknowledged & set(offsets), "an acknowledged record came back"
                for r in ranges:
                    for offset in range(r.first_offset, r.last_offset + 1):
                        assert p.records[offset].delivery_count == r.delivery_count
                if strict:
                    assert len(offsets) <= max_records
            case ("ack", member, first, length, types):
                last = first + length
                kinds = tuple(types[:1]) if len(types) != length + 1 else tuple(types)
                p.acknowledge(member, [AckBatch(first, last, kinds)], now)
            case ("wait", millis):
                now += millis
                p.expire_locks(now)
            case ("leave", member):
                p.release_member(member)
        for offset, record in p.records.items():
            assert offset >= p.start_offset
            assert record.delivery_count >= counts.get(offset, 0)
            assert record.delivery_count <= SETTINGS.delivery_count_limit
            counts[offset] = record.delivery_count
            if record.state == DeliveryState.ACKNOWLEDGED:
                acknowledged.add(offset)
            if record.state == DeliveryState.ACQUIRED:
                assert record.member is not None and record.lock_deadline_ms > now - 1
        assert not acknowledged & {o for o, r in p.records.items()
                                   if r.state != DeliveryState.ACKNOWLEDGED}
        assert p.start_offset >= start
        start = p.start_offset
        if p.records:
            assert p.records[p.start_offset].state not in (DeliveryState.ACKNOWLEDGED,
                                                           DeliveryState.ARCHIVED)
        assert p.end_offset - p.start_offset < SETTINGS.max_record_locks + 5  # one log batch over
    reloaded = SharePartition(p.persisted(), SETTINGS)
    p.expire_locks(now + 10_000)
    assert reloaded.start_offset <= p.start_offset
    assert _offered(reloaded) == _offered(p)


def _offered(p: SharePartition) -> dict[int, int]:
    """The records that may still be delivered, with their delivery counts."""
    return {o: r.delivery_count for o, r in p.records.items()
            if r.state == DeliveryState.AVAILABLE
            and r.delivery_count < SETTINGS.delivery_count_limit}
