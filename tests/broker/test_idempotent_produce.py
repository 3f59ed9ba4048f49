"""Idempotent producers: a resent batch is stored once, gaps and fenced epochs are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_wire_helpers import connect, create_topic, list_offsets_request, produce_request
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.broker.servers import InProcessBroker, ServerProcess

from kgroups.broker.producer_state import (
    INT32_MAX,
    BatchIdentity,
    ProducerStateTable,
    last_sequence,
    next_sequence,
)
from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import PartitionLog
from kgroups.log.transactions import control_batch

PRODUCER = 4242


def _batch(sequence: int, count: int = 2, epoch: int = 0, producer: int = PRODUCER) -> bytes:
    return build_batch([(None, f"v{sequence + i}".encode(), 1000) for i in range(count)],
                       producer_id=producer, producer_epoch=epoch, base_sequence=sequence)


def _send(client, topic: str, records: bytes):  # type: ignore[no-untyped-def]
    response = client.call(produce_request(topic, 0, records))
    return response.responses[0].partition_responses[0]


def _end(client, topic: str) -> int:  # type: ignore[no-untyped-def]
    (partition,) = client.call(list_offsets_request(topic, 0, -1)).topics[0].partitions
    return int(partition.offset)


def test_resent_batch_is_stored_once_and_answers_the_original_offset(
    inprocess_broker: InProcessBroker,
) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "idem")
        first = _send(client, "idem", _batch(0))
        second = _send(client, "idem", _batch(2))
        resent = _send(client, "idem", _batch(0))
        assert (first.base_offset, second.base_offset) == (0, 2)
        assert (resent.error_code, resent.base_offset) == (ErrorCode.NONE, 0)
        assert _end(client, "idem") == 4


def test_sequence_gap_and_fenced_epoch_are_refused(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "seq")
        _send(client, "seq", _batch(0, epoch=1))
        assert _send(client, "seq", _batch(5, epoch=1)).error_code == (
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        assert _send(client, "seq", _batch(2, epoch=0)).error_code == (
            ErrorCode.INVALID_PRODUCER_EPOCH)
        assert _send(client, "seq", _batch(3, epoch=2)).error_code == (
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        assert _send(client, "seq", _batch(0, epoch=2)).error_code == ErrorCode.NONE
        assert _end(client, "seq") == 4


def test_producers_without_id_are_never_deduplicated(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        create_topic(client, "plain")
        for _ in range(3):
            _send(client, "plain", _batch(0, producer=-1))
        assert _end(client, "plain") == 6


def test_sequences_wrap_at_int32_max() -> None:
    assert next_sequence(INT32_MAX) == 0
    assert last_sequence(INT32_MAX, 1) == 0


@settings(deadline=None)
@given(sizes=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=20),
       resend=st.data())
def test_any_recent_batch_resent_is_a_duplicate_and_the_next_one_appends(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], resend: st.DataObject,
) -> None:
    log = PartitionLog.open(tmp_path_factory.mktemp("p") / "t-0", LogConfig())
    table = ProducerStateTable()
    sequence, offset, sent = 0, 0, []
    for size in sizes:
        identity = BatchIdentity(PRODUCER, 0, sequence, last_sequence(sequence, size - 1))
        assert table.check(log, identity).append
        table.record(log, identity, offset)
        sent.append((identity, offset))
        sequence, offset = sequence + size, offset + size
    index = resend.draw(st.integers(min_value=max(0, len(sent) - 5), max_value=len(sent) - 1))
    identity, original = sent[index]
    assert table.check(log, identity).duplicate_of == original
    assert table.check(log, BatchIdentity(PRODUCER, 0, sequence, sequence)).append
    assert (table.check(log, BatchIdentity(PRODUCER, 0, sequence + 1, sequence + 1)).error
            == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


def test_table_rebuilt_from_the_log_recognises_a_resend_after_restart(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300)  # several segments, so the rebuild crosses a roll
    log = PartitionLog.open(tmp_path / "t-0", config)
    bases = [log.append_batch(_batch(sequence))[0] for sequence in range(0, 20, 2)]
    log.append_batch(_batch(0, producer=-1))
    assert len(log.segments()) > 2
    reopened = PartitionLog.open(tmp_path / "t-0", config)
    table = ProducerStateTable()  # a fresh broker knows nothing until it reads the log
    resent = BatchIdentity(PRODUCER, 0, 18, 19)
    assert table.check(reopened, resent).duplicate_of == bases[-1]
    assert table.check(reopened, BatchIdentity(PRODUCER, 0, 20, 20)).append
    assert (table.check(reopened, BatchIdentity(PRODUCER, 0, 25, 25)).error
            == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


def test_a_rebuilt_table_steps_over_transaction_markers(tmp_path: Path) -> None:
    """A marker carries the producer id but no sequence: after a restart (or a new leader in
    a cluster) the producer's next transactional batch still follows its last one."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    log.append_batch(build_batch([(None, b"v", 0)], producer_id=PRODUCER, producer_epoch=0,
                                 base_sequence=0, transactional=True))
    log.append_batch(control_batch(PRODUCER, 0, commits=True, coordinator_epoch=1,
                                   timestamp_ms=0))
    table = ProducerStateTable()
    assert table.check(log, BatchIdentity(PRODUCER, 0, 1, 1)).append
    assert (table.check(log, BatchIdentity(PRODUCER, 0, 0, 0)).duplicate_of == 0)


@pytest.mark.interop
def test_resend_across_a_broker_kill_is_stored_once(kgroups_server: ServerProcess) -> None:
    with connect(kgroups_server.port) as client:
        create_topic(client, "survivor")
        original = _send(client, "survivor", _batch(0))
        _send(client, "survivor", _batch(2))
    kgroups_server.kill()
    kgroups_server.start()
    with connect(kgroups_server.port) as client:
        resent = _send(client, "survivor", _batch(2))
        assert (resent.error_code, resent.base_offset) == (ErrorCode.NONE, 2)
        assert _end(client, "survivor") == 4
        assert _send(client, "survivor", _batch(4)).base_offset == 4
    assert original.base_offset == 0
