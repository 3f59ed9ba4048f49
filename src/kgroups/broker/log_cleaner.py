"""Retention and compaction of the topic logs, on Kafka's schedule.

Kafka's log manager wakes every log.retention.check.interval.ms and, per partition, deletes the
oldest segments past retention.ms / retention.bytes (cleanup.policy=delete) or compacts it
(cleanup.policy=compact); under either policy it also deletes the segments DeleteRecords left
wholly below the log start offset. Without this a kgroups data directory would only ever grow.
__consumer_offsets is left to the coordinator runtime, which compacts it on its own schedule.
A cluster broker cleans the partitions it leads in PostgreSQL on the same schedule
(PostgresPartitionLog.apply_retention and compact, fenced by its lease).
"""

from __future__ import annotations

import asyncio
import logging
import time

from kgroups.broker.events import log_event
from kgroups.broker.topics import OFFSETS_TOPIC, TopicCatalog
from kgroups.log.compaction import compact
from kgroups.log.manager import LogManager
from kgroups.storage.database import StorageUnavailableError

logger = logging.getLogger("kgroups.cleaner")


def clean_once(logs: LogManager, now_ms: int) -> int:
    """One pass over every topic partition; returns how many segments retention deleted."""
    deleted_total = 0
    for topic, partition in logs.partitions():
        if topic == OFFSETS_TOPIC:
            continue
        try:
            deleted_total += _clean_partition(logs, topic, partition, now_ms)
        except OSError as exc:  # a full disk or an offline partition: the others still get cleaned
            log_event(logger, logging.ERROR, "log_cleaning_failed", topic=topic,
                      partition=partition, error=exc)
    return deleted_total


def _clean_partition(logs: LogManager, topic: str, partition: int, now_ms: int) -> int:
    log = logs.get(topic, partition)
    if log is None:
        return 0
    below_start = log.drop_segments_below_start()
    if below_start:
        log_event(logger, logging.INFO, "segments_deleted", topic=topic, partition=partition,
                  segments=below_start, log_start_offset=log.log_start_offset)
    if log.config.compacted:
        result = compact(log, now_ms)
        if result.records_removed:
            log_event(logger, logging.INFO, "log_compacted", topic=topic,
                      partition=partition, removed=result.records_removed,
                      kept=result.records_kept)
    if not log.config.deletes:
        return below_start
    deleted = log.apply_retention(now_ms)
    if deleted:
        log_event(logger, logging.INFO, "segments_deleted", topic=topic,
                  partition=partition, segments=deleted, log_start_offset=log.log_start_offset)
    return below_start + deleted


def clean_led_partitions(topics: TopicCatalog, now_ms: int) -> None:
    """A cluster broker's pass over the partitions it leads, in PostgreSQL (their batches
    deleted or rewritten in fenced transactions); an unreachable store skips this pass."""
    try:
        done = topics.clean_led_partitions(now_ms)
    except StorageUnavailableError as exc:
        log_event(logger, logging.WARNING, "log_cleaning_failed", error=exc)
        return
    for topic, partition, deleted, compacted in done:
        if compacted.records_removed:
            log_event(logger, logging.INFO, "log_compacted", topic=topic, partition=partition,
                      removed=compacted.records_removed, kept=compacted.records_kept)
        if deleted:
            log_event(logger, logging.INFO, "batches_deleted", topic=topic,
                      partition=partition, batches=deleted)


async def run_cleaner(logs: LogManager, topics: TopicCatalog, interval_ms: int) -> None:
    """Forever: wait an interval, clean, repeat (cancelled when the broker stops). Disk errors
    are logged per partition; anything else ends the task, which the broker logs and records."""
    while True:
        await asyncio.sleep(interval_ms / 1000)
        now_ms = int(time.time() * 1000)
        clean_once(logs, now_ms)
        clean_led_partitions(topics, now_ms)
