"""Transaction markers: the COMMIT or ABORT control batch that ends a producer's transaction
in one partition.

The transaction coordinator ends a transaction by writing a marker to every partition the
transaction touched (Kafka's WriteTxnMarkers); readers then count the producer's records in
that partition as committed or drop them. The marker's bytes: kgroups.log.transactions.

`write_markers` is the one path every marker takes into a log on this broker: appended under the
partition's gate (kgroups.broker.append_gates) so it is ordered with produce requests, made
durable like an acks=all produce, and fetchers woken. Appending it closes the producer's
transaction in the partition's tracker (kgroups.log.transaction_state): the last stable offset
moves, and an ABORT is kept in the aborted-transaction index. A partition this broker does not lead
answers NOT_LEADER_OR_FOLLOWER, one that does not exist UNKNOWN_TOPIC_OR_PARTITION.
A marker for a __consumer_offsets partition goes to the group coordinator instead
(`CoordinatorRuntime.complete_transaction`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from kgroups.broker.apis.contract import HandlerServices
from kgroups.broker.append_gates import gate_of
from kgroups.broker.events import log_event
from kgroups.broker.topics import OFFSETS_TOPIC
from kgroups.errors import ErrorCode
from kgroups.log.partition_log import PartitionLog
from kgroups.log.transactions import control_batch
from kgroups.storage.log_seam import PartitionLogSeam
from kgroups.storage.postgresql import FencedError
from kgroups.transactions.messages import MarkerWrite

logger = logging.getLogger("kgroups.txn_markers")



async def write_markers(broker: HandlerServices,
                        markers: Sequence[MarkerWrite]) -> list[ErrorCode]:
    """Append each marker to its partition's log; one error per marker, in order (NONE once
    the marker is durable). The partitions are written at once, as Kafka sends a
    transaction's markers to all its partitions together: each waits for its own log's fsync,
    so one after another they would add up. Markers for one partition still go in order,
    through that partition's append gate."""
    errors = list(await asyncio.gather(*(_write(broker, marker) for marker in markers)))
    if any(error == ErrorCode.NONE for error in errors):
        broker.appends.notify()
    return errors


async def _write(broker: HandlerServices, marker: MarkerWrite) -> ErrorCode:
    if marker.topic == OFFSETS_TOPIC:
        # The group coordinator writes it in its own order for the partition and then commits
        # or drops the producer's pending offsets: never straight to the log.
        return await broker.coordinator.complete_transaction(
            marker.partition, marker.producer_id, marker.producer_epoch, marker.commits,
            marker.coordinator_epoch)
    try:
        log = broker.topics.log(marker.topic, marker.partition)
    except OSError:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if log is None:
        return broker.topics.unserved_error(marker.topic, marker.partition)
    try:
        async with gate_of(log):
            refused = _marker_error(log, marker)
            if refused != ErrorCode.NONE:
                return refused
            log.append_batch(control_batch(marker.producer_id, marker.producer_epoch,
                                           marker.commits, marker.coordinator_epoch,
                                           int(time.time() * 1000)))
        if isinstance(log, PartitionLog):
            await broker.group_commit.wait_durable(log)
    except FencedError:
        broker.topics.leadership_lost(marker.topic, marker.partition)
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    except OSError as exc:
        log_event(logger, logging.ERROR, "marker_write_failed", topic=marker.topic,
                  partition=marker.partition, producer_id=marker.producer_id, error=exc)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


def _marker_error(log: PartitionLogSeam, marker: MarkerWrite) -> ErrorCode:
    """Kafka's checks of a marker against the producer's state in the partition: an older
    producer epoch (for transactions v2, not newer, unless it repeats the marker that ended
    the producer's last transaction) is INVALID_PRODUCER_EPOCH, an older coordinator epoch
    TRANSACTION_COORDINATOR_FENCED. A marker for a producer with no open transaction there is
    written all the same."""
    producer = log.transactions.producers.get(marker.producer_id)
    if producer is None:
        return ErrorCode.NONE
    if marker.transaction_version >= 2:
        stale = marker.producer_epoch <= producer.epoch and not (
            marker.producer_epoch == producer.epoch and producer.txn_start_offset < 0)
    else:
        stale = marker.producer_epoch < producer.epoch
    if stale:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if marker.coordinator_epoch < producer.coordinator_epoch:
        return ErrorCode.TRANSACTION_COORDINATOR_FENCED
    return ErrorCode.NONE
