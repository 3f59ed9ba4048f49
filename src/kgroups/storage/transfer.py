"""Moving topics and their records between a local data directory (Kafka's layout, kgroups' or
a Kafka broker's) and a PostgreSQL store, byte for byte: every batch keeps its offsets and its
bytes (CRC included), each partition its log start offset and next offset, each topic its id.

Writes into the store go through the same fenced appends as a broker's, under a lease taken
for `TRANSFER_NODE` and given back at the end of each partition, so a transfer into a store a
cluster is using can never overwrite what a leader wrote. The catalog (topic settings, ACLs,
SCRAM credentials, dynamic broker settings) is in the broker's files, so the broker's
cluster/catalog_transfer.py moves it; `left_behind` names the data directory's other entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kgroups.log.batch import peek_batch_header
from kgroups.log.config import LogConfig
from kgroups.log.manager import LogManager
from kgroups.log.segment import Segment
from kgroups.log.topic_ids import new_topic_id, write_partition_metadata
from kgroups.storage.postgresql import PostgresStore

# The node id a transfer leads partitions as: no broker has a negative one.
TRANSFER_NODE = -2
TRANSFER_LEASE_MS = 10 * 60 * 1000
_READ_BYTES = 1 << 20
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


class TransferError(ValueError):
    """Why a transfer cannot start: one line for the user."""


@dataclass
class TransferSummary:
    topics: int = 0
    partitions: int = 0
    batches: int = 0
    bytes: int = 0
    left_behind: list[str] = field(default_factory=list)


def import_data_dir(data_dir: Path, store: PostgresStore) -> TransferSummary:
    """Every topic of `data_dir` into `store`, which must not have any of them yet."""
    if not data_dir.is_dir():
        raise TransferError(f"{data_dir} is not a directory")
    logs = LogManager(data_dir, LogConfig())
    counts: dict[str, int] = {}
    for topic, partition in logs.partitions():
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    clashes = sorted(set(counts) & set(store.topics()))
    if clashes:
        raise TransferError(f"the store already has topic(s) {', '.join(clashes)}")
    summary = TransferSummary(left_behind=sorted(
        path.name for path in data_dir.iterdir() if not _PARTITION_DIR.match(path.name)))
    try:
        for topic, count in sorted(counts.items()):
            store.create_topic(topic, logs.topic_id(topic) or new_topic_id(), count)
            summary.topics += 1
            for partition in range(count):
                _import_partition(logs, store, topic, partition, summary)
                summary.partitions += 1
    finally:
        logs.close()
    return summary


def _import_partition(logs: LogManager, store: PostgresStore, topic: str, partition: int,
                      summary: TransferSummary) -> None:
    log = logs.get(topic, partition)
    lease = store.take_lease(topic, partition, TRANSFER_NODE, TRANSFER_LEASE_MS)
    if lease is None:
        raise TransferError(f"{topic}-{partition} is led by a broker: stop the cluster first")
    try:
        if log is not None:
            offset, end = log.log_start_offset, log.log_end_offset
            while offset < end:
                chunk = log.read(offset, _READ_BYTES)
                if not chunk:
                    break
                position = 0
                while position < len(chunk):
                    base, last, size = peek_batch_header(chunk, position)
                    batch = chunk[position:position + size]
                    position += size
                    if last < offset:
                        continue
                    store.append(lease, batch, base_offset=base)
                    summary.batches += 1
                    summary.bytes += size
                    offset = last + 1
            store.set_log_start_offset(lease, log.log_start_offset)
            if log.log_end_offset > store.partition_state(topic, partition).next_offset:
                store.set_log_start_offset(lease, log.log_end_offset)
    finally:
        store.release_lease(lease)


def export_data_dir(store: PostgresStore, data_dir: Path) -> TransferSummary:
    """Every topic of `store` into `data_dir` (new or empty) as Kafka's segment files, which
    `kgroups serve --data-dir` and Kafka's DumpLogSegments read."""
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise TransferError(f"{data_dir} is not an empty directory")
    data_dir.mkdir(parents=True, exist_ok=True)
    summary = TransferSummary()
    for topic, (topic_id, count) in store.topics().items():
        config = LogConfig().for_topic(topic)
        summary.topics += 1
        for partition in range(count):
            directory = data_dir / f"{topic}-{partition}"
            directory.mkdir()
            write_partition_metadata(directory, topic_id)
            segment: Segment | None = None
            for batch in store.batches(topic, partition):
                base, last, size = peek_batch_header(batch)
                if segment is None or segment.size + size > config.segment_bytes:
                    if segment is not None:
                        _close(segment)
                    segment = Segment(directory, base)
                segment.append(batch, last, config.index_interval_bytes)
                summary.batches += 1
                summary.bytes += size
            if segment is None:  # an empty log starts at the partition's next offset
                next_offset = store.partition_state(topic, partition).next_offset
                segment = Segment(directory, next_offset)
            _close(segment)
            summary.partitions += 1
    return summary


def _close(segment: Segment) -> None:
    segment.sync()
    segment.close()
