"""The transaction coordinator's conversation against Kafka 4.3.1: InitProducerId with a
transactional id, AddPartitionsToTxn (client versions and the batched verify-only form),
AddOffsetsToTxn, EndTxn, fencing by a second producer, DescribeTransactions and
ListTransactions, with the errors Kafka gives (timeouts out of range, ending without a
transaction, wrong producer ids, fenced epochs: PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for
the versions before KIP-588).

Producer ids differ between the brokers (each allocates its own): the transcript records the
errors, epochs, states and partitions, and whether an answer's producer id is the one the
producer was given."""

from __future__ import annotations

import datetime
import re
import time
from typing import Any

import pytest
from diff_dialog import Connection, Dialog
from tests.broker.broker_wire_helpers import nested_of, request_of

from kgroups.errors import ErrorCode
from kgroups.log.batch import build_batch

pytestmark = pytest.mark.kafka

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 10, 22, 24, 25, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


RETRIABLE = frozenset({14, 15, 16})  # load in progress, not available, not coordinator


def _first_init(c: Connection, transactional_id: str) -> Any:
    """Kafka creates __transaction_state on the first lookup and answers retriable errors
    until the id's partition is loaded: look up and retry (unrecorded), as a client does."""
    deadline = time.monotonic() + 60
    while True:
        found = c.call(request_of(FIND_COORDINATOR, 4, key_type=1,
                                  coordinator_keys=(transactional_id,)), record=False)
        if int(found.coordinators[0].error_code) == 0:
            answer = _init(c, transactional_id)
            if int(answer.error_code) not in RETRIABLE:
                return answer
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


def _init(c: Connection, tx: str, timeout_ms: int = 60_000, *, v: int = 5,
          producer: tuple[int, int] = (-1, -1)) -> Any:
    return c.call(request_of(INIT_PRODUCER_ID, v, transactional_id=tx,
                             transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                             producer_id=producer[0], producer_epoch=producer[1]), record=False)


def _add(c: Connection, tx: str, pid: int, epoch: int, partitions: dict[str, list[int]],
         *, v: int = 3) -> Any:
    topics = tuple(nested_of(ADD_PARTITIONS, v, "AddPartitionsToTxnTopic", name=topic,
                             partitions=tuple(ids)) for topic, ids in partitions.items())
    return c.call(request_of(ADD_PARTITIONS, v, v3_and_below_transactional_id=tx,
                             v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                             v3_and_below_topics=topics), record=False)


def _verify(c: Connection, tx: str, pid: int, epoch: int,
            partitions: dict[str, list[int]]) -> Any:
    v = 5
    topics = tuple(nested_of(ADD_PARTITIONS, v, "AddPartitionsToTxnTopic", name=topic,
                             partitions=tuple(ids)) for topic, ids in partitions.items())
    transaction = nested_of(ADD_PARTITIONS, v, "AddPartitionsToTxnTransaction",
                            transactional_id=tx, producer_id=pid, producer_epoch=epoch,
                            verify_only=True, topics=topics)
    return c.call(request_of(ADD_PARTITIONS, v, transactions=(transaction,)), record=False)


def _end(c: Connection, tx: str, pid: int, epoch: int, commit: bool, *, v: int = 4) -> Any:
    return c.call(request_of(END_TXN, v, transactional_id=tx, producer_id=pid,
                             producer_epoch=epoch, committed=commit), record=False)


def _describe(c: Connection, *ids: str) -> Any:
    return c.call(request_of(DESCRIBE_TRANSACTIONS, 0, transactional_ids=ids), record=False)


def _state(c: Connection, tx: str) -> str:
    return str(_describe(c, tx).transaction_states[0].transaction_state)


def _wait_state(c: Connection, tx: str, state: str) -> None:
    """Poll (unrecorded) until the markers are written; a broker that never gets there shows
    in the transcript, with the state it stayed in."""
    deadline = time.monotonic() + 30
    while _state(c, tx) != state and time.monotonic() < deadline:
        time.sleep(0.05)


def _partition_errors(answer: Any) -> dict[str, int]:
    results = (answer.results_by_topic_v3_and_below
               if hasattr(answer, "results_by_topic_v3_and_below")
               else answer.results_by_transaction[0].topic_results)
    return {f"{t.name}-{p.partition_index}": int(p.partition_error_code)
            for t in results for p in t.results_by_partition}


def test_a_transaction_and_every_refusal(converse: Any) -> None:
    def script(d: Dialog) -> None:
        tx = f"{d.group}-tx"
        c = d.connect("producer")
        first = _first_init(c, tx)
        pid, epoch = int(first.producer_id), int(first.producer_epoch)
        d.record("init", {"error": int(first.error_code), "epoch": epoch})
        for timeout in (0, 900_001):
            d.record(f"init timeout {timeout}", int(_init(c, tx, timeout).error_code))
        d.record("end without a transaction", int(_end(c, tx, pid, epoch, True).error_code))
        d.record("add", _partition_errors(_add(c, tx, pid, epoch, {"diff-t": [0, 1]})))
        d.record("add unknown", _partition_errors(
            _add(c, tx, pid, epoch, {"diff-t": [0], "no-such-topic": [0]})))
        d.record("add stale epoch v3", _partition_errors(
            _add(c, tx, pid, epoch + 1, {"diff-t": [2]})))
        d.record("add stale epoch v1", _partition_errors(
            _add(c, tx, pid, epoch + 1, {"diff-t": [2]}, v=1)))
        d.record("add wrong id", _partition_errors(
            _add(c, tx, pid + 1, epoch, {"diff-t": [2]})))
        d.record("verify", _partition_errors(
            _verify(c, tx, pid, epoch, {"diff-t": [0, 2]})))
        offsets = c.call(request_of(ADD_OFFSETS, 3, transactional_id=tx, producer_id=pid,
                                    producer_epoch=epoch, group_id=d.group), record=False)
        d.record("add offsets", int(offsets.error_code))
        described = _describe(c, tx, f"{tx}-unknown").transaction_states
        d.record("describe ongoing", [
            {"error": int(s.error_code), "state": s.transaction_state,
             "timeout": s.transaction_timeout // datetime.timedelta(milliseconds=1),
             "epoch": int(s.producer_epoch),
             "same id": int(s.error_code) == 0 and int(s.producer_id) == pid,
             "topics": sorted((t.topic, sorted(t.partitions)) for t in s.topics
                              if t.topic != "__consumer_offsets"),
             "offsets partitions": len([t for t in s.topics
                                        if t.topic == "__consumer_offsets"])}
            for s in described])
        listed = c.call(request_of(LIST_TRANSACTIONS, 2, state_filters=("Ongoing", "Bogus"),
                                   producer_id_filters=(), duration_filter=-1,
                                   transactional_id_pattern=re.escape(tx)), record=False)
        d.record("list", {"error": int(listed.error_code),
                          "unknown": list(listed.unknown_state_filters),
                          "ids": [s.transactional_id for s in listed.transaction_states],
                          "states": [s.transaction_state for s in listed.transaction_states]})
        d.record("end wrong id", int(_end(c, tx, pid + 1, epoch, True).error_code))
        d.record("end stale epoch", int(_end(c, tx, pid, epoch - 1, True).error_code))
        commit = _end(c, tx, pid, epoch, True)
        d.record("commit", int(commit.error_code))
        # An abort right behind the commit races the commit's markers on either broker: while
        # they are written the id is pending (CONCURRENT_TRANSACTIONS), once they are done the
        # state refuses it (INVALID_TXN_STATE), and which comes first is the machine's timing
        # (runs here saw Kafka answer either). Refused it must be, one way or the other.
        aborted = ErrorCode(_end(c, tx, pid, epoch, False).error_code)
        d.record("abort while committing", "refused" if aborted in (
            ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.INVALID_TXN_STATE) else aborted.name)
        _wait_state(c, tx, "CompleteCommit")
        d.record("commit again", int(_end(c, tx, pid, epoch, True).error_code))
        d.record("abort after commit", int(_end(c, tx, pid, epoch, False).error_code))

        # A second producer with the same id fences the first's ongoing transaction.
        _add(c, tx, pid, epoch, {"diff-u": [1]})
        other = d.connect("other")
        fencing = _init(other, tx)
        d.record("fencing init", int(fencing.error_code))
        _wait_state(c, tx, "CompleteAbort")
        fenced = _init(other, tx)
        d.record("fenced init", {"error": int(fenced.error_code),
                                 "epoch": int(fenced.producer_epoch),
                                 "same id": int(fenced.producer_id) == pid})
        d.record("old producer end v4", int(_end(c, tx, pid, epoch, True).error_code))
        d.record("old producer end v1", int(_end(c, tx, pid, epoch, True, v=1).error_code))
        d.record("old producer add", _partition_errors(_add(c, tx, pid, epoch, {"diff-t": [0]})))
        retry = _init(other, tx, producer=(pid, int(fenced.producer_epoch)))
        d.record("KIP-360 init", {"error": int(retry.error_code),
                                  "epoch": int(retry.producer_epoch)})
        d.record("KIP-360 init stranger", int(_init(other, tx, producer=(pid + 9, 0)).error_code))

    converse(script)


PRODUCE, TXN_OFFSET_COMMIT = 0, 28


def _produce(c: Connection, tx: str | None, pid: int, epoch: int, partition: int, *, v: int,
             sequence: int = 0) -> int:
    """One transactional batch of the producer to diff-u; the partition's error."""
    batch = build_batch([(b"k", b"v", 1_700_000_000_000)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=sequence, transactional=True)
    data = nested_of(PRODUCE, v, "TopicProduceData", name="diff-u", partition_data=(
        nested_of(PRODUCE, v, "PartitionProduceData", index=partition, records=batch),))
    answer = c.call(request_of(PRODUCE, v, transactional_id=tx, acks=-1,
                               timeout=datetime.timedelta(seconds=10), topic_data=(data,)),
                    record=False)
    return int(answer.responses[0].partition_responses[0].error_code)


def _txn_offsets(c: Connection, tx: str, group: str, pid: int, epoch: int, *, v: int) -> int:
    topic = nested_of(TXN_OFFSET_COMMIT, v, "TxnOffsetCommitRequestTopic", name="diff-t",
                      partitions=(nested_of(TXN_OFFSET_COMMIT, v,
                                            "TxnOffsetCommitRequestPartition", partition_index=0,
                                            committed_offset=5, committed_leader_epoch=-1,
                                            committed_metadata=""),))
    answer = c.call(request_of(TXN_OFFSET_COMMIT, v, transactional_id=tx, group_id=group,
                               producer_id=pid, producer_epoch=epoch, generation_id=-1,
                               member_id="", group_instance_id=None, topics=(topic,)),
                    record=False)
    return int(answer.topics[0].partitions[0].error_code)


def test_writes_outside_the_transaction_are_verified(converse: Any) -> None:
    """KIP-890 verification: a transactional batch, or transactional offsets, for a partition
    the producer's transaction does not hold (AddPartitionsToTxn / AddOffsetsToTxn never sent)
    are refused with the error each request version knows; Produce v12 and TxnOffsetCommit v5
    (transaction version 2) add the partition to the transaction instead."""
    def script(d: Dialog) -> None:
        tx = f"{d.group}-verified"
        c = d.connect("producer")
        first = _first_init(c, tx)
        pid, epoch = int(first.producer_id), int(first.producer_epoch)
        for v in (3, 9, 10, 11):
            d.record(f"produce v{v} outside", _produce(c, tx, pid, epoch, 0, v=v))
        d.record("produce v11 stale epoch", _produce(c, tx, pid, epoch + 1, 0, v=11))
        d.record("produce v11 wrong id", _produce(c, tx, pid + 7, 0, 0, v=11))
        d.record("produce v11 unknown id", _produce(c, f"{tx}-nobody", pid, epoch, 0, v=11))
        for v in (3, 4):
            d.record(f"txn offsets v{v} outside",
                     _txn_offsets(c, tx, d.group, pid, epoch, v=v))
        d.record("txn offsets v4 wrong id", _txn_offsets(c, tx, d.group, pid + 7, 0, v=4))
        d.record("txn offsets v4 unknown id",
                 _txn_offsets(c, f"{tx}-nobody", d.group, pid, epoch, v=4))
        d.record("added, produce v11", _partition_errors(
            _add(c, tx, pid, epoch, {"diff-u": [1]})))
        d.record("produce v11 inside", _produce(c, tx, pid, epoch, 1, v=11))
        d.record("produce v11 inside, other partition", _produce(c, tx, pid, epoch, 0, v=11))
        d.record("produce v12 adds", _produce(c, tx, pid, epoch, 0, v=12))
        d.record("txn offsets v5 adds", _txn_offsets(c, tx, d.group, pid, epoch, v=5))
        described = _describe(c, tx).transaction_states[0]
        d.record("state after", {"state": described.transaction_state,
                                 "topics": sorted((t.topic, sorted(t.partitions))
                                                  for t in described.topics
                                                  if t.topic != "__consumer_offsets"),
                                 "offsets partitions": len(
                                     [t for t in described.topics
                                      if t.topic == "__consumer_offsets"])})
        d.record("abort", int(_end(c, tx, pid, epoch, False).error_code))
        _wait_state(c, tx, "CompleteAbort")
        d.record("produce v11 after the abort", _produce(c, tx, pid, epoch, 1, v=11,
                                                         sequence=1))

    converse(script)
