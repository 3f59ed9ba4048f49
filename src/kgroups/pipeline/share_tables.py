"""What `kgroups analyze` tells of share groups: each share-partition's delivery state as the
share coordinator keeps it in `__share_group_state`.

The topic holds, per share-partition (group, topic id, partition), ShareSnapshot records (the
whole state) and ShareUpdate records (batches merged into it). The state is rebuilt by
replaying each partition's records in log order with the share coordinator's own replay
(kgroups.share_coordinator.shard), so the rows are what a ReadShareGroupState would answer:
the start offset and the in-flight batches past it, each with a delivery state and count.

Only records past the start offset are kept by the coordinator: once every record before one
is acknowledged or archived, the start offset moves past them and they leave the state. So the
counts here are of the records still in flight, not of all records ever delivered. A record
persisted as AVAILABLE is waiting for (re)delivery or acquired now (acquisition itself is not
written); a delivery count above one means the record was delivered again after a release or
a lock timeout; ARCHIVED records were rejected or reached the delivery count limit.

The topic is small (compacted by snapshot), so it is read on the driver as __transaction_state
is.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

import pyarrow as pa

from kgroups.pipeline.decode import internal_topic_records
from kgroups.pipeline.discovery import SegmentFile
from kgroups.pipeline.tables import TIMESTAMP
from kgroups.records.share_state import decode_share_state_key, decode_share_state_value
from kgroups.share.persisted import DeliveryState
from kgroups.share_coordinator.shard import ShareCoordinatorShard, StateRecord

log = logging.getLogger("kgroups.analyze")

SHARE_STATE_TOPIC = "__share_group_state"

SHARE_PARTITIONS = pa.schema([
    ("group", pa.string()),
    ("topic_id", pa.string()),
    ("partition", pa.int32()),
    ("state_epoch", pa.int32()),
    ("start_offset", pa.int64()),
    ("available", pa.int64()),  # in flight, waiting for (re)delivery or acquired
    ("acknowledged", pa.int64()),  # in flight past a gap, accepted
    ("archived", pa.int64()),  # rejected, or delivered as often as the limit allows
    ("redeliveries", pa.int64()),  # in-flight records delivered more than once
    ("max_delivery_count", pa.int32()),
    ("last_write_ts", TIMESTAMP),  # the share-partition's last record in the topic
])


def read_share_state(segments: Sequence[SegmentFile]) -> pa.Table | None:
    """SHARE_PARTITIONS from the __share_group_state segments found beside the offsets topic
    (in any order: each partition's are read in offset order); None when there are none. A
    damaged segment, or a record that does not decode, is logged and left out."""
    if not any(segment.topic == SHARE_STATE_TOPIC for segment in segments):
        return None
    shard = ShareCoordinatorShard()
    written: dict[tuple[str, uuid.UUID, int], int] = {}
    for data, record in internal_topic_records(segments, SHARE_STATE_TOPIC):
        try:
            key = decode_share_state_key(data)
            value = decode_share_state_value(key, record.value)
        except ValueError as exc:
            log.warning("skipped the %s record at offset %d: %s", SHARE_STATE_TOPIC,
                        record.offset, exc)
            continue
        shard.replay(StateRecord(key, value), record.offset)
        written[(key.group_id, key.topic_id, key.partition)] = record.timestamp
    rows = []
    for (group, topic_id, partition), state in sorted(shard.states.items()):
        counts = dict.fromkeys(DeliveryState, 0)
        redeliveries = 0
        for batch in state.batches:
            size = batch.last_offset - batch.first_offset + 1
            counts[DeliveryState(batch.delivery_state)] += size
            redeliveries += size if batch.delivery_count > 1 else 0
        rows.append({
            "group": group, "topic_id": str(topic_id), "partition": partition,
            "state_epoch": state.state_epoch, "start_offset": state.start_offset,
            "available": counts[DeliveryState.AVAILABLE] + counts[DeliveryState.ACQUIRED],
            "acknowledged": counts[DeliveryState.ACKNOWLEDGED],
            "archived": counts[DeliveryState.ARCHIVED],
            "redeliveries": redeliveries,
            "max_delivery_count": max((b.delivery_count for b in state.batches), default=0),
            "last_write_ts": written[(group, topic_id, partition)],
        })
    return pa.Table.from_pylist(rows, schema=SHARE_PARTITIONS)
