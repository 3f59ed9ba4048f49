"""Transaction markers: the COMMIT or ABORT control batch that ends a producer's transaction
in one partition.

The transaction coordinator ends a transaction by writing a marker to every partition the
transaction touched (Kafka's WriteTxnMarkers); readers then count the producer's records in
that partition as committed or drop them. The marker's bytes: kgroups.log.transactions.

`write_markers` is the one path every marker takes into a log on this broker: appended under the
partition's gate (kgroups.broker.append_gates) so it is ordered with produce requests, made
durable like an acks=all produce, and fetchers woken. A partition this broker does not lead
answers NOT_LEADER_OR_FOLLOWER, one that does not exist UNKNOWN_TOPIC_OR_PARTITION. A marker
for a __consumer_offsets partition goes to the group coordinator instead
(`CoordinatorRuntime.complete_transaction`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from kgroups.broker.apis.contract import HandlerServices
from kgroups.broker.append_gates import gate_of
from kgroups.broker.events import log_event
from kgroups.broker.topics import OFFSETS_TOPIC
from kgroups.errors import ErrorCode
from kgroups.log.partition_log import PartitionLog
from kgroups.log.transactions import control_batch
from kgroups.storage.postgresql import FencedError

logger = logging.getLogger("kgroups.txn_markers")



@dataclass(frozen=True, slots=True)
class MarkerWrite:
    """End `producer_id`'s transaction in one partition."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commits: bool
    coordinator_epoch: int


async def write_markers(broker: HandlerServices,
                        markers: Sequence[MarkerWrite]) -> list[ErrorCode]:
    """Append each marker to its partition's log; one error per marker, in order (NONE once
    the marker is durable)."""
    errors = [await _write(broker, marker) for marker in markers]
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
        if broker.topics.elsewhere(marker.topic, marker.partition) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    try:
        async with gate_of(log):
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
