"""The settings a share partition runs by: Kafka's share group configs (each defaulting to its
broker `group.share.*` setting) and where a share partition with no persisted start begins."""

from __future__ import annotations

import re
from dataclasses import dataclass

_DURATION = re.compile(
    r"^by_duration:P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


@dataclass(frozen=True, slots=True)
class ShareSettings:
    record_lock_duration_ms: int = 30_000  # share.record.lock.duration.ms
    delivery_count_limit: int = 5  # share.delivery.count.limit
    max_record_locks: int = 2_000  # share.partition.max.record.locks
    read_committed: bool = False  # share.isolation.level
    auto_offset_reset: str = "latest"  # share.auto.offset.reset
    renew_enabled: bool = True  # share.renew.acknowledge.enable


@dataclass(frozen=True, slots=True)
class StartFrom:
    """Where `share.auto.offset.reset` puts a new share partition's start: the log's start
    (earliest), its end (latest), or the first offset at or after a timestamp (by_duration)."""

    earliest: bool = False
    duration_ms: int | None = None


def start_from(auto_offset_reset: str) -> StartFrom:
    """"earliest", "latest" or "by_duration:<ISO-8601 duration>" (Kafka's three values);
    anything else is refused when the group config is set, so it reads as latest here."""
    if auto_offset_reset == "earliest":
        return StartFrom(earliest=True)
    match = _DURATION.match(auto_offset_reset)
    if match is None:
        return StartFrom()
    days, hours, minutes, seconds = (float(part) if part else 0.0 for part in match.groups())
    return StartFrom(duration_ms=int(((days * 24 + hours) * 60 + minutes) * 60_000
                                     + seconds * 1000))
