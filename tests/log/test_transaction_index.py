"""A partition's transactions in the file log: open transactions and the last stable offset,
aborted transactions kept in Kafka's `.txnindex` files, across a restart, a torn index tail, a
lost index entry and segment deletion."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.kafka_harness import java_command, kafka_classpath

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import PartitionLog
from kgroups.log.transactions import control_batch
from kgroups.log.txn_index import ENTRY, AbortedTransaction

PRODUCER_A, PRODUCER_B = 1000, 2000


def _data(producer_id: int, *values: bytes, epoch: int = 0, sequence: int = 0) -> bytes:
    return build_batch([(b"k", value, 1_000 + n) for n, value in enumerate(values)],
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                       transactional=True)


def _marker(producer_id: int, commits: bool, epoch: int = 0, coordinator_epoch: int = 3) -> bytes:
    return control_batch(producer_id, epoch, commits, coordinator_epoch, 2_000)


def _plain(value: bytes) -> bytes:
    return build_batch([(b"k", value, 1_000)])


def _history(log: PartitionLog) -> None:
    """0 plain; 1-2 A open; 3 B open; 4 A aborts; 5 plain; 6 B commits; 7-8 A open again."""
    log.append_batch(_plain(b"p0"))
    log.append_batch(_data(PRODUCER_A, b"a1", b"a2"))
    log.append_batch(_data(PRODUCER_B, b"b3"))
    log.append_batch(_marker(PRODUCER_A, commits=False))
    log.append_batch(_plain(b"p5"))
    log.append_batch(_marker(PRODUCER_B, commits=True))
    log.append_batch(_data(PRODUCER_A, b"a7", b"a8", sequence=2))


def test_the_lso_is_the_oldest_open_transaction_and_an_abort_is_indexed(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, LogConfig())
    log.append_batch(_plain(b"p0"))
    assert log.transactions.last_stable_offset(log.log_end_offset) == 1
    log.append_batch(_data(PRODUCER_A, b"a1", b"a2"))
    log.append_batch(_data(PRODUCER_B, b"b3"))
    assert log.transactions.last_stable_offset(log.log_end_offset) == 1
    log.append_batch(_marker(PRODUCER_A, commits=False))
    assert log.transactions.last_stable_offset(log.log_end_offset) == 3  # B's is now oldest
    # Kafka's entry: the LSO once A ended is B's first offset
    assert log.transactions.aborted == [AbortedTransaction(PRODUCER_A, 1, 4, 3)]
    log.append_batch(_plain(b"p5"))
    log.append_batch(_marker(PRODUCER_B, commits=True))
    assert log.transactions.last_stable_offset(log.log_end_offset) == 7
    log.append_batch(_data(PRODUCER_A, b"a7", b"a8", sequence=2))
    assert log.transactions.last_stable_offset(log.log_end_offset) == 7
    assert len(log.transactions.aborted) == 1  # a commit is not indexed
    raw = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert raw == ENTRY.pack(0, PRODUCER_A, 1, 4, 3)
    producer_a = log.transactions.producers[PRODUCER_A]
    assert (producer_a.txn_start_offset, producer_a.coordinator_epoch,
            producer_a.last_sequence) == (7, 3, 3)
    log.close()


def test_a_marker_without_an_open_transaction_lists_nothing(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, LogConfig())
    log.append_batch(_marker(PRODUCER_A, commits=False))
    assert log.transactions.aborted == []
    assert not (tmp_path / "00000000000000000000.txnindex").exists()
    assert log.transactions.last_stable_offset(log.log_end_offset) == 1
    log.close()


def test_aborted_between_follows_kafkas_overlap_rule(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, LogConfig())
    _history(log)
    tracker = log.transactions
    assert tracker.aborted_between(0, 1) == []  # ends before the transaction's first offset
    assert tracker.aborted_between(0, 2) == [AbortedTransaction(PRODUCER_A, 1, 4, 3)]
    assert tracker.aborted_between(4, 9) == [AbortedTransaction(PRODUCER_A, 1, 4, 3)]
    assert tracker.aborted_between(5, 9) == []  # starts after its marker
    log.close()


@pytest.mark.parametrize("segment_bytes", [1 << 30, 200], ids=["one segment", "several"])
def test_open_and_aborted_transactions_survive_a_restart(tmp_path: Path,
                                                         segment_bytes: int) -> None:
    config = LogConfig(segment_bytes=segment_bytes)
    log = PartitionLog.open(tmp_path, config)
    _history(log)
    producers = dict(log.transactions.producers)
    log.close()
    reopened = PartitionLog.open(tmp_path, config)
    assert reopened.transactions.aborted == [AbortedTransaction(PRODUCER_A, 1, 4, 3)]
    assert reopened.transactions.last_stable_offset(reopened.log_end_offset) == 7
    assert reopened.transactions.producers == producers
    # the entry was not written a second time by the rebuild
    assert sum(path.stat().st_size for path in tmp_path.glob("*.txnindex")) == ENTRY.size
    reopened.append_batch(_marker(PRODUCER_A, commits=True))
    assert reopened.transactions.last_stable_offset(reopened.log_end_offset) == 10
    reopened.close()


def test_a_torn_txnindex_tail_is_cut_and_a_lost_entry_rebuilt(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, LogConfig())
    _history(log)
    log.append_batch(_marker(PRODUCER_A, commits=False))  # second abort, offset 9
    log.close()
    index = tmp_path / "00000000000000000000.txnindex"
    whole = index.read_bytes()
    assert len(whole) == 2 * ENTRY.size
    index.write_bytes(whole[:ENTRY.size + 20])  # a crash tore the second entry
    reopened = PartitionLog.open(tmp_path, LogConfig())
    expected = [AbortedTransaction(PRODUCER_A, 1, 4, 3),
                AbortedTransaction(PRODUCER_A, 7, 9, 10)]
    assert reopened.transactions.aborted == expected
    assert index.read_bytes() == whole  # torn bytes cut, the entry written again from the log
    reopened.close()


def test_entries_past_a_cut_log_tail_are_dropped(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, LogConfig())
    _history(log)
    log.close()
    segment = tmp_path / "00000000000000000000.log"
    index = tmp_path / "00000000000000000000.txnindex"
    # keep the log up to (not including) A's abort marker: as if the crash tore it away
    sizes = [len(_plain(b"p0")), len(_data(PRODUCER_A, b"a1", b"a2")),
             len(_data(PRODUCER_B, b"b3"))]
    with open(segment, "r+b") as out:
        out.truncate(sum(sizes) + 5)  # a torn marker batch
    reopened = PartitionLog.open(tmp_path, LogConfig())
    assert reopened.log_end_offset == 4
    assert reopened.transactions.aborted == []
    assert index.read_bytes() == b""
    assert reopened.transactions.last_stable_offset(reopened.log_end_offset) == 1
    reopened.close()


def test_segment_deletion_drops_its_txnindex(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=200)
    log = PartitionLog.open(tmp_path, config)
    _history(log)
    first = log.segments()[0]
    assert first.txn_index_path.exists() or any(
        s.txn_index_path.exists() for s in log.segments())
    holder = next(s for s in log.segments() if s.txn_index_path.exists())
    later = log.segments()[log.segments().index(holder) + 1]
    log.advance_log_start(later.base_offset)
    log.drop_segments_below_start()
    assert not holder.txn_index_path.exists()
    assert log.transactions.aborted == []
    log.close()


def test_kafkas_dump_log_segments_reads_the_txnindex(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "orders-0", LogConfig())
    _history(log)
    log.append_batch(_marker(PRODUCER_A, commits=False))
    log.close()
    dumped = subprocess.run(
        [java_command(), "-cp", kafka_classpath(), "org.apache.kafka.tools.DumpLogSegments",
         "--files", str(tmp_path / "orders-0" / "00000000000000000000.txnindex")],
        capture_output=True, text=True, timeout=120, check=True).stdout
    entries = [line for line in dumped.splitlines() if line.startswith("version:")]
    assert entries == [
        "version: 0 producerId: 1000 firstOffset: 1 lastOffset: 4 lastStableOffset: 3",
        "version: 0 producerId: 1000 firstOffset: 7 lastOffset: 9 lastStableOffset: 10"]
