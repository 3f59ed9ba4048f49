"""Log compaction for __consumer_offsets: keep the latest record per key.

Like Kafka's cleaner, only segments before the active one are rewritten, offsets never change,
and a tombstone survives one cleaning with a delete horizon (now + delete.retention.ms) stamped
into its batch (attribute bit 6, the horizon in the base timestamp); a later cleaning after the
horizon drops it, so consumers that were behind still get to see the deletion. Control batches
and keyless records are kept: the cleaner cannot judge them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from kgroups.log.batch import (
    DELETE_HORIZON,
    Record,
    RecordBatch,
    check_batch,
    decode_batch,
    encode_batch,
    iter_records_raw,
)
from kgroups.log.partition_log import PartitionLog


@dataclass(frozen=True, slots=True)
class CompactionResult:
    records_kept: int
    records_removed: int
    segments_rewritten: int


def compact(log: PartitionLog, now_ms: int) -> CompactionResult:
    """Compact every segment of `log` except the active one."""
    segments = log.segments()
    latest = latest_offsets(segment.pread(segment.size, 0) for segment in segments)
    horizon = now_ms + log.config.delete_retention_ms
    kept = removed = rewritten = 0
    for segment in segments[:-1]:
        original = segment.pread(segment.size, 0)
        parts = []
        position = 0
        while position < len(original):
            end = check_batch(original, position)[1]
            cleaned, batch_kept, batch_removed = clean_batch(original[position:end], latest,
                                                             now_ms, horizon)
            kept += batch_kept
            removed += batch_removed
            if cleaned is not None:
                parts.append(cleaned)
            position = end
        cleaned_segment = b"".join(parts)
        if cleaned_segment != original:
            log.replace_segment(segment, cleaned_segment)
            rewritten += 1
    return CompactionResult(kept, removed, rewritten)


def latest_offsets(chunks: Iterable[bytes]) -> dict[bytes, int]:
    """Each key's latest offset in `chunks` (whole batches, in offset order)."""
    latest: dict[bytes, int] = {}
    for chunk in chunks:
        for offset, _ts, key, _value in iter_records_raw(chunk):
            if key is not None:
                latest[key] = offset
    return latest


def clean_batch(raw: bytes, latest: dict[bytes, int], now_ms: int,
                horizon: int) -> tuple[bytes | None, int, int]:
    """One batch cleaned against `latest`: its bytes (the original ones when nothing changed;
    None when no record survives), and how many records were kept and removed."""
    batch, _ = decode_batch(raw)
    survivors = _survivors(batch, latest, now_ms)
    removed = len(batch.records) - len(survivors)
    if not survivors:
        return None, 0, removed
    return _rebuild(batch, raw, survivors, horizon), len(survivors), removed


def _survivors(batch: RecordBatch, latest: dict[bytes, int], now_ms: int) -> list[Record]:
    if batch.is_control:
        return batch.records
    expired = batch.has_delete_horizon and now_ms >= batch.base_timestamp
    return [
        record
        for record in batch.records
        if record.key is None
        or (latest[record.key] == record.offset and not (record.value is None and expired))
    ]


def _rebuild(batch: RecordBatch, raw: bytes, survivors: list[Record], horizon: int) -> bytes:
    """The batch with only `survivors`, stamped with a delete horizon if it keeps a tombstone;
    an untouched batch keeps its original bytes."""
    stamp = (
        not batch.is_control
        and not batch.has_delete_horizon
        and any(record.value is None and record.key is not None for record in survivors)
    )
    if len(survivors) == len(batch.records) and not stamp:
        return raw
    kept = replace(batch, records=survivors)
    if stamp:
        kept.attributes |= DELETE_HORIZON
        kept.base_timestamp = horizon
    kept.max_timestamp = max(record.timestamp for record in survivors)
    return encode_batch(kept)
